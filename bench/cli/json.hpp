#pragma once
// orchmllm-bench: a tiny writer for one-line JSON objects (the tool's machine-readable output).
//
// Numbers: integers are printed exactly; doubles with %.17g, enough digits to read back the
// identical double; non-finite doubles (JSON has none) become null. Strings are escaped per
// RFC 8259 (quote, backslash, control characters). Keys appear in insertion order, so output
// is deterministic.

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace orchmllm::tool {

/// `text` as a quoted, escaped JSON string.
std::string json_quote(std::string_view text);

/// A double with %.17g (round-trips exactly); "null" for NaN and infinities.
std::string json_number(double v);

/// Builds one JSON object on one line: `{"a":1,"b":"x"}`.
class json_object {
 public:
  json_object& add(std::string_view key, std::string_view value) {
    return raw(key, json_quote(value));
  }
  json_object& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  json_object& add(std::string_view key, const std::string& value) {
    return add(key, std::string_view(value));
  }
  json_object& add(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
  /// Any integer (exact) or floating-point value (%.17g).
  template <class T>
  requires(std::is_arithmetic_v<T> && !std::same_as<T, bool>) json_object& add(std::string_view key,
                                                                               T value) {
    if constexpr (std::is_floating_point_v<T>) {
      return raw(key, json_number(static_cast<double>(value)));
    } else if constexpr (std::is_signed_v<T>) {
      return raw(key, std::to_string(static_cast<long long>(value)));
    } else {
      return raw(key, std::to_string(static_cast<unsigned long long>(value)));
    }
  }
  /// Adds an already-encoded JSON value (a nested object or array).
  json_object& raw(std::string_view key, std::string_view encoded);
  /// The object text, without a trailing newline.
  [[nodiscard]] std::string str() const;

 private:
  std::string body_;
};

}  // namespace orchmllm::tool
