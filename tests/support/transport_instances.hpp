#pragma once
// Random sparse transportation instances (bins × nodes with capacities, sparse positive
// profits) and their exact optimum by the dense Hungarian method over capacity slots, for the
// tests of the bin → node solvers (tests/topology/min_cost_flow_test.cpp, auction_test.cpp),
// and the check that a solver fills every node to its capacity.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "orchmllm/detail/topology/hungarian.hpp"
#include "orchmllm/detail/topology/sparse_profits.hpp"

namespace orchmllm::test {

using orchmllm::detail::sparse_profits;

struct instance {
  sparse_profits prof;
  std::vector<std::int32_t> capacity;
};

// d bins, nodes of capacity drawn from {0..max_cap} (the last node takes the rest), each bin
// `arcs` random distinct nodes with profits in [1, max_profit] (small ranges make many ties).
inline instance make_instance(std::int32_t d, std::int32_t nodes, std::int32_t max_cap, int arcs,
                              std::int64_t max_profit, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  instance in;
  in.capacity.assign(static_cast<std::size_t>(nodes), 0);
  std::int32_t left = d;
  for (std::int32_t m = 0; m + 1 < nodes && left > 0; ++m) {
    const auto c = std::min(left, static_cast<std::int32_t>(rng() % (max_cap + 1)));
    in.capacity[static_cast<std::size_t>(m)] = c;
    left -= c;
  }
  in.capacity.back() += left;
  for (std::int32_t b = 0; b < d; ++b) {
    std::vector<std::int32_t> used;
    for (int k = 0; k < arcs; ++k) {
      const auto m = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(nodes));
      if (std::find(used.begin(), used.end(), m) != used.end()) continue;
      used.push_back(m);
      in.prof.arcs.push_back(
          {m, 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_profit))});
    }
    in.prof.offsets.push_back(static_cast<std::int64_t>(in.prof.arcs.size()));
  }
  return in;
}

inline std::int64_t profit_of(const instance& in, const std::vector<std::int32_t>& node_of_bin) {
  std::int64_t total = 0;
  for (std::size_t b = 0; b + 1 < in.prof.offsets.size(); ++b)
    for (auto k = in.prof.offsets[b]; k < in.prof.offsets[b + 1]; ++k)
      if (in.prof.arcs[static_cast<std::size_t>(k)].node == node_of_bin[b])
        total += in.prof.arcs[static_cast<std::size_t>(k)].profit;
  return total;
}

// The optimum by the dense Hungarian method over capacity slots. O(d³).
inline std::int64_t oracle(const instance& in) {
  const auto d = static_cast<int>(in.prof.offsets.size() - 1);
  std::vector<std::int32_t> node_of_slot;
  for (std::size_t m = 0; m < in.capacity.size(); ++m)
    for (std::int32_t k = 0; k < in.capacity[m]; ++k)
      node_of_slot.push_back(static_cast<std::int32_t>(m));
  const auto n = static_cast<std::size_t>(d);
  std::vector<std::int64_t> dense(n * n, 0);
  for (std::size_t b = 0; b < n; ++b)
    for (auto k = in.prof.offsets[b]; k < in.prof.offsets[b + 1]; ++k) {
      const auto& arc = in.prof.arcs[static_cast<std::size_t>(k)];
      for (std::size_t s = 0; s < n; ++s)
        if (node_of_slot[s] == arc.node) dense[b * n + s] = arc.profit;
    }
  const auto col = orchmllm::detail::max_profit_assignment(dense, d);
  std::vector<std::int32_t> node_of_bin(static_cast<std::size_t>(d));
  for (int b = 0; b < d; ++b)
    node_of_bin[static_cast<std::size_t>(b)] =
        node_of_slot[static_cast<std::size_t>(col[static_cast<std::size_t>(b)])];
  return profit_of(in, node_of_bin);
}

// Checks that a solver's node_of_bin has one entry per bin and gives every node exactly its
// capacity.
inline void check_fills_capacities(const instance& in, const std::vector<std::int32_t>& got) {
  REQUIRE(got.size() + 1 == in.prof.offsets.size());
  std::vector<std::int32_t> load(in.capacity.size(), 0);
  for (auto m : got) {
    REQUIRE(m >= 0);
    REQUIRE(static_cast<std::size_t>(m) < in.capacity.size());
    ++load[static_cast<std::size_t>(m)];
  }
  CHECK(load == in.capacity);
}

}  // namespace orchmllm::test
