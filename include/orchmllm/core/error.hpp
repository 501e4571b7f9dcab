#pragma once
/// @file error.hpp
/// The exception hierarchy of the library.
///
/// Every failure the library detects raises a subclass of `orchmllm::error`. Messages name the
/// offending value and the limit it broke, and end with the source location that detected it
/// (`[file:line]`), so a log line is enough to find both the bad input and the check.
///
///   error                      base; catch this to catch everything the library throws
///   ├── invalid_argument_error malformed input: negative length, wrong sizes, bad option
///   │   └── parse_error        malformed text input (CSV), names the line
///   └── infeasible_error       well-formed input that no plan can satisfy (caps, counts)
///
/// See docs/design.md, "Invariants".

#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <version>

#include "orchmllm/config.hpp"

#if defined(__cpp_lib_source_location)
#include <source_location>
#endif

namespace orchmllm {

namespace detail {
#if defined(__cpp_lib_source_location)
/// The location type recorded by errors: `std::source_location` where the standard library
/// provides it.
using source_location = std::source_location;
#else
// Fallback for C++20 toolchains whose library lacks <source_location> (e.g. clang 14 with
// libstdc++ 12, Debian 12's default clang). The builtins, like std::source_location::current(),
// evaluate at the call site when used as default arguments.
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           std::uint_least32_t line = __builtin_LINE()) noexcept {
    source_location l;
    l.file_ = file;
    l.line_ = line;
    return l;
  }
  [[nodiscard]] constexpr const char* file_name() const noexcept { return file_; }
  [[nodiscard]] constexpr std::uint_least32_t line() const noexcept { return line_; }

 private:
  const char* file_ = "";
  std::uint_least32_t line_ = 0;
};
#endif
}  // namespace detail

/// Base of every exception the library throws. `what()` is the full message including the
/// location; `message()` is the message alone; `file()`/`line()` give the detecting check.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& message,
                 detail::source_location where = detail::source_location::current())
      : std::runtime_error(format(message, where)),
        message_(message),
        file_(where.file_name()),
        line_(where.line()) {}

  /// The message without the location suffix.
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  /// Source file of the check that raised the error.
  [[nodiscard]] const char* file() const noexcept { return file_; }
  /// Source line of the check that raised the error.
  [[nodiscard]] std::uint_least32_t line() const noexcept { return line_; }

 private:
  static std::string format(const std::string& message, const detail::source_location& where);

  std::string message_;
  const char* file_;
  std::uint_least32_t line_;
};

// Out of the class so that a unit using the compiled library (orchmllm/config.hpp) does not
// compile it: it is defined there once.
#if !ORCHMLLM_USE_COMPILED
ORCHMLLM_FUNC std::string error::format(const std::string& message,
                                        const detail::source_location& where) {
  std::string_view file = where.file_name();
  // Keep the path from "orchmllm/" on (or the basename) so messages stay short and stable.
  if (auto p = file.rfind("orchmllm/"); p != std::string_view::npos) {
    file.remove_prefix(p);
  } else if (auto s = file.find_last_of("/\\"); s != std::string_view::npos) {
    file.remove_prefix(s + 1);
  }
  std::string out = "orchmllm: " + message + " [";
  out.append(file);
  out += ':' + std::to_string(where.line()) + ']';
  return out;
}
#endif

/// Malformed input: a value outside its domain, sizes that do not match, a bad option.
class invalid_argument_error : public error {
 public:
  // Spelled out rather than inherited (`using Base::Base;`): nvcc 13.0's front end crashes
  // ("compare_expressions: bad expr kind") on inherited constructors whose default argument
  // calls source_location::current().
  explicit invalid_argument_error(
      const std::string& message,
      detail::source_location where = detail::source_location::current())
      : error(message, where) {}
};

/// Malformed text input; the message names the line (and column) at fault.
class parse_error : public invalid_argument_error {
 public:
  // Spelled out for nvcc 13.0 (see invalid_argument_error).
  explicit parse_error(const std::string& message,
                       detail::source_location where = detail::source_location::current())
      : invalid_argument_error(message, where) {}
};

/// Well-formed input for which no plan satisfies the constraints (per-rank caps, item counts).
/// The message names the total, the limit and the rank count.
class infeasible_error : public error {
 public:
  // Spelled out for nvcc 13.0 (see invalid_argument_error).
  explicit infeasible_error(const std::string& message,
                            detail::source_location where = detail::source_location::current())
      : error(message, where) {}
};

/// A collective operation failed: a peer rank failed or aborted, ranks disagree on what they
/// move (plan fingerprint, row width, item counts), a backend call returned an error, or a
/// transfer did not finish within its timeout. Collectives raise it on every rank that takes
/// part, so no rank is left waiting for a peer that has given up.
class communication_error : public error {
 public:
  // Spelled out for nvcc 13.0 (see invalid_argument_error).
  explicit communication_error(const std::string& message,
                               detail::source_location where = detail::source_location::current())
      : error(message, where) {}
};

namespace detail {

/// Message pieces, written as std::ostream writes them by default: text as is, a `char` as a
/// character, `bool` as 1/0, integers in decimal, floating values like "%g" (6 significant
/// digits); any other type through a `to_string(value)` found by argument-dependent lookup
/// (the library's enums have one). Built on <charconv>, not <sstream>: every check in every
/// header formats its pieces, and an ostream per message shape costs every translation unit
/// that includes us.
inline void append_piece(std::string& s, std::string_view text) { s.append(text); }
inline void append_piece(std::string& s, const char* text) { s.append(text); }
inline void append_piece(std::string& s, const std::string& text) { s.append(text); }
inline void append_piece(std::string& s, char c) { s.push_back(c); }
template <class T>
requires std::is_same_v<T, bool>  // a template: no pointer or number converts to it silently
void append_piece(std::string& s, T b) { s.push_back(b ? '1' : '0'); }
template <class T>
requires(std::is_arithmetic_v<T> && !std::is_same_v<T, char> &&
         !std::is_same_v<T, bool>) void append_piece(std::string& s, T value) {
  char buffer[128];
  std::to_chars_result r{};
  if constexpr (std::is_floating_point_v<T>) {
    r = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, 6);
  } else {
    r = std::to_chars(buffer, buffer + sizeof buffer, value);
  }
  s.append(buffer, r.ptr);
}
template <class T>
requires(!std::is_arithmetic_v<T> && !std::is_convertible_v<const T&, std::string_view> &&
         requires(const T& v) {
           std::string_view(to_string(v));
         }) void append_piece(std::string& s, const T& value) {
  s.append(std::string_view(to_string(value)));
}

/// Concatenates message pieces (text, characters, numbers; see `append_piece`) into one string.
/// Used to build messages lazily, only on the failure path.
template <class... Args>
[[nodiscard]] std::string concat(const Args&... args) {
  std::string s;
  (append_piece(s, args), ...);
  return s;
}

/// Throws `Error(message)` recording the caller's location.
template <class Error>
[[noreturn]] void raise(const std::string& message,
                        source_location where = source_location::current()) {
  throw Error(message, where);
}

}  // namespace detail
}  // namespace orchmllm

/// Checks `cond`; when false throws `ErrorType` with the message pieces concatenated (text,
/// characters, numbers, or anything with an ADL `to_string`; see `detail::append_piece`). The
/// message is only built on failure, so checks are cheap on hot paths.
#define ORCHMLLM_REQUIRE(cond, ErrorType, ...)                                       \
  do {                                                                               \
    if (!(cond)) [[unlikely]] {                                                      \
      ::orchmllm::detail::raise<ErrorType>(::orchmllm::detail::concat(__VA_ARGS__)); \
    }                                                                                \
  } while (false)
