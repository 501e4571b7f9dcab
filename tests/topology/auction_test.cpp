// Tests for include/orchmllm/detail/topology/auction.hpp (detail::solve_transport_auction):
//  - on random sparse transportation instances (d = 40..240, tied and spread profits, 1–8 arcs
//    per bin, uneven capacities, nodes of capacity 0, no profit at all) every node gets exactly
//    its capacity and the profit lies within the proven d·ε of the dense Hungarian optimum,
//    ε = max(1, ⌊tolerance · U / d⌋), U = Σ_b max profit (and never above it);
//  - with every profit a multiple of d + 1 and ε = 1 the bound forces the exact optimum, so the
//    ε-complementary-slackness argument itself is tested, not only its slack;
//  - determinism.
#include "orchmllm/detail/topology/auction.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "support/transport_instances.hpp"

namespace {

using orchmllm::test::instance;
using orchmllm::test::make_instance;
using orchmllm::test::oracle;
using orchmllm::test::profit_of;

// U = Σ_b max_m profit[b][m]: no assignment keeps more.
std::int64_t keep_bound(const instance& in) {
  std::int64_t u = 0;
  for (std::size_t b = 0; b + 1 < in.prof.offsets.size(); ++b) {
    std::int64_t best = 0;
    for (auto k = in.prof.offsets[b]; k < in.prof.offsets[b + 1]; ++k)
      best = std::max(best, in.prof.arcs[static_cast<std::size_t>(k)].profit);
    u += best;
  }
  return u;
}

struct auction_outcome {
  std::int64_t profit = 0;   // the auction's
  std::int64_t optimum = 0;  // the oracle's
};

// Runs the auction and checks capacities, the bound and determinism.
auction_outcome check(const instance& in, double tolerance) {
  const auto d = static_cast<std::int64_t>(in.prof.offsets.size() - 1);
  const auto got = orchmllm::detail::solve_transport_auction(in.prof, in.capacity, tolerance);
  orchmllm::test::check_fills_capacities(in, got);
  const auto eps = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(tolerance * static_cast<double>(keep_bound(in)) /
                                   static_cast<double>(std::max<std::int64_t>(1, d))));
  const auto best = oracle(in);
  const auto profit = profit_of(in, got);
  CHECK(profit <= best);
  CHECK(profit >= best - d * eps);
  CHECK(orchmllm::detail::solve_transport_auction(in.prof, in.capacity, tolerance) == got);
  return {profit, best};
}

}  // namespace

TEST_CASE("auction keeps within d·ε of the optimum on random sparse instances") {
  std::uint64_t seed = 1;
  int below_optimum = 0, cases = 0;
  for (const std::int32_t d : {40, 120, 240})
    for (const std::int32_t g : {1, 4, 8})
      for (const int arcs : {1, 3, 8})
        for (const std::int64_t max_profit : {3, 1000000})
          for (const double tolerance : {1.0, 0.1, 0.01}) {
            CAPTURE(d);
            CAPTURE(g);
            CAPTURE(arcs);
            CAPTURE(max_profit);
            CAPTURE(tolerance);
            const auto in = make_instance(d, (d + g - 1) / g, g, arcs, max_profit, seed++);
            const auto out = check(in, tolerance);
            below_optimum += out.profit < out.optimum ? 1 : 0;
            ++cases;
          }
  // The loose tolerances do lose something somewhere: the bound is what is tested, not luck.
  CHECK(below_optimum > 0);
  CHECK(cases == 162);
}

TEST_CASE("auction with uneven capacities, capacity 0 nodes and no profit") {
  std::uint64_t seed = 100;
  for (int rep = 0; rep < 12; ++rep) (void)check(make_instance(150, 30, 12, 4, 50, seed++), 0.01);
  const auto empty = make_instance(64, 8, 8, 0, 1, 7);  // no arcs: every bin fills a spare slot
  CHECK(empty.prof.arcs.empty());
  CHECK(check(empty, 0.01).profit == 0);
  const auto one = make_instance(1, 1, 1, 1, 5, 8);  // one bin, one node
  const auto out = check(one, 1.0);
  CHECK(out.profit == out.optimum);
}

TEST_CASE("auction is exact when profits are multiples of d + 1 and ε = 1") {
  // profit ≥ OPT − d·ε with ε = 1 and every profit (so OPT and the result) a multiple of d + 1:
  // the gap is a multiple of d + 1 below d + 1, hence 0.
  std::uint64_t seed = 500;
  for (const std::int32_t d : {40, 90})
    for (const std::int32_t g : {2, 8})
      for (const int arcs : {2, 6}) {
        CAPTURE(d);
        CAPTURE(g);
        CAPTURE(arcs);
        auto in = make_instance(d, (d + g - 1) / g, g, arcs, 40, seed++);
        for (auto& a : in.prof.arcs) a.profit *= d + 1;
        // tolerance · U / d < 1, so ε = 1.
        const double tolerance = 0.5 / static_cast<double>(keep_bound(in));
        const auto out = check(in, tolerance);
        CHECK(out.profit == out.optimum);
      }
}
