#pragma once
// Input checks that keep the balancers' and the statistics' arithmetic inside its types: what
// every entry point that computes loads runs once on its per-item costs.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"

namespace orchmllm::detail {

/// Checks the contract of a trainer's padding rule on the lengths of `layout` (the longest
/// segments of a layout with segments, which are what a padded policy pads): pad(l) ≥ l and
/// pad non-decreasing (the exact padded algorithm and every padded bound rely on it). O(n log n)
/// and one rule call per distinct length; nothing for the shipped policies, which keep it by
/// construction. Throws `invalid_argument_error` naming the rule and the two lengths.
inline void check_padding_rule(const batch_layout& layout, padding_policy policy) {
  if (policy.policy_kind() != padding_policy::kind::custom) return;
  std::vector<std::int64_t> lengths(layout.lengths().begin(), layout.lengths().end());
  if (layout.has_segments()) {  // the rule pads rows: the items' longest segments
    for (std::int64_t g = 0; g < layout.num_items(); ++g)
      lengths[static_cast<std::size_t>(g)] = item_shape_of(layout, g).row_length;
  }
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  std::int64_t previous = -1;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t padded = policy.padded_length(lengths[i]);  // checks padded >= length
    ORCHMLLM_REQUIRE(i == 0 || padded >= previous, invalid_argument_error, "padding rule '",
                     policy.rule_name(), "' is not non-decreasing: it pads length ", lengths[i - 1],
                     " to ", previous, " but the longer ", lengths[i], " to ", padded);
    previous = padded;
  }
}

/// `item_cost` of item g of a layout with segments, every segment's cost checked: >= 0
/// (finite is checked with the item's sum by `check_headroom`) and, for integral costs, a sum
/// that fits in 64 bits. `running(sum)` (optional) sees the sum after every segment, in order:
/// the item's prefix sums, the last of which is the result. Throws `invalid_argument_error`
/// naming the item and the segment.
struct ignore_running {
  template <class T>
  constexpr void operator()(const T&) const noexcept {}
};
template <class C, class Running = ignore_running>
cost_type_t<C> checked_item_cost(const batch_layout& layout, std::int64_t g, const C& cost,
                                 Running running = {}) {
  using Cost = cost_type_t<C>;
  Cost sum{};
  return item_cost<Cost>(layout, g, cost, [&](std::int64_t s, const Cost& c) {
    ORCHMLLM_REQUIRE(c >= Cost{}, invalid_argument_error, "cost of segment ", s, " of item ", g,
                     " (length ", layout.segments(g)[static_cast<std::size_t>(s)], ") is ", c,
                     ", must be >= 0");
    if constexpr (std::is_integral_v<Cost>) {
      ORCHMLLM_REQUIRE(c <= std::numeric_limits<Cost>::max() - sum, invalid_argument_error,
                       "cost of item ", g, " overflows at segment ", s, " (cost ", c,
                       ", sum so far ", sum, ", limit 2^63 - 1)");
    }
    sum += c;
    running(sum);
  });
}

/// Checks that no load, bound, token count or byte count formed on this input can overflow, so
/// the algorithms may add and multiply them unchecked:
///   - floating costs: every cost finite, and so are the totals below;
///   - packed: Σ costs fits `Cost` (a rank's load is a part of it; Σ lengths and Σ bytes are
///     checked by `batch_layout`);
///   - padded: the longest padded row length, R × that many tokens, n × the widest item's bytes
///     and (R + 1) × the largest padded cost fit, R the rows (n, or Σ S_g with segments: a
///     rank's load is its rows × its padded cost; the list scheduler's keys look one row
///     ahead); a trainer's rule keeps its contract (`check_padding_rule`).
/// `costs[g]` is `item_cost(layout, g, cost)` and `cost` returns `Cost`. O(n) plus one evaluation.
/// Throws `invalid_argument_error` naming the item or the value that does not fit.
template <class Cost, class C>
void check_headroom(const batch_layout& layout, std::span<const Cost> costs, const C& cost,
                    padding_policy policy) {
  const std::int64_t n = layout.num_items();
  if (n == 0) return;
  constexpr bool integral = std::is_integral_v<Cost>;
  constexpr Cost top = std::numeric_limits<Cost>::max();
  if constexpr (!integral) {
    for (std::int64_t g = 0; g < n; ++g)
      ORCHMLLM_REQUIRE(
          std::isfinite(costs[static_cast<std::size_t>(g)]), invalid_argument_error,
          "cost of item ", g, " (length ", layout.length(g), ") is ",
          costs[static_cast<std::size_t>(g)], ", must be finite",
          std::isinf(costs[static_cast<std::size_t>(g)]) ? ": the cost overflows double" : "");
  }
  if (!policy.is_padded()) {
    Cost total{};
    for (std::int64_t g = 0; g < n; ++g) {
      const Cost c = costs[static_cast<std::size_t>(g)];
      if constexpr (integral) {
        ORCHMLLM_REQUIRE(c <= top - total, invalid_argument_error, "total cost overflows at item ",
                         g, " (cost ", c, ", sum so far ", total, ", limit 2^63 - 1)");
      }
      total += c;
    }
    if constexpr (!integral) {
      ORCHMLLM_REQUIRE(std::isfinite(total), invalid_argument_error, "total cost of ", n,
                       " items is not finite: the sum overflows double");
    }
    return;
  }
  check_padding_rule(layout, policy);
  std::int64_t longest = 0;
  std::int64_t widest = 0;
  Cost largest{};
  for (std::int64_t g = 0; g < n; ++g) {
    longest = std::max(longest, item_shape_of(layout, g).row_length);
    widest = std::max(widest, layout.bytes(g));
    largest = std::max(largest, costs[static_cast<std::size_t>(g)]);
  }
  // With segments every segment is a padded row: loads and token footprints count rows.
  const std::int64_t rows = layout.total_segments();
  const std::int64_t padded = policy.padded_length(longest);  // throws past 2^63 - 1
  ORCHMLLM_REQUIRE(padded == 0 || rows <= INT64_MAX / padded, invalid_argument_error, rows,
                   layout.has_segments() ? " rows" : " items", " padded to ", padded,
                   " tokens exceed 2^63 - 1 tokens (int64 overflow)");
  ORCHMLLM_REQUIRE(widest == 0 || n <= INT64_MAX / widest, invalid_argument_error, n,
                   " items padded to ", widest, " bytes exceed 2^63 - 1 bytes (int64 overflow)");
  const Cost padded_cost = static_cast<Cost>(cost(padded));
  largest = std::max(largest, padded_cost);
  if constexpr (integral) {
    ORCHMLLM_REQUIRE(largest == 0 || rows + 1 <= top / largest, invalid_argument_error, rows + 1,
                     " × the padded cost ", largest, " (length ", padded,
                     ") exceeds the largest load 2^63 - 1 (int64 overflow)");
  } else {
    ORCHMLLM_REQUIRE(
        std::isfinite(padded_cost) && std::isfinite(static_cast<Cost>(rows + 1) * largest),
        invalid_argument_error, rows + 1, " × the padded cost ", largest, " (length ", padded,
        ") is not finite: it overflows double");
  }
}

}  // namespace orchmllm::detail
