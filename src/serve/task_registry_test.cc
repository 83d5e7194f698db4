// The task registry (serve/task_registry.h): every task is found by its name and parses its
// configs into a TaskConfig whose shared part (train::RunConfig) gives the loop's settings; an
// unknown name is an InvalidArgument listing the registered ones.
#include "serve/task_registry.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/task.h"

namespace leanemb::serve {
namespace {

// find_task knows ctr and text; another name is refused with the list of registered tasks.
TEST(TaskRegistryTest, UnknownTaskNamesTheRegisteredOnes) {
  ASSERT_GE(registered_tasks().size(), 2u);
  EXPECT_EQ(default_task().name, "ctr");
  for (const char* name : {"ctr", "text"}) {
    auto t = find_task(name);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t.value()->name, name);
  }
  auto bad = find_task("ranking");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("unknown task 'ranking' (registered tasks: ctr, text"), std::string::npos)
      << bad.status().message();
}

// The default task parses its embedded config; --steps overrides the config's steps in the
// loop's settings, and without eval files there is no periodic evaluation.
TEST(TaskRegistryTest, DefaultConfigGivesTheLoopSettings) {
  const TaskEntry& t = default_task();
  ASSERT_NE(t.default_config, nullptr);
  const std::vector<std::string> sets = {"train.eval_every=5", "train.checkpoint_every=7", "dist.grad_groups=3"};
  auto c = t.parse_config(t.default_config(), "default", sets);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const train::RunConfig& rc = c.value()->run();
  EXPECT_EQ(rc.origin, "default");
  EXPECT_EQ(rc.checkpoint_every, 7);
  train::RunOptions ro;
  ro.steps = 11;
  train::LoopSettings ls = train::loop_settings(std::string(t.name), rc, ro, true);
  EXPECT_EQ(ls.task, "ctr");
  EXPECT_EQ(ls.steps, 11);
  EXPECT_EQ(ls.epochs, 0);
  EXPECT_EQ(ls.eval_every, 5);
  EXPECT_EQ(ls.checkpoint_every, 7);
  EXPECT_EQ(ls.grad_groups, 3);
  EXPECT_EQ(ls.record, rc.record);
  EXPECT_EQ(train::loop_settings("ctr", rc, train::RunOptions{}, false).eval_every, 0);
}

// A text config keeps fastText's defaults where they differ from the CTR task's (5 epochs, a
// progress line every 5 s, metrics every 1000 steps), and the shared keys read the same way.
TEST(TaskRegistryTest, TextConfigKeepsItsOwnDefaults) {
  auto t = find_task("text");
  ASSERT_TRUE(t.ok());
  auto c = t.value()->parse_config("task = \"text\"\n[data]\ntrain = [\"x.txt\"]\n[memory]\nhost_budget = \"1GiB\"\n", "t.toml", {});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const train::RunConfig& rc = c.value()->run();
  EXPECT_EQ(rc.epochs, 5);
  EXPECT_EQ(rc.memory.host_budget_bytes, size_t{1} << 30);
  const train::LoopSettings ls = train::loop_settings("text", rc, train::RunOptions{}, false);
  EXPECT_EQ(ls.epochs, 5);
  EXPECT_EQ(ls.log_every, 1000);
  EXPECT_EQ(ls.log_every_s, 5.0);
  EXPECT_FALSE(c.value()->writes_planned_config());
  // A CTR-only key is refused by the text task's parser, naming it.
  auto bad = t.value()->parse_config("task = \"text\"\n[data]\ntrain = [\"x.txt\"]\nnum_dense = 3\n", "t.toml", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("num_dense"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace leanemb::serve
