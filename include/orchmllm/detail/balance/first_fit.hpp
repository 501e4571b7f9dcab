#pragma once
// Constrained first-fit decreasing: the fallback the façade tries when the chosen algorithm
// cannot honour the per-rank cap and item counts. Internal: reached through orchmllm::balance.
//
// Goal: first a feasible assignment (cap, min/max items), then a balanced one.
//
// One packing pass at a load target T ("FFD(T)"): items in `in.order` (largest first); each goes
// to the lowest-index rank that can take it without its load exceeding T, its footprint
// exceeding the cap or its count exceeding max_items. min_items is kept by a reservation: once
// the items left equal the items still owed to ranks below min_items, an item may only go to
// such a rank. Lowest-index first fit fills ranks in order, so empty ranks always form a suffix
// and the first of them stands for all.
//
// Passes, feasibility first:
//  1. FFD(+inf): plain cap-and-count first fit decreasing. Packed policy with a cap: if it fails,
//     FFD(+inf) again with items by decreasing footprint (the bin-packing order), then worst fit
//     in that order (each item to the rank with the most cap room): first fit strands the slack
//     on the first ranks, which max_items may have closed; worst fit spreads it.
//  2. If nothing packed yet: FFD at a ladder of targets LB · (1 + 2^(k−8)), k < first_fit_ladder;
//     a finite target also spreads items and counts over all ranks.
//  3. MULTIFIT (Coffman–Garey–Johnson 1978): bisection of T between the highest failed target
//     (at first makespan_lower_bound) and the best makespan found, geometric while the interval
//     spans more than a factor 2, at most first_fit_iterations passes or until it is within
//     2^-20 of its top; the best feasible packing is kept. FFD is not monotone in T, so this is a
//     heuristic; it never returns a plan worse than the first feasible pass.
// Returns nullopt when no pass packs (bin packing is NP-hard: a feasible instance may be missed).
//
// "Lowest-index rank that can take the item" is a descent in a max-segment tree over the ranks.
// Conditions whose threshold does not depend on the item (count below max_items, the min_items
// reserve, the padded load and token tests) close a rank outright; only item-dependent rooms are
// kept per node (packed: load room and cap room; padded bytes: cap / (count + 1)), and the descent
// skips a subtree as soon as one maximum is too small. When one rank attains all maxima of its
// subtree (rooms that grow together, the usual case: packed costs and tokens both follow the
// length) the descent never backtracks: O(log d) per item. Rooms that order ranks differently
// (packed load against a bytes cap) can make it backtrack, up to O(d) per item at worst.
//
// Padded policy: `in.order` is by decreasing length, so a non-empty rank's longest item is its
// first and one more item makes its load (count + 1) · cost(padded first length) and its token
// footprint (count + 1) · padded first length, whatever the item; the byte footprint
// count · max bytes needs (count + 1) · max bytes ≤ cap (a closing test) and the item's bytes
// ≤ cap / (count + 1) (a room). Every rank is a `rank_load` (core/rank_load.hpp): the rooms and
// closing tests read its load, `load_if_added` and `fits_if_added`.
//
// Complexity: O(n log n) for the orders and the bound; O(n log d) per pass typically (see
// above), at most 3 + first_fit_ladder + first_fit_iterations passes (35); the items of a pass
// order are gathered once into contiguous arrays. Memory O(n + d). Deterministic.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"

namespace orchmllm::detail {

/// Binary-search passes of constrained_first_fit after the first feasible one.
inline constexpr int first_fit_iterations = 20;
/// Targets tried when plain FFD fails: lower bound × (1 + 2^(k−8)), k = 0 … first_fit_ladder − 1.
inline constexpr int first_fit_ladder = 12;

namespace first_fit_impl {

inline constexpr std::int64_t none = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t all = std::numeric_limits<std::int64_t>::max();

// The rooms of a rank: it can take an item iff every room is >= the item's need. Conditions
// whose need does not depend on the item (count below max_items, owed items in the min_items
// reserve, every padded load/cap test but the item's own bytes) are not rooms: a rank failing
// one is closed (all rooms lowest). Fewer rooms means fewer subtrees whose maxima come from
// different ranks, which is what makes the descent backtrack.
template <class Cost>
struct rooms {
  Cost load;           // packed: T − load; padded: 0
  std::int64_t cap_a;  // packed: cap − footprint; padded: 0
  std::int64_t cap_b;  // padded bytes: cap / (count + 1); else all

  static constexpr rooms closed() noexcept { return rooms{lowest<Cost>(), none, none}; }
};

// Max-segment tree over ranks for "lowest index with every room >= need".
template <class Cost>
class room_tree {
 public:
  explicit room_tree(std::int64_t d) {
    size_ = 1;
    while (size_ < d) size_ *= 2;
    node_.assign(static_cast<std::size_t>(2 * size_), rooms<Cost>::closed());
  }

  void set(std::int64_t r, const rooms<Cost>& v) {
    auto i = static_cast<std::size_t>(r + size_);
    node_[i] = v;
    for (i /= 2; i >= 1; i /= 2) {
      const auto& a = node_[2 * i];
      const auto& b = node_[2 * i + 1];
      node_[i] = rooms<Cost>{std::max(a.load, b.load), std::max(a.cap_a, b.cap_a),
                             std::max(a.cap_b, b.cap_b)};
    }
  }

  // Lowest rank whose rooms all reach `need`, or -1.
  std::int64_t first(const rooms<Cost>& need) const { return descend(1, 0, size_, need); }

 private:
  static bool enough(const rooms<Cost>& have, const rooms<Cost>& need) {
    return have.load >= need.load && have.cap_a >= need.cap_a && have.cap_b >= need.cap_b;
  }
  std::int64_t descend(std::size_t i, std::int64_t lo, std::int64_t hi,
                       const rooms<Cost>& need) const {
    if (!enough(node_[i], need)) return -1;
    if (hi - lo == 1) return lo;
    const std::int64_t mid = lo + (hi - lo) / 2;
    const std::int64_t r = descend(2 * i, lo, mid, need);
    return r >= 0 ? r : descend(2 * i + 1, mid, hi, need);
  }

  std::int64_t size_ = 1;
  std::vector<rooms<Cost>> node_;
};

template <class Cost>
struct packing {
  std::vector<rank_t> assignment;
  Cost makespan{};
};

// The items of one pass order with what a pass reads, gathered once into contiguous arrays:
// the passes (up to about 35) then stream through memory instead of jumping by item id.
template <class Cost>
struct sequence {
  std::vector<std::int64_t> id;
  std::vector<Cost> cost;        // packed: the item's cost; padded: cost(padded length)
  std::vector<std::int64_t> fp;  // footprint under the cap's measure (0 without a cap)
  std::vector<std::int64_t> length, bytes;
  std::vector<item_shape> shape;  // padded with segments only: the item's rows (else empty)

  template <class C>
  sequence(const balance_input<Cost>& in, const C& c, std::vector<std::int64_t> order)
      : id(std::move(order)),
        cost(id.size()),
        fp(id.size(), 0),
        length(id.size()),
        bytes(id.size()) {
    const bool rows = in.policy.is_padded() && in.layout.has_segments();
    if (rows) shape.resize(id.size());
    for (std::size_t i = 0; i < id.size(); ++i) {
      const auto g = id[i];
      length[i] = in.layout.length(g);
      bytes[i] = in.layout.bytes(g);
      if (rows) shape[i] = item_shape_of(in.layout, g);
      cost[i] = in.policy.is_padded()
                    ? static_cast<Cost>(
                          c(in.policy.padded_length(rows ? shape[i].row_length : length[i])))
                    : in.costs[static_cast<std::size_t>(g)];
      if (in.limits.cap) fp[i] = item_footprint(in.layout, g, in.policy, in.limits.cap->what);
    }
  }
};

// One FFD pass at target T over `seq`. nullopt when an item finds no rank.
template <class Cost, class C>
std::optional<packing<Cost>> pack(const balance_input<Cost>& in, const C& cost,
                                  const sequence<Cost>& seq, Cost T) {
  const std::int64_t n = static_cast<std::int64_t>(seq.id.size());
  const std::int64_t d = in.d;
  const bool padded = in.policy.is_padded();
  const auto& lim = in.limits;
  const std::int64_t m = lim.min_items;
  const bool capped = lim.cap.has_value();
  const std::int64_t cap = capped ? lim.cap->limit : all;
  const bool bytes = capped && lim.cap->what == capacity::measure::bytes;

  using state = rank_load<Cost, rank_load_mode::add_only>;
  const std::int64_t used = std::min(d, n);  // ranks that can receive an item
  std::vector<state> st(static_cast<std::size_t>(used), state(in.policy));
  room_tree<Cost> tree(used);
  std::int64_t open = 0;  // ranks 0..open-1 are non-empty
  std::int64_t deficit = m * d;
  bool reserve = false;  // the items left are exactly those owed to ranks below min_items

  auto room_of = [&](const state& s) {
    using R = rooms<Cost>;
    if (s.count() >= lim.max_items || (reserve && s.count() >= m)) return R::closed();
    if (!padded)
      return R{T - s.load(cost), capped ? cap - (bytes ? s.bytes() : s.tokens()) : all, all};
    // Padded, non-empty rank: its first item is its longest (decreasing lengths), so one more
    // item gives load (count + 1) · unit and footprint (count + 1) · max(widest, item's).
    if (T < s.load_if_added(s.max_length(), Cost{}, cost)) return R::closed();
    if (capped && !s.fits_if_added(*lim.cap, s.max_length(), s.max_bytes())) return R::closed();
    return R{Cost{}, 0, bytes ? cap / (s.count() + 1) : all};
  };

  packing<Cost> out;
  out.assignment.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const Cost p = seq.cost[ui];
    const std::int64_t f = seq.fp[ui];
    if (!reserve && m > 0 && n - i == deficit) {
      // From here on only ranks below min_items may receive (and this stays so): close the
      // others. Once per pass, O(d log d).
      reserve = true;
      for (std::int64_t r = 0; r < open; ++r) tree.set(r, room_of(st[static_cast<std::size_t>(r)]));
    }
    const rooms<Cost> need = padded ? rooms<Cost>{Cost{}, 0, bytes ? f : 0} : rooms<Cost>{p, f, 0};
    std::int64_t r = tree.first(need);
    if (r < 0 && open < used) {
      // The first empty rank: can it hold the item alone? (It is below min_items if any.)
      if (p <= T && f <= cap && lim.max_items >= 1) r = open;
    }
    if (r < 0) return std::nullopt;
    auto& s = st[static_cast<std::size_t>(r)];
    if (r == open) ++open;
    if (s.count() < m) --deficit;
    if (seq.shape.empty()) {
      s.add(seq.length[ui], p, seq.bytes[ui], cost);
    } else {
      s.add(seq.shape[ui], p, cost);
    }
    tree.set(r, room_of(s));
    out.assignment[static_cast<std::size_t>(seq.id[ui])] = static_cast<rank_t>(r);
  }
  if (deficit > 0) return std::nullopt;  // only when d · min_items > n (the façade rejects it)
  for (std::int64_t r = 0; r < open; ++r)
    out.makespan = std::max(out.makespan, st[static_cast<std::size_t>(r)].load(cost));
  return out;
}

// Worst-fit decreasing for the packed policy with a cap, used when first fit fails: each item
// (footprint descending) goes to the rank with the most cap room left (ties: lowest index), so
// the slack is spread over all ranks instead of being left on ranks that max_items has closed.
// No load target. O(n log d) per pass: the leftmost maximum of a max-tree is one descent.
template <class Cost, class C>
std::optional<packing<Cost>> pack_worst_fit(const balance_input<Cost>& in, const C& cost,
                                            const sequence<Cost>& seq) {
  const std::int64_t n = static_cast<std::int64_t>(seq.id.size());
  const std::int64_t d = in.d;
  const auto& lim = in.limits;
  const std::int64_t m = lim.min_items;
  const std::int64_t cap = lim.cap->limit;
  std::int64_t size = 1;
  while (size < d) size *= 2;
  std::vector<std::int64_t> room(static_cast<std::size_t>(2 * size), none);
  auto set = [&](std::int64_t r, std::int64_t v) {
    auto i = static_cast<std::size_t>(r + size);
    room[i] = v;
    for (i /= 2; i >= 1; i /= 2) room[i] = std::max(room[2 * i], room[2 * i + 1]);
  };
  using state = rank_load<Cost, rank_load_mode::add_only>;
  std::vector<state> st(static_cast<std::size_t>(d), state(in.policy));
  const bool bytes = lim.cap->what == capacity::measure::bytes;
  const bool can_take = lim.max_items >= 1;
  for (std::int64_t r = 0; r < d; ++r) set(r, can_take ? cap : none);
  std::int64_t deficit = m * d;
  bool reserve = false;
  packing<Cost> out;
  out.assignment.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const std::int64_t f = seq.fp[ui];
    if (!reserve && m > 0 && n - i == deficit) {
      reserve = true;
      for (std::int64_t r = 0; r < d; ++r)
        if (st[static_cast<std::size_t>(r)].count() >= m) set(r, none);
    }
    if (room[1] < f) return std::nullopt;
    std::size_t node = 1;  // leftmost leaf holding the maximum
    while (node < static_cast<std::size_t>(size))
      node = room[2 * node] == room[node] ? 2 * node : 2 * node + 1;
    const auto r = static_cast<std::int64_t>(node) - size;
    auto& s = st[static_cast<std::size_t>(r)];
    if (s.count() < m) --deficit;
    if (seq.shape.empty()) {
      s.add(seq.length[ui], seq.cost[ui], seq.bytes[ui]);
    } else {
      s.add(seq.shape[ui], seq.cost[ui]);
    }
    const bool open = s.count() < lim.max_items && !(reserve && s.count() >= m);
    set(r, open ? cap - (bytes ? s.bytes() : s.tokens()) : none);
    out.assignment[static_cast<std::size_t>(seq.id[ui])] = static_cast<rank_t>(r);
  }
  if (deficit > 0) return std::nullopt;
  for (const auto& s : st) out.makespan = std::max(out.makespan, s.load(cost));
  return out;
}

}  // namespace first_fit_impl

/// Constrained first-fit decreasing with a MULTIFIT search on the load target (see the file
/// comment). Returns one destination rank per item (global-id order) satisfying every
/// constraint, or nullopt when none was found. Requires `in.order` to be the canonical order of
/// `in.policy`. Deterministic.
template <class Cost, class C>
std::optional<std::vector<rank_t>> constrained_first_fit(const balance_input<Cost>& in,
                                                         const C& cost) {
  using first_fit_impl::pack;
  using seq_t = first_fit_impl::sequence<Cost>;
  const std::int64_t n = in.layout.num_items();
  if (n == 0) return std::vector<rank_t>{};
  if (in.d <= 0) return std::nullopt;

  const Cost inf = unbounded<Cost>();
  Cost lo = input_lower_bound(in, cost);

  // 1. Feasibility: plain cap-and-count FFD.
  seq_t seq(in, cost, std::vector<std::int64_t>(in.order.begin(), in.order.end()));
  auto best = pack(in, cost, seq, inf);
  if (!best && in.limits.cap && !in.policy.is_padded()) {
    // The bin-packing order (footprint descending, then the canonical order). Only for the
    // packed policy: the padded pass relies on decreasing lengths.
    std::vector<std::int64_t> position(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) position[static_cast<std::size_t>(i)] = i;
    std::stable_sort(position.begin(), position.end(), [&](std::int64_t a, std::int64_t b) {
      return seq.fp[static_cast<std::size_t>(a)] > seq.fp[static_cast<std::size_t>(b)];
    });
    std::vector<std::int64_t> by_footprint(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      by_footprint[static_cast<std::size_t>(i)] =
          seq.id[static_cast<std::size_t>(position[static_cast<std::size_t>(i)])];
    seq_t alt(in, cost, std::move(by_footprint));
    best = pack(in, cost, alt, inf);
    // 2. First fit leaves the slack on the first ranks; when max_items closes them the small
    // items find no room. Worst fit spreads the slack over all ranks.
    if (!best) best = first_fit_impl::pack_worst_fit(in, cost, alt);
    if (best) seq = std::move(alt);
  }
  // 3. A finite target also spreads items (and counts) over all ranks: climb a ladder of
  // targets above the lower bound.
  for (int step = 0; !best && step < first_fit_ladder; ++step) {
    Cost T;
    if constexpr (std::is_integral_v<Cost>) {
      constexpr Cost top = std::numeric_limits<Cost>::max();  // saturate, never overflow
      const int shift = step - 8;
      Cost extra = shift < 0 ? static_cast<Cost>(lo >> -shift)
                             : (lo > (top >> shift) ? top : static_cast<Cost>(lo << shift));
      extra = std::max<Cost>(extra, 1);
      T = extra > top - lo ? top : static_cast<Cost>(lo + extra);
    } else {
      T = lo + lo * static_cast<Cost>(std::ldexp(1.0, step - 8));
    }
    best = pack(in, cost, seq, T);
    if (!best) lo = T;
  }
  if (!best) return std::nullopt;

  // 4. MULTIFIT: the smallest target at which FFD still packs, by bisection, until the interval
  // is within 2^-20 of its top (or first_fit_iterations passes).
  Cost hi = best->makespan;
  for (int it = 0; it < first_fit_iterations && lo < hi; ++it) {
    if (static_cast<double>(hi - lo) <= std::ldexp(static_cast<double>(hi), -20)) break;
    // Geometric midpoint while the interval spans more than a factor 2 (FFD(+inf) can be far
    // above the bound), arithmetic after that.
    Cost mid;
    if (lo > Cost{0} && hi / 2 > lo) {
      mid = static_cast<Cost>(std::sqrt(static_cast<double>(lo)) *
                              std::sqrt(static_cast<double>(hi)));
    } else if constexpr (std::is_integral_v<Cost>) {
      mid = static_cast<Cost>(lo + (hi - lo) / 2);
    } else {
      mid = lo + (hi - lo) / 2;
    }
    // The interval no longer splits (a floating midpoint equal to lo would not move lo).
    if (!(mid < hi) || !(mid >= lo) || (std::is_floating_point_v<Cost> && !(mid > lo))) break;
    auto p = pack(in, cost, seq, mid);
    if (p) {
      hi = std::min(mid, p->makespan);
      if (p->makespan < best->makespan) best = std::move(p);
    } else {
      if constexpr (std::is_integral_v<Cost>) {
        lo = static_cast<Cost>(mid + 1);
      } else {
        lo = mid;
      }
    }
  }
  return std::move(best->assignment);
}

}  // namespace orchmllm::detail
