// Errors as values at API edges: Status (ok or a one-line message) and Result<T>.
// Invariants inside the engine use MLA_CHECK (core/check.h) instead.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace mlaserve {

// A one-line, human-readable error. An empty message means success.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  Status(std::string message, bool failed) : message_(std::move(message)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

// Either a value or an error Status. Access value() only after checking ok().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT: implicit by design, like std::expected
  Result(Status error) : state_(std::move(error)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }
  const std::string& error() const { return status().message(); }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace mlaserve

// Propagates an error Status from an expression returning Status.
#define MLA_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::mlaserve::Status mla_status_ = (expr);   \
    if (!mla_status_.ok()) return mla_status_; \
  } while (0)
