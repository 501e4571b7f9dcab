#pragma once
// Checked non-negative 64-bit sums and products for sizes (tokens, rows, bytes) that come from
// the caller: an overflow raises `invalid_argument_error` naming the operands instead of
// wrapping.

#include <cstdint>

#include "orchmllm/core/error.hpp"

namespace orchmllm::detail {

/// a + b for a, b ≥ 0. Throws `invalid_argument_error` "<what…>: a + b exceeds 2^63 - 1".
template <class... What>
std::int64_t checked_add(std::int64_t a, std::int64_t b, const What&... what) {
  ORCHMLLM_REQUIRE(b <= INT64_MAX - a, invalid_argument_error, what..., ": ", a, " + ", b,
                   " exceeds 2^63 - 1");
  return a + b;
}

/// a · b for a, b ≥ 0. Throws `invalid_argument_error` "<what…>: a × b exceeds 2^63 - 1".
template <class... What>
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const What&... what) {
  ORCHMLLM_REQUIRE(b == 0 || a <= INT64_MAX / b, invalid_argument_error, what..., ": ", a,
                   " × ", b, " exceeds 2^63 - 1");
  return a * b;
}

}  // namespace orchmllm::detail
