#pragma once
// User text inside messages. A field, flag value or option string is echoed so the user can
// find it, but it is not trusted: a 10 MB line or binary bytes must not end up whole (or raw)
// in a one-line error message. Shared by the text forms (core/text_forms.hpp) and the
// command-line tool (bench/support/quote.hpp).

#include <cstddef>
#include <string>
#include <string_view>

namespace orchmllm::detail {

/// Printable form of `text` (no quotes): bytes outside printable ASCII as \xNN, a backslash as
/// \\, cut after `limit` input bytes with "...(N more bytes)". O(min(size, limit)).
inline std::string printable(std::string_view text, std::size_t limit = 200) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  const std::size_t shown = text.size() < limit ? text.size() : limit;
  out.reserve(shown + 24);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (shown < text.size()) out += "...(" + std::to_string(text.size() - shown) + " more bytes)";
  return out;
}

/// `printable(text)` in single quotes: how messages echo what the user wrote.
inline std::string quote_text(std::string_view text, std::size_t limit = 200) {
  std::string out(1, '\'');
  out += printable(text, limit);
  out += '\'';
  return out;
}

}  // namespace orchmllm::detail
