// Tests of the balancer customisation point (balance/problem.hpp): the application's own
// balancers through `balance`, in each of the return forms; the problem they see; how `balance`
// treats a missing, constraint-breaking or malformed plan; the claims a balancer may make.

#include "orchmllm/balance/problem.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/statistics.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using orchmllm::test::brute_force;
using orchmllm::test::expect_error;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;

// Items in canonical order, dealt to the ranks in turn.
struct round_robin {
  template <class C>
  std::vector<rank_t> operator()(const balance_problem<C>& p) const {
    std::vector<rank_t> dst(static_cast<std::size_t>(p.num_items()));
    rank_t r = 0;
    for (const auto g : p.order()) {
      dst[static_cast<std::size_t>(g)] = r;
      r = (r + 1) % p.num_ranks();
    }
    return dst;
  }
};

// A user greedy that reads the whole problem: each item (canonical order) to the rank whose
// load after taking it is smallest under the policy (the padded load uses the cost model), among
// the ranks that still satisfy max_items; proves optimality when it meets the lower bound.
struct smallest_load_after {
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const {
    using Cost = typename balance_problem<C>::cost_type;
    const auto d = static_cast<std::size_t>(p.num_ranks());
    std::vector<Cost> sum(d, Cost{});
    std::vector<std::int64_t> count(d, 0), longest(d, 0);
    std::vector<rank_t> dst(static_cast<std::size_t>(p.num_items()));
    for (const auto g : p.order()) {
      const auto len = p.layout().length(g);
      std::size_t best = d;
      Cost best_load{};
      for (std::size_t r = 0; r < d; ++r) {
        if (count[r] + 1 > p.limits().max_items) continue;
        const Cost load =
            p.policy().is_padded()
                ? static_cast<Cost>(count[r] + 1) *
                      p.cost_model()(p.policy().padded_length(std::max(longest[r], len)))
                : sum[r] + p.cost(g);
        if (best == d || load < best_load) {
          best = r;
          best_load = load;
        }
      }
      if (best == d) return {};  // no plan
      dst[static_cast<std::size_t>(g)] = static_cast<rank_t>(best);
      sum[best] += p.cost(g);
      ++count[best];
      longest[best] = std::max(longest[best], len);
    }
    const bool at_bound = p.satisfies(dst) && p.makespan(dst) <= p.lower_bound();
    return balancer_plan{std::move(dst), "custom", at_bound};
  }
};

static_assert(balancer<round_robin, linear_cost>);
static_assert(balancer_for<smallest_load_after, quadratic_cost>);

// n items on d ranks, lengths 1..1500.
batch_layout random_problem_layout(std::mt19937_64& rng, rank_t d, std::int64_t n) {
  return orchmllm::test::random_uniform_layout(rng, d, n, 1, 1500);
}

// The invariants every plan `balance` returns must meet, checked without the balancer.
template <class C, class R>
void check_result(const batch_layout& layout, const C& cost, padding_policy policy,
                  const constraints& limits, const R& r) {
  REQUIRE_NOTHROW(r.plan.validate());
  REQUIRE(r.plan.num_items() == layout.num_items());
  const auto s = compute_statistics(layout, r.plan, cost, policy, limits);
  CHECK(r.makespan == s.makespan);
  CHECK(r.lower_bound == s.lower_bound);
  CHECK(s.min_items_per_rank >= limits.min_items);
  CHECK(s.max_items_per_rank <= limits.max_items);
  if (limits.cap) CHECK(s.max_tokens <= limits.cap->limit);
  CHECK(static_cast<double>(r.makespan) >= static_cast<double>(r.lower_bound) * (1 - 1e-12));
  if (r.proven_optimal && layout.num_items() <= 8 && layout.num_ranks() <= 3) {
    const auto best = brute_force(layout, layout.num_ranks(), cost, policy, limits);
    REQUIRE(best.has_value());
    CHECK(static_cast<double>(r.makespan) <= static_cast<double>(*best) * (1 + 1e-12));
  }
}

}  // namespace

TEST_CASE("problem: the application's balancer runs through balance with every invariant") {
  std::mt19937_64 rng(0xc057);
  for (int trial = 0; trial < 300; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, trial % 2 == 0 ? 3 : 12));
    const auto layout = random_problem_layout(rng, d, uniform(rng, 0, trial % 2 == 0 ? 8 : 150));
    constraints limits;
    if (trial % 3 == 1 && layout.num_items() > 0)
      limits.max_items = (layout.num_items() + d - 1) / d + 1;
    CAPTURE(trial);
    for (const padding_policy policy : {packed, padded, padded_to_multiple(16)}) {
      const quadratic_cost q{1.0, 1.0, 1.0 / 1024};
      const auto a = balance(layout, q, policy, smallest_load_after{}, limits);
      CHECK(a.used == "custom");
      CHECK_FALSE(a.fallback);
      check_result(layout, q, policy, limits, a);
      const auto b = balance(layout, linear_cost{1}, policy, round_robin{}, limits);
      check_result(layout, linear_cost{1}, policy, limits, b);
      // Deterministic, and the plan is the balancer's own (round robin on the canonical order).
      CHECK(balance(layout, linear_cost{1}, policy, round_robin{}, limits).plan == b.plan);
      // Never better than the optimum the exact built-in proves.
      if (layout.num_items() <= 8 && !policy.is_padded()) {
        const auto ex = balance(layout, q, policy, balancers::exact{}, limits);
        if (ex.proven_optimal) CHECK(a.makespan >= ex.makespan);
      }
    }
  }
}

TEST_CASE("problem: the return forms, the fallback and the claims") {
  const auto layout = batch_layout::from_ranks({{900, 100, 50}, {400, 300}, {}});
  const linear_cost cost{1};
  SUBCASE("a generic lambda returning a plain plan") {
    const auto r = balance(layout, cost, packed, [](const auto& p) {
      return std::vector<rank_t>(static_cast<std::size_t>(p.num_items()), 2);
    });
    CHECK(r.used == "custom");
    CHECK(r.makespan == 1750);
    CHECK(r.plan.dst_offsets().back() == 5);
    CHECK(r.plan.dst_offsets()[2] == 0);  // ranks 0 and 1 receive nothing
  }
  SUBCASE("a plan that names its balancer reports that name") {
    const auto r = balance(layout, cost, packed, [](const auto& p) {
      return balancer_plan{std::vector<rank_t>(static_cast<std::size_t>(p.num_items()), 1),
                           "all_on_one"};
    });
    CHECK(r.used == "all_on_one");
    CHECK_FALSE(r.fallback);
    CHECK(r.makespan == 1750);
  }
  SUBCASE("no plan: the constrained fallback plans instead, under the custom name") {
    const auto r = balance(layout, cost, packed,
                           [](const auto&) { return std::optional<std::vector<rank_t>>{}; });
    CHECK(r.fallback);
    CHECK(r.used == "custom");
    CHECK(r.makespan == 900);
    CHECK(r.proven_optimal);  // meets the bound (the longest item)
  }
  SUBCASE("a plan that breaks a constraint counts as none") {
    const constraints cap{.cap = capacity{capacity::measure::tokens, 1000}};
    const auto r = balance(
        layout, cost, packed,
        [](const auto& p) {
          return std::vector<rank_t>(static_cast<std::size_t>(p.num_items()), 0);
        },
        cap);
    CHECK(r.fallback);
    const auto s = compute_statistics(layout, r.plan, cost, packed, cap);
    CHECK(s.max_tokens <= 1000);
  }
  SUBCASE("a malformed plan is a clear error") {
    expect_invalid(
        [&] {
          (void)balance(layout, cost, packed, [](const auto&) { return std::vector<rank_t>{0}; });
        },
        {"the balancer returned 1 destinations for 5 items"});
    expect_invalid(
        [&] {
          (void)balance(layout, cost, packed, [](const auto& p) {
            return std::vector<rank_t>(static_cast<std::size_t>(p.num_items()), 3);
          });
        },
        {"the balancer sent item 0 to rank 3, outside [0, 3)"});
  }
  SUBCASE("a proof of infeasibility skips the fallback") {
    expect_error<infeasible_error>(
        [&] {
          (void)balance(layout, cost, packed, [](const auto&) {
            return balancer_plan{std::nullopt, "custom", false, true};
          });
        },
        {"no placement of 5 items on 3 ranks"});
  }
  SUBCASE("the problem holds what balance computed") {
    (void)balance(layout, quadratic_cost{0.0, 1.0, 0.001}, padded, [&](const auto& p) {
      CHECK(p.num_ranks() == 3);
      CHECK(p.num_items() == 5);
      CHECK(&p.layout() == &layout);
      CHECK(p.policy() == padded);
      CHECK(p.costs().size() == 5);
      CHECK(p.cost(0) == doctest::Approx(900 + 0.001 * 900 * 900));
      // Padded canonical order: length descending.
      CHECK(std::vector<std::int64_t>(p.order().begin(), p.order().end()) ==
            std::vector<std::int64_t>{0, 3, 4, 1, 2});
      // The structural bound; the reported one may be tighter.
      CHECK(p.lower_bound() <=
            makespan_lower_bound(layout, 3, quadratic_cost{0.0, 1.0, 0.001}, padded));
      std::vector<rank_t> dst{0, 1, 1, 2, 2};
      CHECK(p.satisfies(dst));
      CHECK_FALSE(p.satisfies(std::vector<rank_t>{0, 1}));
      CHECK(p.makespan(dst) ==
            doctest::Approx(std::max(
                {900 + 0.001 * 810000, 2 * (100 + 0.001 * 10000), 2 * (400 + 0.001 * 160000)})));
      return dst;
    });
  }
}
