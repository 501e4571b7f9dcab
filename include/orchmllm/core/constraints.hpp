#pragma once
/// @file constraints.hpp
/// Per-rank constraints a balanced plan must satisfy: a memory capacity and item-count limits.
/// See docs/algorithms.md, "Constraints and the first-fit fallback (`first_fit.hpp`)".

#include <cstdint>
#include <limits>
#include <optional>

#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// A hard per-rank memory cap, checked against the rank's footprint under the padding policy
/// (see padding.hpp): tokens (Σ lengths, or count × padded max length) or payload bytes.
struct capacity {
  enum class measure : std::uint8_t { tokens, bytes };
  measure what = measure::tokens;
  std::int64_t limit = std::numeric_limits<std::int64_t>::max();
  friend constexpr bool operator==(const capacity&, const capacity&) = default;
};

/// What every destination rank must satisfy. Default: no constraint.
struct constraints {
  /// Optional hard memory cap per rank; a plan never exceeds it.
  std::optional<capacity> cap{};
  /// Minimum items per rank (1 = no empty rank).
  std::int64_t min_items = 0;
  /// Maximum items per rank.
  std::int64_t max_items = std::numeric_limits<std::int64_t>::max();

  /// Whether any constraint is set.
  [[nodiscard]] constexpr bool any() const noexcept {
    return cap.has_value() || min_items > 0 ||
           max_items != std::numeric_limits<std::int64_t>::max();
  }

  /// Checks the values themselves and the obvious feasibility conditions for n items on d ranks
  /// (d · min ≤ n ≤ d · max; no item on zero ranks). The memory cap is only checked for sign
  /// here: whether the items fit under it depends on the layout and the policy. O(1), no
  /// overflow for any 64-bit n, d. Throws `invalid_argument_error` for a negative n, d, limit or
  /// crossed limits, and `infeasible_error` naming n, d and the limit otherwise.
  void check(std::int64_t n, std::int64_t d) const {
    ORCHMLLM_REQUIRE(n >= 0 && d >= 0, invalid_argument_error, "constraints checked for ", n,
                     " items on ", d, " ranks (both must be >= 0)");
    ORCHMLLM_REQUIRE(min_items >= 0, invalid_argument_error, "min_items is ", min_items,
                     ", must be >= 0");
    ORCHMLLM_REQUIRE(max_items >= min_items, invalid_argument_error, "max_items ", max_items,
                     " is below min_items ", min_items);
    ORCHMLLM_REQUIRE(!cap || cap->limit >= 0, invalid_argument_error, "capacity ", cap->limit,
                     " is negative");
    ORCHMLLM_REQUIRE(d > 0 || n == 0, infeasible_error, n, " items but no ranks");
    if (d == 0) return;
    ORCHMLLM_REQUIRE(min_items <= n / d, infeasible_error, n, " items cannot give each of ", d,
                     " ranks at least ", min_items, " items");
    // ⌈n / d⌉ without forming n + d - 1, which overflows for n near 2^63.
    ORCHMLLM_REQUIRE(max_items >= n / d + (n % d != 0 ? 1 : 0), infeasible_error, n,
                     " items do not fit on ", d, " ranks of at most ", max_items, " items");
  }

  friend constexpr bool operator==(const constraints&, const constraints&) = default;
};

}  // namespace orchmllm
