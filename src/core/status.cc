#include "leanemb/status.h"

#include <cstdio>

namespace leanemb {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

namespace detail {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "leanemb: CHECK failed at %s:%d: %s: %s\n", file, line, cond, msg.c_str());
  std::abort();
}
}  // namespace detail

}  // namespace leanemb
