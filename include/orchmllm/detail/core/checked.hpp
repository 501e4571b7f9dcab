#pragma once
// Checked 64-bit sums and products for sizes (tokens, rows, bytes) and costs that come from
// the caller: an overflow raises `invalid_argument_error` naming the operands instead of
// wrapping, with a message that says so ("... exceeds 2^63 - 1 (int64 overflow)"), apart from
// a value outside its domain.

#include <cstdint>

#include "orchmllm/core/error.hpp"

namespace orchmllm::detail {

/// a + b for a, b ≥ 0. Throws `invalid_argument_error` "<what…>: a + b exceeds 2^63 - 1
/// (int64 overflow)".
template <class... What>
std::int64_t checked_add(std::int64_t a, std::int64_t b, const What&... what) {
  ORCHMLLM_REQUIRE(b <= INT64_MAX - a, invalid_argument_error, what..., ": ", a, " + ", b,
                   " exceeds 2^63 - 1 (int64 overflow)");
  return a + b;
}

/// a · b for a, b ≥ 0. Throws `invalid_argument_error` "<what…>: a × b exceeds 2^63 - 1
/// (int64 overflow)".
template <class... What>
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const What&... what) {
  ORCHMLLM_REQUIRE(b == 0 || a <= INT64_MAX / b, invalid_argument_error, what..., ": ", a, " × ", b,
                   " exceeds 2^63 - 1 (int64 overflow)");
  return a * b;
}

/// Whether a · b (any signs) falls outside std::int64_t; else stores it in `out`. One multiply
/// and a flag test with GCC and Clang (usable in constant expressions), a division elsewhere.
constexpr bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t& out) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_mul_overflow(a, b, &out);
#else
  if (a == 0 || b == 0) {
    out = 0;
    return false;
  }
  // |a · b| ≤ 2^63 - 1, or exactly -2^63; checked in magnitudes without forming the product.
  const bool negative = (a < 0) != (b < 0);
  const auto ua = a < 0 ? 0 - static_cast<std::uint64_t>(a) : static_cast<std::uint64_t>(a);
  const auto ub = b < 0 ? 0 - static_cast<std::uint64_t>(b) : static_cast<std::uint64_t>(b);
  const std::uint64_t limit = negative ? std::uint64_t{1} << 63 : (std::uint64_t{1} << 63) - 1;
  if (ua > limit / ub) return true;
  const std::uint64_t p = ua * ub;
  out = negative ? static_cast<std::int64_t>(0 - p) : static_cast<std::int64_t>(p);
  return false;
#endif
}

}  // namespace orchmllm::detail
