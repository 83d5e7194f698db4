// Status and Result<T>: how every recoverable error leaves the library.
//
// Library code never throws across the API. A function that can fail for reasons outside the
// program's control (bad input, I/O, exhausted budget, corrupt file) returns `Status` or
// `Result<T>`; broken invariants (bugs) abort through LEANEMB_CHECK instead.
//
// Thread safety: Status and Result are values; distinct objects may be used from any thread.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace leanemb {

// The short list of error codes. Pick the first that fits.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed something malformed: bad id, offsets, config value
  kOutOfRange = 2,          // a well-formed value outside what the object holds (row >= num_rows)
  kNotFound = 3,            // a named thing (file, table, checkpoint) does not exist
  kFailedPrecondition = 4,  // the object is in the wrong state for the call (train a frozen table)
  kResourceExhausted = 5,   // a memory budget or disk space ran out; freeing and retrying can work
  kDataLoss = 6,            // stored data is corrupt or truncated (checksum mismatch)
  kIoError = 7,             // the OS refused an I/O operation (EIO, ENOSPC, short write)
  kUnimplemented = 8,       // a valid combination this build does not support
  kInternal = 9,            // an unexpected failure of a dependency (MPI, BLAS)
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>" or "OK".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
inline Status out_of_range(std::string msg) { return {StatusCode::kOutOfRange, std::move(msg)}; }
inline Status not_found(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
inline Status failed_precondition(std::string msg) { return {StatusCode::kFailedPrecondition, std::move(msg)}; }
inline Status resource_exhausted(std::string msg) { return {StatusCode::kResourceExhausted, std::move(msg)}; }
inline Status unimplemented(std::string msg) { return {StatusCode::kUnimplemented, std::move(msg)}; }
inline Status internal_error(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
inline Status data_loss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
inline Status io_error(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {     // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) std::abort();      // an OK Status carries no value
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace leanemb

#define LEANEMB_CONCAT_INNER_(a, b) a##b
#define LEANEMB_CONCAT_(a, b) LEANEMB_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define LEANEMB_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::leanemb::Status leanemb_st_ = (expr);           \
    if (!leanemb_st_.ok()) return leanemb_st_;        \
  } while (0)

// `LEANEMB_ASSIGN_OR_RETURN(auto x, f());` declares x from a Result or returns its Status.
#define LEANEMB_ASSIGN_OR_RETURN(lhs, expr) \
  LEANEMB_ASSIGN_OR_RETURN_IMPL_(LEANEMB_CONCAT_(leanemb_res_, __LINE__), lhs, expr)
#define LEANEMB_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

namespace leanemb::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}

// Aborts with file:line when an invariant is broken (a bug, never bad user input).
#define LEANEMB_CHECK(cond, msg)                                                       \
  do {                                                                                 \
    if (!(cond)) ::leanemb::detail::check_failed(__FILE__, __LINE__, #cond, (msg));    \
  } while (0)

#ifdef NDEBUG
#define LEANEMB_DCHECK(cond, msg) \
  do {                            \
  } while (0)
#else
#define LEANEMB_DCHECK(cond, msg) LEANEMB_CHECK(cond, msg)
#endif
