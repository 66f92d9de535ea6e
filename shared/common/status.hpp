// Status and Result<T>: the one error style of herd. Exceptions from Boost, yaml-cpp, protobuf and
// the OS are caught at library edges and turned into a Status there.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace herd {

enum class Code {
  kOk = 0,
  kInvalidArgument,     // bad input from a user: YAML, flags, frames
  kNotFound,            // a job, cluster, node or file that does not exist
  kAlreadyExists,       // a name taken
  kPermissionDenied,    // a peer whose certificate role does not allow the request
  kUnavailable,         // a peer or host that cannot be reached now
  kDeadlineExceeded,    // a bounded wait ran out
  kFailedPrecondition,  // the request is valid but the state does not allow it
  kCancelled,           // stopped on purpose
  kIo,                  // a file or socket operation failed
  kInternal,            // a bug: an invariant did not hold
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;
  // "context: message", keeping the code.
  Status WithContext(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {Code::kFailedPrecondition, std::move(m)};
}
inline Status Cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }
inline Status IoError(std::string m) { return {Code::kIo, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

// errno-based I/O error: "what: strerror(errno)".
Status ErrnoError(std::string_view what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK status");
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

 private:
  std::variant<T, Status> v_;
};

}  // namespace herd

#define HERD_CONCAT_INNER(a, b) a##b
#define HERD_CONCAT(a, b) HERD_CONCAT_INNER(a, b)

#define HERD_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::herd::Status herd_status_ = (expr);        \
    if (!herd_status_.ok()) return herd_status_; \
  } while (0)

#define HERD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define HERD_ASSIGN_OR_RETURN(lhs, expr) \
  HERD_ASSIGN_OR_RETURN_IMPL(HERD_CONCAT(herd_result_, __LINE__), lhs, expr)
