#pragma once
// The body of `balance_micro_batches` and `micro_batch_objective_as_sampled`
// (balance/micro_batches.hpp, which includes this file at its end): cells with their limits,
// the count M, the per-step and per-micro-batch plans, the exact step for small inputs, the
// order, the slots and the bounds.
// docs/algorithms.md, "Micro-batches", has the algorithms and the proofs.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/micro_batches.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/balance/input.hpp"
#include "orchmllm/detail/balance/refine.hpp"
#include "orchmllm/detail/core/order.hpp"
#include "orchmllm/detail/core/prefetch.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"
#include "orchmllm/detail/core/text.hpp"

namespace orchmllm::detail {

// The items of one balancing problem with what the cells need of each.
template <class Cost>
struct micro_items {
  std::vector<Cost> cost;           // per item (the balancer's costs)
  std::vector<item_shape> shape;    // per item
  std::vector<std::int64_t> order;  // canonical order (heaviest first)
  std::vector<Cost> alone;          // the load of a cell holding the item alone
};

// Checks the options; O(1). Throws invalid_argument_error naming the option.
inline void check_micro_batching(const micro_batching& m) {
  ORCHMLLM_REQUIRE(m.count >= 0, invalid_argument_error, "micro-batch count is ", m.count,
                   ", must be >= 0 (0: the smallest that fits)");
  ORCHMLLM_REQUIRE(m.min_count >= 1, invalid_argument_error, "min_count is ", m.min_count,
                   ", must be >= 1");
  ORCHMLLM_REQUIRE(m.multiple_of >= 1, invalid_argument_error, "multiple_of is ", m.multiple_of,
                   ", must be >= 1");
  ORCHMLLM_REQUIRE(m.exact_max_items >= 0 && m.exact_node_budget >= 0, invalid_argument_error,
                   "exact_max_items is ", m.exact_max_items, " and exact_node_budget ",
                   m.exact_node_budget, ", both must be >= 0");
  ORCHMLLM_REQUIRE(m.count == 0 || (m.count >= m.min_count && m.count % m.multiple_of == 0),
                   invalid_argument_error, "micro-batch count ", m.count, " must be >= min_count ",
                   m.min_count, " and a multiple of ", m.multiple_of);
  const auto& l = m.limits;
  ORCHMLLM_REQUIRE(
      l.tokens >= 1 && l.bytes >= 0 && l.items >= 1 && !(l.cost < 0) && !std::isnan(l.cost),
      invalid_argument_error, "micro-batch limits must be tokens >= 1, bytes >= 0, ",
      "items >= 1 and cost >= 0; got tokens ", l.tokens, ", bytes ", l.bytes, ", items ", l.items,
      ", cost ", l.cost);
}

// The tokens an item adds to any cell's footprint at least, and alone exactly: packed, its
// length; padded, its rows at its own padded row length (a cell pads to its longest row, so
// its footprint is at least the sum of these over its items).
inline std::int64_t item_tokens(const item_shape& s, padding_policy policy) {
  return policy.is_padded() ? s.rows * policy.padded_length(s.row_length) : s.length;
}

// One cell (a rank's micro-batch) and the limits every cell keeps.
template <class Cost>
using cell_load = rank_load<Cost, rank_load_mode::add_only>;

template <class Cost, class C>
struct cell_rules {
  padding_policy policy;
  const micro_batch_limits& limits;
  const C& cost;

  // Whether `cell` can take the item (every limit) and its load if it does.
  [[nodiscard]] bool fits(const cell_load<Cost>& cell, const item_shape& s, Cost c) const {
    if (cell.count() + 1 > limits.items) return false;
    if (!cell.fits_if_added(capacity{capacity::measure::tokens, limits.tokens}, s)) return false;
    if (!cell.fits_if_added(capacity{capacity::measure::bytes, limits.bytes}, s)) return false;
    if (std::isfinite(limits.cost) &&
        static_cast<double>(cell.load_if_added(s, c, cost)) > limits.cost)
      return false;
    return true;
  }
};

// The largest item against each limit: an item that alone exceeds one is an error naming it.
template <class Cost, class C>
void check_items_fit(const batch_layout& layout, const micro_items<Cost>& in,
                     const cell_rules<Cost, C>& rules) {
  const auto& l = rules.limits;
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    const auto gi = static_cast<std::size_t>(g);
    const auto& s = in.shape[gi];
    const std::int64_t tokens = item_tokens(s, rules.policy);
    ORCHMLLM_REQUIRE(tokens <= l.tokens, invalid_argument_error, "item ", g, " alone needs ",
                     tokens, " tokens, above the micro-batch limit of ", l.tokens, " tokens");
    ORCHMLLM_REQUIRE(s.bytes <= l.bytes, invalid_argument_error, "item ", g, " alone has ", s.bytes,
                     " bytes, above the micro-batch limit of ", l.bytes, " bytes");
    ORCHMLLM_REQUIRE(!(static_cast<double>(in.alone[gi]) > l.cost), invalid_argument_error, "item ",
                     g, " alone costs ", in.alone[gi], ", above the micro-batch limit of ", l.cost);
  }
}

// The smallest M the limits allow: each cell holds at most `tokens` (and every item's own
// footprint counts, padding included), `bytes`, `cost` and `items`. O(n).
template <class Cost>
std::int64_t micro_batch_count_bound(const micro_items<Cost>& in, padding_policy policy,
                                     const micro_batch_limits& l, rank_t d) {
  long double tokens = 0, bytes = 0, cost = 0;
  for (std::size_t g = 0; g < in.shape.size(); ++g) {
    tokens += static_cast<long double>(item_tokens(in.shape[g], policy));
    bytes += static_cast<long double>(in.shape[g].bytes);
    cost += static_cast<long double>(in.alone[g]);
  }
  const long double cells = static_cast<long double>(d);
  const auto need = [&](long double total, long double per_cell) -> std::int64_t {
    if (!(per_cell > 0) || total <= 0) return 1;
    const long double m = std::ceil(total / (cells * per_cell));
    return m > 9e18L ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(m);
  };
  std::int64_t m = 1;
  m = std::max(m, need(tokens, static_cast<long double>(l.tokens)));
  if (l.bytes > 0) m = std::max(m, need(bytes, static_cast<long double>(l.bytes)));
  if (std::isfinite(l.cost) && l.cost > 0) m = std::max(m, need(cost, l.cost));
  m = std::max(m,
               need(static_cast<long double>(in.shape.size()), static_cast<long double>(l.items)));
  return m;
}

// A plan of cells: for every item its rank and micro-batch; the loads of every cell.
template <class Cost>
struct cell_plan {
  std::vector<rank_t> rank;         // per item
  std::vector<std::int64_t> batch;  // per item, 0..M-1
  std::vector<Cost> load;           // per cell r·M + m
};

// Σ_m max_r and max_r Σ_m of a plan's cell loads.
template <class Cost>
std::pair<Cost, Cost> objectives(const std::vector<Cost>& load, rank_t d, std::int64_t m_count) {
  Cost per_mb{}, per_step{};
  for (std::int64_t m = 0; m < m_count; ++m) {
    Cost top{};
    for (rank_t r = 0; r < d; ++r)
      top = std::max(top, load[static_cast<std::size_t>(r * m_count + m)]);
    per_mb += top;
  }
  for (rank_t r = 0; r < d; ++r) {
    Cost sum{};
    for (std::int64_t m = 0; m < m_count; ++m)
      sum += load[static_cast<std::size_t>(r * m_count + m)];
    per_step = std::max(per_step, sum);
  }
  return {per_mb, per_step};
}

// A cell under the packed policy: what its limits and load need.
template <class Cost>
struct packed_cell {
  Cost load{};
  std::int64_t count = 0, tokens = 0, bytes = 0;
};

// Places the items of `items` (heaviest first) into `cells` cells of one group: each to the
// lightest cell that fits (ties: the one with fewer items, then the lowest index), so the
// first `cells` items open one cell each. Returns the cell of every item, or nullopt when an item
// fits no cell. O(k · cells).
template <class Cost, class C>
std::optional<std::vector<std::int64_t>> pack_into_cells(std::span<const std::int64_t> items,
                                                         const micro_items<Cost>& in,
                                                         std::int64_t cells,
                                                         const cell_rules<Cost, C>& rules,
                                                         std::vector<cell_load<Cost>>& state) {
  state.assign(static_cast<std::size_t>(cells), cell_load<Cost>(rules.policy));
  std::vector<std::int64_t> where(items.size());
  if (!rules.policy.is_padded()) {
    // Packed: the same choice on four numbers per cell, the cells' loads added up at the end.
    std::vector<packed_cell<Cost>> cell(static_cast<std::size_t>(cells));
    const auto& l = rules.limits;
    const bool cost_cap = std::isfinite(l.cost);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto g = static_cast<std::size_t>(items[i]);
      const auto& s = in.shape[g];
      std::int64_t best = -1;
      for (std::int64_t k = 0; k < cells; ++k) {
        const auto& c = cell[static_cast<std::size_t>(k)];
        if (best >= 0) {
          const auto& b = cell[static_cast<std::size_t>(best)];
          if (!(c.load < b.load || (c.load == b.load && c.count < b.count))) continue;
        }
        if (c.count + 1 > l.items || s.length > l.tokens - c.tokens ||
            s.bytes > l.bytes - c.bytes ||
            (cost_cap && static_cast<double>(c.load + in.cost[g]) > l.cost))
          continue;
        best = k;
      }
      if (best < 0) return std::nullopt;
      auto& c = cell[static_cast<std::size_t>(best)];
      c.load += in.cost[g];
      ++c.count;
      c.tokens += s.length;
      c.bytes += s.bytes;
      where[i] = best;
    }
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto g = static_cast<std::size_t>(items[i]);
      state[static_cast<std::size_t>(where[i])].add(in.shape[g], in.cost[g], rules.cost);
    }
    return where;
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto g = static_cast<std::size_t>(items[i]);
    std::int64_t best = -1;
    Cost best_load{};
    std::int64_t best_count = 0;
    for (std::int64_t k = 0; k < cells; ++k) {
      const auto& cell = state[static_cast<std::size_t>(k)];
      if (!rules.fits(cell, in.shape[g], in.cost[g])) continue;
      const Cost l = cell.load(rules.cost);
      if (best < 0 || l < best_load || (l == best_load && cell.count() < best_count)) {
        best = k;
        best_load = l;
        best_count = cell.count();
      }
    }
    if (best < 0) return std::nullopt;
    state[static_cast<std::size_t>(best)].add(in.shape[g], in.cost[g], rules.cost);
    where[i] = best;
  }
  return where;
}

// Sync per step: the balancer's rank plan, then each rank's items over its M cells (heaviest
// first to the lightest cell that fits). nullopt when a rank cannot fill or hold M cells.
template <class Cost, class C>
std::optional<cell_plan<Cost>> plan_per_step(const batch_layout& layout,
                                             const micro_items<Cost>& in,
                                             const rearrangement& ranks, std::int64_t m_count,
                                             bool allow_empty, const cell_rules<Cost, C>& rules) {
  const rank_t d = layout.num_ranks();
  cell_plan<Cost> out;
  out.rank.assign(in.cost.size(), 0);
  out.batch.assign(in.cost.size(), 0);
  out.load.assign(static_cast<std::size_t>(d * m_count), Cost{});
  std::vector<std::vector<std::int64_t>> of_rank(static_cast<std::size_t>(d));
  for (const auto g : in.order)
    of_rank[static_cast<std::size_t>(ranks.dst_ranks()[static_cast<std::size_t>(g)])].push_back(g);
  std::vector<cell_load<Cost>> state;
  for (rank_t r = 0; r < d; ++r) {
    const auto& items = of_rank[static_cast<std::size_t>(r)];
    if (!allow_empty && static_cast<std::int64_t>(items.size()) < m_count) return std::nullopt;
    auto where = pack_into_cells<Cost>(items, in, m_count, rules, state);
    if (!where) return std::nullopt;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto g = static_cast<std::size_t>(items[i]);
      out.rank[g] = r;
      out.batch[g] = (*where)[i];
    }
    for (std::int64_t m = 0; m < m_count; ++m)
      out.load[static_cast<std::size_t>(r * m_count + m)] =
          state[static_cast<std::size_t>(m)].load(rules.cost);
  }
  return out;
}

// A 4-ary min-heap (by `<`) that can also replace its top by a larger entry in one sift (a cell
// that takes an item only grows); four children share a cache line or two. The order must be
// total, so the top is the same whatever the heap's shape. O(log size) per operation.
template <class T>
class min_heap {
 public:
  [[nodiscard]] bool empty() const noexcept { return h_.empty(); }
  [[nodiscard]] const T& top() const { return h_.front(); }
  void push(T e) {
    std::size_t i = h_.size();
    h_.push_back(e);
    while (i > 0) {
      const std::size_t p = (i - 1) / 4;
      if (!(e < h_[p])) break;
      h_[i] = h_[p];
      i = p;
    }
    h_[i] = e;
  }
  void pop() {
    const T last = h_.back();
    h_.pop_back();
    if (!h_.empty()) sift_down(last);
  }
  // Replaces the top by `e`, no smaller than it.
  void replace_top(T e) { sift_down(e); }

 private:
  // Puts `e` at the root's place and moves it down to where it belongs.
  void sift_down(T e) {
    const std::size_t n = h_.size();
    std::size_t i = 0;
    for (;;) {
      const std::size_t first = 4 * i + 1;
      if (first >= n) break;
      const std::size_t end = std::min(first + 4, n);
      std::size_t c = first;
      for (std::size_t k = first + 1; k < end; ++k)
        if (h_[k] < h_[c]) c = k;
      if (!(h_[c] < e)) break;
      h_[i] = h_[c];
      i = c;
    }
    h_[i] = e;
  }
  std::vector<T> h_;
};

// The cells of one micro-batch during the first per-micro-batch pass: a min-heap of the open
// cells by (load, items, rank), the cells set aside because an item's tokens did not fit them
// (a max-heap by token room: they reopen for a later, smaller item), and the top load. Entries
// whose load or count is not the cell's any more are stale and skipped.
template <class Cost>
struct group_cells {
  // (load, items, rank), ordered so: a total order. Items and rank share one word (items in
  // the high half: a cell holds fewer than 2^31 items).
  struct entry {
    Cost load;
    std::uint64_t items_rank;
    entry(Cost l, std::int64_t items, rank_t rank)
        : load(l),
          items_rank(static_cast<std::uint64_t>(items) << 32 | static_cast<std::uint32_t>(rank)) {}
    [[nodiscard]] std::int64_t items() const { return static_cast<std::int64_t>(items_rank >> 32); }
    [[nodiscard]] rank_t rank() const { return static_cast<rank_t>(items_rank & 0xffffffffU); }
    friend bool operator<(const entry& a, const entry& b) {
      return a.load < b.load || (a.load == b.load && a.items_rank < b.items_rank);
    }
  };
  std::vector<cell_load<Cost>> cell;      // padded policies
  std::vector<packed_cell<Cost>> packed;  // packed
  min_heap<entry> open;
  std::priority_queue<std::pair<std::int64_t, rank_t>> aside;  // (token room, rank)
  Cost top{};
};

// Sync per micro-batch, the first pass: the items in canonical order (heaviest first), each to
// the micro-batch and cell where Σ_m max_r load(r, m) grows least: to the lightest open cell of
// the micro-batch with the most room under its top ("slack" = top − lightest load): no growth
// when the item fits under a top (then the micro-batch where it fits tightest), else growth
// item − slack, least for the largest slack. Cells whose token room is too small for an item
// are set aside until an item small enough comes. While there are empty cells and only as many
// items left, items go to empty cells only. nullopt when an item fits no cell or a cell stays
// empty (unless allowed). O(n (log d + log M)) plus the cells set aside and reopened.
template <class Cost, class C>
std::optional<cell_plan<Cost>> plan_per_micro_batch_greedy(const micro_items<Cost>& in, rank_t d,
                                                           std::int64_t m_count, bool allow_empty,
                                                           const cell_rules<Cost, C>& rules) {
  const auto n = static_cast<std::int64_t>(in.cost.size());
  const auto cells = static_cast<std::size_t>(d * m_count);
  const std::int64_t token_cap = rules.limits.tokens;
  // Packed cells are four numbers each (`packed_cell`), padded ones a `cell_load`.
  const bool packed_cells = !rules.policy.is_padded();
  std::vector<group_cells<Cost>> group(static_cast<std::size_t>(m_count));
  for (auto& gc : group) {
    if (packed_cells) {
      gc.packed.assign(static_cast<std::size_t>(d), packed_cell<Cost>{});
    } else {
      gc.cell.assign(static_cast<std::size_t>(d), cell_load<Cost>(rules.policy));
    }
    for (rank_t r = 0; r < d; ++r) gc.open.push({Cost{}, 0, r});
  }
  const auto load_of = [&](const group_cells<Cost>& gc, rank_t r) {
    return packed_cells ? gc.packed[static_cast<std::size_t>(r)].load
                        : gc.cell[static_cast<std::size_t>(r)].load(rules.cost);
  };
  const auto count_of = [&](const group_cells<Cost>& gc, rank_t r) {
    return packed_cells ? gc.packed[static_cast<std::size_t>(r)].count
                        : gc.cell[static_cast<std::size_t>(r)].count();
  };
  const auto tokens_in = [&](const group_cells<Cost>& gc, rank_t r) {
    return packed_cells ? gc.packed[static_cast<std::size_t>(r)].tokens
                        : gc.cell[static_cast<std::size_t>(r)].tokens();
  };
  // `rules.fits` on a packed cell's numbers: its count, tokens, bytes and load.
  const auto packed_fits = [&](Cost load, std::int64_t count, std::int64_t token_room,
                               std::int64_t byte_room, std::size_t g) {
    return count + 1 <= rules.limits.items && in.shape[g].length <= token_room &&
           in.shape[g].bytes <= byte_room &&
           !(std::isfinite(rules.limits.cost) &&
             static_cast<double>(load + in.cost[g]) > rules.limits.cost);
  };
  const auto fits = [&](const group_cells<Cost>& gc, rank_t r, std::size_t g) {
    if (!packed_cells)
      return rules.fits(gc.cell[static_cast<std::size_t>(r)], in.shape[g], in.cost[g]);
    const auto& c = gc.packed[static_cast<std::size_t>(r)];
    return packed_fits(c.load, c.count, token_cap - c.tokens, rules.limits.bytes - c.bytes, g);
  };
  // The tokens item g adds to a cell's footprint at least (exact for the packed policy; padded
  // cells re-check in `fits`).
  const auto tokens_of = [&](std::size_t g) { return item_tokens(in.shape[g], rules.policy); };
  // The lightest open cell of micro-batch m that the item fits, after reopening the cells with
  // room for it and setting aside those without; -1 if none. Owed: empty cells only.
  const auto lightest = [&](std::int64_t m, std::size_t g, bool owed) -> rank_t {
    auto& gc = group[static_cast<std::size_t>(m)];
    const std::int64_t t = tokens_of(g);
    while (!gc.aside.empty() && gc.aside.top().first >= t) {
      const rank_t r = gc.aside.top().second;
      gc.aside.pop();
      gc.open.push({load_of(gc, r), count_of(gc, r), r});
    }
    std::size_t tried = 0;
    while (!gc.open.empty()) {
      const auto& e = gc.open.top();
      const Cost l = e.load;
      const std::int64_t k = e.items();
      const rank_t r = e.rank();
      if (l != load_of(gc, r) || k != count_of(gc, r)) {  // stale
        gc.open.pop();
        continue;
      }
      if (owed && k > 0) return -1;  // empty cells load 0 and sort first: none is left
      if (fits(gc, r, g)) return r;
      gc.open.pop();
      const std::int64_t room = token_cap - tokens_in(gc, r);
      if (room < t) {
        gc.aside.push({room, r});  // too full for this item; maybe not for a smaller one
      } else if (++tried > 64) {   // another limit: give up on this micro-batch for the item
        gc.open.push({l, k, r});
        return -1;
      } else {
        gc.aside.push({room, r});
      }
    }
    return -1;
  };
  // Packed: each micro-batch's lightest open cell (the open heap's valid top) with what `fits`
  // and the load read of it, so that the micro-batch of an item is chosen from M of these
  // instead of M heaps and cells; `lightest` itself only when a set-aside cell may reopen for the
  // item or the head does not fit it. Refreshed after every change to the micro-batch's cells.
  struct head {
    rank_t r = -1;  // -1: no open cell
    Cost load{};
    std::int64_t count = 0, token_room = 0, byte_room = 0, aside_room = -1;
  };
  std::vector<head> heads(static_cast<std::size_t>(m_count));
  const auto refresh = [&](std::int64_t m) {
    auto& gc = group[static_cast<std::size_t>(m)];
    auto& h = heads[static_cast<std::size_t>(m)];
    h.aside_room = gc.aside.empty() ? -1 : gc.aside.top().first;
    h.r = -1;
    while (!gc.open.empty()) {
      const auto& e = gc.open.top();
      const auto& c = gc.packed[static_cast<std::size_t>(e.rank())];
      if (e.load != c.load || e.items() != c.count) {  // stale
        gc.open.pop();
        continue;
      }
      h.r = e.rank();
      h.load = c.load;
      h.count = c.count;
      h.token_room = token_cap - c.tokens;
      h.byte_room = rules.limits.bytes - c.bytes;
      return;
    }
  };
  // `lightest(m, g, owed)`, from the head where it decides.
  const auto probe = [&](std::int64_t m, std::size_t g, bool owed) -> rank_t {
    const auto& h = heads[static_cast<std::size_t>(m)];
    if (packed_cells && h.aside_room < in.shape[g].length) {
      if (h.r < 0) return -1;
      if (owed && h.count > 0) return -1;
      if (packed_fits(h.load, h.count, h.token_room, h.byte_room, g)) return h.r;
    }
    const rank_t r = lightest(m, g, owed);
    if (packed_cells) refresh(m);
    return r;
  };
  if (packed_cells)
    for (std::int64_t m = 0; m < m_count; ++m) refresh(m);
  std::int64_t empty = allow_empty ? 0 : static_cast<std::int64_t>(cells);
  cell_plan<Cost> out;
  out.rank.assign(static_cast<std::size_t>(n), 0);
  out.batch.assign(static_cast<std::size_t>(n), 0);
  std::vector<rank_t> cand(static_cast<std::size_t>(m_count));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto g = static_cast<std::size_t>(in.order[static_cast<std::size_t>(i)]);
    if (i + prefetch_distance < n) {
      const auto ahead =
          static_cast<std::size_t>(in.order[static_cast<std::size_t>(i + prefetch_distance)]);
      prefetch(&in.shape[ahead]);
      prefetch(&in.cost[ahead]);
      prefetch(&out.rank[ahead], true);
      prefetch(&out.batch[ahead], true);
    }
    const bool owed = empty > 0 && n - i <= empty;
    // The best micro-batch: least growth; no growth: the tightest fit; ties: the lowest m.
    std::int64_t best_m = -1;
    Cost best_inc{}, best_after{};
    for (std::int64_t m = 0; m < m_count; ++m) {
      const rank_t r = probe(m, g, owed);
      cand[static_cast<std::size_t>(m)] = r;
      if (r < 0) continue;
      const auto& gc = group[static_cast<std::size_t>(m)];
      const Cost after = packed_cells ? heads[static_cast<std::size_t>(m)].load + in.cost[g]
                                      : gc.cell[static_cast<std::size_t>(r)].load_if_added(
                                            in.shape[g], in.cost[g], rules.cost);
      const Cost inc = after > gc.top ? after - gc.top : Cost{};
      if (best_m < 0 || inc < best_inc ||
          (inc == best_inc && inc == Cost{} && after > best_after)) {
        best_m = m;
        best_inc = inc;
        best_after = after;
      }
    }
    if (best_m < 0) return std::nullopt;
    auto& gc = group[static_cast<std::size_t>(best_m)];
    const rank_t r = cand[static_cast<std::size_t>(best_m)];
    if (count_of(gc, r) == 0 && !allow_empty) --empty;
    if (packed_cells) {
      auto& c = gc.packed[static_cast<std::size_t>(r)];
      c.load += in.cost[g];
      ++c.count;
      c.tokens += in.shape[g].length;
      c.bytes += in.shape[g].bytes;
    } else {
      gc.cell[static_cast<std::size_t>(r)].add(in.shape[g], in.cost[g], rules.cost);
    }
    const Cost now = load_of(gc, r);
    gc.top = std::max(gc.top, now);
    // The cell was the lightest open one, the heap's top: its entry is replaced in place.
    gc.open.replace_top({now, count_of(gc, r), r});
    if (packed_cells) refresh(best_m);
    out.rank[g] = r;
    out.batch[g] = best_m;
  }
  if (empty > 0) return std::nullopt;
  out.load.resize(cells);
  for (std::int64_t m = 0; m < m_count; ++m)
    for (rank_t r = 0; r < d; ++r)
      out.load[static_cast<std::size_t>(r * m_count + m)] =
          load_of(group[static_cast<std::size_t>(m)], r);
  return out;
}

// The limits of one cell as rank constraints for `balance` (one cap: tokens, else bytes; the
// others are checked on its plan).
inline constraints cell_constraints(const micro_batch_limits& l, bool allow_empty) {
  constraints out;
  if (l.tokens < std::numeric_limits<std::int64_t>::max())
    out.cap = capacity{capacity::measure::tokens, l.tokens};
  else if (l.bytes < std::numeric_limits<std::int64_t>::max())
    out.cap = capacity{capacity::measure::bytes, l.bytes};
  out.min_items = allow_empty ? 0 : 1;
  out.max_items = l.items;
  return out;
}

// The items `ids` (ascending) of one micro-batch as a layout on the ranks they were sampled on,
// with their segments. O(k + d).
inline batch_layout group_layout(const batch_layout& layout, std::span<const std::int64_t> ids) {
  const rank_t d = layout.num_ranks();
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(d) + 1, 0), lengths, bytes,
      seg_offsets, seg_lengths;
  lengths.reserve(ids.size());
  bytes.reserve(ids.size());
  rank_t home = 0;  // the rank of g: ids ascend, so it only moves forward
  for (const auto g : ids) {
    while (g >= layout.offset(home + 1)) ++home;
    ++offsets[static_cast<std::size_t>(home) + 1];
    lengths.push_back(layout.length(g));
    bytes.push_back(layout.bytes(g));
  }
  for (rank_t r = 0; r < d; ++r)
    offsets[static_cast<std::size_t>(r) + 1] += offsets[static_cast<std::size_t>(r)];
  if (layout.has_segments()) {
    seg_offsets.push_back(0);
    for (const auto g : ids) {
      const auto s = layout.segments(g);
      seg_lengths.insert(seg_lengths.end(), s.begin(), s.end());
      seg_offsets.push_back(static_cast<std::int64_t>(seg_lengths.size()));
    }
  }
  return batch_layout(std::move(offsets), std::move(lengths), std::move(bytes), {},
                      std::move(seg_offsets), std::move(seg_lengths));
}

// The cells of one micro-batch: the rank of each of its items and the d cell loads.
template <class Cost>
using group_cells_plan = std::pair<std::vector<rank_t>, std::vector<Cost>>;

// The d cell loads of the items `ids` on the ranks `rank`, or nullopt when a cell breaks a limit.
// `tracked`: the cells are known to keep the token or byte cap and the item count (a plan the
// balancers' refinement kept): packed cells then only add up their costs, unless a cap on the
// other measure or on cost needs checking. O(k + d).
template <class Cost, class C>
std::optional<std::vector<Cost>> group_loads(const micro_items<Cost>& in, rank_t d,
                                             std::span<const std::int64_t> ids,
                                             std::span<const rank_t> rank,
                                             const cell_rules<Cost, C>& rules,
                                             bool tracked = false) {
  constexpr auto none = std::numeric_limits<std::int64_t>::max();
  const auto& l = rules.limits;
  if (tracked && !rules.policy.is_padded() && (l.tokens == none || l.bytes == none) &&
      !std::isfinite(l.cost)) {
    std::vector<Cost> load(static_cast<std::size_t>(d), Cost{});
    for (std::size_t i = 0; i < ids.size(); ++i)
      load[static_cast<std::size_t>(rank[i])] += in.cost[static_cast<std::size_t>(ids[i])];
    return load;
  }
  std::vector<cell_load<Cost>> cells(static_cast<std::size_t>(d), cell_load<Cost>(rules.policy));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto g = static_cast<std::size_t>(ids[i]);
    auto& cell = cells[static_cast<std::size_t>(rank[i])];
    if (!rules.fits(cell, in.shape[g], in.cost[g])) return std::nullopt;
    cell.add(in.shape[g], in.cost[g], rules.cost);
  }
  std::vector<Cost> load(static_cast<std::size_t>(d));
  for (rank_t r = 0; r < d; ++r)
    load[static_cast<std::size_t>(r)] = cells[static_cast<std::size_t>(r)].load(rules.cost);
  return load;
}

// The items `ids` (ascending) of one micro-batch balanced over the d ranks by the balancer under
// the cell limits, or nullopt when the balancer finds no plan that keeps every limit. The
// balancer sees the items on the ranks they were sampled on.
template <class Cost, class C>
std::optional<group_cells_plan<Cost>> balance_group(
    const batch_layout& layout, const micro_items<Cost>& in, std::span<const std::int64_t> ids,
    const any_balancer& b, const cell_rules<Cost, C>& rules, const constraints& cell_limits) {
  const batch_layout group = group_layout(layout, ids);
  std::optional<balance_result<Cost>> res;
  try {
    res = balance(group, rules.cost, rules.policy, b, cell_limits);
  } catch (const infeasible_error&) {
    return std::nullopt;
  }
  std::vector<rank_t> rank(res->plan.dst_ranks().begin(), res->plan.dst_ranks().end());
  auto load = group_loads(in, layout.num_ranks(), ids, std::span<const rank_t>(rank), rules);
  if (!load) return std::nullopt;
  return group_cells_plan<Cost>{std::move(rank), std::move(*load)};
}

// The cells `start` of the items `ids` (ascending; `order`: their local indices heaviest first,
// as the canonical order has them) improved by the balancers' local search (moves and swaps from
// the heaviest cell, docs/algorithms.md "Refinement") under the cell limits, down to the
// micro-batch's own bound max(Σ cost / d, the largest item alone). Items whose start is −1 are
// placed first, heaviest first, each on the lightest cell that takes it. nullopt when nothing
// changes, when an item to place fits no cell, or when the cells break a limit the search does
// not track (a second cap, the cost limit). The placed items must keep the cell limits.
// O(k + d + placed · log d + steps · (log d + items of two cells)), plus the cells passed over
// while placing.
template <class Cost, class C>
std::optional<group_cells_plan<Cost>> refine_group(
    const batch_layout& layout, const micro_items<Cost>& in, std::span<const std::int64_t> ids,
    std::span<const std::int64_t> order, std::vector<rank_t> start,
    const cell_rules<Cost, C>& rules, const constraints& cell_limits) {
  const rank_t d = layout.num_ranks();
  const auto placed = std::count(start.begin(), start.end(), rank_t{-1});
  const bool changed = placed > 0;
  if (changed) {
    std::vector<cell_load<Cost>> cells(static_cast<std::size_t>(d), cell_load<Cost>(rules.policy));
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (start[i] >= 0) {
        const auto g = static_cast<std::size_t>(ids[i]);
        cells[static_cast<std::size_t>(start[i])].add(in.shape[g], in.cost[g], rules.cost);
      }
    using entry = std::pair<Cost, rank_t>;  // (load, rank), lightest first
    std::priority_queue<entry, std::vector<entry>, std::greater<>> lightest;
    for (rank_t r = 0; r < d; ++r)
      lightest.push({cells[static_cast<std::size_t>(r)].load(rules.cost), r});
    std::vector<entry> passed;
    for (const auto i : order) {
      const auto li = static_cast<std::size_t>(i);
      if (start[li] >= 0) continue;
      const auto g = static_cast<std::size_t>(ids[li]);
      while (!lightest.empty()) {
        const auto [l, r] = lightest.top();
        lightest.pop();
        auto& cell = cells[static_cast<std::size_t>(r)];
        if (!rules.fits(cell, in.shape[g], in.cost[g])) {
          passed.push_back({l, r});
          continue;
        }
        cell.add(in.shape[g], in.cost[g], rules.cost);
        lightest.push({cell.load(rules.cost), r});
        start[li] = r;
        break;
      }
      if (start[li] < 0) return std::nullopt;
      for (const auto& e : passed) lightest.push(e);
      passed.clear();
    }
  }
  const batch_layout group = group_layout(layout, ids);
  std::vector<Cost> costs(ids.size());
  Cost sum{}, largest{};
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto g = static_cast<std::size_t>(ids[i]);
    costs[i] = in.cost[g];
    sum += in.cost[g];
    largest = std::max(largest, in.alone[g]);
  }
  const balance_input<Cost> problem{group,        d,          std::span<const Cost>(costs), order,
                                    rules.policy, cell_limits};
  const std::vector<rank_t> before = start;
  refine(problem, rules.cost, start,
         2 * (changed ? placed : static_cast<std::int64_t>(ids.size())) + 64,
         std::max(largest, sum / static_cast<Cost>(d)));
  if (!changed && start == before) return std::nullopt;
  auto load = group_loads(in, d, ids, std::span<const rank_t>(start), rules, true);
  if (!load) return std::nullopt;
  return group_cells_plan<Cost>{std::move(start), std::move(*load)};
}

// The cells of one micro-batch balanced again: by the balancer `b` from scratch (the ranks it
// starts from are ignored), or, without one (`automatic`), by refine_group from `start`.
template <class Cost, class C>
std::optional<group_cells_plan<Cost>> improve_group(
    const batch_layout& layout, const micro_items<Cost>& in, std::span<const std::int64_t> ids,
    std::span<const std::int64_t> order, std::vector<rank_t> start, const any_balancer* b,
    const cell_rules<Cost, C>& rules, const constraints& cell_limits) {
  if (b != nullptr) return balance_group(layout, in, ids, *b, rules, cell_limits);
  return refine_group(layout, in, ids, order, std::move(start), rules, cell_limits);
}

// The members of every micro-batch of a plan: their ids ascending (a layout's order) and their
// local indices in canonical order (heaviest first). O(n).
struct micro_batch_members {
  std::vector<std::vector<std::int64_t>> ids, order;
};
template <class Cost>
micro_batch_members members_of(const micro_items<Cost>& in, std::span<const std::int64_t> batch,
                               std::int64_t m_count) {
  micro_batch_members out;
  out.ids.resize(static_cast<std::size_t>(m_count));
  out.order.resize(static_cast<std::size_t>(m_count));
  std::vector<std::int64_t> local(batch.size());
  for (std::size_t g = 0; g < batch.size(); ++g) {
    auto& ids = out.ids[static_cast<std::size_t>(batch[g])];
    local[g] = static_cast<std::int64_t>(ids.size());
    ids.push_back(static_cast<std::int64_t>(g));
  }
  for (const auto g : in.order)
    out.order[static_cast<std::size_t>(batch[static_cast<std::size_t>(g)])].push_back(
        local[static_cast<std::size_t>(g)]);
  return out;
}

// The second pass of the per-micro-batch plan: each micro-batch's cells balanced again
// (improve_group with `b`), kept where its top is lower. Only cells move within a micro-batch.
// `members`: members_of the plan. O(n + d · M) plus the refinement steps, or the balancer's
// time on each micro-batch.
template <class Cost, class C>
void rebalance_micro_batches(const batch_layout& layout, const micro_items<Cost>& in,
                             std::int64_t m_count, bool allow_empty, const any_balancer* b,
                             const cell_rules<Cost, C>& rules, const micro_batch_members& members,
                             cell_plan<Cost>& plan) {
  const rank_t d = layout.num_ranks();
  const constraints cell_limits = cell_constraints(rules.limits, allow_empty);
  for (std::int64_t m = 0; m < m_count; ++m) {
    const auto& ids = members.ids[static_cast<std::size_t>(m)];
    if (ids.empty()) continue;
    Cost current{};
    for (rank_t r = 0; r < d; ++r)
      current = std::max(current, plan.load[static_cast<std::size_t>(r * m_count + m)]);
    std::vector<rank_t> start(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i)
      start[i] = plan.rank[static_cast<std::size_t>(ids[i])];
    const auto cells =
        improve_group(layout, in, std::span<const std::int64_t>(ids),
                      std::span<const std::int64_t>(members.order[static_cast<std::size_t>(m)]),
                      std::move(start), b, rules, cell_limits);
    if (!cells) continue;  // the first pass's cells stand
    Cost top{};
    for (const auto l : cells->second) top = std::max(top, l);
    if (!(top < current)) continue;
    for (std::size_t i = 0; i < ids.size(); ++i)
      plan.rank[static_cast<std::size_t>(ids[i])] = cells->first[i];
    for (rank_t r = 0; r < d; ++r)
      plan.load[static_cast<std::size_t>(r * m_count + m)] =
          cells->second[static_cast<std::size_t>(r)];
  }
}

// The third pass: a micro-batch whose cells are full to the token limit can keep a top well
// above its average (its heaviest cell cannot shed tokens to full neighbours). Its shortest
// items, worth the gap and at least 1/16 of its tokens (room for the cells to even out), move to
// the micro-batch with the most token room (placed on its lightest cells), and both are balanced
// again (improve_group); kept when their tops add up to less. The micro-batch with the largest gap
// above its own bound (its average, its largest item) goes first, if the gap is above 1/1024 of its
// top; up to M rounds while one helps.
// `members` (members_of the plan) is kept current. O(d · M + n) per round besides improve_group.
template <class Cost, class C>
void relieve_full_micro_batches(const batch_layout& layout, const micro_items<Cost>& in,
                                std::int64_t m_count, bool allow_empty, const any_balancer* b,
                                const cell_rules<Cost, C>& rules, micro_batch_members& members,
                                cell_plan<Cost>& plan) {
  const rank_t d = layout.num_ranks();
  if (m_count < 2 || d < 2 || rules.limits.tokens == std::numeric_limits<std::int64_t>::max())
    return;
  const constraints cell_limits = cell_constraints(rules.limits, allow_empty);
  const auto n = static_cast<std::int64_t>(in.cost.size());
  const auto mc = static_cast<std::size_t>(m_count);
  // The canonical position of every item: the two sides' orders merge by it.
  std::vector<std::int64_t> position(static_cast<std::size_t>(n));
  for (std::int64_t p = 0; p < n; ++p)
    position[static_cast<std::size_t>(in.order[static_cast<std::size_t>(p)])] = p;
  // Each micro-batch's tokens and largest item.
  std::vector<long double> tokens(mc, 0);
  std::vector<Cost> largest(mc, Cost{});
  const auto tally = [&](std::size_t m) {
    tokens[m] = 0;
    largest[m] = Cost{};
    for (const auto g : members.ids[m]) {
      const auto gi = static_cast<std::size_t>(g);
      largest[m] = std::max(largest[m], in.alone[gi]);
      tokens[m] += static_cast<long double>(item_tokens(in.shape[gi], rules.policy));
    }
  };
  for (std::size_t m = 0; m < mc; ++m) tally(m);
  for (std::int64_t round = 0; round < m_count; ++round) {
    std::vector<Cost> top(mc, Cost{}), sum(mc, Cost{});
    for (std::int64_t m = 0; m < m_count; ++m)
      for (rank_t r = 0; r < d; ++r) {
        const Cost l = plan.load[static_cast<std::size_t>(r * m_count + m)];
        top[static_cast<std::size_t>(m)] = std::max(top[static_cast<std::size_t>(m)], l);
        sum[static_cast<std::size_t>(m)] += l;
      }
    std::int64_t from_m = -1, to_m = -1;
    Cost gap{};
    for (std::int64_t m = 0; m < m_count; ++m) {
      const auto mi = static_cast<std::size_t>(m);
      const Cost floor = std::max(largest[mi], sum[mi] / static_cast<Cost>(d));
      if (top[mi] - floor > top[mi] / 1024 && (from_m < 0 || top[mi] - floor > gap)) {
        from_m = m;
        gap = top[mi] - floor;
      }
    }
    if (from_m < 0) return;
    for (std::int64_t m = 0; m < m_count; ++m)
      if (m != from_m && (to_m < 0 || tokens[static_cast<std::size_t>(m)] <
                                          tokens[static_cast<std::size_t>(to_m)]))
        to_m = m;
    const auto from = static_cast<std::size_t>(from_m), to = static_cast<std::size_t>(to_m);
    const long double room =
        static_cast<long double>(d) * static_cast<long double>(rules.limits.tokens) - tokens[to];
    const auto& ids_from = members.ids[from];
    const auto& ids_to = members.ids[to];
    // The shortest items of `from` (cheapest alone first: packed, the canonical order backwards;
    // padded, by their load alone, ties by id), worth the gap and 1/16 of its tokens, none the
    // last item of its cell unless cells may be empty, within half the room of `to`.
    std::vector<std::int64_t> cheap;  // local indices
    cheap.reserve(ids_from.size());
    if (!rules.policy.is_padded()) {
      cheap.assign(members.order[from].rbegin(), members.order[from].rend());
    } else {
      cheap.resize(ids_from.size());
      std::iota(cheap.begin(), cheap.end(), std::int64_t{0});
      std::stable_sort(cheap.begin(), cheap.end(), [&](std::int64_t x, std::int64_t y) {
        return in.alone[static_cast<std::size_t>(ids_from[static_cast<std::size_t>(x)])] <
               in.alone[static_cast<std::size_t>(ids_from[static_cast<std::size_t>(y)])];
      });
    }
    std::vector<std::int64_t> left(static_cast<std::size_t>(d), 0);
    for (const auto g : ids_from)
      ++left[static_cast<std::size_t>(plan.rank[static_cast<std::size_t>(g)])];
    std::vector<char> moved(ids_from.size(), 0);
    Cost moved_cost{};
    long double moved_tokens = 0;
    for (const auto i : cheap) {
      if (!(moved_cost < gap) && 16 * moved_tokens >= tokens[from]) break;
      const auto gi = static_cast<std::size_t>(ids_from[static_cast<std::size_t>(i)]);
      const auto t = static_cast<long double>(item_tokens(in.shape[gi], rules.policy));
      if (2 * (moved_tokens + t) > room) break;
      auto& k = left[static_cast<std::size_t>(plan.rank[gi])];
      if (!allow_empty && k <= 1) continue;
      --k;
      moved[static_cast<std::size_t>(i)] = 1;
      moved_cost += in.alone[gi];
      moved_tokens += t;
    }
    if (moved_tokens == 0 && moved_cost == Cost{}) return;
    // The items that stay, on their cells; the receiving micro-batch's on theirs with the moved
    // ones to place (−1), ids ascending; each side's local order, heaviest first.
    std::vector<std::int64_t> new_from, new_to, at_from(ids_from.size()), at_to(ids_to.size());
    std::vector<rank_t> start_from, start_to;
    for (std::size_t i = 0; i < ids_from.size(); ++i)
      if (!moved[i]) {
        at_from[i] = static_cast<std::int64_t>(new_from.size());
        new_from.push_back(ids_from[i]);
        start_from.push_back(plan.rank[static_cast<std::size_t>(ids_from[i])]);
      }
    for (std::size_t i = 0, j = 0; i < ids_from.size() || j < ids_to.size();) {
      while (i < ids_from.size() && !moved[i]) ++i;
      const bool take_moved =
          i < ids_from.size() && (j == ids_to.size() || ids_from[i] < ids_to[j]);
      if (!take_moved && j == ids_to.size()) break;
      if (take_moved) {
        at_from[i] = static_cast<std::int64_t>(new_to.size());
        new_to.push_back(ids_from[i++]);
        start_to.push_back(-1);
      } else {
        at_to[j] = static_cast<std::int64_t>(new_to.size());
        start_to.push_back(plan.rank[static_cast<std::size_t>(ids_to[j])]);
        new_to.push_back(ids_to[j++]);
      }
    }
    std::vector<std::int64_t> order_from, order_to;
    order_from.reserve(new_from.size());
    order_to.reserve(new_to.size());
    for (const auto i : members.order[from])
      if (!moved[static_cast<std::size_t>(i)])
        order_from.push_back(at_from[static_cast<std::size_t>(i)]);
    {
      const auto& old_to = members.order[to];
      const auto& old_from = members.order[from];
      std::size_t i = 0, j = 0;
      const auto next_moved = [&] {
        while (i < old_from.size() && !moved[static_cast<std::size_t>(old_from[i])]) ++i;
      };
      next_moved();
      while (i < old_from.size() || j < old_to.size()) {
        const bool take_moved =
            i < old_from.size() &&
            (j == old_to.size() ||
             position[static_cast<std::size_t>(ids_from[static_cast<std::size_t>(old_from[i])])] <
                 position[static_cast<std::size_t>(ids_to[static_cast<std::size_t>(old_to[j])])]);
        if (take_moved) {
          order_to.push_back(at_from[static_cast<std::size_t>(old_from[i++])]);
          next_moved();
        } else {
          order_to.push_back(at_to[static_cast<std::size_t>(old_to[j++])]);
        }
      }
    }
    auto a =
        improve_group(layout, in, std::span<const std::int64_t>(new_from),
                      std::span<const std::int64_t>(order_from), start_from, b, rules, cell_limits);
    if (!a) {  // nothing to refine: the cells as they are without the moved items
      auto load = group_loads(in, d, std::span<const std::int64_t>(new_from),
                              std::span<const rank_t>(start_from), rules);
      if (load) a = group_cells_plan<Cost>{std::move(start_from), std::move(*load)};
    }
    if (!a) return;
    Cost top_a{}, top_c{};
    for (const auto l : a->second) top_a = std::max(top_a, l);
    // The receiving micro-batch was balanced before and only gains items: unless `from`'s top
    // falls, the round cannot help, and `to` is not balanced again; nor when `to`'s top after
    // it, at least its average (loads are superadditive), already cancels the gain.
    if (!(top_a < top[from])) return;
    if (!(top_a + (sum[to] + moved_cost) / static_cast<Cost>(d) < top[from] + top[to])) return;
    const auto c = improve_group(layout, in, std::span<const std::int64_t>(new_to),
                                 std::span<const std::int64_t>(order_to), std::move(start_to), b,
                                 rules, cell_limits);
    if (!c) return;
    for (const auto l : c->second) top_c = std::max(top_c, l);
    if (!(top_a + top_c < top[from] + top[to])) return;
    for (std::size_t i = 0; i < new_from.size(); ++i)
      plan.rank[static_cast<std::size_t>(new_from[i])] = a->first[i];
    for (std::size_t i = 0; i < new_to.size(); ++i) {
      plan.rank[static_cast<std::size_t>(new_to[i])] = c->first[i];
      plan.batch[static_cast<std::size_t>(new_to[i])] = to_m;
    }
    for (rank_t r = 0; r < d; ++r) {
      plan.load[static_cast<std::size_t>(r) * mc + from] = a->second[static_cast<std::size_t>(r)];
      plan.load[static_cast<std::size_t>(r) * mc + to] = c->second[static_cast<std::size_t>(r)];
    }
    members.ids[from] = std::move(new_from);
    members.ids[to] = std::move(new_to);
    members.order[from] = std::move(order_from);
    members.order[to] = std::move(order_to);
    tally(from);
    tally(to);
  }
}

// The exact step for small inputs: a depth-first branch and bound over the cells. The items go in
// canonical order (heaviest first) to every cell that can take them. Under sync per micro-batch
// the cells of a micro-batch are interchangeable, and so are the micro-batches; per step the
// cells of a rank and the ranks: of the empty cells of a group only the first is tried, and of
// the wholly empty groups only the first. A node is cut when its bound (docs/algorithms.md,
// "Micro-batches") reaches the best objective found, when fewer items are left than cells that
// must still be filled, or when the node budget runs out (then `complete()` is false); it ends
// at a plan that meets the lower bound. O(budget · d · M · log(d · M)).
template <class Cost, class C>
class exact_cells {
 public:
  exact_cells(const micro_items<Cost>& in, rank_t d, std::int64_t m_count,
              const micro_batching& micro, const cell_rules<Cost, C>& rules)
      : in_(in),
        rules_(rules),
        d_(d),
        m_count_(m_count),
        per_mb_(micro.sync == sync_model::micro_batch),
        allow_empty_(micro.allow_empty),
        budget_(micro.exact_node_budget) {
    groups_ = per_mb_ ? m_count : d;
    members_ = per_mb_ ? d : m_count;
    const auto n = in.order.size();
    rest_.assign(n + 1, Cost{});
    for (std::size_t i = n; i-- > 0;)
      rest_[i] = rest_[i + 1] + in.alone[static_cast<std::size_t>(in.order[i])];
  }

  // A plan whose objective is below `incumbent` (any plan when there is none), the smallest one
  // when the search completes; nullopt when there is none.
  // The search ends early at a plan that meets `floor`, a lower bound on every plan.
  std::optional<cell_plan<Cost>> run(std::optional<Cost> incumbent, Cost floor) {
    const auto cells = static_cast<std::size_t>(groups_ * members_);
    cell_.assign(cells, cell_load<Cost>(rules_.policy));
    top_.assign(static_cast<std::size_t>(groups_), Cost{});
    sum_.assign(static_cast<std::size_t>(groups_), Cost{});
    filled_.assign(static_cast<std::size_t>(groups_), 0);
    at_.assign(in_.order.size(), 0);
    best_ = incumbent;
    floor_ = floor;
    found_ = false;
    nodes_ = 0;
    empty_ = allow_empty_ ? 0 : static_cast<std::int64_t>(cells);
    search(0);
    if (!found_) return std::nullopt;
    cell_plan<Cost> out;
    out.rank.assign(in_.order.size(), 0);
    out.batch.assign(in_.order.size(), 0);
    std::vector<cell_load<Cost>> load(cells, cell_load<Cost>(rules_.policy));
    for (std::size_t i = 0; i < in_.order.size(); ++i) {
      const auto g = static_cast<std::size_t>(in_.order[i]);
      const std::int64_t grp = best_at_[i] / members_, k = best_at_[i] % members_;
      const rank_t r = static_cast<rank_t>(per_mb_ ? k : grp);
      const std::int64_t m = per_mb_ ? grp : k;
      out.rank[g] = r;
      out.batch[g] = m;
      load[static_cast<std::size_t>(r * m_count_ + m)].add(in_.shape[g], in_.cost[g], rules_.cost);
    }
    out.load.resize(cells);
    for (std::size_t c = 0; c < cells; ++c) out.load[c] = load[c].load(rules_.cost);
    return out;
  }

  // Whether the last `run` searched every assignment (its answer is optimal, or proves none).
  [[nodiscard]] bool complete() const { return nodes_ <= budget_; }

 private:
  // The objective of the cells so far (loads only grow, so it bounds every completion).
  [[nodiscard]] Cost objective() const {
    Cost out{};
    for (std::int64_t g = 0; g < groups_; ++g) {
      const auto gi = static_cast<std::size_t>(g);
      out = per_mb_ ? out + top_[gi] : std::max(out, sum_[gi]);
    }
    return out;
  }

  // A lower bound on every completion when the items from the i-th on, `rest_[i]` alone, are
  // still to come: a micro-batch's top is at least its cells' loads over d, and each load grows
  // by at least the item's cost alone; per step, the average rank.
  [[nodiscard]] Cost bound(std::size_t i) const {
    const Cost now = objective();
    const Cost dd = static_cast<Cost>(d_);
    Cost excess = rest_[i];
    if (per_mb_) {
      Cost room{};
      for (std::int64_t g = 0; g < groups_; ++g) {
        const auto gi = static_cast<std::size_t>(g);
        room += top_[gi] * dd - sum_[gi];
      }
      excess = excess > room ? excess - room : Cost{};
    } else {
      for (const auto s : sum_) excess += s;
      if (now * dd >= excess) return now;
      excess -= now * dd;
    }
    Cost add = excess / dd;
    if constexpr (std::is_integral_v<Cost>) {
      if (excess % dd != 0) ++add;
    }
    return now + add;
  }

  void search(std::size_t i) {
    if (++nodes_ > budget_) return;
    if (empty_ > static_cast<std::int64_t>(in_.order.size() - i)) return;
    if (i == in_.order.size()) {
      const Cost obj = objective();
      if (!best_ || obj < *best_) {
        best_ = obj;
        best_at_ = at_;
        found_ = true;
      }
      return;
    }
    if (best_ && !(floor_ < *best_)) return;  // the best meets the bound: nothing is better
    if (best_ && !(bound(i) < *best_)) return;
    const auto g = static_cast<std::size_t>(in_.order[i]);
    // The candidate cells, by the objective after the item, then index.
    std::vector<std::pair<Cost, std::int64_t>> cand;
    bool empty_group_tried = false;
    for (std::int64_t grp = 0; grp < groups_; ++grp) {
      const auto gi = static_cast<std::size_t>(grp);
      if (filled_[gi] == 0) {
        if (empty_group_tried) continue;
        empty_group_tried = true;
      }
      bool empty_tried = false;
      for (std::int64_t k = 0; k < members_; ++k) {
        const std::int64_t c = grp * members_ + k;
        const auto& cell = cell_[static_cast<std::size_t>(c)];
        if (cell.count() == 0) {
          if (empty_tried) continue;
          empty_tried = true;
        }
        if (!rules_.fits(cell, in_.shape[g], in_.cost[g])) continue;
        const Cost after = cell.load_if_added(in_.shape[g], in_.cost[g], rules_.cost);
        const Cost grown = per_mb_ ? (after > top_[gi] ? after - top_[gi] : Cost{})
                                   : sum_[gi] - cell.load(rules_.cost) + after;
        cand.emplace_back(grown, c);
      }
    }
    std::sort(cand.begin(), cand.end());
    for (const auto& [grown, c] : cand) {
      const auto ci = static_cast<std::size_t>(c);
      const auto gi = static_cast<std::size_t>(c / members_);
      const auto saved = cell_[ci];
      const Cost saved_top = top_[gi], saved_sum = sum_[gi];
      const std::int64_t saved_filled = filled_[gi], saved_empty = empty_;
      if (saved.count() == 0) {
        ++filled_[gi];
        if (!allow_empty_) --empty_;
      }
      cell_[ci].add(in_.shape[g], in_.cost[g], rules_.cost);
      const Cost now = cell_[ci].load(rules_.cost);
      top_[gi] = std::max(top_[gi], now);
      sum_[gi] = sum_[gi] - saved.load(rules_.cost) + now;
      at_[i] = c;
      search(i + 1);
      cell_[ci] = saved;
      top_[gi] = saved_top;
      sum_[gi] = saved_sum;
      filled_[gi] = saved_filled;
      empty_ = saved_empty;
      if (nodes_ > budget_) return;
    }
  }

  const micro_items<Cost>& in_;
  const cell_rules<Cost, C>& rules_;
  rank_t d_;
  std::int64_t m_count_;
  bool per_mb_, allow_empty_;
  std::int64_t budget_;
  std::int64_t groups_ = 0, members_ = 0;  // cell c = group · members + member
  std::vector<Cost> rest_;                 // Σ alone of the items from the i-th on
  std::vector<cell_load<Cost>> cell_;
  std::vector<Cost> top_, sum_;             // per group: the largest and the total cell load
  std::vector<std::int64_t> filled_;        // per group: cells holding an item
  std::vector<std::int64_t> at_, best_at_;  // per item in canonical order: its cell
  std::optional<Cost> best_;
  Cost floor_{};
  bool found_ = false;
  std::int64_t nodes_ = 0, empty_ = 0;
};

// The micro-batches in their run order: `perm[k]` is the planned micro-batch that runs k-th.
// light_ends: by weight (per_micro_batch: max_r load; per step: Σ_r load), the lightest
// first and last, the heaviest in the middle; ties by index. planned: heaviest first.
template <class Cost>
std::vector<std::int64_t> run_order(const std::vector<Cost>& load, rank_t d, std::int64_t m_count,
                                    const micro_batching& micro) {
  std::vector<Cost> weight(static_cast<std::size_t>(m_count), Cost{});
  for (std::int64_t m = 0; m < m_count; ++m)
    for (rank_t r = 0; r < d; ++r) {
      const Cost l = load[static_cast<std::size_t>(r * m_count + m)];
      auto& w = weight[static_cast<std::size_t>(m)];
      w = micro.sync == sync_model::micro_batch ? std::max(w, l) : w + l;
    }
  std::vector<std::int64_t> by_weight(static_cast<std::size_t>(m_count));
  std::iota(by_weight.begin(), by_weight.end(), std::int64_t{0});
  std::stable_sort(by_weight.begin(), by_weight.end(), [&](std::int64_t a, std::int64_t b) {
    return weight[static_cast<std::size_t>(a)] > weight[static_cast<std::size_t>(b)];
  });
  if (micro.order == micro_batch_order::planned) return by_weight;
  // light_ends: walk from the lightest, alternately to the front and the back.
  std::vector<std::int64_t> perm(static_cast<std::size_t>(m_count));
  std::int64_t front = 0, back = m_count - 1;
  for (std::int64_t k = m_count - 1, i = 0; k >= 0; --k, ++i)
    perm[static_cast<std::size_t>(i % 2 == 0 ? front++ : back--)] =
        by_weight[static_cast<std::size_t>(k)];
  return perm;
}

// An upper bound on the cost a set of the items other than `skip` holds when its total weight
// is at most `capacity`: the fractional knapsack (items by cost per unit of weight, highest
// first, the last one cut; weightless items whole). O(n log n).
template <class Cost>
long double fractional_knapsack(const std::vector<Cost>& value,
                                const std::vector<std::int64_t>& weight, long double capacity,
                                std::size_t skip) {
  long double out = 0;
  // (cost per unit, id): the same doubles on every rank, ties by id.
  std::vector<std::pair<double, std::size_t>> by_ratio;
  by_ratio.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (i == skip) continue;
    if (weight[i] <= 0) {
      out += static_cast<long double>(value[i]);
    } else {
      by_ratio.emplace_back(static_cast<double>(value[i]) / static_cast<double>(weight[i]), i);
    }
  }
  // The items in that order until the capacity is filled, without sorting them: a weighted
  // selection. The pivot of [lo, hi) is put in place by nth_element; the items before it either
  // fill what is left, and the search goes on among them, or are taken whole with the pivot (cut
  // if it fills the rest) and the search goes on after it. The pivot's place is the share of the
  // range's weight that the capacity is (most prefixes are short), at most the middle, and the
  // middle after a pivot that fell short: the range halves at least every second step, so O(n)
  // expected. The same items and cut on every rank (a total order).
  const auto before = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  long double range_weight = 0;
  for (const auto& e : by_ratio) range_weight += static_cast<long double>(weight[e.second]);
  auto lo = by_ratio.begin(), hi = by_ratio.end();
  bool fell_short = false;
  while (lo != hi && capacity > 0) {
    const auto len = hi - lo;
    auto k = len / 2;
    if (!fell_short && range_weight > 0 && capacity < range_weight)
      k = std::min(
          k, static_cast<std::ptrdiff_t>(static_cast<long double>(len) * capacity / range_weight));
    const auto mid = lo + k;
    std::nth_element(lo, mid, hi, before);
    long double w = 0;
    for (auto it = lo; it != mid; ++it) w += static_cast<long double>(weight[it->second]);
    if (w >= capacity) {
      hi = mid;
      range_weight = w;
      fell_short = false;
      continue;
    }
    for (auto it = lo; it != mid; ++it) out += static_cast<long double>(value[it->second]);
    capacity -= w;
    const auto pw = static_cast<long double>(weight[mid->second]);
    const auto pv = static_cast<long double>(value[mid->second]);
    out += pw <= capacity ? pv : pv * capacity / pw;
    capacity -= pw;
    range_weight -= w + pw;
    lo = mid + 1;
    fell_short = true;
  }
  return out;
}

// Lower bounds on Σ_m max_r load(r, m) with M micro-batches (docs/algorithms.md,
// "Micro-batches", proves each): the average Σ alone / d; the largest item alone; when every
// cell holds an item, the largest item plus, for j = 1 … M − 1, the (j·d)-th smallest item; and
// the cap-aware bound a₁ + (C − min(U, d·a₁)) / d, U the most cost the micro-batch of the
// largest item can hold under the token, byte and cost limits of its d cells. O(n log n).
template <class Cost>
Cost micro_batch_bound(const micro_items<Cost>& in, padding_policy policy,
                       const micro_batch_limits& l, rank_t d, std::int64_t m_count,
                       bool every_cell_filled) {
  const auto& alone = in.alone;
  if (alone.empty() || d < 1) return Cost{};
  // Largest first: the canonical order already sorts them under the packed policy.
  std::vector<Cost> sorted(alone.size());
  for (std::size_t i = 0; i < sorted.size(); ++i)
    sorted[i] = alone[static_cast<std::size_t>(in.order[i])];
  if (!std::is_sorted(sorted.begin(), sorted.end(), std::greater<>()))
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
  Cost sum{};
  for (const auto c : sorted) sum += c;
  const auto up = [&](Cost x) {  // ⌈x / d⌉ for integral costs, x / d otherwise
    Cost q = x / static_cast<Cost>(d);
    if constexpr (std::is_integral_v<Cost>) {
      if (x % static_cast<Cost>(d) != 0) ++q;
    }
    return q;
  };
  const Cost a1 = sorted.front();
  Cost bound = std::max(up(sum), a1);
  const auto n = static_cast<std::int64_t>(sorted.size());
  const std::int64_t dd = d;
  if (every_cell_filled && n >= m_count * dd) {
    Cost tops = a1;
    for (std::int64_t j = 1; j < m_count; ++j) tops += sorted[static_cast<std::size_t>(n - j * dd)];
    bound = std::max(bound, tops);
  }
  // The cap-aware bound: the micro-batch holding the largest item (the first of them by id).
  const auto first =
      static_cast<std::size_t>(std::find(alone.begin(), alone.end(), a1) - alone.begin());
  const auto cells = static_cast<long double>(d);
  long double most = static_cast<long double>(sum);
  const auto weights = [&](auto of) {
    std::vector<std::int64_t> w(alone.size());
    for (std::size_t g = 0; g < alone.size(); ++g) w[g] = of(in.shape[g]);
    return w;
  };
  if (l.tokens < std::numeric_limits<std::int64_t>::max()) {
    const auto w = weights([&](const item_shape& s) { return item_tokens(s, policy); });
    most = std::min(most, static_cast<long double>(a1) +
                              fractional_knapsack(alone, w,
                                                  cells * static_cast<long double>(l.tokens) -
                                                      static_cast<long double>(w[first]),
                                                  first));
  }
  if (l.bytes < std::numeric_limits<std::int64_t>::max()) {
    const auto w = weights([](const item_shape& s) { return s.bytes; });
    most = std::min(most, static_cast<long double>(a1) +
                              fractional_knapsack(alone, w,
                                                  cells * static_cast<long double>(l.bytes) -
                                                      static_cast<long double>(w[first]),
                                                  first));
  }
  if (std::isfinite(l.cost)) most = std::min(most, cells * static_cast<long double>(l.cost));
  // Rounding must not shrink U: a relative margin, and for integral costs the next integer.
  most = most * (1 + 1e-12L) + 1e-9L;
  if (most < cells * static_cast<long double>(a1)) {
    Cost held{};
    if constexpr (std::is_integral_v<Cost>) {
      held = static_cast<Cost>(std::ceil(most));
    } else {
      held = static_cast<Cost>(most);
    }
    if (held < sum) bound = std::max(bound, a1 + up(sum - held));
  }
  return bound;
}

template <class C>
micro_batch_result<cost_type_t<C>> balance_micro_batches_impl(const batch_layout& layout,
                                                              const C& cost, padding_policy policy,
                                                              const micro_batching& micro,
                                                              const any_balancer& b,
                                                              const constraints& limits) {
  using Cost = cost_type_t<C>;
  check_micro_batching(micro);
  const rank_t d = layout.num_ranks();
  const std::int64_t n = layout.num_items();
  ORCHMLLM_REQUIRE(d >= 1 || n == 0, invalid_argument_error, n, " items on 0 ranks");
  micro_items<Cost> in;
  in.cost = checked_costs(layout, cost, policy);
  in.shape.resize(static_cast<std::size_t>(n));
  in.alone.resize(static_cast<std::size_t>(n));
  for (std::int64_t g = 0; g < n; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    in.shape[gi] = item_shape_of(layout, g);
    cell_load<Cost> one(policy);
    one.add(in.shape[gi], in.cost[gi]);
    in.alone[gi] = one.load(cost);
  }
  in.order = canonical_order<Cost>(layout, std::span<const Cost>(in.cost), policy);
  const cell_rules<Cost, C> rules{policy, micro.limits, cost};
  check_items_fit(layout, in, rules);

  // M: the given count, or from the limits' bound up, in steps of multiple_of.
  const std::int64_t step = micro.multiple_of;
  const auto round_up = [&](std::int64_t m) { return (m + step - 1) / step * step; };
  std::int64_t m_count = micro.count;
  const std::int64_t most =
      micro.allow_empty || d == 0 ? std::max<std::int64_t>(n, 1) : n / std::max<rank_t>(d, 1);
  if (m_count == 0)
    m_count = round_up(std::max(micro.min_count, micro_batch_count_bound(in, policy, micro.limits,
                                                                         std::max<rank_t>(d, 1))));
  const std::int64_t last = micro.count != 0 ? m_count : round_up(std::max(most, m_count));
  std::optional<balance_result<Cost>> rank_result;
  std::optional<cell_plan<Cost>> plan;
  // Small inputs without rank constraints: the exact step after the heuristic, for every M.
  const bool by_micro_batch = micro.sync == sync_model::micro_batch;
  // identity keeps every item on its rank under either sync model: only the cells are planned.
  const bool stay_home = b.get_if<balancers::identity>() != nullptr;
  // The balancer that balances a micro-batch's cells again: the one asked for, or, for
  // `automatic`, none (the first pass's cells are refined where they are).
  const any_balancer* const cell_balancer =
      b.get_if<balancers::automatic>() != nullptr ? nullptr : &b;
  const bool exact = n > 0 && n <= micro.exact_max_items && micro.exact_node_budget > 0 &&
                     !limits.any() && !stay_home;
  bool exact_plan = false, proven = false;
  // max_r Σ_m: packed, a rank's cells add up to its load, so the rank-level bound holds; padded,
  // cells pad less than their rank would, and only the items alone bound it.
  const balance_input<Cost> rank_level{layout, d, in.cost, in.order, policy, limits};
  const auto step_bound = [&] {
    return policy.is_padded() ? micro_batch_bound(in, policy, micro_batch_limits{}, d, 1, false)
                              : input_lower_bound(rank_level, cost);
  };
  // The rank plan of `balance` (it keeps the rank-level constraints), each rank's items then
  // over its M cells.
  const auto cells_of_rank_plan = [&](std::int64_t m) {
    if (!rank_result) rank_result = balance(layout, cost, policy, b, limits);
    auto cells = plan_per_step(layout, in, rank_result->plan, m, micro.allow_empty, rules);
    if (!cells && !micro.allow_empty && limits.min_items < m) {
      // A rank with fewer than M items: the balancer again, every rank given M.
      constraints at_least = limits;
      at_least.min_items = m;
      try {
        auto again = balance(layout, cost, policy, b, at_least);
        cells = plan_per_step(layout, in, again.plan, m, micro.allow_empty, rules);
        if (cells) rank_result = std::move(again);
      } catch (const infeasible_error&) {
      }
    }
    return cells;
  };
  std::int64_t tried = m_count;
  for (; tried <= last; tried += step) {
    if (!micro.allow_empty && tried * static_cast<std::int64_t>(d) > n) break;
    if (micro.sync == sync_model::step || stay_home) {
      plan = cells_of_rank_plan(tried);
    } else {
      plan = plan_per_micro_batch_greedy(in, d, tried, micro.allow_empty, rules);
      if (plan) {
        auto members = members_of(in, std::span<const std::int64_t>(plan->batch), tried);
        rebalance_micro_batches(layout, in, tried, micro.allow_empty, cell_balancer, rules, members,
                                *plan);
        relieve_full_micro_batches(layout, in, tried, micro.allow_empty, cell_balancer, rules,
                                   members, *plan);
      }
      // The cells are planned without the rank-level constraints (a cap on a rank's tokens or
      // bytes, its item counts): a plan that breaks one gives way to the per-step plan, which
      // keeps them.
      if (limits.any() && (!plan || !satisfies(rank_level, std::span<const rank_t>(plan->rank))))
        plan = cells_of_rank_plan(tried);
    }
    if (exact) {
      // From the heuristic's objective, keeping only a better plan; it also settles whether
      // this M admits a plan where the heuristic found none.
      std::optional<Cost> incumbent;
      if (plan) {
        const auto [pm, ps] = objectives(plan->load, d, tried);
        incumbent = by_micro_batch ? pm : ps;
      }
      const Cost floor =
          by_micro_batch ? micro_batch_bound(in, policy, micro.limits, d, tried, !micro.allow_empty)
                         : step_bound();
      exact_cells<Cost, C> search(in, d, tried, micro, rules);
      if (auto better = search.run(incumbent, floor)) {
        plan = std::move(better);
        exact_plan = true;
      }
      proven = search.complete();
    }
    if (plan) break;
  }
  if (!plan) {
    const std::string why =
        !micro.allow_empty && tried * static_cast<std::int64_t>(d) > n
            ? concat(n, " items cannot fill ", tried, " micro-batches on each of ", d,
                     " ranks (every micro-batch needs an item; allow_empty marks empty ones)")
            : concat("the items do not fit ", std::min(tried, last), " micro-batches of at most ",
                     micro.limits.tokens, " tokens, ", micro.limits.bytes, " bytes and ",
                     micro.limits.items, " items on each of ", d, " ranks");
    raise<infeasible_error>(
        micro.count != 0 ? why : concat("no micro-batch count from ", m_count, " up fits: ", why));
  }
  m_count = tried;

  // Run order, slots grouped by micro-batch, the plan and its figures.
  const auto perm = run_order(plan->load, d, m_count, micro);
  std::vector<std::int64_t> position(static_cast<std::size_t>(m_count));
  for (std::int64_t k = 0; k < m_count; ++k)
    position[static_cast<std::size_t>(perm[static_cast<std::size_t>(k)])] = k;
  micro_batch_result<Cost> out;
  out.micro_batches = m_count;
  std::vector<std::int64_t> count(static_cast<std::size_t>(d * m_count) + 1, 0);
  for (std::int64_t g = 0; g < n; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    plan->batch[gi] = position[static_cast<std::size_t>(plan->batch[gi])];
    ++count[static_cast<std::size_t>(plan->rank[gi] * m_count + plan->batch[gi]) + 1];
  }
  std::partial_sum(count.begin(), count.end(), count.begin());
  out.cell_offsets = count;
  // Slots: by micro-batch, then by source id (ids ascending here).
  std::vector<std::int64_t> next(count.begin(), count.end() - 1);
  std::vector<placement> where(static_cast<std::size_t>(n));
  for (std::int64_t g = 0; g < n; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    const auto cell = static_cast<std::size_t>(plan->rank[gi] * m_count + plan->batch[gi]);
    where[gi] = {plan->rank[gi],
                 next[cell]++ - count[static_cast<std::size_t>(plan->rank[gi] * m_count)]};
  }
  std::vector<Cost> load(plan->load.size());
  for (rank_t r = 0; r < d; ++r)
    for (std::int64_t m = 0; m < m_count; ++m)
      load[static_cast<std::size_t>(r * m_count + position[static_cast<std::size_t>(m)])] =
          plan->load[static_cast<std::size_t>(r * m_count + m)];
  const auto [per_mb, per_step] = objectives(load, d, m_count);
  auto& res = out.balance;
  res.plan = rearrangement::from_placements(layout.offsets(), where, d);
  // The exact step's, the rank plan's algorithm per step, or the cells' own construction.
  res.used = exact_plan    ? std::string_view("micro_batches_exact")
             : rank_result ? rank_result->used
                           : std::string_view("micro_batches");
  res.fallback = !exact_plan && rank_result && rank_result->fallback;
  res.makespan = per_step;
  res.lower_bound = step_bound();
  res.proven_optimal = res.makespan <= res.lower_bound;
  if (micro.sync == sync_model::step) {
    out.objective = per_step;
    out.objective_lower_bound = res.lower_bound;
  } else {
    out.objective = per_mb;
    out.objective_lower_bound =
        micro_batch_bound(in, policy, micro.limits, d, m_count, !micro.allow_empty);
  }
  out.objective_proven_optimal = proven || out.objective <= out.objective_lower_bound;
  return out;
}

template <class C>
cost_type_t<C> micro_batch_objective_as_sampled_impl(const batch_layout& layout, const C& cost,
                                                     padding_policy policy,
                                                     const micro_batching& micro) {
  using Cost = cost_type_t<C>;
  check_micro_batching(micro);
  const rank_t d = layout.num_ranks();
  micro_items<Cost> in;
  in.cost = checked_costs(layout, cost, policy);
  in.shape.resize(in.cost.size());
  in.alone.resize(in.cost.size());
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    const auto gi = static_cast<std::size_t>(g);
    in.shape[gi] = item_shape_of(layout, g);
    cell_load<Cost> one(policy);
    one.add(in.shape[gi], in.cost[gi]);
    in.alone[gi] = one.load(cost);
  }
  const cell_rules<Cost, C> rules{policy, micro.limits, cost};
  check_items_fit(layout, in, rules);
  // Each rank's items in slot order, a new micro-batch whenever the next one does not fit.
  std::vector<std::vector<Cost>> loads(static_cast<std::size_t>(d));
  for (rank_t r = 0; r < d; ++r) {
    cell_load<Cost> cell(policy);
    auto& rl = loads[static_cast<std::size_t>(r)];
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g) {
      const auto gi = static_cast<std::size_t>(g);
      if (cell.count() > 0 && !rules.fits(cell, in.shape[gi], in.cost[gi])) {
        rl.push_back(cell.load(cost));
        cell = cell_load<Cost>(policy);
      }
      cell.add(in.shape[gi], in.cost[gi], cost);
    }
    if (cell.count() > 0) rl.push_back(cell.load(cost));
  }
  Cost out{};
  if (micro.sync == sync_model::step) {
    for (const auto& rl : loads) {
      Cost sum{};
      for (const auto l : rl) sum += l;
      out = std::max(out, sum);
    }
    return out;
  }
  std::size_t most = 0;
  for (const auto& rl : loads) most = std::max(most, rl.size());
  for (std::size_t m = 0; m < most; ++m) {
    Cost top{};
    for (const auto& rl : loads)
      if (m < rl.size()) top = std::max(top, rl[m]);
    out += top;
  }
  return out;
}

}  // namespace orchmllm::detail

namespace orchmllm {

inline sync_model parse_sync_model(std::string_view text) {
  if (text == "step") return sync_model::step;
  if (text == "micro-batch") return sync_model::micro_batch;
  detail::raise<invalid_argument_error>(detail::concat(
      "unknown sync model ", detail::quote_text(text), "; expected step or micro-batch"));
}

}  // namespace orchmllm

namespace orchmllm {

namespace detail {

// The rank count d of d·M + 1 cell offsets for M micro-batches per rank (0 for no cells: M = 0
// and one offset). O(1). Throws invalid_argument_error when the sizes disagree.
inline std::int64_t cell_ranks(std::span<const std::int64_t> cell_offsets,
                               std::int64_t micro_batches) {
  if (micro_batches == 0 && cell_offsets.size() == 1) return 0;
  ORCHMLLM_REQUIRE(micro_batches >= 1 && !cell_offsets.empty() &&
                       (cell_offsets.size() - 1) % static_cast<std::size_t>(micro_batches) == 0,
                   invalid_argument_error, cell_offsets.size(), " cell offsets for ", micro_batches,
                   " micro-batches per rank");
  return static_cast<std::int64_t>(cell_offsets.size() - 1) / micro_batches;
}

}  // namespace detail

inline std::vector<std::int64_t> cell_offsets_on_ranks(std::span<const std::int64_t> cell_offsets,
                                                       std::int64_t micro_batches,
                                                       std::span<const rank_t> rank_of_bin) {
  const auto d = detail::cell_ranks(cell_offsets, micro_batches);
  if (micro_batches == 0) return {0};  // no cells at all
  ORCHMLLM_REQUIRE(rank_of_bin.empty() || static_cast<std::int64_t>(rank_of_bin.size()) == d,
                   invalid_argument_error, "rank_of_bin has ", rank_of_bin.size(),
                   " entries, expected one per bin (", d, ")");
  std::vector<std::int64_t> sizes(cell_offsets.size() - 1);
  for (std::int64_t b = 0; b < d; ++b) {
    const std::int64_t r = rank_of_bin.empty() ? b : rank_of_bin[static_cast<std::size_t>(b)];
    ORCHMLLM_REQUIRE(r >= 0 && r < d, invalid_argument_error, "bin ", b, " goes to rank ", r,
                     ", outside [0, ", d, ")");
    for (std::int64_t m = 0; m < micro_batches; ++m) {
      const auto from = static_cast<std::size_t>(b * micro_batches + m);
      sizes[static_cast<std::size_t>(r * micro_batches + m)] =
          cell_offsets[from + 1] - cell_offsets[from];
    }
  }
  std::vector<std::int64_t> out(sizes.size() + 1, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i) out[i + 1] = out[i] + sizes[i];
  return out;
}

inline std::vector<std::int64_t> item_micro_batches(const rearrangement& plan,
                                                    std::span<const std::int64_t> cell_offsets,
                                                    std::int64_t micro_batches) {
  const std::int64_t n = plan.num_items();
  (void)detail::cell_ranks(cell_offsets, micro_batches);
  ORCHMLLM_REQUIRE(cell_offsets.front() == 0 && cell_offsets.back() == n, invalid_argument_error,
                   "the cell offsets run from ", cell_offsets.front(), " to ", cell_offsets.back(),
                   ", the plan's destination ids from 0 to ", n);
  // The micro-batch of every destination id, then of every item through its destination.
  std::vector<std::int64_t> of_id(static_cast<std::size_t>(n));
  for (std::size_t c = 0; c + 1 < cell_offsets.size(); ++c) {
    ORCHMLLM_REQUIRE(cell_offsets[c] <= cell_offsets[c + 1], invalid_argument_error, "cell offset ",
                     c + 1, " (", cell_offsets[c + 1], ") is below offset ", c, " (",
                     cell_offsets[c], ")");
    for (auto id = cell_offsets[c]; id < cell_offsets[c + 1]; ++id)
      of_id[static_cast<std::size_t>(id)] = static_cast<std::int64_t>(c) % micro_batches;
  }
  std::vector<std::int64_t> out(of_id.size());
  for (std::int64_t g = 0; g < n; ++g)
    out[static_cast<std::size_t>(g)] = of_id[static_cast<std::size_t>(plan.destination_id(g))];
  return out;
}

}  // namespace orchmllm
