#pragma once
// The cutting primitives of `balance_split` (balance/split.hpp): the fewest contiguous pieces of
// one item under a target, the smallest largest piece an item can be cut into, and the boundary
// shifts between adjacent pieces on different ranks. docs/algorithms.md ("Splitting segmented
// items") has the algorithm and its proof.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"

namespace orchmllm::detail {

/// The segment costs of one item as prefix sums `prefix[0..S]` (prefix[0] = 0), with the
/// cutting rules: every piece of a cut item has at least `min_segments` segments, at most
/// `max_pieces` pieces.
template <class Cost>
struct item_cutter {
  std::span<const Cost> prefix;
  std::int64_t min_segments;
  std::int64_t max_pieces;

  [[nodiscard]] std::int64_t segments() const noexcept {
    return static_cast<std::int64_t>(prefix.size()) - 1;
  }
  [[nodiscard]] Cost total() const noexcept { return prefix.back(); }
  /// The most pieces this item may be cut into (1: it stays whole).
  [[nodiscard]] std::int64_t piece_limit() const noexcept {
    return std::max<std::int64_t>(1, std::min(max_pieces, segments() / min_segments));
  }

  /// The fewest pieces, each of cost (prefix difference) ≤ tau and ≥ min_segments segments,
  /// that cover the item; `cut` (if not null) receives their first segments. Returns
  /// INT64_MAX when no such cut exists. A sliding-window minimum over the DP
  /// f[i] = 1 + min { f[j] : lo(i) ≤ j ≤ i − min_segments }, where lo(i) is the first j with
  /// prefix[i] − prefix[j] ≤ tau (non-decreasing in i, since costs are ≥ 0). O(S).
  /// Deterministic: among equal counts the earliest j (so the last piece is the longest).
  std::int64_t fewest(Cost tau, std::vector<std::int64_t>* cut = nullptr) const {
    const std::int64_t s = segments();
    constexpr std::int64_t inf = std::numeric_limits<std::int64_t>::max();
    std::vector<std::int64_t> f(static_cast<std::size_t>(s) + 1, inf);
    std::vector<std::int64_t> from(cut ? static_cast<std::size_t>(s) + 1 : 0, -1);
    f[0] = 0;
    std::deque<std::int64_t> window;  // candidate j, f increasing strictly from front to back
    std::int64_t lo = 0;
    for (std::int64_t i = 1; i <= s; ++i) {
      const std::int64_t j_new = i - min_segments;
      if (j_new >= 0 && f[static_cast<std::size_t>(j_new)] != inf) {
        while (!window.empty() &&
               f[static_cast<std::size_t>(window.back())] > f[static_cast<std::size_t>(j_new)])
          window.pop_back();
        window.push_back(j_new);
      }
      while (prefix[static_cast<std::size_t>(i)] - prefix[static_cast<std::size_t>(lo)] > tau) ++lo;
      while (!window.empty() && window.front() < lo) window.pop_front();
      if (!window.empty()) {
        f[static_cast<std::size_t>(i)] = f[static_cast<std::size_t>(window.front())] + 1;
        if (cut) from[static_cast<std::size_t>(i)] = window.front();
      }
    }
    const std::int64_t k = f[static_cast<std::size_t>(s)];
    if (cut && k != inf) {
      cut->clear();
      for (std::int64_t i = s; i > 0; i = from[static_cast<std::size_t>(i)])
        cut->push_back(from[static_cast<std::size_t>(i)]);
      std::reverse(cut->begin(), cut->end());
    }
    return k;
  }

  /// The smallest tau for which a cut into at most `k` (≤ piece_limit()) valid pieces exists:
  /// binary search on tau over fewest(tau) ≤ k, which is monotone in tau. Integral costs:
  /// exact, O(S log total). Floating: bisection down to adjacent representable values,
  /// O(S · (digits + log k)); the pieces' costs are prefix differences, so within a few ulps of
  /// the costs summed piece by piece.
  [[nodiscard]] Cost smallest_largest(std::int64_t k) const {
    const Cost total = this->total();
    if (k <= 1) return total;
    Cost widest{};  // no piece is cheaper than its most expensive segment
    for (std::size_t i = 1; i < prefix.size(); ++i)
      widest = std::max(widest, prefix[i] - prefix[i - 1]);
    Cost lo;
    if constexpr (std::is_integral_v<Cost>) {
      lo = std::max(widest, total / k + (total % k != 0 ? 1 : 0));
    } else {
      lo = std::max(widest, total / static_cast<Cost>(k));
    }
    if (fewest(lo) <= k) return lo;
    Cost hi = total;  // one piece: always a valid cut (min_segments ≤ S)
    // Invariant: fewest(lo) > k >= fewest(hi).
    while (true) {
      Cost mid;
      if constexpr (std::is_integral_v<Cost>) {
        if (hi - lo <= 1) break;
        mid = lo + (hi - lo) / 2;
      } else {
        mid = lo + (hi - lo) / 2;
        if (!(mid > lo && mid < hi)) break;
      }
      if (fewest(mid) <= k) {
        hi = mid;
      } else {
        lo = mid;
      }
    }
    return hi;
  }
};

/// Shifts the boundaries between adjacent pieces of cut items that sit on different ranks:
/// while moving the boundary segment from the piece on the more loaded rank to its neighbour on
/// the other rank lowers the larger of the two loads (B + c < A), it moves, keeping every piece
/// at ≥ `min_segments` segments and the number of pieces unchanged. `prefix`/`start` are the
/// items' segment prefix sums (as in `item_cutter`), `piece_offsets`/`first` the cut (first is
/// updated), `rank` every piece's rank, `load` every rank's load (updated). Each move lowers
/// Σ load² strictly, so it ends; passes are capped at 64 (each O(pieces + moves)). Returns
/// whether a boundary moved. Deterministic (items, then boundaries, in order).
template <class Cost>
bool shift_boundaries(std::span<const Cost> prefix, std::span<const std::int64_t> start,
                      std::span<const std::int64_t> piece_offsets, std::vector<std::int64_t>& first,
                      std::span<const rank_t> rank, std::vector<Cost>& load,
                      std::int64_t min_segments) {
  bool moved_any = false;
  for (int pass = 0; pass < 64; ++pass) {
    bool moved = false;
    for (std::size_t g = 0; g + 1 < piece_offsets.size(); ++g) {
      const std::int64_t a = piece_offsets[g], b = piece_offsets[g + 1];
      if (b - a < 2) continue;
      const Cost* pre = prefix.data() + start[g];  // pre[i]: cost of the item's first i segments
      const std::int64_t segments = start[g + 1] - start[g] - 1;
      for (std::int64_t p = a; p + 1 < b; ++p) {
        const auto pi = static_cast<std::size_t>(p);
        const rank_t ra = rank[pi], rb = rank[pi + 1];
        if (ra == rb) continue;
        std::int64_t& f = first[pi + 1];  // the boundary: first segment of piece p + 1
        const std::int64_t lo = first[pi] + min_segments;
        const std::int64_t hi = (p + 2 < b ? first[pi + 2] : segments) - min_segments;
        Cost& la = load[static_cast<std::size_t>(ra)];
        Cost& lb = load[static_cast<std::size_t>(rb)];
        while (f > lo && la > lb) {  // piece p's last segment to piece p + 1
          const Cost c = pre[f] - pre[f - 1];
          if (!(c > Cost{}) || !(lb + c < la)) break;
          la -= c;
          lb += c;
          --f;
          moved = true;
        }
        while (f < hi && lb > la) {  // piece p + 1's first segment to piece p
          const Cost c = pre[f + 1] - pre[f];
          if (!(c > Cost{}) || !(la + c < lb)) break;
          la += c;
          lb -= c;
          ++f;
          moved = true;
        }
      }
    }
    moved_any = moved_any || moved;
    if (!moved) break;
  }
  return moved_any;
}

}  // namespace orchmllm::detail
