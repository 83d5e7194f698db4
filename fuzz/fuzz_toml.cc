// libFuzzer harness: the TOML configs of `leanemb train` (ctr/ctr_config.h: CTR; text/text_config.h:
// text) and the task key, with and without a --set override.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/text_config.h"
#include "ctr/ctr_config.h"
#include "train/toml_section.h"

using namespace leanemb;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The first line, if it looks like one, is also tried as a --set override.
  const size_t nl = text.find('\n');
  const std::string first(text.substr(0, nl == std::string_view::npos ? 0 : std::min<size_t>(nl, 200)));
  std::vector<std::string> sets;
  if (first.find('=') != std::string::npos && first.find('.') != std::string::npos) sets.push_back(first);
  for (const auto& s : {std::vector<std::string>{}, sets}) {
    (void)train::config_task(text, "fuzz", s);
    auto c = ctr::parse_ctr_config(text, "fuzz", s);
    if (c.ok() && c->record.empty()) __builtin_trap();  // every parsed config records its keys
    (void)text::parse_text_config(text, "fuzz", s);
  }
  return 0;
}
