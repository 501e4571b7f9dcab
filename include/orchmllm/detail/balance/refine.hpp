#pragma once
// Local-search refinement of an assignment: moves and swaps between the heaviest rank and the
// lightest ones. Internal: called by `orchmllm::balance` (balance/balancer.hpp) after lpt / kk
// when refinement is on, and always in `automatic`.
//
// Step (packed policy). H = the heaviest rank (ties: lowest index). For L = the lightest ranks
// in increasing load order (at most refine_partners of them, skipping H):
//   move  an item a of H to L with 0 < c_a < load_H − load_L; the best is the one with c_a
//         closest to half the gap (it minimises max(new load_H, new load_L));
//   swap  a of H with b of L with 0 < c_a − c_b < load_H − load_L, closest to half the gap
//         (both lists are kept sorted by cost, so one two-pointer sweep finds it);
// and the better of the two is applied if both new loads are strictly below the old load_H.
// The first L that admits an improving step wins; when none does, refinement stops (the
// makespan cannot drop through H). Stops too when load_H ≤ target or after step_budget steps.
//
// Termination: every applied step turns H into a rank strictly below the old makespan and
// keeps L strictly below it, so the pair (makespan, number of ranks at the makespan) strictly
// decreases lexicographically. The loads compared are exactly the stored ones (new values are
// computed once, checked, then stored), so this holds in floating point too.
//
// Padded policy (count × cost of the longest): only moves, and only of H's longest item (the
// one that can lower H's padded length) or its shortest (the one that raises L's padded length
// least); every other item is dominated by one of those two when no cap is set. No swaps. This
// is a cheap polish; the exact padded algorithm is the real tool for padded batches.
//
// Constraints: never broken. Moves keep H ≥ min_items and L ≤ max_items; caps are checked for
// every candidate in the footprint the policy defines (with a cap, the closest-to-half moves
// that fit are found by scanning outward; for swaps only the two pairs nearest to half for each
// item of H are looked at).
//
// Floating-point costs: loads start as the sums the façade computes (global-id order) and are
// then updated incrementally in a fixed order, so refinement is deterministic, but they can
// drift by a few ulps from the sums the façade recomputes. To keep "never increases the makespan"
// exact in that metric, the result is compared with the input by `assignment_makespan` at the end
// and discarded if worse.
//
// Complexity: O(n + d) set-up (none when the input already meets the target); per step
// O(log d) for the rank order (amortised over its stale entries) plus, per partner tried,
// O(k_H + k_L) (k = items on a rank) for the swap sweep and the list updates. O(n + d + steps)
// memory. Deterministic: ranks are ordered by (load, index), items by their canonical position.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/detail/balance/common.hpp"

namespace orchmllm::detail {

/// How many of the lightest ranks a refinement step tries as partner of the heaviest.
inline constexpr int refine_partners = 8;

/// Shared state of a refinement run: per-rank item lists in canonical order (for packed: cost
/// descending; for padded: length descending), loads, and the ranks ordered by load.
///
/// Built for runs of a few steps on many ranks: the lists hold canonical positions (item
/// `order[p]` at position p), so they sort by the position itself and need no inverse of the
/// order; they are one counting sort of the positions into a flat array (a rank's list is moved
/// to the end of it, with room to grow, when it first changes). The load order is two binary
/// heaps of (load, rank, version) entries (heaviest first, lightest first), a rank's old entries
/// going stale when its load changes. The order is the total order (load, then index: heaviest
/// = largest load, lowest index), so the heaps give the ranks in exactly the order a sorted set
/// would.
template <class Cost>
struct refine_state {
  struct entry {
    Cost load;
    rank_t rank;
    std::uint32_t version;
  };
  // Lighter first: smaller load, then larger index.
  static bool lighter(const entry& a, const entry& b) {
    return a.load < b.load || (a.load == b.load && a.rank > b.rank);
  }

  const balance_input<Cost>& in;
  std::vector<Cost> load;

  refine_state(const balance_input<Cost>& input, std::span<const rank_t> assignment)
      : in(input),
        load(static_cast<std::size_t>(input.d), Cost{}),
        begin_(static_cast<std::size_t>(input.d) + 1, 0),
        size_(static_cast<std::size_t>(input.d), 0),
        room_(static_cast<std::size_t>(input.d), 0),
        version_(static_cast<std::size_t>(input.d), 0) {
    const auto n = static_cast<std::size_t>(input.layout.num_items());
    const auto d = size_.size();
    for (std::size_t g = 0; g < n; ++g) ++size_[static_cast<std::size_t>(assignment[g])];
    for (std::size_t r = 0; r < d; ++r) {
      begin_[r + 1] = begin_[r] + size_[r];
      room_[r] = size_[r];
    }
    flat_.resize(n);
    std::vector<std::size_t> fill(begin_.begin(), begin_.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      flat_[fill[static_cast<std::size_t>(assignment[static_cast<std::size_t>(in.order[i])])]++] =
          static_cast<std::int64_t>(i);
  }

  /// Rank r's items as their canonical positions, ascending. Valid until r's list next changes.
  [[nodiscard]] std::span<const std::int64_t> items(rank_t r) const {
    const auto R = static_cast<std::size_t>(r);
    return {flat_.data() + begin_[R], size_[R]};
  }
  [[nodiscard]] std::int64_t count(rank_t r) const {
    return static_cast<std::int64_t>(size_[static_cast<std::size_t>(r)]);
  }
  /// The item at canonical position p, and its cost.
  [[nodiscard]] std::int64_t item(std::int64_t p) const {
    return in.order[static_cast<std::size_t>(p)];
  }
  [[nodiscard]] Cost cost_of(std::int64_t p) const {
    return in.costs[static_cast<std::size_t>(item(p))];
  }

  void erase_at(rank_t r, std::size_t i) {
    const auto R = static_cast<std::size_t>(r);
    auto* v = flat_.data() + begin_[R];
    std::copy(v + i + 1, v + size_[R], v + i);
    --size_[R];
  }
  void insert_sorted(rank_t r, std::int64_t p) {
    const auto R = static_cast<std::size_t>(r);
    if (size_[R] == room_[R]) {
      // Moved to the end with room to grow (amortised O(1) per item).
      const std::size_t at = flat_.size();
      room_[R] = 2 * size_[R] + 8;
      flat_.resize(at + room_[R]);
      std::copy(flat_.begin() + static_cast<std::ptrdiff_t>(begin_[R]),
                flat_.begin() + static_cast<std::ptrdiff_t>(begin_[R] + size_[R]),
                flat_.begin() + static_cast<std::ptrdiff_t>(at));
      begin_[R] = at;
    }
    auto* v = flat_.data() + begin_[R];
    auto* it = std::lower_bound(v, v + size_[R], p);
    std::copy_backward(it, v + size_[R], v + size_[R] + 1);
    *it = p;
    ++size_[R];
  }
  void set_loads(rank_t h, Cost new_h, rank_t l, Cost new_l) {
    for (const auto& [r, v] : {std::pair{h, new_h}, std::pair{l, new_l}}) {
      const auto R = static_cast<std::size_t>(r);
      load[R] = v;
      push({v, r, ++version_[R]});
      touched_.push_back(r);
    }
  }
  // Both heaps from the loads. O(d).
  void index_ranks() {
    heavy_.clear();
    light_.clear();
    for (rank_t r = 0; r < in.d; ++r) {
      const auto R = static_cast<std::size_t>(r);
      heavy_.push_back({load[R], r, version_[R]});
    }
    light_ = heavy_;
    std::make_heap(heavy_.begin(), heavy_.end(), lighter);
    std::make_heap(light_.begin(), light_.end(), heavier);
  }
  // The items of every rank whose list changed get that rank (the others keep theirs).
  void write(std::vector<rank_t>& assignment) const {
    for (const rank_t r : touched_)
      for (auto p : items(r)) assignment[static_cast<std::size_t>(item(p))] = r;
  }

  /// Runs steps until the target, the budget, or no improving step. `step(H, L)` tries one
  /// partner and returns whether it applied a step. Returns the number of steps applied.
  template <class Step>
  std::int64_t run(std::int64_t budget, Cost target, Step&& step) {
    std::int64_t steps = 0;
    std::vector<entry> tried_entries;
    while (steps < budget) {
      while (stale(heavy_.front())) pop(heavy_, lighter);
      const rank_t h = heavy_.front().rank;
      const Cost m = load[static_cast<std::size_t>(h)];
      if (m <= target) break;
      bool applied = false;
      int tried = 0;
      // The lightest ranks in order, taken off their heap and put back after.
      tried_entries.clear();
      while (!light_.empty() && tried < refine_partners) {
        const entry e = light_.front();
        pop(light_, heavier);
        if (stale(e)) continue;
        tried_entries.push_back(e);
        if (e.rank == h) continue;
        if (!(e.load < m)) break;
        ++tried;
        if (step(h, e.rank)) {
          applied = true;
          break;
        }
      }
      for (const auto& e : tried_entries)
        if (!stale(e)) {
          light_.push_back(e);
          std::push_heap(light_.begin(), light_.end(), heavier);
        }
      if (!applied) break;
      ++steps;
    }
    return steps;
  }

 private:
  static bool heavier(const entry& a, const entry& b) { return lighter(b, a); }
  [[nodiscard]] bool stale(const entry& e) const {
    return e.version != version_[static_cast<std::size_t>(e.rank)];
  }
  template <class Less>
  static void pop(std::vector<entry>& heap, Less less) {
    std::pop_heap(heap.begin(), heap.end(), less);
    heap.pop_back();
  }
  void push(const entry& e) {
    heavy_.push_back(e);
    std::push_heap(heavy_.begin(), heavy_.end(), lighter);
    light_.push_back(e);
    std::push_heap(light_.begin(), light_.end(), heavier);
  }

  std::vector<std::int64_t> flat_;  // every rank's list, at begin_[r], size_[r] of room_[r]
  std::vector<std::size_t> begin_;  // d + 1 (the last is unused once a list moves)
  std::vector<std::size_t> size_, room_;
  std::vector<std::uint32_t> version_;
  std::vector<entry> heavy_, light_;  // max-heaps of heavier-first and lighter-first
  std::vector<rank_t> touched_;       // ranks whose load changed (with repeats): every step that
                                      // changes lists sets both ranks' loads
};

/// Packed-policy refinement; see the file comment. A rank's state here is two sums, its load
/// (Σ cost: what `rank_load::load` is under the packed policy) and its footprint, kept in plain
/// arrays: the move and swap sweeps evaluate dozens of candidates per step directly on them
/// (m − c_a + c_b), and per-rank `rank_load`s that can remove items cost 18 % more on
/// `BM_lpt_refine` (docs/results.md) for the same bits.
template <class Cost, class C>
void refine_packed(const balance_input<Cost>& in, [[maybe_unused]] const C& cost,
                   std::vector<rank_t>& assignment, std::int64_t budget, Cost target) {
  // Initial loads in global-id order, exactly as assignment_makespan adds them, so the first
  // comparison with the target is exact; nothing else is built when it is already met.
  std::vector<Cost> load(static_cast<std::size_t>(in.d), Cost{});
  for (std::size_t g = 0; g < assignment.size(); ++g)
    load[static_cast<std::size_t>(assignment[g])] += in.costs[g];
  const Cost before = *std::max_element(load.begin(), load.end());
  if (before <= target) return;

  refine_state<Cost> s(in, assignment);
  s.load = std::move(load);
  s.index_ranks();
  const auto& lim = in.limits;
  const bool capped = lim.cap.has_value();
  const std::int64_t cap = capped ? lim.cap->limit : 0;
  const capacity::measure what = capped ? lim.cap->what : capacity::measure::tokens;
  // Lists hold canonical positions: the footprint of the item at position p.
  auto footprint = [&](std::int64_t p) {
    return item_footprint(in.layout, s.item(p), in.policy, what);
  };
  std::vector<std::int64_t> fp(static_cast<std::size_t>(in.d), 0);
  if (capped)
    for (std::size_t g = 0; g < assignment.size(); ++g)
      fp[static_cast<std::size_t>(assignment[g])] +=
          item_footprint(in.layout, static_cast<std::int64_t>(g), in.policy, what);

  struct candidate {
    int kind = 0;  // 0 none, 1 move, 2 swap
    std::size_t ia = 0, ib = 0;
    Cost new_h{}, new_l{};
    [[nodiscard]] Cost value() const { return std::max(new_h, new_l); }
  };

  auto step = [&](rank_t h, rank_t l) -> bool {
    const auto H = static_cast<std::size_t>(h), L = static_cast<std::size_t>(l);
    const auto hi = s.items(h);
    const auto li = s.items(l);
    const Cost m = s.load[H], lo = s.load[L];
    const Cost gap = m - lo;
    const Cost half_gap = gap / 2;
    candidate best;
    auto consider = [&](const candidate& c) {
      if (c.value() < m && (best.kind == 0 || c.value() < best.value())) best = c;
    };

    // Best move: hi is cost-descending; [0, j) have cost > half, [j, end) cost ≤ half.
    if (s.count(h) - 1 >= lim.min_items && s.count(l) + 1 <= lim.max_items) {
      const auto j = static_cast<std::size_t>(
          std::partition_point(hi.begin(), hi.end(),
                               [&](std::int64_t g) { return s.cost_of(g) > half_gap; }) -
          hi.begin());
      std::size_t right = j;  // cost ≤ half, walking to smaller costs
      std::size_t left = j;   // left - 1: cost > half, walking to larger costs
      bool right_open = right < hi.size();
      bool left_open = left > 0;
      auto make = [&](std::size_t i) {
        const Cost c = s.cost_of(hi[i]);
        return candidate{1, i, 0, m - c, lo + c};
      };
      while (right_open || left_open) {
        // Evaluate both frontiers, take the better one.
        candidate cr, cl;
        if (right_open) {
          cr = make(right);
          if (!(s.cost_of(hi[right]) > Cost{}) || !(cr.value() < m)) right_open = false;
        }
        if (left_open) {
          cl = make(left - 1);
          if (!(cl.value() < m)) left_open = false;
        }
        if (!right_open && !left_open) break;
        const bool take_right = right_open && (!left_open || !(cl.value() < cr.value()));
        const candidate c = take_right ? cr : cl;
        if (!capped || footprint(hi[c.ia]) <= cap - fp[L]) {
          consider(c);
          break;
        }
        if (take_right) {
          right_open = ++right < hi.size();
        } else {
          left_open = --left > 0;
        }
      }
    }

    // Best swap: sweep H's items in ascending cost; for each, the items of L nearest to
    // c_a − half (pointer k only moves towards larger costs). li is cost-descending, so
    // ascending index k corresponds to li[li.size() − 1 − k].
    if (!li.empty()) {
      const std::size_t nl = li.size();
      auto lcost = [&](std::size_t k) { return s.cost_of(li[nl - 1 - k]); };
      std::size_t k = 0;  // first ascending index with cost ≥ target
      for (std::size_t t = hi.size(); t-- > 0;) {
        const Cost ca = s.cost_of(hi[t]);
        if (!(ca > Cost{})) continue;
        const Cost want = ca - half_gap;
        while (k < nl && lcost(k) < want) ++k;
        for (std::size_t q = (k > 0 ? k - 1 : k); q <= k && q < nl; ++q) {
          const Cost cb = lcost(q);
          if (!(cb < ca) || !(ca - cb < gap)) continue;
          const std::size_t ib = nl - 1 - q;
          if (capped) {
            const auto fa = footprint(hi[t]), fb = footprint(li[ib]);
            if (fb - fa > cap - fp[H] || fa - fb > cap - fp[L]) continue;
          }
          consider(candidate{2, t, ib, m - ca + cb, lo - cb + ca});
        }
      }
    }

    if (best.kind == 0) return false;
    const std::int64_t a = hi[best.ia];
    if (best.kind == 1) {
      if (capped) {
        fp[H] -= footprint(a);
        fp[L] += footprint(a);
      }
      s.erase_at(h, best.ia);
      s.insert_sorted(l, a);
    } else {
      const std::int64_t b = li[best.ib];
      if (capped) {
        fp[H] += footprint(b) - footprint(a);
        fp[L] += footprint(a) - footprint(b);
      }
      s.erase_at(h, best.ia);
      s.erase_at(l, best.ib);
      s.insert_sorted(h, b);
      s.insert_sorted(l, a);
    }
    s.set_loads(h, best.new_h, l, best.new_l);
    return true;
  };

  if (s.run(budget, target, step) == 0) return;

  if constexpr (std::is_floating_point_v<Cost>) {
    // See the file comment: guard against ulp drift of the incremental loads.
    std::vector<rank_t> result = assignment;
    s.write(result);
    // `before` is the input's makespan exactly as assignment_makespan computes it.
    if (assignment_makespan(in, cost, std::span<const rank_t>(result)) <= before)
      assignment = std::move(result);
  } else {
    s.write(assignment);
  }
}

/// Padded-policy refinement (moves of H's longest or shortest item); see the file comment.
template <class Cost, class C>
void refine_padded(const balance_input<Cost>& in, const C& cost, std::vector<rank_t>& assignment,
                   std::int64_t budget, Cost target) {
  if (assignment_makespan(in, cost, std::span<const rank_t>(assignment)) <= target) return;
  refine_state<Cost> s(in, assignment);
  const auto& lim = in.limits;
  const bool capped = lim.cap.has_value();
  // Per-rank states: every load, and every load a candidate move would give, comes from them.
  using tally = rank_load<Cost>;
  std::vector<tally> st(static_cast<std::size_t>(in.d), tally(in.policy));
  // Lists hold canonical positions: p is the item s.item(p).
  auto shape = [&](std::int64_t p) { return item_shape_of(in.layout, s.item(p)); };
  auto take = [&](tally& t, std::int64_t p) { t.add(shape(p), s.cost_of(p), cost); };
  auto give = [&](tally& t, std::int64_t p) { t.remove(shape(p), s.cost_of(p), cost); };
  for (rank_t r = 0; r < in.d; ++r) {
    const auto R = static_cast<std::size_t>(r);
    for (auto p : s.items(r)) take(st[R], p);
    s.load[R] = st[R].load(cost);
  }
  s.index_ranks();

  auto step = [&](rank_t h, rank_t l) -> bool {
    const auto H = static_cast<std::size_t>(h), L = static_cast<std::size_t>(l);
    const auto hi = s.items(h);
    const Cost m = s.load[H];
    const std::int64_t ch = s.count(h), cl = s.count(l);
    if (ch == 0 || ch - 1 < lim.min_items || cl + 1 > lim.max_items) return false;
    bool found = false;
    std::size_t best_i = 0;
    Cost best_h{}, best_l{};
    const std::size_t picks[2] = {0, hi.size() - 1};
    for (int p = 0; p < (hi.size() > 1 ? 2 : 1); ++p) {
      const std::size_t i = picks[p];
      const std::int64_t a = hi[i];
      tally rest = st[H];  // H without a: O(k_H)
      give(rest, a);
      const Cost new_h = rest.load(cost);
      const Cost new_l = st[L].load_if_added(shape(a), s.cost_of(a), cost);
      if (!(std::max(new_h, new_l) < m)) continue;
      if (capped && !st[L].fits_if_added(*lim.cap, shape(a))) continue;
      if (!found || std::max(new_h, new_l) < std::max(best_h, best_l)) {
        found = true;
        best_i = i;
        best_h = new_h;
        best_l = new_l;
      }
    }
    if (!found) return false;
    const std::int64_t a = hi[best_i];
    give(st[H], a);
    take(st[L], a);
    s.erase_at(h, best_i);
    s.insert_sorted(l, a);
    s.set_loads(h, best_h, l, best_l);
    return true;
  };

  if (s.run(budget, target, step) > 0) s.write(assignment);
}

/// Refines `assignment` in place: never breaks a constraint the input satisfies, never raises
/// the makespan; stops at `target` (usually the lower bound) or after `step_budget` steps.
/// See the file comment.
template <class Cost, class C>
void refine(const balance_input<Cost>& in, const C& cost, std::vector<rank_t>& assignment,
            std::int64_t step_budget, Cost target) {
  if (in.d <= 1 || step_budget <= 0 || in.layout.num_items() == 0) return;
  if (in.policy.is_padded()) {
    refine_padded(in, cost, assignment, step_budget, target);
  } else {
    refine_packed(in, cost, assignment, step_budget, target);
  }
}

}  // namespace orchmllm::detail
