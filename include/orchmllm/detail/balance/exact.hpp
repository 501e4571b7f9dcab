#pragma once
// Exact depth-first branch and bound over assignments, for any padding policy and every
// constraint. Internal: reached through orchmllm::balance with balancers::exact, and from
// balancers::automatic on small inputs. Meant for n up to about 20; the node budget bounds the
// work on anything larger.
//
// Search. Items are placed one by one in `in.order` (largest first, which makes loads grow fast
// and bounds bite early). At each level the children are the ranks the item may join:
//  - symmetry: ranks are opened in index order, so only the first empty rank is ever tried
//    (all empty ranks are interchangeable), and among ranks whose state is equal in every field
//    that matters for the rest of the search (load, and count / footprint where a constraint
//    reads them) only the lowest index is tried;
//  - feasibility: max_items and the cap are checked as the item is added (footprints only grow),
//    min_items by keeping enough items for the ranks still below it;
//  - bound: loads only grow, so a child whose rank load reaches the best makespan known (or the
//    given upper bound) cannot lead to a strictly better solution and is cut; children are tried
//    in increasing order of that load (ties by rank), so the first leaf is an LPT-like solution;
//  - padded capacity: with every load to stay below the best makespan, a rank of count c and
//    unit cost u takes at most (largest t with t · u < best) − c more items; fewer places than
//    items left cuts the node (this is what makes padded instances of n ≈ 20 quick); with
//    segments c counts the rank's rows (every item is at least one row) and max_items the items;
//  - stop: once a solution meets makespan_lower_bound nothing can beat it.
// Every child examined (kept or cut) counts one node against `node_budget`; the search stops,
// incomplete, when the budget is spent. No clock is read: the same input gives the same result.
//
// Floating costs: loads along the search are summed in search order; a leaf's makespan is
// recomputed in global-id order (the order the façade and the statistics use), so the value the
// search compares and returns is bit-identical to the reported one. Pruning compares the
// search-order sums, which can differ from the id-order ones by rounding (a few ulps); only
// packed floating costs are affected (padded loads are a single product).
//
// Complexity: O(nodes · log(branching)) time with nodes <= node_budget; memory O(n + d) plus the
// kept children of the nodes on the current path (16 bytes each), at most
// min(node_budget, n · min(n, d)) entries.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"

namespace orchmllm::detail {

/// Result of `exact_search`. `assignment` is the best solution found (one destination rank per
/// item, global-id order), strictly better than the given upper bound if one was given, or
/// nullopt if none was found. `complete` means the search space was exhausted (or a solution met
/// the lower bound), so the assignment, or else the upper bound, is optimal; with no assignment
/// and no upper bound it means no feasible assignment exists.
template <class Cost>
struct exact_result {
  std::optional<std::vector<rank_t>> assignment;
  bool complete = false;
};

namespace exact_impl {

// What decides a rank's future: two ranks with equal keys are interchangeable for the rest of
// the search. Fields no constraint reads are zeroed so that more ranks compare equal.
template <class Cost>
struct key {
  Cost cost{};
  std::int64_t count = 0;
  std::int64_t a = 0;
  std::int64_t b = 0;
  friend bool operator==(const key&, const key&) = default;
  friend bool operator<(const key& x, const key& y) {
    return std::tie(x.cost, x.count, x.a, x.b) < std::tie(y.cost, y.count, y.a, y.b);
  }
};

// A child while the children of a node are being sorted and deduplicated.
template <class Cost>
struct candidate {
  Cost load;  // the rank's load once the item joins it
  key<Cost> state;
  rank_t rank;
};

// A kept child, as stored for the rest of the node's life.
template <class Cost>
struct child {
  Cost load;
  rank_t rank;
};

}  // namespace exact_impl

/// Branch-and-bound search for a minimum-makespan assignment under `in.policy` and
/// `in.limits` (see the file comment). With `upper_bound`, only assignments of makespan strictly
/// below it are returned. `node_budget` >= 0 bounds the children examined. Deterministic.
template <class Cost, class C>
exact_result<Cost> exact_search(const balance_input<Cost>& in, const C& cost,
                                std::int64_t node_budget,
                                std::optional<Cost> upper_bound = std::nullopt) {
  using bin = rank_load<Cost, rank_load_mode::add_only>;  // one rank during the search
  using cand = exact_impl::candidate<Cost>;
  using child = exact_impl::child<Cost>;
  ORCHMLLM_REQUIRE(node_budget >= 0, invalid_argument_error, "node budget is ", node_budget,
                   ", must be >= 0");
  const std::int64_t n = in.layout.num_items();
  ORCHMLLM_REQUIRE(static_cast<std::int64_t>(in.order.size()) == n, invalid_argument_error,
                   "item order has ", in.order.size(), " entries for ", n, " items");
  exact_result<Cost> result;
  if (n == 0) {
    if (!upper_bound || Cost{} < *upper_bound) result.assignment.emplace();
    result.complete = true;
    return result;
  }
  if (in.d <= 0) {
    result.complete = true;
    return result;
  }

  const auto& lim = in.limits;
  const bool padded = in.policy.is_padded();
  const bool segmented = padded && in.layout.has_segments();  // items are S_g padded rows
  const std::int64_t m = lim.min_items;
  const bool counts_matter = m > 0 || lim.max_items != std::numeric_limits<std::int64_t>::max();
  const bool tokens_cap = lim.cap && lim.cap->what == capacity::measure::tokens;
  const bool bytes_cap = lim.cap && lim.cap->what == capacity::measure::bytes;
  const std::int64_t cap = lim.cap ? lim.cap->limit : 0;
  const Cost lower = input_lower_bound(in, cost);

  bool have_best = upper_bound.has_value();
  Cost best = upper_bound.value_or(Cost{});
  if (have_best && best <= lower) {  // nothing is strictly below a bound the optimum meets
    result.complete = true;
    return result;
  }

  const auto d = static_cast<std::int64_t>(in.d);
  std::vector<bin> bins(static_cast<std::size_t>(std::min<std::int64_t>(d, n)), bin(in.policy));
  std::vector<rank_t> assign(static_cast<std::size_t>(n), 0);
  std::int64_t open = 0;         // ranks 0..open-1 hold items; the rest are empty
  std::int64_t deficit = d * m;  // items still owed to ranks below min_items
  std::int64_t nodes = 0;
  bool stop = false;
  bool exhausted_budget = false;

  // Per level: the rank chosen, that rank's state before, open/deficit before, path maximum.
  struct frame {
    std::size_t begin, end, next;
    bool applied;
  };
  std::vector<frame> frames;
  frames.reserve(static_cast<std::size_t>(n));
  std::vector<child> arena;   // kept children of every level on the current path
  std::vector<cand> scratch;  // children of the node being expanded
  std::vector<bin> saved(static_cast<std::size_t>(n), bin(in.policy));
  std::vector<rank_t> chosen(static_cast<std::size_t>(n));
  std::vector<std::int64_t> saved_open(static_cast<std::size_t>(n));
  std::vector<Cost> path_max(static_cast<std::size_t>(n) + 1, Cost{});

  auto grown = [&](const bin& b, std::int64_t g) {
    bin x = b;
    x.add(item_shape_of(in.layout, g), in.costs[static_cast<std::size_t>(g)], cost);
    return x;
  };
  auto fits_cap = [&](const bin& x) { return !lim.cap || x.fits(*lim.cap); };
  auto state_key = [&](const bin& b) {
    exact_impl::key<Cost> k;
    if (padded) {
      k.count = b.count();
      k.a = b.max_length();
      if (bytes_cap) k.b = b.max_bytes();
      // With segments the load reads the rows; the item count (limits, bytes) rides along.
      if (segmented) k.cost = static_cast<Cost>(b.rows());
    } else {
      k.cost = b.load(cost);
      if (counts_matter) k.count = b.count();
      if (tokens_cap) k.a = b.tokens();
      if (bytes_cap) k.a = b.bytes();
    }
    return k;
  };

  // Pushes the kept children of level i (item order[i]) as a new frame.
  auto expand = [&](std::int64_t i) {
    const std::int64_t g = in.order[static_cast<std::size_t>(i)];
    const std::int64_t last = std::min(open, d - 1);
    scratch.clear();
    for (std::int64_t r = 0; r <= last; ++r) {
      if (nodes >= node_budget) {
        stop = true;
        exhausted_budget = true;
        break;
      }
      ++nodes;
      const bin& b = bins[static_cast<std::size_t>(r)];
      if (b.count() >= lim.max_items) continue;
      const bin x = grown(b, g);
      const Cost load = x.load(cost);
      if (have_best && !(load < best)) continue;
      if (!fits_cap(x)) continue;
      const std::int64_t owed = deficit - (b.count() < m ? 1 : 0);
      if (n - i - 1 < owed) continue;
      scratch.push_back(cand{load, state_key(b), static_cast<rank_t>(r)});
    }
    std::sort(scratch.begin(), scratch.end(), [](const cand& a, const cand& b) {
      if (a.load != b.load) return a.load < b.load;
      if (!(a.state == b.state)) return a.state < b.state;
      return a.rank < b.rank;
    });
    // Equal states are adjacent (equal state implies equal load): keep the lowest rank.
    const std::size_t begin = arena.size();
    for (std::size_t k = 0; k < scratch.size(); ++k) {
      if (k > 0 && scratch[k].state == scratch[k - 1].state) continue;
      arena.push_back(child{scratch[k].load, scratch[k].rank});
    }
    frames.push_back(frame{begin, arena.size(), begin, false});
  };

  // Padded capacity bound: with every load to stay below `best`, a rank of count c and unit
  // cost u can take at most t − c more items, t the largest count with t · u < best (and within
  // max_items and the cap); an empty rank at most t for the smallest unit of any item (every
  // load is at least count · that unit). Fewer places than items left: cut. O(min(n, d)).
  const Cost min_unit =
      padded ? static_cast<Cost>(cost(in.policy.padded_length(
                   item_shape_of(in.layout, in.order[static_cast<std::size_t>(n - 1)]).row_length)))
             : Cost{};
  auto below_best = [&](Cost u, std::int64_t limit) -> std::int64_t {
    // Largest t in [0, limit] with Cost(t) · u < best.
    if (!(u > Cost{0})) return limit;
    std::int64_t t;
    if constexpr (std::is_integral_v<Cost>) {
      const Cost q = (best - 1) / u;  // best >= 1 here: best > lower >= 0
      t = static_cast<std::int64_t>(std::min<Cost>(q, static_cast<Cost>(limit)));
    } else {
      const Cost q = std::floor(best / u);
      t = !(q >= Cost{0})                 ? 0
          : q >= static_cast<Cost>(limit) ? limit
                                          : static_cast<std::int64_t>(q);
      while (t > 0 && !(bin::padded_load(t, u) < best)) --t;
      while (t < limit && bin::padded_load(t + 1, u) < best) ++t;
    }
    return std::max<std::int64_t>(t, 0);
  };
  auto room_left = [&](std::int64_t next) {
    const std::int64_t need = n - next;
    std::int64_t room = 0;
    auto limit_of = [&](std::int64_t largest_footprint) {
      std::int64_t t = std::min(lim.max_items, n);
      if (lim.cap && largest_footprint > 0) t = std::min(t, cap / largest_footprint);
      return t;
    };
    for (std::int64_t r = 0; r < open && room < need; ++r) {
      const bin& b = bins[static_cast<std::size_t>(r)];
      const std::int64_t fp = tokens_cap  ? in.policy.padded_length(b.max_length())
                              : bytes_cap ? b.max_bytes()
                                          : 0;
      if (segmented) {
        // Rows below best (each item is at least one row), within the cap's rows, and items
        // within max_items: whichever admits fewer items.
        const std::int64_t rows_cap =
            lim.cap && fp > 0 ? cap / fp : std::numeric_limits<std::int64_t>::max();
        const std::int64_t by_rows = below_best(b.unit(cost), rows_cap) - b.rows();
        const std::int64_t by_count = std::min(lim.max_items, n) - b.count();
        room += std::max<std::int64_t>(0, std::min(by_rows, by_count));
        continue;
      }
      room += std::max<std::int64_t>(0, below_best(b.unit(cost), limit_of(fp)) - b.count());
    }
    if (open < d && room < need) {
      const std::int64_t each = below_best(min_unit, limit_of(0));
      const std::int64_t empty = d - open;
      room += each > 0 && empty > (need - room) / each ? need : empty * each;
    }
    return room >= need;
  };

  auto leaf_value = [&]() -> Cost {
    if constexpr (std::is_floating_point_v<Cost>) {
      if (!padded) {
        // Recompute in global-id order, as the façade and the statistics do.
        std::vector<Cost> loads(static_cast<std::size_t>(open), Cost{});
        for (std::int64_t g = 0; g < n; ++g)
          loads[static_cast<std::size_t>(assign[static_cast<std::size_t>(g)])] +=
              in.costs[static_cast<std::size_t>(g)];
        Cost mx{};
        for (auto v : loads) mx = std::max(mx, v);
        return mx;
      }
    }
    return path_max[static_cast<std::size_t>(n)];
  };

  expand(0);
  while (!frames.empty() && !stop) {
    const std::size_t i = frames.size() - 1;
    frame& f = frames.back();
    if (f.applied) {  // undo the child tried last at this level
      const auto r = static_cast<std::size_t>(chosen[i]);
      if (saved[i].count() < m) ++deficit;
      bins[r] = saved[i];
      open = saved_open[i];
      f.applied = false;
    }
    if (f.next == f.end || (have_best && !(path_max[i] < best))) {
      arena.resize(f.begin);
      frames.pop_back();
      continue;
    }
    const child c = arena[f.next++];
    if (have_best && !(c.load < best)) {  // sorted by load: the rest are no better
      f.next = f.end;
      continue;
    }
    // Apply the child.
    const auto r = static_cast<std::size_t>(c.rank);
    const std::int64_t g = in.order[i];
    chosen[i] = c.rank;
    saved[i] = bins[r];
    saved_open[i] = open;
    if (bins[r].count() < m) --deficit;
    bins[r] = grown(bins[r], g);
    if (static_cast<std::int64_t>(r) == open) ++open;
    assign[static_cast<std::size_t>(g)] = c.rank;
    path_max[i + 1] = std::max(path_max[i], c.load);
    f.applied = true;
    if (static_cast<std::int64_t>(i) + 1 == n) {
      const Cost v = leaf_value();
      if (!have_best || v < best) {
        have_best = true;
        best = v;
        result.assignment = assign;
        if (best <= lower) {
          stop = true;
        }
      }
      continue;
    }
    if (padded && have_best && !room_left(static_cast<std::int64_t>(i) + 1)) continue;
    expand(static_cast<std::int64_t>(i) + 1);
  }
  result.complete = !exhausted_budget;
  return result;
}

}  // namespace orchmllm::detail
