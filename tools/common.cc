#include <cstdio>

#include "tools/commands.h"

namespace leanemb::tools {

int exit_code_for(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kNotFound:
    case StatusCode::kUnimplemented: return 2;
    case StatusCode::kResourceExhausted: return 3;
    default: return 1;
  }
}

int report_error(const Status& s) {
  std::fprintf(stderr, "leanemb: error: %s\n", s.to_string().c_str());
  return exit_code_for(s);
}

}  // namespace leanemb::tools
