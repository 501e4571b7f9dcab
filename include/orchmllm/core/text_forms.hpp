#pragma once
/// @file text_forms.hpp
/// The text forms of cost models and padding policies: how configurations, the command-line
/// tool (`orchmllm-bench --cost`, `--policy`, `--pad-multiple`) and the Python package
/// (`orchmllm.balance(..., cost="quadratic:1,1.3e-5", policy="packed")`) name them.
///
///   cost    linear                  cost(l) = l (`linear_cost{}`, exact 64-bit integers)
///           quadratic:A,B           cost(l) = A·l + B·l² (`quadratic_cost{0, A, B}`; A, B
///                                   finite and >= 0)
///           quadratic:A,B,C         cost(l) = A·l + B·l² + C (`quadratic_cost{C, A, B}`: a
///                                   per-item constant, e.g. a calibrated launch overhead)
///   policy  packed                  `packed`
///           padded                  `padded_to_multiple(pad_multiple)` (pad_multiple >= 1)
///           bucketed:B1,B2,...      `bucketed({B1, B2, ...})` (strictly increasing, >= 1)
///
/// Parsing and printing round-trip (the pad multiple of a padded policy travels beside its
/// text, as `--pad-multiple` does). See docs/cost_models.md, "Text forms".

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>
#include <vector>

#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/detail/core/text.hpp"

namespace orchmllm {

/// The cost models that have a text form. Code that balances with one visits it with a generic
/// lambda, so it is written once for both the integral and the floating-point cost type.
using text_cost_model = std::variant<linear_cost, quadratic_cost>;

namespace detail {

// The shortest text that reads back as exactly `v` ("0.0005", not %.17g's
// "0.00050000000000000001"): the canonical spelling of a coefficient.
inline std::string shortest_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

// `text` (the whole of it; a field of the form `whole`) as a finite double; else
// invalid_argument_error "<what> expects a finite number, got '<text>' (in '<whole>')".
inline double text_to_double(std::string_view what, std::string_view text, std::string_view whole) {
  double v = 0;
  const auto* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || p != end || !std::isfinite(v))
    raise<invalid_argument_error>(concat(what, " expects a finite number, got ", quote_text(text),
                                         " (in ", quote_text(whole), ")"));
  return v;
}

// `text` (the whole of it; a field of the form `whole`) as an integer in [lo, 2^63); else
// invalid_argument_error "<what> expects an integer, got '<text>' (in '<whole>')" or "<what>
// is <v>, must be in [lo, 2^63) (in '<whole>')".
inline std::int64_t text_to_int(std::string_view what, std::string_view text, std::int64_t lo,
                                std::string_view whole) {
  std::int64_t v = 0;
  const auto* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc{} || p != end)
    raise<invalid_argument_error>(concat(what, " expects an integer, got ", quote_text(text),
                                         " (in ", quote_text(whole), ")"));
  if (v < lo)
    raise<invalid_argument_error>(
        concat(what, " is ", v, ", must be in [", lo, ", 2^63) (in ", quote_text(whole), ")"));
  return v;
}

}  // namespace detail

/// Parses a cost model's text form: "linear", "quadratic:A,B" or "quadratic:A,B,C" (A, B, C
/// finite and >= 0; numbers as `std::from_chars` reads them, e.g. "1", "1.3e-5"). O(length of
/// text), deterministic. Throws `invalid_argument_error`: "cost is '<text>', expected 'linear' or
/// 'quadratic:A,B[,C]' (cost(l) = A*l + B*l^2 + C)" for any other shape (one coefficient, or
/// four), "cost expects a finite number, got '<A>' (in '<text>')" for a coefficient that is not
/// a finite number, "cost '<text>': <reason>" for a negative one.
inline text_cost_model parse_cost_model(std::string_view text) {
  if (text == "linear") return linear_cost{};
  constexpr std::string_view prefix = "quadratic:";
  if (text.substr(0, prefix.size()) == prefix) {
    const auto rest = text.substr(prefix.size());
    std::vector<std::string_view> fields;
    for (std::size_t at = 0;;) {
      const auto comma = rest.find(',', at);
      fields.push_back(rest.substr(at, comma == std::string_view::npos ? comma : comma - at));
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
    if (fields.size() == 2 || fields.size() == 3) {
      const double a = detail::text_to_double("cost", fields[0], text);
      const double b = detail::text_to_double("cost", fields[1], text);
      const double c = fields.size() == 3 ? detail::text_to_double("cost", fields[2], text) : 0.0;
      try {
        return quadratic_cost{c, a, b}.validated();
      } catch (const invalid_argument_error& e) {
        detail::raise<invalid_argument_error>(
            detail::concat("cost ", detail::quote_text(text), ": ", e.message()));
      }
    }
  }
  detail::raise<invalid_argument_error>(
      detail::concat("cost is ", detail::quote_text(text),
                     ", expected 'linear' or 'quadratic:A,B[,C]' (cost(l) = A*l + B*l^2 + C)"));
}

/// The canonical text form of a cost model: "linear", or "quadratic:A,B" (constant 0) or
/// "quadratic:A,B,C" with the shortest numbers that read back as exactly A, B and C
/// ("quadratic:1,0.0005"). O(1), deterministic. Throws `invalid_argument_error` for a model
/// without a text form (a `linear_cost` of weight other than 1).
inline std::string to_text(const text_cost_model& cost) {
  if (const auto* lin = std::get_if<linear_cost>(&cost)) {
    ORCHMLLM_REQUIRE(lin->weight == 1, invalid_argument_error, "linear_cost of weight ",
                     lin->weight, " has no text form (only weight 1: 'linear')");
    return "linear";
  }
  const auto& q = std::get<quadratic_cost>(cost);
  // Appends rather than operator+ (GCC 12's false -Wrestrict, PR 105329).
  std::string out = "quadratic:";
  out.append(detail::shortest_text(q.linear))
      .append(",")
      .append(detail::shortest_text(q.quadratic));
  if (q.constant != 0.0) out.append(",").append(detail::shortest_text(q.constant));
  return out;
}

/// Parses a padding policy's text form: "packed", "padded" (rounded up to a multiple of
/// `pad_multiple`) or "bucketed:B1,B2,..." (bucket lengths strictly increasing, >= 1).
/// `pad_multiple` other than 1 is only meaningful with "padded". O(length of text + m log m)
/// for m buckets, deterministic. Throws `invalid_argument_error`: "policy is '<text>',
/// expected 'packed', 'padded' or 'bucketed:B1,B2,...'" for any other name, "policy expects an
/// integer, got '<B>' (in '<text>')" / "policy is <B>, must be in [1, 2^63) (in '<text>')" for
/// a bad bucket length, "policy '<text>': <reason>" for an unsorted list, "pad multiple <k>
/// needs the padded policy, not '<text>'" for a pad multiple with another policy, and
/// `padding_policy::padded`'s error for a pad multiple below 1.
inline padding_policy parse_padding_policy(std::string_view text, std::int64_t pad_multiple = 1) {
  const bool padded_name = text == "padded";
  constexpr std::string_view prefix = "bucketed:";
  const bool bucketed_name = text.substr(0, prefix.size()) == prefix;
  if (!padded_name && !bucketed_name && text != "packed")
    detail::raise<invalid_argument_error>(
        detail::concat("policy is ", detail::quote_text(text),
                       ", expected 'packed', 'padded' or 'bucketed:B1,B2,...'"));
  if (padded_name) return padding_policy::padded(pad_multiple);
  ORCHMLLM_REQUIRE(pad_multiple == 1, invalid_argument_error, "pad multiple ", pad_multiple,
                   " needs the padded policy, not ", detail::quote_text(text));
  if (!bucketed_name) return packed;
  std::vector<std::int64_t> buckets;
  std::string_view rest = text.substr(prefix.size());
  while (true) {
    const auto comma = rest.find(',');
    buckets.push_back(detail::text_to_int("policy", rest.substr(0, comma), 1, text));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  try {
    return padding_policy::bucketed(buckets);
  } catch (const invalid_argument_error& e) {
    detail::raise<invalid_argument_error>(
        detail::concat("policy ", detail::quote_text(text), ": ", e.message()));
  }
}

/// The text form of a padding policy: "packed", "padded" (whatever its multiple, which
/// `padding_policy::multiple()` gives) or "bucketed:B1,B2,...". O(m) for m buckets,
/// deterministic. Throws `invalid_argument_error` for a custom policy (the trainer's own
/// `padding_rule` has no text form).
inline std::string to_text(const padding_policy& policy) {
  switch (policy.policy_kind()) {
    case padding_policy::kind::packed:
      return "packed";
    case padding_policy::kind::padded:
      return "padded";
    case padding_policy::kind::bucketed: {
      std::string text = "bucketed";
      for (const auto b : policy.buckets()) {
        text += text.size() == 8 ? ':' : ',';
        text += std::to_string(b);
      }
      return text;
    }
    case padding_policy::kind::custom:
      break;
  }
  detail::raise<invalid_argument_error>(
      detail::concat("the custom padding policy '", policy.rule_name(), "' has no text form"));
}

}  // namespace orchmllm
