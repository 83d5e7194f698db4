// JSON text in and out through one translation unit (src/core/json.cc). nlohmann::json's parser
// and serializer are templates that every file calling json::parse or json::dump instantiates
// again: measured under the debug preset's ASan + UBSan (GCC 12, -O1 -g1), a file holding only
// the include compiles in 2.1 s, with one dump() in 8.8 s, with one parse() in 13.9 s. Files call
// these instead; building and reading json values stays inline.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace leanemb {

// nlohmann::json::parse(text): throws nlohmann::json::parse_error on bad text.
nlohmann::json parse_json(std::string_view text);
// The same without exceptions: a discarded value (is_discarded()) on bad text.
nlohmann::json parse_json_or_discarded(std::string_view text);
nlohmann::json parse_json_or_discarded(std::istream& in);
// Bytes (a checkpoint blob, a message) as text.
inline nlohmann::json parse_json_or_discarded(const void* data, size_t size) {
  return parse_json_or_discarded(std::string_view(static_cast<const char*>(data), size));
}
// j.dump(indent): compact with indent < 0.
std::string dump_json(const nlohmann::json& j, int indent = -1);

}  // namespace leanemb
