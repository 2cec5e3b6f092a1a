// Status and Result<T>: expected failures as values, with the stable error
// codes every RPC reply carries (docs/architecture.md, "Errors").
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gpubox {

enum class ErrorCode {
  ok,
  invalid_request,
  not_found,
  unknown_method,
  permission_denied,
  deadline_exceeded,
  busy,
  input_changed,
  result_rejected,
  resource_exhausted,
  already_exists,
  unavailable,
  cancelled,
  raised,    // a served function raised: details {type, message, traceback}
  internal,
};

// The wire name of a code ("invalid_request"); "internal" for values out of range.
std::string_view error_code_name(ErrorCode code);
// Parses a wire name; nullopt for a name no code has.
std::optional<ErrorCode> error_code_from_name(std::string_view name);

// The outcome of an operation that returns nothing: ok, or a code and a
// message that tells the caller what went wrong and what to do.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  // Maps an errno value to a code, in one place: ENOENT → not_found, EACCES/EPERM →
  // permission_denied, EEXIST → already_exists, ENOSPC/ENOMEM/EMFILE → resource_exhausted, …
  static Status from_errno(int err, std::string_view context);
  // A request the caller must change: invalid_request with MESSAGE.
  static Status invalid_request(std::string message) { return Status(ErrorCode::invalid_request, std::move(message)); }

  bool is_ok() const { return code_ == ErrorCode::ok; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code: message", for logs and CLI output.
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {}  // NOLINT: implicit by design

  bool is_ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return is_ok(); }

  // REQUIRES: is_ok().
  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

  // Status::ok() when a value is held.
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(state_); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace gpubox
