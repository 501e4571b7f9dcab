#pragma once
// Locality-aware balancing: start from the current placement (every item on its source rank)
// and move only what is needed to bring every rank to a makespan target T and inside the
// constraints. Internal: reached through `orchmllm::balance` with `balancers::locality`, which
// sets T = automatic's makespan × (1 + tolerance), runs this, verifies the result and falls back
// to automatic's plan when it misses T or a constraint (see balance/balancer.hpp).
//
// Why: a balancer built from scratch (lpt, kk) scatters the items of every source rank over many
// bins, so even the best bin → rank mapping (topology/mapping.hpp, `transport`) keeps only a
// fraction of the bytes home. Most ranks of a sampled batch are already close to the mean; only
// the excess of the heavy ones has to move.
//
// Phases (all deterministic: fixed orders, ties by rank index or global id, no randomness):
//  1. Donors: ranks whose load exceeds T, or whose footprint exceeds the cap, or that hold more
//     than max_items. Processed by decreasing excess (ties: lower rank first). Unprocessed donors
//     never receive.
//  2. Shed set of a donor (packed): the cheapest way to cover the excess e = load − T (and the cap
//     and count excess): items by ascending bytes / cost (ties: smaller cost, then id) are taken
//     until every excess is covered, then items not needed are dropped again, most bytes first;
//     equal ratios (every item, for a linear cost with bytes ∝ length) take the LARGER item
//     first: the small items stay on their ranks, where phase 3 can evict them to fill the
//     last gaps (shedding the small ones first left rooms too fragmented for the pool's
//     larger items at d = 2560: 15 % of ranks above T against none);
//     a single item covering everything with fewer bytes replaces the set if there is one.
//     Padded (load = count · cost(longest)): every split "drop the k longest, then the m items
//     with the fewest bytes among the rest" is evaluated (O(k²) per donor) and the one with the
//     fewest bytes that meets T, the cap and the counts is taken.
//  3. Placement (packed). Every donor's shed set is taken off first, so every rank is within
//     T, the cap and max_items; the shed items form a pool, placed largest cost first (ties:
//     lower id): back home if home has room again, else best fit (the receiver left with the
//     least room, ties lower rank) among the ranks of the home node that can take it (load ≤ T,
//     cap, max_items), else best fit over all nodes. When nothing has room, eviction: among the
//     `locality_evict_scan` ranks with the most room, the first that can give up items each
//     cheaper than the pooled item, covering its cost beyond the room (one item if one covers
//     alone, else the cheapest prefix), takes it; the evicted items rejoin the pool. Costs fall
//     strictly along every eviction chain and an eviction budget (4n + 64 items) bounds the
//     work; an item still without a place goes home (over T) for phase 5. Receivers are indexed
//     in ordered sets keyed by (room, rank), per node and global: a best-fit query is O(log d)
//     plus at most `locality_scan` candidates rejected by the cap.
//     Padded: each donor places its own shed items at once, same node first, best fit by a scan
//     over the ranks (O(d) per item); if one fits nowhere the attempt stops there (the façade
//     then falls back to automatic): rectangular batches need ranks of similar lengths, which a
//     sampled placement rarely has, so a partial repair is not worth its time.
//  4. min_items: a rank below it takes, from a rank above it, the item with the fewest bytes
//     that it can take within T and the cap, same node first. O(n) per missing item.
//  5. If some rank is still above T: the existing refinement (refine.hpp), heaviest against
//     lightest with T as its target. It may move items that had stayed home (more bytes) but
//     only acts while a rank is above T.
// The façade then checks the constraints and makespan ≤ T with the same arithmetic as every
// other algorithm; this routine always hands back a complete assignment, its best attempt,
// which may still miss T (then the façade falls back).
//
// Correctness: every item is detached at most once per stay on a rank and every pooled item is
// attached again before the pool empties (home as the last resort), so every item ends on
// exactly one rank. Phases 3 and 4 only put an item on a rank that can take it (load ≤ T, cap,
// max_items; an eviction frees ≥ cost − room first, so load − evicted + cost ≤ T) and only take
// from ranks that keep min_items; so a rank within all limits stays within them. The only
// places that can leave a rank above T are "home as last resort" and shed sets a donor cannot
// cover; phase 5 and the façade's final check deal with those. Determinism: as above;
// floating-point loads are updated in one fixed order.
//
// Code: `locality_assign` below runs the phases in order over one `locality_impl::state`
// (locality/state.hpp: the assignment, per-rank items, loads, footprints, the receiver index
// and the detach / attach / find_receiver operations): 1. `find_donors` and 2. `shed_sets`
// (locality/shed.hpp; padded donors place their items there, `place_padded`), 3. `place_pool`
// (locality/place.hpp, with `evict_for`), 4. `fill_min_items` and 5. `polish`
// (locality/repair.hpp).
//
// Complexity (packed, k = items of a donor, s = pooled items incl. evicted ones): O(n + d log d)
// set-up, O(k log k) per donor, O(s log d) placements; an eviction looks at up to
// `locality_evict_scan` ranks, O(k log k) each; plus refinement when a rank is still above T
// (budget `refine_budget`). Padded: O(Σ k² log k) shed selection and O(s · d) placement; phase 4
// is O(n) per missing item. Memory O(n + d). Measured at d = 2,560 × 8 items: 1–37 ms on top of
// automatic (docs/algorithms.md).

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/detail/balance/input.hpp"
#include "orchmllm/detail/balance/locality/place.hpp"
#include "orchmllm/detail/balance/locality/repair.hpp"
#include "orchmllm/detail/balance/locality/shed.hpp"
#include "orchmllm/detail/balance/locality/state.hpp"

namespace orchmllm::detail {

/// The locality-aware balancer; see the file comment. `node_of_rank` has d entries (empty = one
/// node). Returns an assignment (destination rank per item), not necessarily within T.
template <class Cost, class C>
std::vector<rank_t> locality_assign(const balance_input<Cost>& in, const C& cost, Cost target,
                                    std::span<const rank_t> node_of_rank,
                                    std::int64_t refine_budget) {
  namespace impl = locality_impl;
  const std::int64_t n = in.layout.num_items();
  std::vector<rank_t> home = impl::home_placement(in.layout, in.d, n);
  if (n == 0 || in.d <= 1) return home;
  impl::state<Cost, C> s(in, cost, target, node_of_rank, std::move(home));
  const std::vector<rank_t> donors = impl::find_donors(s);  // phase 1
  std::vector<std::int64_t> pool;                           // packed: shed items waiting for a rank
  // Phase 2 (and 3 for padded donors, which may give up: the attempt so far is the answer).
  if (!impl::shed_sets(s, donors, pool)) return std::move(s.a);
  impl::place_pool(s, pool);       // phase 3, packed
  impl::fill_min_items(s);         // phase 4
  impl::polish(s, refine_budget);  // phase 5
  return std::move(s.a);
}

}  // namespace orchmllm::detail
