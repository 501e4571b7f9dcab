// Tests for include/orchmllm/detail/topology/min_cost_flow.hpp (detail::solve_transport):
// random sparse transportation instances at d = 40..240 against the dense Hungarian oracle
// (each node expanded into capacity slots), covering the solver's paths: bins that stay
// unmatched and fill spare capacity, bins displaced from a full node into the unmatched state,
// nodes of capacity 0, inputs with no profit at all, and the potential refresh (long searches
// near the end of the insertion order; these instances trigger ~270 refreshes in all).
#include "orchmllm/detail/topology/min_cost_flow.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "orchmllm/detail/topology/hungarian.hpp"

namespace {

using orchmllm::detail::sparse_profits;

struct instance {
  sparse_profits prof;
  std::vector<std::int32_t> capacity;
};

// d bins, nodes of capacity drawn from {0..max_cap} (the last node takes the rest), each bin
// `arcs` random distinct nodes with profits in [1, max_profit] (small ranges make many ties).
instance make_instance(std::int32_t d, std::int32_t nodes, std::int32_t max_cap, int arcs,
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

std::int64_t profit_of(const instance& in, const std::vector<std::int32_t>& node_of_bin) {
  std::int64_t total = 0;
  for (std::size_t b = 0; b + 1 < in.prof.offsets.size(); ++b)
    for (auto k = in.prof.offsets[b]; k < in.prof.offsets[b + 1]; ++k)
      if (in.prof.arcs[static_cast<std::size_t>(k)].node == node_of_bin[b])
        total += in.prof.arcs[static_cast<std::size_t>(k)].profit;
  return total;
}

// The optimum by the dense Hungarian method over capacity slots. O(d³).
std::int64_t oracle(const instance& in) {
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

void check(const instance& in) {
  const auto got = orchmllm::detail::solve_transport(in.prof, in.capacity);
  REQUIRE(got.size() + 1 == in.prof.offsets.size());
  std::vector<std::int32_t> load(in.capacity.size(), 0);
  for (auto m : got) {
    REQUIRE(m >= 0);
    REQUIRE(static_cast<std::size_t>(m) < in.capacity.size());
    ++load[static_cast<std::size_t>(m)];
  }
  CHECK(load == in.capacity);
  CHECK(profit_of(in, got) == oracle(in));
  CHECK(orchmllm::detail::solve_transport(in.prof, in.capacity) == got);  // deterministic
}

}  // namespace

TEST_CASE("solve_transport matches the dense Hungarian oracle on random sparse instances") {
  std::uint64_t seed = 1;
  for (const std::int32_t d : {40, 120, 240})
    for (const std::int32_t g : {1, 4, 8})
      for (const int arcs : {1, 3, 8})
        for (const std::int64_t max_profit : {3, 1000000}) {
          CAPTURE(d);
          CAPTURE(g);
          CAPTURE(arcs);
          CAPTURE(max_profit);
          check(make_instance(d, (d + g - 1) / g, g, arcs, max_profit, seed++));
        }
}

TEST_CASE("solve_transport with uneven capacities, capacity 0 nodes and no profit") {
  std::uint64_t seed = 100;
  for (int rep = 0; rep < 12; ++rep) check(make_instance(150, 30, 12, 4, 50, seed++));
  const auto empty = make_instance(64, 8, 8, 0, 1, 7);  // no arcs: any bijection is optimal
  check(empty);
  CHECK(empty.prof.arcs.empty());
}
