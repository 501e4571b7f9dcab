#pragma once
// Phases 1 and 2 of the locality-aware balancer (detail/balance/locality.hpp): the donors, and
// the shed set of each donor, the items it gives up. Packed donors put their shed sets in the
// pool that phase 3 places; padded donors place theirs at once. Internal: may change without
// notice.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/detail/balance/locality/state.hpp"

namespace orchmllm::detail::locality_impl {

/// Phase 1: the donors, ranks above T, the cap or max_items, by decreasing excess (ties: lower
/// rank first). Every other rank is opened for receiving; a donor only once it has shed.
template <class Cost, class C>
std::vector<rank_t> find_donors(state<Cost, C>& s) {
  std::vector<rank_t> donors;
  for (rank_t r = 0; r < s.d; ++r) {
    if (s.violates(r)) {
      donors.push_back(r);
    } else {
      s.open_rank(r);
    }
  }
  std::stable_sort(donors.begin(), donors.end(),
                   [&](rank_t x, rank_t y) { return s.excess(x) > s.excess(y); });
  return donors;
}

/// Phase 2, packed: the cheapest items in bytes that cover donor r's load, cap and count
/// excesses without going below min_items (empty when r may shed nothing). Items by ascending
/// bytes / cost (equal ratios: larger cost first, then id) until every excess is covered, then
/// those not needed are dropped again, most bytes first; one item covering everything with
/// fewer bytes replaces the set. O(k log k) for k items on r.
template <class Cost, class C>
std::vector<std::int64_t> packed_shed_set(const state<Cost, C>& s, rank_t r) {
  const auto R = static_cast<std::size_t>(r);
  const Cost need_c = s.excess(r);
  const std::int64_t need_f = s.capped ? s.fp[R] - s.cap : 0;
  const std::int64_t need_n = s.count(r) - s.lim.max_items;
  const std::int64_t may_shed = s.count(r) - s.lim.min_items;
  std::vector<std::int64_t> cand;
  for (auto g : s.items[R]) cand.push_back(g);
  if (cand.empty() || may_shed <= 0) return {};
  auto ratio = [&](std::int64_t g) {
    return s.cost_of(g) > Cost{}
               ? static_cast<double>(s.bytes_of(g)) / static_cast<double>(s.cost_of(g))
               : std::numeric_limits<double>::infinity();
  };
  std::sort(cand.begin(), cand.end(), [&](std::int64_t x, std::int64_t y) {
    const double rx = ratio(x), ry = ratio(y);
    if (rx != ry) return rx < ry;
    if (s.cost_of(x) != s.cost_of(y)) return s.cost_of(x) > s.cost_of(y);
    return x < y;
  });
  Cost sc{};
  std::int64_t sf = 0, sn = 0;
  auto covered = [&] { return !(sc < need_c) && sf >= need_f && sn >= need_n; };
  std::vector<std::int64_t> sel;
  for (auto g : cand) {
    if (covered() || sn >= may_shed) break;
    sel.push_back(g);
    sc += s.cost_of(g);
    sf += s.footprint_of(g);
    ++sn;
  }
  // Drop what is not needed, most bytes first (ties: later in `sel` first).
  std::vector<std::size_t> by_bytes(sel.size());
  for (std::size_t i = 0; i < sel.size(); ++i) by_bytes[i] = sel.size() - 1 - i;
  std::stable_sort(by_bytes.begin(), by_bytes.end(), [&](std::size_t x, std::size_t y) {
    return s.bytes_of(sel[x]) > s.bytes_of(sel[y]);
  });
  std::vector<char> dropped(sel.size(), 0);
  if (covered()) {
    for (auto i : by_bytes) {
      const auto g = sel[i];
      sc -= s.cost_of(g);
      sf -= s.footprint_of(g);
      --sn;
      if (covered()) {
        dropped[i] = 1;
      } else {
        sc += s.cost_of(g);
        sf += s.footprint_of(g);
        ++sn;
      }
    }
  }
  std::vector<std::int64_t> shed;
  std::int64_t shed_bytes = 0;
  for (std::size_t i = 0; i < sel.size(); ++i)
    if (!dropped[i]) {
      shed.push_back(sel[i]);
      shed_bytes += s.bytes_of(sel[i]);
    }
  // One item covering everything with fewer bytes.
  if (need_n <= 1) {
    std::optional<std::int64_t> single;
    for (auto g : cand)
      if (!(s.cost_of(g) < need_c) && s.footprint_of(g) >= need_f && s.bytes_of(g) < shed_bytes &&
          (!single || s.bytes_of(g) < s.bytes_of(*single)))
        single = g;
    if (single) shed.assign(1, *single);
  }
  return shed;
}

/// Phase 2, padded (load = count · cost of the longest): donor r's items by length descending
/// (ties: id); every split "drop the k longest, then the m items with the fewest bytes among
/// the rest" is evaluated and the one with the fewest bytes that meets T, the cap and the
/// counts is returned, in that order (empty when none does). O(k² log k) for k items on r.
template <class Cost, class C>
std::vector<std::int64_t> padded_shed_set(const state<Cost, C>& s, rank_t r) {
  using tally = typename state<Cost, C>::tally;
  const auto& lim = s.lim;
  std::vector<std::int64_t> v = s.items[static_cast<std::size_t>(r)];
  std::sort(v.begin(), v.end(), [&](std::int64_t x, std::int64_t y) {
    return s.length_of(x) > s.length_of(y) || (s.length_of(x) == s.length_of(y) && x < y);
  });
  const auto k_all = static_cast<std::int64_t>(v.size());
  std::optional<std::pair<std::int64_t, std::int64_t>> best;  // (k, m)
  std::int64_t best_bytes = 0;
  std::int64_t prefix_bytes = 0;
  for (std::int64_t k = 0; k <= k_all; ++k) {
    if (k > 0) prefix_bytes += s.bytes_of(v[static_cast<std::size_t>(k - 1)]);
    if (k_all - k < lim.min_items) break;
    if (best && prefix_bytes >= best_bytes) break;
    if (k == k_all) {
      if (!best || prefix_bytes < best_bytes) {
        best = std::pair{k, std::int64_t{0}};
        best_bytes = prefix_bytes;
      }
      break;
    }
    const std::int64_t longest = s.length_of(v[static_cast<std::size_t>(k)]);
    const Cost u = s.unit(longest);
    std::vector<std::int64_t> rest_bytes;
    std::int64_t widest = 0;
    for (std::int64_t i = k; i < k_all; ++i)
      widest = std::max(widest, s.bytes_of(v[static_cast<std::size_t>(i)]));
    for (std::int64_t i = k + 1; i < k_all; ++i)
      rest_bytes.push_back(s.bytes_of(v[static_cast<std::size_t>(i)]));
    std::sort(rest_bytes.begin(), rest_bytes.end());
    const std::int64_t w = s.cap_tokens ? s.in.policy.padded_length(longest) : widest;
    std::int64_t extra = 0;
    for (std::int64_t m = 0; m < k_all - k; ++m) {
      if (m > 0) extra += rest_bytes[static_cast<std::size_t>(m - 1)];
      const std::int64_t keep = k_all - k - m;
      if (keep < lim.min_items) break;
      const bool ok = !(tally::padded_load(keep, u) > s.target) && keep <= lim.max_items &&
                      (!s.capped || w == 0 || keep <= s.cap / w);
      if (ok) {
        if (!best || prefix_bytes + extra < best_bytes) {
          best = std::pair{k, m};
          best_bytes = prefix_bytes + extra;
        }
        break;
      }
    }
  }
  if (!best) return {};
  std::vector<std::int64_t> shed(v.begin(), v.begin() + best->first);
  std::vector<std::int64_t> rest(v.begin() + std::min(best->first + 1, k_all), v.end());
  std::stable_sort(rest.begin(), rest.end(),
                   [&](std::int64_t x, std::int64_t y) { return s.bytes_of(x) < s.bytes_of(y); });
  shed.insert(shed.end(), rest.begin(), rest.begin() + best->second);
  return shed;
}

/// Phase 3 for a padded donor r: its shed items, in order, each to the best receiver (same
/// node first, best fit by a scan, O(d) per item) until r is within its limits. Returns false
/// at the first item that fits nowhere: the attempt stops there (see the file comment of
/// locality.hpp; the façade then falls back to automatic).
template <class Cost, class C>
bool place_padded(state<Cost, C>& s, rank_t r, const std::vector<std::int64_t>& shed) {
  for (auto g : shed) {
    if (!s.violates(r)) break;
    if (auto q = s.find_receiver(r, g)) {
      s.move(g, *q);
    } else {
      return false;
    }
  }
  return true;
}

/// Phase 2, every donor in phase 1's order: packed, its shed set is taken off and joins
/// `pool`; padded, its shed set is placed at once (`place_padded`). A donor opens for
/// receiving once it has shed. Returns false when a padded donor gave up; the assignment then
/// stays as it is (its best attempt).
template <class Cost, class C>
bool shed_sets(state<Cost, C>& s, const std::vector<rank_t>& donors,
               std::vector<std::int64_t>& pool) {
  for (const rank_t r : donors) {
    if (!s.padded) {
      for (auto g : packed_shed_set(s, r)) {
        s.detach(g);
        pool.push_back(g);
      }
    } else if (!place_padded(s, r, padded_shed_set(s, r))) {
      return false;
    }
    s.open_rank(r);
  }
  return true;
}

}  // namespace orchmllm::detail::locality_impl
