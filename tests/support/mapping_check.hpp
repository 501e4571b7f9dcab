#pragma once
// Shared by the mapping tests (tests/topology/mapper_test.cpp, tests/orchestrator/, tests/backend/
// glpk/mapping_test.cpp): random mapping instances, and the checks every mapping result must pass
// (a bijection, the plan it implies, every byte figure recomputed item by item). Uses doctest.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/mapping_result.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/test_support.hpp"

namespace orchmllm::test {

struct mapping_instance {
  topology topo;
  rearrangement binned;
  std::vector<std::int64_t> bytes;
};

// Random plan with random locality (items kept on their source rank) and random sizes (about
// one in five zero).
inline mapping_instance random_mapping_instance(std::mt19937_64& rng, topology topo,
                                                std::int64_t max_bytes = 1000) {
  const rank_t d = topo.num_ranks();
  const auto n = uniform(rng, 0, 6 * d);
  const auto off = random_offsets(rng, d, n);
  auto binned = random_rearrangement(rng, off, d, uniform(rng, 0, 1) == 1,
                                     static_cast<int>(uniform(rng, 0, 80)));
  std::vector<std::int64_t> bytes(static_cast<std::size_t>(n));
  for (auto& b : bytes) b = uniform(rng, 0, 4) == 0 ? 0 : uniform(rng, 1, max_bytes);
  return {std::move(topo), std::move(binned), std::move(bytes)};
}

// Checks a mapping result of `binned`: bijection, plan, figures recomputed item by item.
inline void check_mapping_result(const mapping_result& res, const rearrangement& binned,
                                 std::span<const std::int64_t> bytes, const topology& topo) {
  const auto d = static_cast<std::size_t>(topo.num_ranks());
  REQUIRE(res.rank_of_bin.size() == d);
  auto sorted = res.rank_of_bin;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t k = 0; k < d; ++k) REQUIRE(sorted[k] == static_cast<rank_t>(k));
  res.plan.validate();
  // Every item on its bin's rank, in the slot it has in the binned plan.
  std::vector<placement> want(static_cast<std::size_t>(binned.num_items()));
  for (std::size_t g = 0; g < want.size(); ++g)
    want[g] = placement{res.rank_of_bin[static_cast<std::size_t>(binned.dst_ranks()[g])],
                        binned.dst_slots()[g]};
  CHECK(res.plan == rearrangement::from_placements(binned.src_offsets(), want, topo.num_ranks()));
  const auto nodes = static_cast<std::size_t>(topo.num_nodes());
  std::vector<std::int64_t> egress(nodes, 0), ingress(nodes, 0);
  std::int64_t moved = 0, inter = 0;
  const auto off = res.plan.src_offsets();
  for (std::size_t r = 0; r + 1 < off.size(); ++r)
    for (auto g = off[r]; g < off[r + 1]; ++g) {
      const rank_t t = res.plan.dst_ranks()[static_cast<std::size_t>(g)];
      const auto x = bytes[static_cast<std::size_t>(g)];
      if (t != static_cast<rank_t>(r)) moved += x;
      if (topo.same_node(t, static_cast<rank_t>(r))) continue;
      inter += x;
      egress[static_cast<std::size_t>(topo.node_of(static_cast<rank_t>(r)))] += x;
      ingress[static_cast<std::size_t>(topo.node_of(t))] += x;
    }
  CHECK(res.moved_bytes == moved);
  CHECK(res.inter_node_bytes == inter);
  CHECK(res.inter_node_bytes_lower_bound <= inter);
  CHECK(res.max_node_egress_bytes == *std::max_element(egress.begin(), egress.end()));
  CHECK(res.max_node_ingress_bytes == *std::max_element(ingress.begin(), ingress.end()));
}

}  // namespace orchmllm::test
