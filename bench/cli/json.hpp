#pragma once
// orchmllm-bench: a tiny writer for one-line JSON objects (the tool's machine-readable output),
// and `add_statistics` for the plan figures under their shared keys.
//
// Numbers: integers are printed exactly; doubles with %.17g, enough digits to read back the
// identical double; non-finite doubles (JSON has none) become null. Strings are escaped per
// RFC 8259 (quote, backslash, control characters). Keys appear in insertion order, so output
// is deterministic.

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <orchmllm/detail/core/statistics_fields.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

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
  /// An int64 or a double, as the overload above prints it.
  json_object& add(std::string_view key, const std::variant<std::int64_t, double>& value) {
    return std::visit([&](auto v) -> json_object& { return add(key, v); }, value);
  }
  /// Adds an already-encoded JSON value (a nested object or array).
  json_object& raw(std::string_view key, std::string_view encoded);
  /// The object text, without a trailing newline.
  [[nodiscard]] std::string str() const;

 private:
  std::string body_;
};

/// Adds the plan figures `ids` of `figures` to `j` in that order, each under its key
/// (`orchmllm::detail::statistic_key`). O(ids).
inline json_object& add_statistics(json_object& j,
                                   const ::orchmllm::detail::statistic_table& figures,
                                   std::initializer_list<::orchmllm::detail::statistic> ids) {
  for (const auto id : ids) j.add(figures[id].key, figures[id].value);
  return j;
}

}  // namespace orchmllm::tool
