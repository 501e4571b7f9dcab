// Tests for include/orchmllm/detail/topology/min_cost_flow.hpp (detail::solve_transport):
// random sparse transportation instances at d = 40..240 against the dense Hungarian oracle
// (each node expanded into capacity slots), covering the solver's paths: bins that stay
// unmatched and fill spare capacity, bins displaced from a full node into the unmatched state,
// nodes of capacity 0, inputs with no profit at all, and the potential refresh (long searches
// near the end of the insertion order; these instances trigger ~270 refreshes in all).
#include "orchmllm/detail/topology/min_cost_flow.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "support/transport_instances.hpp"

namespace {

using orchmllm::test::instance;
using orchmllm::test::make_instance;
using orchmllm::test::oracle;
using orchmllm::test::profit_of;

void check(const instance& in) {
  const auto got = orchmllm::detail::solve_transport(in.prof, in.capacity);
  orchmllm::test::check_fills_capacities(in, got);
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
