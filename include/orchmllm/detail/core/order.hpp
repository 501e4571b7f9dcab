#pragma once
// The canonical item order shared by the balancers and the lower bounds, and the radix sort
// that produces it. Internal.
//
// Why a radix sort: ordering 10^5..10^6 items is the largest single cost of a balancing call
// (an index sort with a three-key comparator took ~16 ms at n = 163,840, more than LPT itself).
// Non-negative integers and non-negative IEEE doubles both order like their unsigned bit
// patterns, so a stable LSD radix sort on 16-bit digits gives the exact same order as the
// comparison sort, in O(n) with passes whose digit is constant skipped.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"

namespace orchmllm::detail {

/// Order-preserving unsigned key of a non-negative arithmetic value (-0.0 maps to 0).
template <class T>
std::uint64_t order_key(T v) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    const double x = static_cast<double>(v);
    return x == 0.0 ? 0 : std::bit_cast<std::uint64_t>(x);
  } else {
    return static_cast<std::uint64_t>(v);
  }
}

/// Stable LSD radix sort of `a` by `key(e)` ASCENDING on 16-bit digits, `varying` holding the
/// bits in which some key differs from another (a digit where none does would move nothing, so
/// its pass is skipped). O(n · varying digits) plus the buffer's allocation.
template <class T, class Key>
void radix_sort_ascending(std::vector<T>& a, std::uint64_t varying, Key key) {
  std::vector<T> b(a.size());
  std::vector<std::size_t> count(65537);
  for (int shift = 0; shift < 64; shift += 16) {
    if (((varying >> shift) & 0xFFFF) == 0) continue;
    std::fill(count.begin(), count.end(), 0);
    for (const auto& e : a) ++count[((key(e) >> shift) & 0xFFFF) + 1];
    for (std::size_t i = 0; i < 65536; ++i) count[i + 1] += count[i];
    for (const auto& e : a) b[count[(key(e) >> shift) & 0xFFFF]++] = e;
    a.swap(b);
  }
}

/// Stable sort of (key, id) pairs by key DESCENDING; equal keys keep their input order.
/// O(n) for n ≥ 4096 (LSD radix, 16-bit digits), std::stable_sort below that.
inline void sort_keys_descending(std::vector<std::pair<std::uint64_t, std::int64_t>>& a) {
  const std::size_t n = a.size();
  if (n < 4096) {
    std::stable_sort(a.begin(), a.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    return;
  }
  // Ascending on the complement = descending.
  const std::uint64_t first = ~a[0].first;
  std::uint64_t varying = 0;
  for (auto& e : a) {
    e.first = ~e.first;
    varying |= e.first ^ first;
  }
  radix_sort_ascending(a, varying, [](const auto& e) { return e.first; });
  for (auto& e : a) e.first = ~e.first;
}

/// The ids of a layout's items by (length desc, id asc), or under a padded policy by (row
/// length desc, id asc), when every such length and every id fits 32 bits: one 64-bit word per
/// item, the complement of its length above its id, radix-sorted on the upper half (the ids
/// are in order already and the sort is stable). Half the bytes of (key, id) pairs and, with
/// lengths below 2^16, one pass. Empty when a length or an id does not fit.
inline std::vector<std::int64_t> order_by_length(const batch_layout& layout,
                                                 padding_policy policy) {
  const auto n = static_cast<std::size_t>(layout.num_items());
  constexpr std::uint64_t low = 0xFFFFFFFFu;
  if (n > low) return {};
  const bool rows = policy.is_padded() && layout.has_segments();
  std::vector<std::uint64_t> w(n);
  std::uint64_t varying = 0;
  std::uint64_t first = 0;
  for (std::size_t g = 0; g < n; ++g) {
    const auto id = static_cast<std::int64_t>(g);
    const auto l =
        static_cast<std::uint64_t>(rows ? item_shape_of(layout, id).row_length : layout.length(id));
    if (l > low) return {};
    w[g] = ((low - l) << 32) | g;
    if (g == 0) first = w[0];
    varying |= (w[g] ^ first) & ~low;
  }
  radix_sort_ascending(w, varying, [](std::uint64_t e) { return e; });
  std::vector<std::int64_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::int64_t>(w[i] & low);
  return order;
}

/// The canonical order: item ids sorted by (cost desc, length desc, id asc) for the packed
/// policy and by (row length desc, id asc) for padded ones (the row length is the item's
/// length, or its longest segment: `item_shape_of`). Every algorithm scans items in this
/// order so ties break the same way on every rank. Costs must be non-negative (not NaN).
/// O(n) for large n (radix), O(n log n) otherwise; deterministic.
///
/// From 4,096 items (where the radix sort runs) the items are first ordered by (length desc,
/// id asc), padded by row length: `order_by_length`, fewer and narrower passes than (cost, id)
/// pairs (lengths fit 16–32 bits, double costs use all 64). Padded, that is the canonical order.
/// Packed, it is when the costs do not increase along it (consecutive items are then in (cost
/// desc, length desc, id asc) order, and a sequence ordered pairwise is sorted); else the costs
/// are sorted as below. A cost model that does not decrease with the length, the common case,
/// takes the first path.
template <class Cost>
std::vector<std::int64_t> canonical_order(const batch_layout& layout, std::span<const Cost> costs,
                                          padding_policy policy) {
  const auto n = static_cast<std::size_t>(layout.num_items());
  if (n >= 4096) {
    auto order = order_by_length(layout, policy);
    bool canonical = !order.empty();
    for (std::size_t i = 1; i < order.size() && canonical && !policy.is_padded(); ++i)
      canonical = !(costs[static_cast<std::size_t>(order[i - 1])] <
                    costs[static_cast<std::size_t>(order[i])]);
    if (canonical) return order;
  }
  std::vector<std::pair<std::uint64_t, std::int64_t>> keys(n);
  for (std::size_t g = 0; g < n; ++g) {
    const auto id = static_cast<std::int64_t>(g);
    keys[g] = {
        policy.is_padded() ? order_key(item_shape_of(layout, id).row_length) : order_key(costs[g]),
        id};
  }
  sort_keys_descending(keys);
  std::vector<std::int64_t> order(n);
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1;
    while (j < n && keys[j].first == keys[i].first) ++j;
    // Equal cost: longer first (a cost model may be flat over a range of lengths), then id.
    // Runs are usually ordered already (a cost that grows with the length): one check, O(run),
    // instead of the O(run log run) sort.
    if (!policy.is_padded() && j - i > 1) {
      const auto first = keys.begin() + static_cast<std::ptrdiff_t>(i);
      const auto last = keys.begin() + static_cast<std::ptrdiff_t>(j);
      const auto longer = [&](const auto& x, const auto& y) {
        return layout.length(x.second) > layout.length(y.second);
      };
      if (!std::is_sorted(first, last, longer)) std::stable_sort(first, last, longer);
    }
    for (std::size_t k = i; k < j; ++k) order[k] = keys[k].second;
    i = j;
  }
  return order;
}

}  // namespace orchmllm::detail
