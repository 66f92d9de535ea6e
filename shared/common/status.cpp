#include "shared/common/status.hpp"

#include <cstring>

namespace herd {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Code::kPermissionDenied:
      return "PERMISSION_DENIED";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::kCancelled:
      return "CANCELLED";
    case Code::kIo:
      return "IO";
    case Code::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

Status ErrnoError(std::string_view what, int err) {
  return IoError(std::string(what) + ": " + std::strerror(err));
}

}  // namespace herd
