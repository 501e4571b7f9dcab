#pragma once
/// @file min_cost_flow.hpp
/// Exact sparse transportation solver: assign d unit-supply sources ("bins") to N sinks
/// ("nodes") with capacities summing to d, maximising the total profit Σ profit[b][node(b)].
///
/// Only positive profits are stored (sparse rows); every other (bin, node) pair has profit 0.
/// Internal (namespace detail); the public façade is orchmllm/topology/mapping.hpp.
///
/// Method: min-cost flow by successive shortest paths with Johnson potentials, adding one bin
/// at a time (the row-by-row Hungarian scheme generalised to capacities). Each augmentation is
/// a Dijkstra from the new bin that stops as soon as the sink is settled; only the vertices it
/// settled get their potentials updated (π[v] += dist[v] − D), which keeps every residual
/// reduced cost non-negative. The optimum for bins 0..k plus a shortest path from bin k+1 is an
/// optimum for bins 0..k+1, so the result is exact.
///
/// The zero-profit pairs are not arcs. A bin either takes one of its profit arcs (bin → node,
/// cost C − p, C = largest profit, so all costs are ≥ 0) or stays "unmatched" (bin → T
/// directly, cost C); nodes take at most their capacity of matched bins (node → T). The
/// unmatched bins then fill the spare capacity at profit 0, in bin and node order: Σ capacity
/// = d means exactly as many free slots as unmatched bins. Every assignment is a flow of cost
/// d·C − its profit (at least: its zero-profit pairs count as unmatched) and every flow maps to
/// an assignment of at least its profit, so the optimum is the same, with d·N arcs replaced by
/// nnz + d + N. (An earlier version routed unmatched bins through a hub vertex with an arc to
/// every node; its N-way fan-out dominated sparse inputs: 0.8 s at d = 10,240 with no profit
/// at all, now 1 ms. The hub's paths bin → Z → node → ... never beat bin → T, because moving an
/// unmatched bin between nodes changes nothing.)
///
/// Speed (exactness unaffected): bins are added in decreasing order of their largest profit;
/// a vertex whose tentative distance is not below the best sink distance found so far is not
/// queued; a node with spare capacity bounds the sink distance as soon as it is reached; each
/// bin's arcs are sorted by cost so its scan stops at the first arc that cannot beat that
/// bound (potentials are never positive). At d = 2,560, 8 GPUs per node, 64 items per rank
/// this cuts relaxations from ~2.1 M to ~0.13 M (bench/topology/mapping_bench.cpp).
///
/// Late in the insertion order the nodes are nearly full and the few free slots lie at the end
/// of long alternating paths (length ~100 at d = 10,240), so each search settles most of the
/// graph. After such a search the potentials are refreshed: one backward Dijkstra from T over
/// the residual graph gives each vertex its reduced distance h to T and π −= h. Reduced costs
/// stay non-negative (red'(u, v) = red(u, v) − h(u) + h(v) ≥ 0 by the triangle inequality)
/// and potentials stay ≤ 0 (h ≥ 0), so every search remains an exact shortest-path search;
/// the refreshed potentials make the next searches far shorter (settled vertices at d = 10,240
/// on the vision inputs: 1.37 M → 0.31 M).
///
/// The sink wins distance ties in the heap, so a search stops as soon as it is (one of) the
/// closest vertices instead of settling every vertex at the final distance first.
///
/// Determinism: integer costs; the heap orders by (distance, vertex id) with the sink first
/// among equals; arcs are scanned in a fixed order (cost, then node); the bin order is a stable
/// sort. Same input → same output on every platform.
///
/// Complexity: O(nnz log nnz) to sort the arcs, then d augmentations, each O((A + V) log V) in
/// the worst case (A = nnz + d + N arcs, V = d + N + 1 vertices) but usually touching only a
/// few vertices (early stop), plus potential refreshes of O((A + V) log V) each, at most one per
/// (nnz + V)/4 vertices settled by the searches. Memory O(nnz + d + N).
///
/// Overflow: costs are ≤ C and every potential stays within V·C in magnitude (it is minus a
/// shortest-path distance over simple residual paths, refreshed or not), so callers must
/// keep C · (V + 2) below 2^62 (the mapping façade checks every bin's bytes against that).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "orchmllm/detail/topology/sparse_profits.hpp"

namespace orchmllm::detail {

// Returns node_of_bin (d entries): each node m receives exactly capacity[m] bins and the total
// profit is maximal. Requires Σ capacity = d = offsets.size() - 1, capacities ≥ 0, profits > 0.
inline std::vector<std::int32_t> solve_transport(const sparse_profits& prof,
                                                 const std::vector<std::int32_t>& capacity) {
  using i64 = std::int64_t;
  const auto d = static_cast<std::int32_t>(prof.offsets.size() - 1);
  const auto nn = static_cast<std::int32_t>(capacity.size());
  i64 big_c = 0;
  for (const auto& a : prof.arcs) big_c = std::max(big_c, a.profit);

  // Vertex ids: bins 0..d-1, nodes d..d+nn-1, sink T = d+nn. No hub (see the file comment):
  // a bin is either matched to a node through one of its profit arcs, or unmatched (its unit
  // goes straight to T at cost C).
  const std::int32_t sink = d + nn, nv = d + nn + 1;
  constexpr std::int32_t unmatched = -1;
  std::vector<std::int32_t> assigned(static_cast<std::size_t>(d), unmatched);  // node or none
  std::vector<i64> assigned_cost(static_cast<std::size_t>(d), 0);  // cost of the arc in use
  std::vector<std::vector<std::int32_t>> direct(static_cast<std::size_t>(nn));  // bins per node
  std::vector<i64> spare(capacity.begin(), capacity.end());  // residual node → sink

  // Each bin's arcs as (cost, node vertex) sorted by cost, then node: with all potentials ≤ 0
  // (they start at 0 and only decrease), an arc's tentative distance is at least
  // dist[bin] + cost + π[bin], so a bin's scan stops at the first arc whose bound reaches the
  // best sink distance found so far. Separate arrays keep the scan cache-friendly.
  std::vector<i64> arc_cost(prof.arcs.size());
  std::vector<std::int32_t> arc_head(prof.arcs.size());
  {
    std::vector<std::pair<i64, std::int32_t>> row;
    for (std::size_t b = 0; b + 1 < prof.offsets.size(); ++b) {
      row.clear();
      for (auto k = prof.offsets[b]; k < prof.offsets[b + 1]; ++k) {
        const auto& a = prof.arcs[static_cast<std::size_t>(k)];
        row.emplace_back(big_c - a.profit, d + a.node);
      }
      std::sort(row.begin(), row.end());
      auto k = static_cast<std::size_t>(prof.offsets[b]);
      for (const auto& [c, v] : row) {
        arc_cost[k] = c;
        arc_head[k] = v;
        ++k;
      }
    }
  }

  std::vector<i64> pot(static_cast<std::size_t>(nv), 0);
  std::vector<i64> dist(static_cast<std::size_t>(nv), std::numeric_limits<i64>::max());
  std::vector<std::int32_t> parent(static_cast<std::size_t>(nv), -1);
  std::vector<char> done(static_cast<std::size_t>(nv), 0);
  std::vector<std::int32_t> touched;
  std::vector<std::int32_t> settled;
  // Binary min-heap on (distance, vertex) kept in a reused vector (no allocation per search).
  // The sink is stored as −1 so that it wins ties: once it is the closest vertex the search
  // stops, instead of first settling every other vertex at the same distance.
  using entry = std::pair<i64, std::int32_t>;
  std::vector<entry> heap;
  const auto heap_push = [&heap, sink](i64 key, std::int32_t v) {
    heap.emplace_back(key, v == sink ? -1 : v);
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  const auto heap_pop = [&heap, sink] {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const entry top = heap.back();
    heap.pop_back();
    return entry(top.first, top.second < 0 ? sink : top.second);
  };

  auto remove_direct = [&](std::int32_t m, std::int32_t b) {
    auto& v = direct[static_cast<std::size_t>(m)];
    v.erase(std::find(v.begin(), v.end(), b));  // keeps order: deterministic scans
  };
  // Potential refresh (see the file comment): a backward Dijkstra from T over the residual
  // graph gives every vertex its reduced distance h to T; π −= h keeps every residual reduced
  // cost non-negative (triangle inequality: red'(u, v) = red(u, v) − h(u) + h(v) ≥ 0) and
  // makes a zero-cost path lead from every vertex to T, so later searches walk straight to the
  // sink instead of settling everything closer than it. Incoming residual arcs: T ← node with
  // spare (0), T ← bin that may drop out (matched or not inserted yet, C), node m ← bin with an
  // unused arc to m (its cost), bin ← its node (−its cost). Nodes of capacity 0 never reach T;
  // they get the largest potential their incoming arcs allow. Bins that were inserted and
  // dropped out are never reached again by a search (only T leads to them), so theirs stays.
  std::vector<char> inserted(static_cast<std::size_t>(d), 0);
  // Column index (bins with an arc into each node), built on the first refresh only.
  std::vector<std::int64_t> col_off;
  std::vector<std::int32_t> col_bin;
  std::vector<i64> col_cost;
  const auto build_columns = [&] {
    col_off.assign(static_cast<std::size_t>(nn) + 1, 0);
    col_bin.resize(prof.arcs.size());
    col_cost.resize(prof.arcs.size());
    for (const auto& a : prof.arcs) ++col_off[static_cast<std::size_t>(a.node) + 1];
    for (std::size_t m = 0; m < static_cast<std::size_t>(nn); ++m) col_off[m + 1] += col_off[m];
    std::vector<std::int64_t> fill(col_off.begin(), col_off.end() - 1);
    for (std::size_t b = 0; b + 1 < prof.offsets.size(); ++b)
      for (auto k = static_cast<std::size_t>(prof.offsets[b]);
           k < static_cast<std::size_t>(prof.offsets[b + 1]); ++k) {
        const auto m = static_cast<std::size_t>(arc_head[k] - d);
        col_bin[static_cast<std::size_t>(fill[m])] = static_cast<std::int32_t>(b);
        col_cost[static_cast<std::size_t>(fill[m]++)] = arc_cost[k];
      }
  };
  std::vector<i64> hd;
  std::vector<char> hdone;
  const auto refresh_potentials = [&] {
    if (col_off.empty()) build_columns();
    constexpr i64 inf = std::numeric_limits<i64>::max();
    hd.assign(static_cast<std::size_t>(nv), inf);
    hdone.assign(static_cast<std::size_t>(nv), 0);
    heap.clear();
    const auto back = [&](std::int32_t u, std::int32_t x, i64 cost) {  // arc u → x, x settled
      const auto uu = static_cast<std::size_t>(u), ux = static_cast<std::size_t>(x);
      if (hdone[uu]) return;
      const i64 nh = hd[ux] + cost + pot[uu] - pot[ux];
      if (nh < hd[uu]) {
        hd[uu] = nh;
        heap.emplace_back(nh, u);
        std::push_heap(heap.begin(), heap.end(), std::greater<>{});
      }
    };
    hd[static_cast<std::size_t>(sink)] = 0;
    heap.emplace_back(0, sink);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
      const i64 hx = heap.back().first;
      const std::int32_t x = heap.back().second;
      heap.pop_back();
      const auto ux = static_cast<std::size_t>(x);
      if (hdone[ux] || hx != hd[ux]) continue;
      hdone[ux] = 1;
      if (x == sink) {
        for (std::int32_t m = 0; m < nn; ++m)
          if (spare[static_cast<std::size_t>(m)] > 0) back(d + m, sink, 0);
        for (std::int32_t b = 0; b < d; ++b)
          if (assigned[static_cast<std::size_t>(b)] >= 0 || !inserted[static_cast<std::size_t>(b)])
            back(b, sink, big_c);
      } else if (x >= d) {
        const auto m = static_cast<std::size_t>(x - d);
        for (auto k = static_cast<std::size_t>(col_off[m]);
             k < static_cast<std::size_t>(col_off[m + 1]); ++k)
          if (assigned[static_cast<std::size_t>(col_bin[k])] != x - d)
            back(col_bin[k], x, col_cost[k]);
      } else if (assigned[ux] >= 0) {
        back(d + assigned[ux], x, -assigned_cost[ux]);
      }
    }
    for (std::size_t v = 0; v < static_cast<std::size_t>(nv); ++v)
      if (hdone[v]) pot[v] -= hd[v];
    for (std::size_t m = 0; m < static_cast<std::size_t>(nn); ++m) {
      if (hdone[static_cast<std::size_t>(d) + m]) continue;  // capacity 0: no way to T
      i64 p = pot[static_cast<std::size_t>(d) + m];
      for (auto k = static_cast<std::size_t>(col_off[m]);
           k < static_cast<std::size_t>(col_off[m + 1]); ++k)
        p = std::min(p, col_cost[k] + pot[static_cast<std::size_t>(col_bin[k])]);
      pot[static_cast<std::size_t>(d) + m] = p;
    }
  };
  // Refresh after a search that settled more than 1/64 of a refresh's size (V + nnz), once the
  // searches since the last refresh settled at least 1/4 of it: refreshes then cost at most
  // about four times the search work they follow, and only where searches are already long
  // (measured at d = 10,240: refreshing after every long search costs more than it saves).
  constexpr std::int64_t refresh_trigger_div = 64, refresh_work_div = 4;
  std::int64_t work_since_refresh = 0;
  const std::int64_t refresh_cost =
      static_cast<std::int64_t>(nv) + static_cast<std::int64_t>(prof.arcs.size());

  // Insertion order: bins with the largest single profit first (ties by index). Any order is
  // exact; this one lets the bins that care most claim their node before it fills, which keeps
  // later searches short.
  std::vector<i64> best(static_cast<std::size_t>(d), 0);
  for (std::size_t b = 0; b + 1 < prof.offsets.size(); ++b)
    for (auto k = prof.offsets[b]; k < prof.offsets[b + 1]; ++k)
      best[b] = std::max(best[b], prof.arcs[static_cast<std::size_t>(k)].profit);
  std::vector<std::int32_t> order(static_cast<std::size_t>(d));
  for (std::int32_t b = 0; b < d; ++b) order[static_cast<std::size_t>(b)] = b;
  std::stable_sort(order.begin(), order.end(), [&best](std::int32_t x, std::int32_t y) {
    return best[static_cast<std::size_t>(x)] > best[static_cast<std::size_t>(y)];
  });
  for (const std::int32_t b0 : order) {
    inserted[static_cast<std::size_t>(b0)] = 1;
    for (auto v : touched) {
      dist[static_cast<std::size_t>(v)] = std::numeric_limits<i64>::max();
      parent[static_cast<std::size_t>(v)] = -1;
      done[static_cast<std::size_t>(v)] = 0;
    }
    touched.clear();
    settled.clear();
    heap.clear();
    auto relax = [&](std::int32_t u, std::int32_t v, i64 cost) {
      const auto uu = static_cast<std::size_t>(u), uv = static_cast<std::size_t>(v);
      if (done[uv]) return;
      const i64 nd = dist[uu] + cost + pot[uu] - pot[uv];
      // Pruning: a vertex no closer than the best path to the sink found so far cannot lie on
      // the shortest path nor needs a potential update (only vertices closer than the final
      // sink distance are updated), so it is not queued.
      if (nd < dist[uv] && nd < dist[static_cast<std::size_t>(sink)]) {
        if (dist[uv] == std::numeric_limits<i64>::max()) touched.push_back(v);
        dist[uv] = nd;
        parent[uv] = u;
        heap_push(nd, v);
        // Eager bound: a node with spare capacity reaches the sink at once, so its tentative
        // distance gives an early sink bound for the pruning above. The node need not be
        // settled before the sink (the sink wins ties): when the sink is popped at distance D no
        // unsettled vertex is closer than D, so the node's tentative distance D is exact, its
        // parent is settled, and it needs no potential update (only distances < D do).
        if (v >= d && v < sink && spare[static_cast<std::size_t>(v - d)] > 0) {
          const auto us = static_cast<std::size_t>(sink);
          const i64 ns = nd + pot[uv] - pot[us];
          if (ns < dist[us]) {
            if (dist[us] == std::numeric_limits<i64>::max()) touched.push_back(sink);
            dist[us] = ns;
            parent[us] = v;
            heap_push(ns, sink);
          }
        }
      }
    };
    dist[static_cast<std::size_t>(b0)] = 0;
    touched.push_back(b0);
    heap_push(0, b0);
    i64 reach = -1;
    while (!heap.empty()) {
      const auto [du, u] = heap_pop();
      const auto uu = static_cast<std::size_t>(u);
      if (done[uu] || du != dist[uu]) continue;
      done[uu] = 1;
      settled.push_back(u);
      if (u == sink) {
        reach = du;
        break;
      }
      if (u < d) {  // a bin: forward arcs it does not use, and dropping out to T
        const auto cur = assigned[uu] + d;  // vertex of its current node (< d if none)
        const i64 base = du + pot[uu];
        for (auto k = static_cast<std::size_t>(prof.offsets[uu]);
             k < static_cast<std::size_t>(prof.offsets[uu + 1]); ++k) {
          if (base + arc_cost[k] >= dist[static_cast<std::size_t>(sink)]) break;
          if (arc_head[k] != cur) relax(u, arc_head[k], arc_cost[k]);
        }
        // Only b0 and matched bins are ever reached (a node leads back to matched bins only),
        // and both may go unmatched: u → T at cost C.
        relax(u, sink, big_c);
      } else {  // a node: back to its matched bins, on to the sink
        const auto m = static_cast<std::size_t>(u - d);
        for (auto b : direct[m]) relax(u, b, -assigned_cost[static_cast<std::size_t>(b)]);
        if (spare[m] > 0) relax(u, sink, 0);
      }
    }
    // A path always exists: b0 → T directly (cost C).
    for (auto v : settled) {
      const auto uv = static_cast<std::size_t>(v);
      if (dist[uv] < reach) pot[uv] += dist[uv] - reach;
    }
    work_since_refresh += static_cast<std::int64_t>(settled.size());
    const bool refresh =
        static_cast<std::int64_t>(settled.size()) * refresh_trigger_div > refresh_cost &&
        work_since_refresh * refresh_work_div >= refresh_cost;
    // Augment along the path, walking back from the sink.
    std::int32_t v = sink;
    while (v != b0) {
      const std::int32_t u = parent[static_cast<std::size_t>(v)];
      if (v == sink) {
        if (u >= d) {
          --spare[static_cast<std::size_t>(u - d)];  // the node takes one more bin
        } else {
          assigned[static_cast<std::size_t>(u)] = unmatched;  // bin u drops out
          assigned_cost[static_cast<std::size_t>(u)] = big_c;
        }
      } else if (u < d) {  // bin u now goes directly to node v
        const auto m = v - d;
        assigned[static_cast<std::size_t>(u)] = m;
        for (auto k = prof.offsets[static_cast<std::size_t>(u)];
             k < prof.offsets[static_cast<std::size_t>(u) + 1]; ++k)
          if (prof.arcs[static_cast<std::size_t>(k)].node == m)
            assigned_cost[static_cast<std::size_t>(u)] =
                big_c - prof.arcs[static_cast<std::size_t>(k)].profit;
        direct[static_cast<std::size_t>(m)].push_back(u);
      } else {  // node u → bin v: bin v leaves node u (its new arc was handled already)
        remove_direct(u - d, v);
      }
      v = u;
    }
    if (refresh) {
      refresh_potentials();
      work_since_refresh = 0;
    }
  }

  // Unmatched bins fill the spare capacity, in bin and node order.
  std::vector<std::int32_t> node_of_bin(static_cast<std::size_t>(d), 0);
  std::int32_t next_node = 0;
  for (std::int32_t b = 0; b < d; ++b) {
    if (assigned[static_cast<std::size_t>(b)] >= 0) {
      node_of_bin[static_cast<std::size_t>(b)] = assigned[static_cast<std::size_t>(b)];
      continue;
    }
    while (spare[static_cast<std::size_t>(next_node)] == 0) ++next_node;
    --spare[static_cast<std::size_t>(next_node)];
    node_of_bin[static_cast<std::size_t>(b)] = next_node;
  }
  return node_of_bin;
}

}  // namespace orchmllm::detail
