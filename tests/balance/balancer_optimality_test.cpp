// Tests of orchmllm::balance (balance/balancer.hpp): optimality against brute force on small
// instances — the exact methods are optimal, automatic within lpt's bound, with and without
// constraints, for every shipped policy and a trainer's own padding rules; padded is optimal with
// ties, zero lengths, multiples and buckets, and its reported lower bound is the optimum without
// a cap.

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/statistics.hpp"
#include "support/balancer_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using namespace orchmllm::test;                     // support/test_support.hpp
using namespace orchmllm::test::balancer_fixtures;  // support/balancer_fixtures.hpp

template <class Cost>
bool same_cost(Cost a, Cost b) {
  if constexpr (std::is_floating_point_v<Cost>) {
    return std::abs(a - b) <= 1e-9 * std::max<Cost>(1, std::abs(b));
  } else {
    return a == b;
  }
}

template <class Cost>
bool at_most(Cost a, double bound) {
  return static_cast<double>(a) <= bound * (1 + 1e-12) + 1e-9;
}

struct tallies {
  int packed_instances = 0;
  int auto_optimal = 0;
  int constrained_feasible = 0;
  int constrained_infeasible = 0;
};

// Every shipped policy, with a random multiple and random buckets.
std::vector<padding_policy> shipped_policies(std::mt19937_64& rng, const batch_layout& layout) {
  return {packed, padded, padded_to_multiple(uniform(rng, 2, 8)), random_buckets(rng, layout)};
}

template <class C>
void check_small_instance(std::mt19937_64& rng, const batch_layout& layout, const C& cost,
                          tallies& t, const std::vector<padding_policy>& policies) {
  const rank_t d = layout.num_ranks();
  const double lpt_ratio = 4.0 / 3.0 - 1.0 / (3.0 * d);
  for (const auto policy : policies) {
    CAPTURE(policy.is_padded());
    CAPTURE(policy.multiple());
    CAPTURE(policy.buckets().size());
    // Unconstrained.
    const auto bf = brute_force(layout, d, cost, policy);
    REQUIRE(bf.has_value());
    const auto ex = balance(layout, cost, policy, balancers::exact{});
    CHECK(same_cost(ex.makespan, *bf));
    CHECK(ex.proven_optimal);
    const auto au = balance(layout, cost, policy, balancers::automatic{});
    CHECK(at_most(au.makespan, lpt_ratio * static_cast<double>(*bf)));
    if (au.proven_optimal) CHECK(same_cost(au.makespan, *bf));
    if (policy.is_padded()) {
      const auto pd = balance(layout, cost, policy, balancers::padded_exact{});
      CHECK(pd.makespan == *bf);  // a product, so exact even for floating costs
      CHECK(pd.proven_optimal);
      CHECK(au.makespan == *bf);
    } else {
      ++t.packed_instances;
      if (same_cost(au.makespan, *bf)) ++t.auto_optimal;
      const auto lp = balance(layout, cost, policy, balancers::lpt{});
      CHECK(at_most(lp.makespan, lpt_ratio * static_cast<double>(*bf)));
      const auto kk = balance(layout, cost, policy, balancers::karmarkar_karp{});
      CHECK(at_most(kk.makespan, 2.0 * static_cast<double>(*bf)));
    }

    // Constrained: balance must agree with brute force on feasibility, and the exact methods
    // on the optimum among feasible plans.
    const constraints lim = random_limits(rng, layout, policy);
    CAPTURE(lim.min_items);
    CAPTURE(lim.max_items);
    CAPTURE(lim.cap ? lim.cap->limit : -1);
    const auto bc = brute_force(layout, d, cost, policy, lim);
    ++(bc ? t.constrained_feasible : t.constrained_infeasible);
    std::vector<any_balancer> methods{balancers::exact{}, balancers::automatic{}};
    if (policy.is_padded()) methods.push_back(balancers::padded_exact{});
    for (const auto& method : methods) {
      CAPTURE(method.name());
      if (!bc) {
        CHECK_THROWS_AS(balance(layout, cost, policy, method, lim), infeasible_error);
        continue;
      }
      const auto r = balance(layout, cost, policy, method, lim);
      const auto e = figures(layout, r.plan.dst_ranks(), d, cost, policy);
      CHECK(honours(e, lim));
      CHECK(max_of(e.load) == r.makespan);
      if (method.name() != balancers::automatic::name) {
        CHECK(same_cost(r.makespan, *bc));
        CHECK(r.proven_optimal);
      }
      if (r.proven_optimal) CHECK(same_cost(r.makespan, *bc));
    }
  }
}

}  // namespace

// -------------------------------------------------------------------------------------------------
// (a) Exactness against brute force.
// -------------------------------------------------------------------------------------------------

TEST_CASE("balance: exact methods are optimal on small random instances (brute force)") {
  std::mt19937_64 rng(0x5eed0001);
  tallies t;
  for (int inst = 0; inst < 240; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const std::int64_t n = uniform(rng, 0, 10);
    const std::int64_t max_len = std::array<std::int64_t, 3>{6, 20, 100}[inst % 3];
    const batch_layout layout = random_layout(rng, d, n, inst % 4 == 0 ? 0 : 1, max_len);
    const linear_cost lin{uniform(rng, 1, 3)};
    check_small_instance(rng, layout, lin, t, shipped_policies(rng, layout));
    const quadratic_cost q{static_cast<double>(uniform(rng, 0, 2)),
                           static_cast<double>(uniform(rng, 1, 4)) * 0.5,
                           static_cast<double>(uniform(rng, 0, 3)) * 0.01};
    check_small_instance(rng, layout, q, t, shipped_policies(rng, layout));
  }
  MESSAGE("automatic optimal on ", t.auto_optimal, " of ", t.packed_instances,
          " packed instances; constrained: ", t.constrained_feasible, " feasible, ",
          t.constrained_infeasible, " infeasible");
  CHECK(t.auto_optimal >= 0.97 * t.packed_instances);
  // The constrained half must exercise both outcomes.
  CHECK(t.constrained_feasible > 100);
  CHECK(t.constrained_infeasible > 30);
}

TEST_CASE("balance: padded is optimal with ties, zero lengths, multiples and buckets") {
  std::mt19937_64 rng(0x5eed0002);
  for (int inst = 0; inst < 150; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const batch_layout layout = random_layout(rng, d, uniform(rng, 1, 9), 0, 5);  // many ties
    for (const padding_policy policy :
         {padded, padded_to_multiple(2), padded_to_multiple(4), bucketed({1, 3, 5}), bucketed({5}),
          random_buckets(rng, layout)}) {
      CAPTURE(policy.multiple());
      CAPTURE(policy.buckets().size());
      const linear_cost lin{1};
      const quadratic_cost q{1.0, 0.5, 0.25};
      CHECK(balance(layout, lin, policy, balancers::padded_exact{}).makespan ==
            brute_force(layout, d, lin, policy));
      CHECK(balance(layout, q, policy, balancers::padded_exact{}).makespan ==
            brute_force(layout, d, q, policy));
    }
  }
}

TEST_CASE("balance: a trainer's padding rule is exact under padded_exact, exact and auto") {
  std::mt19937_64 rng(0x5eed0005);
  tallies t;
  for (int inst = 0; inst < 120; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(uniform(rng, 1, 4));
    const std::int64_t n = uniform(rng, 0, 9);
    const batch_layout layout = random_layout(rng, d, n, inst % 3 == 0 ? 0 : 1,
                                              std::array<std::int64_t, 3>{6, 20, 70}[inst % 3]);
    check_small_instance(rng, layout, linear_cost{uniform(rng, 1, 3)}, t, user_policies(rng));
    check_small_instance(rng, layout, quadratic_cost{1.0, 0.5, 0.02}, t, user_policies(rng));
  }
  CHECK(t.packed_instances == 0);
  CHECK(t.constrained_feasible > 100);
  CHECK(t.constrained_infeasible > 10);
}

TEST_CASE("padded: the reported lower bound is the optimum without a cap (ratio 1 when proven)") {
  // Lengths 10, 9, 1, 1 on 2 ranks, cost = length: the structural terms give 11 (Σ/d), the
  // optimum is 20 ({10, 9} | {1, 1}).
  const batch_layout small({0, 2, 4}, {10, 1, 9, 1});
  CHECK(makespan_lower_bound(small, 2, linear_cost{}, padded) == 20);
  const auto res = balance(small, linear_cost{}, padded, balancers::padded_exact{});
  CHECK(res.makespan == 20);
  CHECK(res.lower_bound == 20);
  CHECK(compute_statistics(small, res.plan, linear_cost{}, padded).ratio == 1.0);
  // Random inputs, with and without item counts: padded_exact meets the bound exactly; with a
  // token cap the bound stays below every plan.
  std::mt19937_64 rng(0x7167);
  for (int iter = 0; iter < 300; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 12));
    const std::int64_t n = uniform(rng, 0, 60);
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(n));
    for (auto& l : lengths) l = uniform(rng, 0, 300);
    const batch_layout layout(random_offsets(rng, d, n), lengths);
    const auto policy = iter % 3 == 0 ? padded_to_multiple(uniform(rng, 2, 64)) : padded;
    constraints limits;
    if (iter % 4 == 1) limits.min_items = n / d;
    if (iter % 4 == 2) limits.max_items = (n + d - 1) / d + uniform(rng, 0, 2);
    CAPTURE(iter);
    const auto q = quadratic_cost{1.5, 0.25, 0.001};
    const auto exact_linear =
        balance(layout, linear_cost{}, policy, balancers::padded_exact{}, limits);
    CHECK(exact_linear.lower_bound == exact_linear.makespan);
    CHECK(exact_linear.lower_bound ==
          makespan_lower_bound(layout, d, linear_cost{}, policy, limits));
    const auto exact_q = balance(layout, q, policy, balancers::padded_exact{}, limits);
    CHECK(exact_q.lower_bound == exact_q.makespan);
    CHECK(exact_q.proven_optimal);
    if (n > 0) {
      limits.cap = capacity{capacity::measure::tokens, 0};
      std::int64_t longest = 0;
      for (auto l : lengths) longest = std::max(longest, policy.padded_length(l));
      limits.cap->limit = longest * ((n + d - 1) / d + 1);
      const auto capped = balance(layout, linear_cost{}, policy, balancers::automatic{}, limits);
      CHECK(capped.lower_bound <= capped.makespan);
      CHECK(capped.lower_bound == exact_linear.lower_bound);  // the cap is not in the bound
    }
  }
}

TEST_CASE("automatic: whole tiles, the bound knows them and lpt's optimum ends the search") {
  // Images of 1–6 tiles of 1,025 tokens, 8 per rank on 256 ranks, linear cost: every load is
  // whole tiles, so ⌈tiles / d⌉ tiles is a bound the plans can meet; automatic proves lpt's
  // plan optimal by it and searches no further.
  std::mt19937_64 rng(1025);
  const rank_t d = 256;
  std::vector<std::vector<std::int64_t>> per_rank(static_cast<std::size_t>(d));
  std::int64_t tiles = 0;
  for (auto& r : per_rank)
    for (int i = 0; i < 8; ++i) {
      const auto t = uniform(rng, 1, 6);
      tiles += t;
      r.push_back(t * 1025);
    }
  REQUIRE(tiles % d != 0);  // else ⌈total / d⌉ alone would be a multiple of the tile
  const auto layout = batch_layout::from_ranks(per_rank);
  const std::int64_t bound = (tiles + d - 1) / d * 1025;
  CHECK(makespan_lower_bound(layout, d, linear_cost{}, packed) == bound);
  const auto r = balance(layout, linear_cost{}, packed, balancers::automatic{});
  CHECK(r.lower_bound == bound);
  CHECK(r.makespan == bound);
  CHECK(r.proven_optimal);
  CHECK(r.used == "lpt");
}
