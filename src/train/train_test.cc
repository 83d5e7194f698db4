// Trainer tests: config parsing, the model's step semantics and checkpoint resume.
#include <gtest/gtest.h>

#include "train/config.h"

namespace leanemb::train {
namespace {

// The embedded default parses.
TEST(TrainConfigTest, EmbeddedDefaultParses) {
  auto c = parse_config(default_config_text(), "<default>");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
}

}  // namespace
}  // namespace leanemb::train
