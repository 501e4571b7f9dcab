#pragma once
// orchmllm-bench: a tiny writer for one-line JSON objects (the tool's machine-readable output).
//
// Numbers: integers are printed exactly; doubles with %.17g, enough digits to read back the
// identical double; non-finite doubles (JSON has none) become null. Strings are escaped per
// RFC 8259 (quote, backslash, control characters). Keys appear in insertion order, so output
// is deterministic.

#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace orchmllm::tool {

/// `text` as a quoted, escaped JSON string.
inline std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += ch;  // UTF-8 bytes pass through unchanged
        }
    }
  }
  out += '"';
  return out;
}

/// A double with %.17g (round-trips exactly); "null" for NaN and infinities.
inline std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

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
  json_object& raw(std::string_view key, std::string_view encoded) {
    body_ += body_.empty() ? "" : ",";
    body_ += json_quote(key);
    body_ += ':';
    body_ += encoded;
    return *this;
  }
  /// The object text, without a trailing newline.
  [[nodiscard]] std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

}  // namespace orchmllm::tool
