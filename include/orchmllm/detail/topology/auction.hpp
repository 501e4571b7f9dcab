#pragma once
/// @file auction.hpp
/// ε-optimal sparse transportation by auction: the same problem as min_cost_flow.hpp (assign d
/// unit bins to N nodes, node m taking exactly capacity[m] of them, maximising Σ profit[b][node
/// (b)] over the sparse positive profits) in near-linear time instead of d shortest paths.
/// Internal (namespace detail); the public façade is `mappers::auction` in
/// orchmllm/topology/mapping.hpp.
///
/// Method: Bertsekas' forward auction for an asymmetric assignment, with each node one object
/// of capacity[m] copies. A bin is *matched* to a node through one of its profit arcs, or stays
/// unmatched (it fills a spare slot at profit 0 at the end, as in the flow: Σ capacity = d).
/// Each node m holds at most capacity[m] matched bins, each with its bid; its price λ_m is the
/// lowest bid it holds when it is full, else 0. An unmatched bin b computes, over its arcs, the
/// values p(b, m) − λ_m: the best v1 at node m1 and the second best v2 (at least 0, the value of
/// staying unmatched). If v1 ≤ 0 it stays unmatched for good (prices never fall). Otherwise it
/// takes a free slot of m1 with bid 0, or, when m1 is full, displaces m1's lowest bid (ties: the
/// lowest bin id) with the bid λ_m1 + v1 − v2 + ε = p(b, m1) − v2 + ε, and the displaced bin
/// bids again. Bins bid in FIFO order, starting in bin order.
///
/// Bound (ε-complementary slackness; proof in docs/algorithms.md, "Auction mapping"): every
/// matched bin b on m has p(b, m) − λ_m ≥ max(0, max_{m'} p(b, m') − λ_m') − ε (it held when b
/// bid, λ_m ≤ b's bid, and the other prices only rose since); unmatched bins value every node at
/// ≤ 0; a node that is not full has λ = 0 (full nodes stay full). So u_b = that value + ε and
/// v_m = λ_m are a feasible dual of the LP relaxation whose objective exceeds the result's
/// profit by ε per matched bin: profit ≥ optimum − d·ε. With ε = max(1, ⌊tolerance · U / d⌋),
/// U = Σ_b max_m p(b, m) (no assignment keeps more than U), the result keeps at least
/// optimum − tolerance · U (or optimum − d when that is larger, i.e. when tolerance · U < d).
///
/// Complexity: O(nnz) to start; each bid costs O(deg(b) + log capacity[m1]). Each bid on a full
/// node replaces a held bid by one at least ε higher (p − v2 + ε ≥ λ + ε as v1 ≥ v2), and no
/// bid exceeds C + ε (C = the largest profit), so the ≤ d held bids allow at most d·⌈C/ε⌉ + d
/// displacements and there are at most d·⌈C/ε⌉ + 2d bids; in practice a few per bin (measured
/// 1 to 18 per bin on the benchmark workloads at 10,240–102,400 bins, docs/results.md).
/// Memory O(d + N + Σ capacity).
///
/// Determinism: integer arithmetic, FIFO bid order, fixed tie-breaks (lowest node among equal
/// values, arcs scanned in stored order; lowest (bid, bin) displaced). Same input → same output
/// on every platform.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "orchmllm/detail/core/prefetch.hpp"
#include "orchmllm/detail/topology/sparse_profits.hpp"

namespace orchmllm::detail {

/// Returns node_of_bin (d entries): node m receives exactly capacity[m] bins and the profit is
/// at least the optimum − max(tolerance · U, d) (file comment). Requires Σ capacity = d =
/// offsets.size() − 1, capacities ≥ 0, profits > 0, distinct nodes per row, 0 < tolerance ≤ 1,
/// and profits small enough that C + ε fits (the mapping façade's overflow guard).
inline std::vector<std::int32_t> solve_transport_auction(const sparse_profits& prof,
                                                         const std::vector<std::int32_t>& capacity,
                                                         double tolerance) {
  using i64 = std::int64_t;
  const auto d = static_cast<std::int32_t>(prof.offsets.size() - 1);
  const auto nn = static_cast<std::size_t>(capacity.size());
  const auto row = [&prof](std::int32_t b) {
    return std::pair(static_cast<std::size_t>(prof.offsets[static_cast<std::size_t>(b)]),
                     static_cast<std::size_t>(prof.offsets[static_cast<std::size_t>(b) + 1]));
  };
  i64 keep_bound = 0;  // U
  for (std::int32_t b = 0; b < d; ++b) {
    i64 best = 0;
    for (auto [k, end] = row(b); k < end; ++k) best = std::max(best, prof.arcs[k].profit);
    keep_bound += best;
  }
  const i64 eps = std::max<i64>(
      1, static_cast<i64>(tolerance * static_cast<double>(keep_bound) / std::max(1, d)));

  // Node m's held (bid, bin) pairs: slots[slot_off[m] .. + held[m]), a min-heap on (bid, bin).
  struct bid_of {
    i64 bid;
    std::int32_t bin;
  };
  const auto displaced_first = [](const bid_of& x, const bid_of& y) {  // heap order: min on top
    return x.bid != y.bid ? x.bid > y.bid : x.bin > y.bin;
  };
  std::vector<std::size_t> slot_off(nn + 1, 0);
  for (std::size_t m = 0; m < nn; ++m)
    slot_off[m + 1] = slot_off[m] + static_cast<std::size_t>(capacity[m]);
  std::vector<bid_of> slots(slot_off[nn]);
  std::vector<std::int32_t> held(nn, 0);
  // λ_m, kept beside the heaps: a bin's scan reads one array instead of two (~15 % faster). A
  // node without capacity gets the largest price, so every arc to it has a value below 0 and is
  // never chosen: the scan needs no capacity test (profit − price cannot overflow, profit > 0).
  std::vector<i64> price(nn, 0);
  for (std::size_t m = 0; m < nn; ++m)
    if (capacity[m] == 0) price[m] = std::numeric_limits<i64>::max();

  std::vector<std::int32_t> node_of_bin(static_cast<std::size_t>(d), -1);
  std::vector<std::int32_t> queue;  // bins waiting to bid: queue[head ..), each at most once
  queue.reserve(static_cast<std::size_t>(d));
  for (std::int32_t b = 0; b < d; ++b)
    if (row(b).first != row(b).second) queue.push_back(b);
  std::size_t head = 0;
  while (head < queue.size()) {
    if (head >= static_cast<std::size_t>(d)) {  // keep the queue O(d)
      queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(head));
      head = 0;
    }
    const std::int32_t b = queue[head++];
    // The next bidder's row: displaced bins re-enter the queue in no order, so its arcs are a
    // cache miss, fetched while this bid runs (same bids, ~20 % less time at 102,400 bins).
    if (head < queue.size())
      prefetch(prof.arcs.data() + prof.offsets[static_cast<std::size_t>(queue[head])]);
    i64 v1 = 0, v2 = 0, p1 = 0;
    std::int32_t m1 = -1;
    for (auto [k, end] = row(b); k < end; ++k) {
      const auto m = static_cast<std::size_t>(prof.arcs[k].node);
      const i64 v = prof.arcs[k].profit - price[m];
      if (v > v1) {
        v2 = v1;
        v1 = v;
        m1 = static_cast<std::int32_t>(m);
        p1 = prof.arcs[k].profit;
      } else if (v > v2) {
        v2 = v;
      }
    }
    if (m1 < 0) continue;  // every value ≤ 0: unmatched for good
    const auto m = static_cast<std::size_t>(m1);
    bid_of* heap = slots.data() + slot_off[m];
    auto& count = held[m];
    if (count < capacity[m]) {  // a free slot, at bid 0 (λ stays 0 until the node is full)
      heap[count++] = {0, b};
      std::push_heap(heap, heap + count, displaced_first);
      price[m] = count < capacity[m] ? 0 : heap[0].bid;
    } else {  // displace the lowest bid
      std::pop_heap(heap, heap + count, displaced_first);
      const std::int32_t out = heap[count - 1].bin;
      node_of_bin[static_cast<std::size_t>(out)] = -1;
      queue.push_back(out);
      heap[count - 1] = {p1 - v2 + eps, b};
      std::push_heap(heap, heap + count, displaced_first);
      price[m] = heap[0].bid;
    }
    node_of_bin[static_cast<std::size_t>(b)] = m1;
  }

  // Unmatched bins fill the spare slots, in bin and node order (as the flow does).
  std::size_t next_node = 0;
  for (std::size_t b = 0; b < node_of_bin.size(); ++b) {
    if (node_of_bin[b] >= 0) continue;
    while (held[next_node] == capacity[next_node]) ++next_node;
    ++held[next_node];
    node_of_bin[b] = static_cast<std::int32_t>(next_node);
  }
  return node_of_bin;
}

}  // namespace orchmllm::detail
