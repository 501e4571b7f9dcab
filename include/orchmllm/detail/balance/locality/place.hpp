#pragma once
// Phase 3 of the locality-aware balancer (detail/balance/locality.hpp), packed policy: placing
// the pool of shed items, with eviction when no rank has room. Internal: may change without
// notice.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/detail/balance/locality/state.hpp"

namespace orchmllm::detail::locality_impl {

/// The items rank q would give up to take pooled item g: items each cheaper than g covering
/// `need` (g's cost beyond q's room): one that covers alone (the cheapest such), else the
/// cheapest prefix in (cost, id) order, written to `out`. Returns false (`out` unspecified)
/// when q's cheaper items cannot cover `need`. (When `need` ≤ 0, e.g. q has room but the cap
/// or the scan limit kept it from `find_receiver`, the prefix is empty and the set is q's
/// cheapest cheaper item, if any.) `cand` is scratch space, kept by the caller across the
/// ranks it scans. O(k log k) for k items on q. Declared inline so that compilers inline it
/// into `evict_for`, which calls it for every rank it scans (GCC 12 does not otherwise).
template <class Cost, class C>
inline bool eviction_set(const state<Cost, C>& s, rank_t q, std::int64_t g, Cost need,
                         std::vector<std::int64_t>& cand, std::vector<std::int64_t>& out) {
  // The hottest loop of the balancer: the costs and cost(g) are read into locals once.
  const std::span<const Cost> costs = s.in.costs;
  const Cost cost_g = costs[static_cast<std::size_t>(g)];
  cand.clear();
  for (auto x : s.items[static_cast<std::size_t>(q)])
    if (costs[static_cast<std::size_t>(x)] < cost_g) cand.push_back(x);
  std::sort(cand.begin(), cand.end(), [&](std::int64_t x, std::int64_t y) {
    return s.cost_of(x) < s.cost_of(y) || (s.cost_of(x) == s.cost_of(y) && x < y);
  });
  Cost sum{};
  std::size_t k = 0;
  while (k < cand.size() && sum < need) sum += s.cost_of(cand[k++]);
  if (sum < need) return false;
  // Prefer one item that covers alone (least overshoot), else the prefix.
  out.assign(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k));
  for (auto x : cand)
    if (!(s.cost_of(x) < need)) {
      out.assign(1, x);
      break;
    }
  return true;
}

/// Eviction for pooled item g (detached from `home`): the ranks with the most room (up to
/// `locality_evict_scan` of them, global order) may give up items each cheaper than g,
/// covering g's cost beyond their room with the fewest bytes (`eviction_set`); the first that
/// can, within min_items, max_items and the cap, takes g and the evicted items rejoin the pool
/// (a heap under `before`). Costs strictly fall along every eviction chain, and
/// `evictions_left` bounds the work. Returns whether g was placed.
template <class Cost, class C, class Before>
bool evict_for(state<Cost, C>& s, std::int64_t g, rank_t home, std::vector<std::int64_t>& pool,
               const Before& before, std::int64_t& evictions_left) {
  if (evictions_left <= 0) return false;
  std::vector<std::int64_t> cand, out;  // eviction_set's, reused over the ranks scanned
  int looked = 0;
  for (auto it = s.all.rbegin(); it != s.all.rend() && looked < locality_evict_scan;
       ++it, ++looked) {
    const rank_t q = it->second;
    if (q == home) continue;
    const auto Q = static_cast<std::size_t>(q);
    const Cost need = static_cast<Cost>(s.cost_of(g) - it->first);
    if (!eviction_set(s, q, g, need, cand, out)) continue;
    const auto left = s.count(q) - static_cast<std::int64_t>(out.size()) + 1;
    if (left < s.lim.min_items || left > s.lim.max_items) continue;
    if (s.capped) {
      std::int64_t f = s.fp[Q] + s.footprint_of(g);
      for (auto x : out) f -= s.footprint_of(x);
      if (f > s.cap) continue;
    }
    for (auto x : out) {
      s.detach(x);
      pool.push_back(x);
      std::push_heap(pool.begin(), pool.end(), before);
    }
    s.attach(g, q);
    evictions_left -= static_cast<std::int64_t>(out.size());
    return true;
  }
  return false;
}

/// Phase 3, packed: places the pool, largest cost first (ties: lower id): home if it has room
/// again, else best fit on the home node, else best fit anywhere (`find_receiver`), else
/// eviction (`evict_for`, within a budget of 4n + 64 evicted items), else home (over T; phase
/// 5 or the façade's fallback deals with it). Leaves the pool empty.
template <class Cost, class C>
void place_pool(state<Cost, C>& s, std::vector<std::int64_t>& pool) {
  if (s.padded || pool.empty()) return;
  auto before = [&](std::int64_t x, std::int64_t y) {  // heap order: largest cost, then lowest id
    return s.cost_of(x) < s.cost_of(y) || (s.cost_of(x) == s.cost_of(y) && x > y);
  };
  std::make_heap(pool.begin(), pool.end(), before);
  std::int64_t evictions_left = 4 * s.n + 64;
  while (!pool.empty()) {
    std::pop_heap(pool.begin(), pool.end(), before);
    const std::int64_t g = pool.back();
    pool.pop_back();
    const rank_t home = s.a[static_cast<std::size_t>(g)];  // where it was detached from
    if (s.open[static_cast<std::size_t>(home)] && s.after_gain(home, g)) {
      s.attach(g, home);
      continue;
    }
    if (auto q = s.find_receiver(home, g)) {
      s.attach(g, *q);
      continue;
    }
    if (!evict_for(s, g, home, pool, before, evictions_left)) s.attach(g, home);
  }
}

}  // namespace orchmllm::detail::locality_impl
