#include "leanemb/status.h"

#include "core/enum_names.h"

#include <cstdio>

namespace leanemb {

template <>
struct EnumNames<StatusCode> {
  using C = StatusCode;
  static constexpr std::string_view kWhat = "status code";
  static constexpr EnumName<C> kNames[] = {
      {C::kOk, "OK", ""},
      {C::kInvalidArgument, "InvalidArgument", ""},
      {C::kOutOfRange, "OutOfRange", ""},
      {C::kNotFound, "NotFound", ""},
      {C::kFailedPrecondition, "FailedPrecondition", ""},
      {C::kResourceExhausted, "ResourceExhausted", ""},
      {C::kDataLoss, "DataLoss", ""},
      {C::kIoError, "IoError", ""},
      {C::kUnimplemented, "Unimplemented", ""},
      {C::kInternal, "Internal", ""}};
};

std::string_view status_code_name(StatusCode code) {
  const std::string_view n = enum_name(code);
  return n == "unknown" ? "Unknown" : n;
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
