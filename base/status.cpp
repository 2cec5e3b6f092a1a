#include "base/status.h"

#include <array>
#include <cstring>

namespace gpubox {
namespace {

constexpr std::array<std::string_view, 15> kNames = {
    "ok",        "invalid_request",    "not_found",      "unknown_method", "permission_denied",
    "deadline_exceeded", "busy",       "input_changed",  "result_rejected", "resource_exhausted",
    "already_exists", "unavailable",   "cancelled",      "raised",         "internal",
};
static_assert(kNames.size() == static_cast<size_t>(ErrorCode::internal) + 1);

ErrorCode code_for_errno(int err) {
  switch (err) {
    case ENOENT: case ENOTDIR: case ESRCH: return ErrorCode::not_found;
    case EACCES: case EPERM: case EROFS: return ErrorCode::permission_denied;
    case EEXIST: case ENOTEMPTY: return ErrorCode::already_exists;
    case ENOSPC: case ENOMEM: case EMFILE: case ENFILE: case EDQUOT: case EAGAIN: case EFBIG:
      return ErrorCode::resource_exhausted;
    case EINVAL: case ENAMETOOLONG: case EISDIR: case ELOOP: case EBADF: return ErrorCode::invalid_request;
    case ETIMEDOUT: return ErrorCode::deadline_exceeded;
    case EBUSY: case ETXTBSY: return ErrorCode::busy;
    case ECANCELED: case EINTR: return ErrorCode::cancelled;
    default: return ErrorCode::internal;
  }
}

}  // namespace

std::string_view error_code_name(ErrorCode code) {
  auto index = static_cast<size_t>(code);
  return index < kNames.size() ? kNames[index] : "internal";
}

std::optional<ErrorCode> error_code_from_name(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<ErrorCode>(i);
  }
  return std::nullopt;
}

Status Status::from_errno(int err, std::string_view context) {
  std::string message(context);
  message += ": ";
  message += std::strerror(err);
  return Status(code_for_errno(err), std::move(message));
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  std::string text(error_code_name(code_));
  text += ": ";
  text += message_;
  return text;
}

}  // namespace gpubox
