#pragma once
// Brute-force references for the mapping tests (tests/topology/mapping_test.cpp and
// tests/backend/glpk/mapping_test.cpp): the bin × rank byte matrix of a binned plan, the worst
// node of a bijection and the best worst node over every bijection, computed the slow, obvious
// way.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm::test {

// Bytes of bin b already on rank r (d × d, row-major), recomputed from the plan.
inline std::vector<std::int64_t> bin_rank_bytes(const rearrangement& p,
                                                std::span<const std::int64_t> bytes) {
  const auto d = static_cast<std::size_t>(p.num_src_ranks());
  std::vector<std::int64_t> w(d * d, 0);
  const auto off = p.src_offsets();
  for (std::size_t r = 0; r < d; ++r)
    for (auto g = off[r]; g < off[r + 1]; ++g)
      w[static_cast<std::size_t>(p.dst_ranks()[static_cast<std::size_t>(g)]) * d + r] +=
          bytes[static_cast<std::size_t>(g)];
  return w;
}

// Worst node bytes (max over nodes of max(inter-node egress, ingress)) of the bijection
// rank_of_bin, from the bin × rank matrix w.
inline std::int64_t worst_node_of(const std::vector<std::int64_t>& w,
                                  const std::vector<rank_t>& rank_of_bin, const topology& topo) {
  const auto d = rank_of_bin.size();
  std::vector<std::int64_t> egress(static_cast<std::size_t>(topo.num_nodes()), 0);
  auto ingress = egress;
  for (std::size_t b = 0; b < d; ++b)
    for (std::size_t r = 0; r < d; ++r) {
      const rank_t t = rank_of_bin[b];
      if (topo.same_node(t, static_cast<rank_t>(r))) continue;
      egress[static_cast<std::size_t>(topo.node_of(static_cast<rank_t>(r)))] += w[b * d + r];
      ingress[static_cast<std::size_t>(topo.node_of(t))] += w[b * d + r];
    }
  std::int64_t worst = 0;
  for (std::size_t m = 0; m < egress.size(); ++m) worst = std::max({worst, egress[m], ingress[m]});
  return worst;
}

// The smallest worst node bytes (worst_node_of) over all d! bijections of the d bins onto the d
// ranks of `topo`, from the bin × rank matrix w (by enumeration: d ≤ 8 or so).
inline std::int64_t best_worst_node(const std::vector<std::int64_t>& w, const topology& topo) {
  std::vector<rank_t> perm(static_cast<std::size_t>(topo.num_ranks()));
  std::iota(perm.begin(), perm.end(), rank_t{0});
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  do {
    best = std::min(best, worst_node_of(w, perm, topo));
  } while (std::next_permutation(perm.begin(), perm.end()));
  return best;
}

}  // namespace orchmllm::test
