// The one instantiation of nlohmann::json's parser and serializer (src/core/json.h).
#include "leanemb/json.h"

#include <istream>

namespace leanemb {

nlohmann::json parse_json(std::string_view text) { return nlohmann::json::parse(text.begin(), text.end()); }

nlohmann::json parse_json_or_discarded(std::string_view text) {
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

nlohmann::json parse_json_or_discarded(std::istream& in) { return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false); }

std::string dump_json(const nlohmann::json& j, int indent) { return j.dump(indent); }

}  // namespace leanemb
