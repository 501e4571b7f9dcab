#pragma once
// The pieces of `balance_split` (balance/split.hpp): the fewest contiguous pieces of one item
// under a target, the smallest largest piece an item can be cut into, and the splitting-aware
// lower bound. docs/algorithms.md ("Splitting segmented items") has the algorithm and its proof.
// Internal: may change without notice.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

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

}  // namespace orchmllm::detail
