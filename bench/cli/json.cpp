// orchmllm-bench: the one-line JSON writer (json.hpp).
#include "bench/cli/json.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

namespace orchmllm::tool {

/// `text` as a quoted, escaped JSON string.
std::string json_quote(std::string_view text) {
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
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

json_object& json_object::raw(std::string_view key, std::string_view encoded) {
  body_ += body_.empty() ? "" : ",";
  body_ += json_quote(key);
  body_ += ':';
  body_ += encoded;
  return *this;
}

std::string json_object::str() const { return "{" + body_ + "}"; }

}  // namespace orchmllm::tool
