#pragma once
// `balance_split` under a padded policy, included by balance/split.hpp at its end: the whole
// items and the finest cut balanced, the smaller makespan kept, with the row-relaxation bound
// and the guarantee of docs/algorithms.md, "Splitting under padded policies".

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/detail/core/order.hpp"
#include "orchmllm/detail/core/padded_search.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"

namespace orchmllm::detail {

/// The padded path of `balance_split` (a padded policy, a layout with segments, max_pieces ≥ 2,
/// n ≥ 1, d ≥ 1): a piece of k segments is k padded rows of its longest segment. Two cuts are
/// balanced with the caller's options and the one with the smaller makespan kept (the whole
/// items on a tie): every item whole, and the *finest* cut, every item into K_g =
/// min(max_pieces, ⌊S_g / m⌋) pieces of ⌊S_g/K_g⌋ or ⌈S_g/K_g⌉ segments (the longer first).
/// Bound L = max(T_rows, max_g ⌈S_g/K_g⌉ · u(shortest segment of g)), T_rows the optimum of the
/// row relaxation (every segment placed on its own, padded to its own length), valid for every
/// cut and assignment;
/// guarantee (automatic or padded_exact, no constraints) T₀ + (R − 1) · u(longest segment), R
/// the most segments of a piece of the finest cut (docs/algorithms.md, "Splitting under padded
/// policies"; T₀ = max(L, the finest cut's largest piece alone, the finest cut's own row
/// optimum) stands for L there, equal to it when segments are equal). `make(pieces, result, bound,
/// largest, guarantee)` builds the split_result.
template <class C, class Make>
auto padded_split(const batch_layout& layout, const C& cost, padding_policy policy,
                  const any_balancer& b, const constraints& limits, const split_options& split,
                  Make make) {
  using Cost = cost_type_t<C>;
  const std::int64_t n = layout.num_items();
  const rank_t d = layout.num_ranks();
  // Checks the costs and headroom as `balance` does (its errors first, on the whole layout).
  (void)checked_costs(layout, cost, policy);
  // T_rows of a layout: the optimum of its row relaxation (padded_search.hpp), every row of an
  // item of S segments at the item's longest segment.
  auto row_optimum = [&](const batch_layout& l) {
    const std::vector<Cost> none(static_cast<std::size_t>(l.num_items()));
    const auto order = canonical_order<Cost>(l, std::span<const Cost>(none), policy);
    return segmented_padded_bound<C>(l, order, d, cost, policy, Cost{});
  };
  // The bound's row term: every segment a row of its own length (a cut piece pads to its own
  // longest segment, which can be shorter than its item's).
  const batch_layout rows_alone(
      {0, layout.total_segments()},
      std::vector<std::int64_t>(layout.segment_lengths().begin(), layout.segment_lengths().end()));
  Cost bound = row_optimum(rows_alone);
  // The finest cut and the per-item term of the bound.
  std::vector<std::int64_t> piece_offsets{0}, first;
  std::int64_t most_rows = 1;
  std::int64_t longest = 0;
  for (std::int64_t g = 0; g < n; ++g) {
    const auto seg = layout.segments(g);
    const auto S = static_cast<std::int64_t>(seg.size());
    const std::int64_t K =
        std::max<std::int64_t>(1, std::min(split.max_pieces, S / split.min_piece_segments));
    const std::int64_t q = S / K, r = S % K;  // r pieces of q + 1, then K − r of q
    std::int64_t at = 0;
    for (std::int64_t i = 0; i < K; ++i) {
      first.push_back(at);
      at += q + (i < r ? 1 : 0);
    }
    piece_offsets.push_back(static_cast<std::int64_t>(first.size()));
    most_rows = std::max(most_rows, q + (r > 0 ? 1 : 0));
    const std::int64_t shortest = *std::min_element(seg.begin(), seg.end());
    longest = std::max(longest, *std::max_element(seg.begin(), seg.end()));
    const Cost unit = static_cast<Cost>(cost(policy.padded_length(shortest)));
    bound = std::max(
        bound, rank_load<Cost, rank_load_mode::add_only>::padded_load(q + (r > 0 ? 1 : 0), unit));
  }
  const Cost u_max = static_cast<Cost>(cost(policy.padded_length(longest)));
  // The largest piece alone: its rows × the unit of its longest segment.
  auto largest_of = [&](const batch_layout& pl) {
    Cost largest{};
    for (std::int64_t p = 0; p < pl.num_items(); ++p) {
      const item_shape item = item_shape_of(pl, p);
      largest = std::max(
          largest, rank_load<Cost, rank_load_mode::add_only>::padded_load(
                       item.rows, static_cast<Cost>(cost(policy.padded_length(item.row_length)))));
    }
    return largest;
  };
  const bool cuts = first.size() != static_cast<std::size_t>(n);
  piece_layout pieces = cuts ? piece_layout(layout, std::move(piece_offsets), std::move(first))
                             : piece_layout::whole(layout);
  // T₀ of the padded bound on the finest cut: at least L and every piece alone (= L's per-item
  // term when an item's segments are equal).
  const Cost t0 = std::max({bound, largest_of(pieces.layout()), row_optimum(pieces.layout())});
  const Cost guarantee =
      t0 + rank_load<Cost, rank_load_mode::add_only>::padded_load(most_rows - 1, u_max);
  auto whole = balance(layout, cost, policy, b, limits);
  if (!cuts) {  // nothing can be cut: whole items are the only plans, so balance's bound holds
    const Cost largest = largest_of(layout);
    const Cost whole_bound = std::max(bound, whole.lower_bound);
    return make(std::move(pieces), std::move(whole), whole_bound, largest, guarantee);
  }
  auto cut = balance(pieces.layout(), cost, policy, b, limits);
  if (cut.makespan < whole.makespan) {
    const Cost largest = largest_of(pieces.layout());
    return make(std::move(pieces), std::move(cut), bound, largest, guarantee);
  }
  const Cost largest = largest_of(layout);
  return make(piece_layout::whole(layout), std::move(whole), bound, largest, guarantee);
}

}  // namespace orchmllm::detail
