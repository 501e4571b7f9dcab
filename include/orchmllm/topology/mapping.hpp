#pragma once
/// @file mapping.hpp
/// Mapping balanced bins to ranks so that data moves as little as possible across nodes.
///
/// A balancer decides which items share a bin; any bijection from bins to ranks keeps the
/// balance. `map_bins` picks one:
///  * `identity`: bin k → rank k (what existing systems do; the baseline).
///  * `transport`: minimises the total inter-node bytes exactly. With w[b][m] the bytes of bin
///    b already on node m, sending bin b to node m costs W_b − w[b][m] inter-node bytes; bins →
///    nodes with node m taking exactly node_size(m) bins is a transportation problem, solved by
///    our own min-cost flow (detail/topology/min_cost_flow.hpp). Then, inside each node, a
///    G × G Hungarian assignment (detail/topology/hungarian.hpp) places the node's bins on its
///    GPUs maximising the bytes that are already on their final GPU.
///
/// What `transport` guarantees: (1) `inter_node_bytes` is the minimum over all d! bijections;
/// (2) given the bin → node assignment it chose, `moved_bytes` is the minimum over all
/// bijections with that node assignment. It does NOT promise the minimum `moved_bytes` among
/// all bijections of minimum inter-node bytes: when several node assignments tie on inter-node
/// bytes, the one the flow returns need not be the best for intra-node moves.
///
/// Thread-safety: pure functions. Determinism: integer arithmetic and fixed tie-breaks; the
/// same input gives the same result on every platform, so every rank can plan locally.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/detail/topology/hungarian.hpp"
#include "orchmllm/detail/topology/min_cost_flow.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// How `map_bins` maps bins to ranks (see the file comment).
enum class mapping_method : std::uint8_t { identity, transport };

/// Name of a mapping method as used by the command-line tool: "identity" or "transport".
constexpr std::string_view to_string(mapping_method m) noexcept {
  switch (m) {
    case mapping_method::identity: return "identity";
    case mapping_method::transport: return "transport";
  }
  return "?";
}

/// Parses "identity" or "transport". Throws `invalid_argument_error` naming the unknown name
/// and listing the valid ones.
inline mapping_method parse_mapping(std::string_view name) {
  for (auto m : {mapping_method::identity, mapping_method::transport})
    if (to_string(m) == name) return m;
  detail::raise<invalid_argument_error>(
      detail::concat("unknown mapping '", name, "' (expected identity or transport)"));
}

/// Result of `map_bins`.
struct mapping_result {
  /// Rank of every bin (d entries, a permutation of 0..d-1).
  std::vector<rank_t> rank_of_bin;
  /// The remapped plan: item g goes to rank_of_bin[bin of g], canonical slots (increasing
  /// source global id on every destination rank, as `rearrangement::from_destinations`).
  rearrangement plan;
  /// Bytes of items whose final rank differs from their source rank.
  std::int64_t moved_bytes = 0;
  /// Bytes of items whose final node differs from their source node.
  std::int64_t inter_node_bytes = 0;
  /// Σ_b (W_b − max_m w[b][m]): no bijection moves fewer bytes across nodes (W_b = bytes of bin
  /// b, w[b][m] = its bytes already on node m). Independent of the method.
  std::int64_t inter_node_bytes_lower_bound = 0;
};

namespace detail {

// Checks map_bins' inputs; returns the total byte count (checked against overflow so that the
// flow's costs and potentials, bounded by total · (V + 2), fit in 63 bits).
inline std::int64_t check_mapping_inputs(const rearrangement& binned,
                                         std::span<const std::int64_t> item_bytes,
                                         const topology& topo) {
  ORCHMLLM_REQUIRE(binned.num_src_ranks() == binned.num_dst_ranks(), invalid_argument_error,
                   "mapping needs a plan with as many bins as source ranks, got ",
                   binned.num_src_ranks(), " source ranks and ", binned.num_dst_ranks(), " bins");
  ORCHMLLM_REQUIRE(topo.num_ranks() == binned.num_src_ranks(), invalid_argument_error,
                   "the topology has ", topo.num_ranks(), " ranks but the plan has ",
                   binned.num_src_ranks());
  ORCHMLLM_REQUIRE(static_cast<std::int64_t>(item_bytes.size()) == binned.num_items(),
                   invalid_argument_error, item_bytes.size(), " item sizes for a plan of ",
                   binned.num_items(), " items");
  const std::int64_t vertices = static_cast<std::int64_t>(topo.num_ranks()) +
                                static_cast<std::int64_t>(topo.num_nodes()) + 4;
  const std::int64_t limit = (std::int64_t{1} << 62) / vertices;
  std::int64_t total = 0;
  for (std::size_t g = 0; g < item_bytes.size(); ++g) {
    ORCHMLLM_REQUIRE(item_bytes[g] >= 0, invalid_argument_error, "item ", g, " has ",
                     item_bytes[g], " bytes");
    ORCHMLLM_REQUIRE(item_bytes[g] <= limit - total, invalid_argument_error,
                     "total item bytes exceed ", limit, " (2^62 / (ranks + nodes + 4)) at item ",
                     g);
    total += item_bytes[g];
  }
  return total;
}

}  // namespace detail

/// Maps the bins of a balancer plan to ranks.
///
/// `binned` is a plan whose destination ranks are bins 0..d-1, with d = topo.num_ranks() =
/// binned.num_src_ranks() = binned.num_dst_ranks(); `item_bytes` has one non-negative entry per
/// item (source global id order). Returns the bijection bin → rank, the remapped plan (canonical
/// slots, also for `identity`) and its byte figures (see `mapping_result`).
///
/// Complexity: O(n + d log d) to gather per-bin bytes by node and by rank; `transport` adds the
/// flow, d shortest-path augmentations of O((A + V) log V) each in the worst case (A ≤ nnz + d
/// + N arcs with nnz ≤ min(n, d·N) the non-zero (bin, node) pairs, V = d + N + 2) but usually
/// far fewer steps thanks to early stopping, plus O(Σ_m G_m³) for the per-node assignments (so
/// a topology with one huge node costs O(d³)). Memory O(n + d + nnz + max_m G_m²).
///
/// Throws `invalid_argument_error` when the plan is not square, the topology's rank count
/// differs, item_bytes has the wrong size, a byte count is negative, or the total bytes exceed
/// 2^62 / (d + N + 4) (the exact solver's overflow guard).
inline mapping_result map_bins(const rearrangement& binned, std::span<const std::int64_t> item_bytes,
                               const topology& topo,
                               mapping_method method = mapping_method::transport) {
  detail::check_mapping_inputs(binned, item_bytes, topo);
  const rank_t d = topo.num_ranks();
  const rank_t nn = topo.num_nodes();
  const auto ud = static_cast<std::size_t>(d);
  const auto src_off = binned.src_offsets();

  std::vector<rank_t> src_rank(static_cast<std::size_t>(binned.num_items()));
  for (std::size_t r = 0; r + 1 < src_off.size(); ++r)
    std::fill(src_rank.begin() + src_off[r], src_rank.begin() + src_off[r + 1],
              static_cast<rank_t>(r));

  // Every bin's (source rank, bytes) pairs, contiguous per bin. Filled in one sequential pass
  // over the items (scattered writes into d streams) rather than by following source_of per
  // bin, whose random reads cost several times more at n ≈ 10^5; both stages then read each
  // bin's items sequentially. Zero-byte items are dropped: they never change a figure.
  struct held {
    rank_t rank;
    std::int64_t bytes;
  };
  std::vector<std::int64_t> held_off(ud + 1, 0);
  for (std::size_t g = 0; g < src_rank.size(); ++g)
    if (item_bytes[g] > 0) ++held_off[static_cast<std::size_t>(binned.dst_ranks()[g]) + 1];
  for (std::size_t b = 0; b < ud; ++b) held_off[b + 1] += held_off[b];
  std::vector<held> items_of_bin(static_cast<std::size_t>(held_off[ud]));
  {
    std::vector<std::int64_t> fill(held_off.begin(), held_off.end() - 1);
    for (std::size_t g = 0; g < src_rank.size(); ++g)
      if (item_bytes[g] > 0)
        items_of_bin[static_cast<std::size_t>(
            fill[static_cast<std::size_t>(binned.dst_ranks()[g])]++)] = {src_rank[g],
                                                                          item_bytes[g]};
  }

  // Per bin: bytes by node (sparse, ascending node) and total. A scratch array indexed by node
  // with a touched list keeps this O(items of the bin) per bin.
  detail::sparse_profits by_node;
  by_node.offsets.reserve(ud + 1);
  std::vector<std::int64_t> acc(static_cast<std::size_t>(nn), 0);
  std::vector<std::int32_t> hit;
  std::int64_t lower_bound = 0;
  for (std::size_t b = 0; b < ud; ++b) {
    hit.clear();
    std::int64_t bin_total = 0;
    for (auto k = held_off[b]; k < held_off[b + 1]; ++k) {
      const auto& it = items_of_bin[static_cast<std::size_t>(k)];
      const auto m = static_cast<std::size_t>(topo.node_of(it.rank));
      if (acc[m] == 0) hit.push_back(static_cast<std::int32_t>(m));
      acc[m] += it.bytes;
      bin_total += it.bytes;
    }
    std::sort(hit.begin(), hit.end());
    std::int64_t best = 0;
    for (auto m : hit) {
      by_node.arcs.push_back({m, acc[static_cast<std::size_t>(m)]});
      best = std::max(best, acc[static_cast<std::size_t>(m)]);
      acc[static_cast<std::size_t>(m)] = 0;
    }
    by_node.offsets.push_back(static_cast<std::int64_t>(by_node.arcs.size()));
    lower_bound += bin_total - best;
  }

  mapping_result out;
  out.inter_node_bytes_lower_bound = lower_bound;
  out.rank_of_bin.resize(ud);
  if (method == mapping_method::identity) {
    std::iota(out.rank_of_bin.begin(), out.rank_of_bin.end(), rank_t{0});
  } else {
    std::vector<std::int32_t> capacity(static_cast<std::size_t>(nn));
    for (rank_t m = 0; m < nn; ++m) capacity[static_cast<std::size_t>(m)] = topo.node_size(m);
    const auto node_of_bin = detail::solve_transport(by_node, capacity);
    // Bins of each node in increasing bin order (deterministic rows of the G × G problems).
    std::vector<std::vector<rank_t>> bins_of(static_cast<std::size_t>(nn));
    for (rank_t b = 0; b < d; ++b)
      bins_of[static_cast<std::size_t>(node_of_bin[static_cast<std::size_t>(b)])].push_back(b);
    std::vector<std::int64_t> profit;
    for (rank_t m = 0; m < nn; ++m) {
      const auto& bins = bins_of[static_cast<std::size_t>(m)];
      const int g = topo.node_size(m);
      const auto ug = static_cast<std::size_t>(g);
      profit.assign(ug * ug, 0);
      // profit[i][j]: bytes of bin i already on the node's j-th rank.
      for (std::size_t i = 0; i < bins.size(); ++i) {
        const auto b = static_cast<std::size_t>(bins[i]);
        for (auto k = held_off[b]; k < held_off[b + 1]; ++k) {
          const auto& it = items_of_bin[static_cast<std::size_t>(k)];
          if (topo.node_of(it.rank) == m)
            profit[i * ug + static_cast<std::size_t>(topo.local_rank(it.rank))] += it.bytes;
        }
      }
      const auto col = detail::max_profit_assignment(profit, g);
      for (std::size_t i = 0; i < bins.size(); ++i)
        out.rank_of_bin[static_cast<std::size_t>(bins[i])] = topo.rank_at(m, col[i]);
    }
  }

  std::vector<rank_t> dst(src_rank.size());
  for (std::size_t g = 0; g < dst.size(); ++g) {
    const rank_t r = out.rank_of_bin[static_cast<std::size_t>(binned.dst_ranks()[g])];
    dst[g] = r;
    if (r != src_rank[g]) {
      out.moved_bytes += item_bytes[g];
      if (!topo.same_node(r, src_rank[g])) out.inter_node_bytes += item_bytes[g];
    }
  }
  out.plan = rearrangement::from_destinations(src_off, dst, d);
  return out;
}

}  // namespace orchmllm
