#pragma once
/// @file bottleneck.hpp
/// Header-only local search for the `bottleneck` mapping: improves a bin → node assignment on
/// F = max over nodes of max(egress_m, ingress_m) (see mapping_problem.hpp for the figures).
/// Internal: used by `map_bins(..., mappers::bottleneck{})` and as the GLPK backend's warm
/// start.
///
/// Move: swap two bins on different nodes (node capacities stay exact). Swapping b1 (on m1) with
/// b2 (on m2) changes only nodes m1 and m2:
///   kept_m1' = kept_m1 − w[b1][m1] + w[b2][m1],   in_m1' = in_m1 − W_b1 + W_b2   (in = Σ W on m)
///   kept_m2' = kept_m2 − w[b2][m2] + w[b1][m2],   in_m2' = in_m2 − W_b2 + W_b1
///   egress' = held − kept',  ingress' = in' − kept'.
/// Step: m1 = a node at F (lowest index); among all swaps of a bin of m1 with a bin elsewhere
/// whose new values at m1 and m2 are both < F, apply the one with the smallest max(val_m1',
/// val_m2'), then the smallest change of total inter-node bytes, then the lowest (b1, b2).
/// Stops when no such swap exists (a local optimum), when F reaches the problem's lower bound
/// (mapping_result::worst_node_bytes_lower_bound: then it is optimal), or after `step_budget`
/// steps.
///
/// Termination and monotonicity: an applied swap leaves every other node unchanged and puts m1
/// and m2 strictly below F, so (F, number of nodes at F) decreases lexicographically: F never
/// increases, and the result is never worse than the start on F. Total inter-node bytes may rise
/// (F comes first).
///
/// Complexity per step: O(G_m1 · (d + N) + column of m1), with a dense column w[·][m1] and a
/// dense row w[b1][·] scattered from the sparse rows; O(d + N + nnz) set-up and memory.
/// Determinism: integer arithmetic, fixed scan order and tie-breaks.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "orchmllm/detail/topology/mapping_problem.hpp"

namespace orchmllm::detail {

// The swap budget `map_bins(..., bottleneck)` and the GLPK warm start both use (d bins).
constexpr std::int64_t bottleneck_step_budget(std::int64_t d) noexcept { return 2 * d + 64; }

// Improves `node_of_bin` (must respect the capacities) in place; returns the number of swaps.
inline std::int64_t bottleneck_local_search(const mapping_problem& p,
                                            std::vector<std::int32_t>& node_of_bin,
                                            std::int64_t step_budget) {
  using i64 = std::int64_t;
  const rank_t d = p.num_bins();
  const auto nn = static_cast<std::size_t>(p.num_nodes());
  if (nn < 2) return 0;
  std::vector<i64> kept(nn, 0), in(nn, 0);
  std::vector<std::vector<rank_t>> bins_on(nn);
  for (rank_t b = 0; b < d; ++b) {
    const auto m = node_of_bin[static_cast<std::size_t>(b)];
    kept[static_cast<std::size_t>(m)] += p.on_node(b, m);
    in[static_cast<std::size_t>(m)] += p.bin_bytes[static_cast<std::size_t>(b)];
    bins_on[static_cast<std::size_t>(m)].push_back(b);
  }
  // Column index: (bin, bytes) with w[bin][m] > 0, per node m.
  std::vector<i64> col_off(nn + 1, 0);
  for (const auto& a : p.by_node.arcs) ++col_off[static_cast<std::size_t>(a.node) + 1];
  for (std::size_t m = 0; m < nn; ++m) col_off[m + 1] += col_off[m];
  std::vector<std::pair<rank_t, i64>> col(p.by_node.arcs.size());
  {
    std::vector<i64> fill(col_off.begin(), col_off.end() - 1);
    for (rank_t b = 0; b < d; ++b)
      for (auto k = p.by_node.offsets[static_cast<std::size_t>(b)];
           k < p.by_node.offsets[static_cast<std::size_t>(b) + 1]; ++k) {
        const auto& a = p.by_node.arcs[static_cast<std::size_t>(k)];
        col[static_cast<std::size_t>(fill[static_cast<std::size_t>(a.node)]++)] = {b, a.profit};
      }
  }
  const auto value = [&](std::size_t m, i64 kept_m, i64 in_m) {
    return std::max(p.node_held[m] - kept_m, in_m - kept_m);
  };
  std::vector<i64> dense_col(static_cast<std::size_t>(d), 0);  // w[·][m1]
  std::vector<i64> dense_row(nn, 0);                           // w[b1][·]

  std::int64_t steps = 0;
  while (steps < step_budget) {
    std::size_t m1 = 0;
    i64 f = -1;
    for (std::size_t m = 0; m < nn; ++m) {
      const i64 v = value(m, kept[m], in[m]);
      if (v > f) {
        f = v;
        m1 = m;
      }
    }
    if (f <= p.worst_lower_bound) break;  // proven optimal: no bijection does better
    for (auto k = col_off[m1]; k < col_off[m1 + 1]; ++k)
      dense_col[static_cast<std::size_t>(col[static_cast<std::size_t>(k)].first)] =
          col[static_cast<std::size_t>(k)].second;
    i64 best_val = f, best_delta = 0;
    rank_t best_b1 = -1, best_b2 = -1;
    for (const rank_t b1 : bins_on[m1]) {
      const auto ub1 = static_cast<std::size_t>(b1);
      for (auto k = p.by_node.offsets[ub1]; k < p.by_node.offsets[ub1 + 1]; ++k)
        dense_row[static_cast<std::size_t>(p.by_node.arcs[static_cast<std::size_t>(k)].node)] =
            p.by_node.arcs[static_cast<std::size_t>(k)].profit;
      const i64 w11 = dense_col[ub1];
      const i64 wb1 = p.bin_bytes[ub1];
      for (rank_t b2 = 0; b2 < d; ++b2) {
        const auto ub2 = static_cast<std::size_t>(b2);
        const auto m2 = static_cast<std::size_t>(node_of_bin[ub2]);
        if (m2 == m1) continue;
        const i64 wb2 = p.bin_bytes[ub2];
        const i64 k1 = kept[m1] - w11 + dense_col[ub2];
        const i64 in1 = in[m1] - wb1 + wb2;
        const i64 v1 = value(m1, k1, in1);
        // v = max(v1, v2) >= v1: skip when it cannot beat (or, with a best, tie) best_val.
        if (v1 > best_val || (v1 == best_val && best_b1 < 0)) continue;
        const i64 w22 = p.on_node(b2, static_cast<std::int32_t>(m2));
        const i64 k2 = kept[m2] - w22 + dense_row[m2];
        const i64 in2 = in[m2] - wb2 + wb1;
        const i64 v2 = value(m2, k2, in2);
        const i64 v = std::max(v1, v2);
        if (v >= f) continue;
        // Change of total inter-node bytes (Σ ingress): Δin − Δkept over both nodes.
        const i64 delta = (in1 - k1) - (in[m1] - kept[m1]) + (in2 - k2) - (in[m2] - kept[m2]);
        if (best_b1 < 0 || v < best_val || (v == best_val && delta < best_delta)) {
          best_val = v;
          best_delta = delta;
          best_b1 = b1;
          best_b2 = b2;
        }
      }
      for (auto k = p.by_node.offsets[ub1]; k < p.by_node.offsets[ub1 + 1]; ++k)
        dense_row[static_cast<std::size_t>(p.by_node.arcs[static_cast<std::size_t>(k)].node)] = 0;
    }
    for (auto k = col_off[m1]; k < col_off[m1 + 1]; ++k)
      dense_col[static_cast<std::size_t>(col[static_cast<std::size_t>(k)].first)] = 0;
    if (best_b1 < 0) break;
    // Apply the swap.
    const auto ub1 = static_cast<std::size_t>(best_b1), ub2 = static_cast<std::size_t>(best_b2);
    const auto m2 = static_cast<std::size_t>(node_of_bin[ub2]);
    kept[m1] += p.on_node(best_b2, static_cast<std::int32_t>(m1)) -
                p.on_node(best_b1, static_cast<std::int32_t>(m1));
    kept[m2] += p.on_node(best_b1, static_cast<std::int32_t>(m2)) -
                p.on_node(best_b2, static_cast<std::int32_t>(m2));
    in[m1] += p.bin_bytes[ub2] - p.bin_bytes[ub1];
    in[m2] += p.bin_bytes[ub1] - p.bin_bytes[ub2];
    node_of_bin[ub1] = static_cast<std::int32_t>(m2);
    node_of_bin[ub2] = static_cast<std::int32_t>(m1);
    auto& on1 = bins_on[m1];
    auto& on2 = bins_on[m2];
    *std::find(on1.begin(), on1.end(), best_b1) = best_b2;
    *std::find(on2.begin(), on2.end(), best_b2) = best_b1;
    std::sort(on1.begin(), on1.end());
    std::sort(on2.begin(), on2.end());
    ++steps;
  }
  return steps;
}

}  // namespace orchmllm::detail
