#pragma once
// The command-line flag parser shared by every orchmllm-bench subcommand and by the stand-alone
// programs (bench/comm/mpi_dispatch_bench.cpp, tests/integration/).
//
// Grammar: `--name value` or `--name=value` for flags that take a value, bare `--name` for
// switches. Every flag a subcommand accepts is declared in a `flag_spec` list, so the parser
// can reject unknown flags, missing values and repeated flags with a message naming the flag,
// and the usage line and help text are generated from the same list (they cannot drift).

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "bench/support/quote.hpp"

namespace orchmllm::tool {

/// A command-line usage mistake: unknown subcommand or flag, missing or malformed value.
/// The tool prints the message and the subcommand's usage line and exits with code 2.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One flag a subcommand accepts.
struct flag_spec {
  std::string name;        ///< without the leading "--"
  std::string value_name;  ///< placeholder in the usage line; empty = switch without a value
  std::string help;        ///< one line for `help <subcommand>`
  bool required = false;   ///< missing → usage_error
};

/// The flags given on one command line, after validation against the spec. Values stay strings
/// until a typed getter converts them, so the error can name the flag and the bad value.
class parsed_args {
 public:
  parsed_args() = default;
  explicit parsed_args(std::map<std::string, std::string, std::less<>> values)
      : values_(std::move(values)) {}

  /// Whether the flag (value or switch) was given.
  [[nodiscard]] bool has(std::string_view name) const {
    return values_.find(name) != values_.end();
  }

  /// The raw value, if given.
  [[nodiscard]] std::optional<std::string> get(std::string_view name) const {
    auto it = values_.find(name);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }

  /// The raw value, or usage_error naming the flag.
  [[nodiscard]] std::string require(std::string_view name) const {
    auto v = get(name);
    if (!v) throw usage_error("missing required flag --" + std::string(name));
    return *v;
  }

  /// The value as a 64-bit integer within [lo, hi]; `fallback` when absent.
  [[nodiscard]] std::int64_t get_int(
      std::string_view name, std::int64_t fallback,
      std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
      std::int64_t hi = std::numeric_limits<std::int64_t>::max()) const {
    auto v = get(name);
    return v ? to_int(name, *v, lo, hi) : fallback;
  }

  /// The value as a 64-bit integer within [lo, hi]; usage_error when absent.
  [[nodiscard]] std::int64_t require_int(
      std::string_view name, std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
      std::int64_t hi = std::numeric_limits<std::int64_t>::max()) const {
    return to_int(name, require(name), lo, hi);
  }

  /// The value as a finite double; `fallback` when absent.
  [[nodiscard]] double get_double(std::string_view name, double fallback) const {
    auto v = get(name);
    return v ? to_double(name, *v) : fallback;
  }

  /// Converts `text` (the whole of it) to an integer in [lo, hi] or throws usage_error naming
  /// the flag, the value and the range.
  static std::int64_t to_int(std::string_view name, std::string_view text, std::int64_t lo,
                             std::int64_t hi) {
    std::int64_t v = 0;
    const auto* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc{} || p != end)
      throw usage_error("--" + std::string(name) + " expects an integer, got " + quote_text(text));
    if (v < lo || v > hi) {
      std::string range(1, '[');
      range += std::to_string(lo);
      range += ", ";
      range += hi == std::numeric_limits<std::int64_t>::max() ? std::string("2^63)")
                                                              : std::to_string(hi) + "]";
      throw usage_error("--" + std::string(name) + " is " + std::to_string(v) + ", must be in " +
                        range);
    }
    return v;
  }

  /// Converts `text` (the whole of it) to a finite double or throws usage_error.
  static double to_double(std::string_view name, std::string_view text) {
    double v = 0;
    const auto* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc{} || p != end || !std::isfinite(v))
      throw usage_error("--" + std::string(name) + " expects a finite number, got " +
                        quote_text(text));
    return v;
  }

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

/// Parses the arguments after the subcommand name against `specs`. Throws usage_error for an
/// unknown flag, a positional argument, a missing value, a value given to a switch, a flag given
/// twice, or a missing required flag; every message names the flag.
inline parsed_args parse_flags(std::span<const flag_spec> specs,
                               std::span<const std::string> args) {
  std::map<std::string, std::string, std::less<>> values;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0)
      throw usage_error("unexpected argument " + quote_text(a) + " (flags start with --)");
    const auto eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const flag_spec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == name) spec = &s;
    if (!spec) throw usage_error("unknown flag --" + name);
    if (values.count(name)) throw usage_error("flag --" + name + " given twice");
    std::string value;
    if (spec->value_name.empty()) {
      if (eq != std::string::npos) throw usage_error("flag --" + name + " takes no value");
    } else if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      if (value.empty()) throw usage_error("flag --" + name + " needs a value");
    } else {
      // A following "--flag" is never taken as a value: `--out --ranks 4` is a forgotten value.
      if (i + 1 >= args.size() || args[i + 1].compare(0, 2, "--") == 0)
        throw usage_error("flag --" + name + " needs a value (" + spec->value_name + ")");
      value = args[++i];
    }
    values.emplace(name, std::move(value));
  }
  for (const auto& s : specs)
    if (s.required && !values.count(s.name)) throw usage_error("missing required flag --" + s.name);
  return parsed_args(std::move(values));
}

/// "--name VALUE" or "[--name VALUE]" for the usage line.
inline std::string flag_synopsis(const flag_spec& s) {
  std::string t = "--" + s.name;
  if (!s.value_name.empty()) t += " " + s.value_name;
  return s.required ? t : "[" + t + "]";
}

/// "usage: PROGRAM --flag V [--opt V] ..." (one line) from the flags a program accepts.
inline std::string usage_text(std::string_view program, std::span<const flag_spec> specs) {
  std::string s = "usage: ";
  s.append(program);
  for (const auto& f : specs) s.append(" ").append(flag_synopsis(f));
  return s;
}

/// Whether the words ask for help: "-h" or "--help" anywhere.
inline bool wants_help(std::span<const std::string> words) {
  for (const auto& w : words)
    if (w == "-h" || w == "--help") return true;
  return false;
}

}  // namespace orchmllm::tool
