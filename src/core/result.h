// Result<T>: the channel for everything that comes from outside (files, user flags, HTTP
// bodies, tool results). It carries either a value or an Error with a message that names
// what was wrong and where, so callers can print it and exit non-zero instead of crashing.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace infercept {

struct Error {
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }

  T& value() & {
    CHECK_MSG(ok(), std::get<Error>(v_).message.c_str());
    return std::get<T>(v_);
  }
  const T& value() const& {
    CHECK_MSG(ok(), std::get<Error>(v_).message.c_str());
    return std::get<T>(v_);
  }
  T&& value() && {
    CHECK_MSG(ok(), std::get<Error>(v_).message.c_str());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    CHECK(!ok());
    return std::get<Error>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

// Result<void> equivalent.
struct Ok {};
using Status = Result<Ok>;
inline Status ok_status() {
  return Ok{};
}

template <typename... Args>
Error make_error(Args&&... parts) {
  std::string s;
  ((s += parts), ...);
  return Error{std::move(s)};
}

}  // namespace infercept

// Propagate an error from an expression producing Result<U>; binds the value to `lhs`.
#define INFERCEPT_CONCAT_INNER(a, b) a##b
#define INFERCEPT_CONCAT(a, b) INFERCEPT_CONCAT_INNER(a, b)
#define TRY_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                    \
  if (!tmp.ok()) return tmp.error();    \
  lhs = std::move(tmp).value()
#define TRY_ASSIGN(lhs, expr) TRY_ASSIGN_IMPL(INFERCEPT_CONCAT(try_tmp_, __LINE__), lhs, expr)
#define TRY(expr)                                      \
  do {                                                 \
    auto try_status_ = (expr);                         \
    if (!try_status_.ok()) return try_status_.error(); \
  } while (0)
