#pragma once
// The splitting-aware lower bound of `balance_split`, included by balance/split.hpp at its end:
// the options' checks, every item's segment-cost prefix sums (checked as `balance` checks
// costs), and L = max(average load, the largest of the smallest largest pieces). The proof is in
// docs/algorithms.md, "Splitting segmented items".

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/detail/balance/split.hpp"
#include "orchmllm/detail/core/headroom.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"

namespace orchmllm::detail {

template <class Cost>
void check_split_options(const split_options& s) {
  ORCHMLLM_REQUIRE(s.min_piece_segments >= 1, invalid_argument_error, "min_piece_segments is ",
                   s.min_piece_segments, ", must be >= 1");
  ORCHMLLM_REQUIRE(s.max_pieces >= 1, invalid_argument_error, "max_pieces is ", s.max_pieces,
                   ", must be >= 1");
  ORCHMLLM_REQUIRE(s.rounds >= 1, invalid_argument_error, "rounds is ", s.rounds, ", must be >= 1");
  ORCHMLLM_REQUIRE(std::isfinite(s.tolerance) && s.tolerance >= 0, invalid_argument_error,
                   "split tolerance is ", s.tolerance, ", must be finite and >= 0");
}

/// Every item's segment-cost prefix sums (CSR over `layout.segment_offsets()` shifted by one
/// per item) and total costs, checked as `balance` checks them.
template <class C>
struct segment_costs {
  using Cost = cost_type_t<C>;
  std::vector<std::int64_t> start;  // prefix of item g: prefix[start[g] .. start[g] + S_g]
  std::vector<Cost> prefix;
  std::vector<Cost> item;  // c_g
  Cost total{};

  segment_costs(const batch_layout& layout, const C& cost, padding_policy policy) {
    const std::int64_t n = layout.num_items();
    start.resize(static_cast<std::size_t>(n) + 1);
    prefix.reserve(static_cast<std::size_t>(layout.total_segments() + n));
    item.resize(static_cast<std::size_t>(n));
    for (std::int64_t g = 0; g < n; ++g) {
      start[static_cast<std::size_t>(g)] = static_cast<std::int64_t>(prefix.size());
      prefix.push_back(Cost{});
      // One evaluation per segment: the checked sum's running values are the prefix sums.
      item[static_cast<std::size_t>(g)] =
          checked_item_cost(layout, g, cost, [&](const Cost& run) { prefix.push_back(run); });
    }
    start[static_cast<std::size_t>(n)] = static_cast<std::int64_t>(prefix.size());
    check_headroom(layout, std::span<const Cost>(item), cost, policy);
    for (const auto c : item) total += c;
  }
  item_cutter<Cost> cutter(std::int64_t g, const split_options& s) const {
    const auto a = static_cast<std::size_t>(start[static_cast<std::size_t>(g)]);
    const auto b = static_cast<std::size_t>(start[static_cast<std::size_t>(g) + 1]);
    return {std::span<const Cost>(prefix).subspan(a, b - a), s.min_piece_segments, s.max_pieces};
  }
};

/// ⌈total / d⌉ for integral costs, total / d for floating ones.
template <class Cost>
Cost average_load(Cost total, rank_t d) {
  if constexpr (std::is_integral_v<Cost>) {
    const auto dd = static_cast<Cost>(d);
    return total / dd + (total % dd != 0 ? 1 : 0);
  } else {
    return total / static_cast<Cost>(d);
  }
}

/// b_g for every item whose cost exceeds `above` (c_g otherwise: no smaller piece is needed).
template <class C>
std::vector<cost_type_t<C>> smallest_pieces(const segment_costs<C>& sc, const split_options& s,
                                            cost_type_t<C> above) {
  std::vector<cost_type_t<C>> b(sc.item);
  for (std::size_t g = 0; g < b.size(); ++g) {
    if (!(b[g] > above)) continue;
    const auto cut = sc.cutter(static_cast<std::int64_t>(g), s);
    if (cut.piece_limit() > 1) b[g] = cut.smallest_largest(cut.piece_limit());
  }
  return b;
}

template <class C>
cost_type_t<C> split_lower_bound_from(const segment_costs<C>& sc, const split_options& s, rank_t d,
                                      std::vector<cost_type_t<C>>* smallest = nullptr) {
  using Cost = cost_type_t<C>;
  if (sc.item.empty()) return Cost{};
  const Cost avg = average_load(sc.total, d);
  auto b = smallest_pieces(sc, s, avg);
  Cost bound = avg;
  for (const auto x : b) bound = std::max(bound, x);
  if (smallest) *smallest = std::move(b);
  return bound;
}

}  // namespace orchmllm::detail
