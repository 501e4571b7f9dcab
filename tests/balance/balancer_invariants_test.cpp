// Tests of orchmllm::balance (balance/balancer.hpp): invariants on thousands of random layouts
// (every item once, constraints, makespan and bound three ways, determinism, automatic never
// worse than lpt or karmarkar_karp, the plan algebra), a trainer's padding rule through every
// balancer and its contract, and padded on a large batch.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/statistics.hpp"
#include "support/balancer_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using namespace orchmllm::test;                     // support/test_support.hpp
using namespace orchmllm::test::balancer_fixtures;  // support/balancer_fixtures.hpp

}  // namespace

// -------------------------------------------------------------------------------------------------
// (b) Invariants on many random layouts.
// -------------------------------------------------------------------------------------------------

namespace {

template <class C>
void check_invariants(std::mt19937_64& rng, const batch_layout& layout, const C& cost,
                      padding_policy policy, int& infeasible) {
  const rank_t d = layout.num_ranks();
  const std::int64_t n = layout.num_items();
  std::vector<std::string_view> methods{balancers::lpt::name, balancers::automatic::name};
  methods.push_back(policy.is_padded() ? balancers::padded_exact::name
                                       : balancers::karmarkar_karp::name);
  if (n <= 12) methods.push_back(balancers::exact::name);
  const std::string_view method = methods[static_cast<std::size_t>(
      uniform(rng, 0, static_cast<std::int64_t>(methods.size()) - 1))];
  const any_balancer b = suite_balancer(method, uniform(rng, 0, 1) == 1);
  constraints limits;
  if (uniform(rng, 0, 2) == 0) {
    // Loose-ish limits: cap at 1.5× the average footprint (at least the largest item).
    const bool bytes = layout.has_bytes() && uniform(rng, 0, 1) == 1;
    const auto what = bytes ? capacity::measure::bytes : capacity::measure::tokens;
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      const auto f = detail::item_footprint(layout, g, policy, what);
      total += f;
      largest = std::max(largest, f);
    }
    const std::int64_t avg = d > 0 ? (total + d - 1) / d : 0;
    const std::int64_t limit = policy.is_padded()
                                   ? 3 * largest * std::max<std::int64_t>(1, (n + d - 1) / d) / 2
                                   : std::max(largest, avg + avg / 2);
    limits.cap = capacity{what, limit};
    if (uniform(rng, 0, 1) == 1) limits.min_items = std::min<std::int64_t>(1, n / d);
    if (uniform(rng, 0, 1) == 1) limits.max_items = (n + d - 1) / d + 2;
  }
  CAPTURE(method);
  CAPTURE(policy.is_padded());
  CAPTURE(limits.any());

  std::optional<balance_result<cost_type_t<C>>> res;
  try {
    res = balance(layout, cost, policy, b, limits);
  } catch (const infeasible_error&) {
    ++infeasible;
    return;
  }
  const auto& r = *res;
  const auto& p = r.plan;
  REQUIRE_NOTHROW(p.validate());
  REQUIRE(p.num_items() == n);
  REQUIRE(p.num_dst_ranks() == d);
  CHECK(std::ranges::equal(p.src_offsets(), layout.offsets()));
  // Each item exactly once.
  std::vector<std::int64_t> src(p.sources().begin(), p.sources().end());
  std::sort(src.begin(), src.end());
  for (std::int64_t h = 0; h < n; ++h) REQUIRE(src[static_cast<std::size_t>(h)] == h);
  // Constraints, makespan and bound, three ways.
  const auto e = figures(layout, p.dst_ranks(), d, cost, policy);
  CHECK(honours(e, limits));
  const auto s = compute_statistics(layout, p, cost, policy, limits);
  CHECK(r.makespan == max_of(e.load));
  CHECK(r.makespan == s.makespan);
  CHECK(r.lower_bound == s.lower_bound);
  CHECK(r.lower_bound == makespan_lower_bound(layout, d, cost, policy, limits));
  CHECK(static_cast<double>(r.makespan) >= static_cast<double>(r.lower_bound) * (1 - 1e-12));
  // automatic reports the candidate it kept; the others name themselves.
  CHECK(r.used != balancers::automatic::name);
  if (method != balancers::automatic::name) CHECK(r.used == method);
  if (limits.cap) {
    CHECK((limits.cap->what == capacity::measure::tokens ? s.max_tokens : s.max_bytes) <=
          limits.cap->limit);
  }
  CHECK(s.min_items_per_rank >= limits.min_items);
  CHECK(s.max_items_per_rank <= limits.max_items);
  // Determinism.
  const auto again = balance(layout, cost, policy, b, limits);
  CHECK(again.plan == p);
  CHECK(again.makespan == r.makespan);
  CHECK(again.used == r.used);
  // automatic is never worse than lpt or karmarkar_karp alone.
  if (method == balancers::automatic::name && !limits.any()) {
    CHECK(r.makespan <= balance(layout, cost, policy, balancers::lpt{}).makespan);
    if (!policy.is_padded())
      CHECK(r.makespan <= balance(layout, cost, policy, balancers::karmarkar_karp{}).makespan);
  }
  // Plan algebra.
  const auto id_src = rearrangement::identity(layout.offsets());
  const auto id_dst = rearrangement::identity(p.dst_offsets());
  CHECK(compose(p.inverse(), p) == id_src);
  CHECK(compose(p, p.inverse()) == id_dst);
  CHECK(p.inverse().inverse() == p);
  // A second plan on the delivered layout: (q ∘ p)⁻¹ = p⁻¹ ∘ q⁻¹.
  const auto lengths2 = orchmllm::apply(
      p, std::vector<std::int64_t>(layout.lengths().begin(), layout.lengths().end()));
  const std::vector<std::int64_t> bytes(layout.item_bytes().begin(), layout.item_bytes().end());
  const batch_layout layout2(
      std::vector<std::int64_t>(p.dst_offsets().begin(), p.dst_offsets().end()), lengths2,
      orchmllm::apply(p, bytes));
  const auto q = balance(layout2, cost, policy, balancers::lpt{}).plan;
  CHECK(p.dst_offsets().size() == q.src_offsets().size());
  const auto qp = compose(q, p);
  CHECK(qp.inverse() == compose(p.inverse(), q.inverse()));
  REQUIRE_NOTHROW(qp.validate());
  // Balancing the delivered layout again cannot beat the optimum: its makespan is at least the
  // same lower bound (the bound depends on the multiset of items only).
  CHECK(makespan_lower_bound(layout2, d, cost, policy, limits) == r.lower_bound);
}

}  // namespace

TEST_CASE("balance: invariants on thousands of random layouts") {
  std::mt19937_64 rng(0x5eed0003);
  int infeasible = 0;
  const int rounds = 1500;
  for (int inst = 0; inst < rounds; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(uniform(rng, 1, inst % 10 == 0 ? 300 : 24));
    const bool with_bytes = inst % 3 == 0;
    const batch_layout layout = skewed_layout(rng, d, inst % 10 == 0 ? 3 : 8, with_bytes);
    const auto pick = uniform(rng, 0, 4);
    const padding_policy policy = pick == 0   ? padded
                                  : pick == 1 ? padded_to_multiple(uniform(rng, 2, 16))
                                  : pick == 2 ? random_buckets(rng, layout)
                                              : packed;
    if (inst % 2 == 0) {
      check_invariants(rng, layout, linear_cost{1}, policy, infeasible);
    } else {
      check_invariants(rng, layout, quadratic_cost{0.0, 1.0, 1.0 / 256}, policy, infeasible);
    }
  }
  MESSAGE(infeasible, " of ", rounds, " constrained layouts were reported infeasible");
  CHECK(infeasible < rounds / 20);
}

TEST_CASE("balance: a trainer's padding rule through every balancer, and its contract") {
  std::mt19937_64 rng(0x5eed0006);
  int infeasible = 0;
  for (int inst = 0; inst < 300; ++inst) {
    CAPTURE(inst);
    const auto d = static_cast<rank_t>(uniform(rng, 1, 24));
    const batch_layout layout = skewed_layout(rng, d, 8, inst % 3 == 0);
    const auto rules = user_policies(rng);
    const padding_policy policy = rules[static_cast<std::size_t>(inst % 3)];
    check_invariants(rng, layout, linear_cost{1}, policy, infeasible);
    // locality keeps within its slack of automatic under the rule as well.
    const auto au = balance(layout, linear_cost{1}, policy);
    const auto lo = balance(layout, linear_cost{1}, policy, balancers::locality{});
    CHECK(static_cast<double>(lo.makespan) <= 1.001 * static_cast<double>(au.makespan) + 1e-9);
  }
  CHECK(infeasible < 15);

  // A rule that breaks the contract is named in a clear error, before any algorithm runs.
  struct shrinks {
    std::int64_t padded_length(std::int64_t l) const { return l - 1; }
    bool operator==(const shrinks&) const = default;
  };
  struct bumpy {
    std::int64_t padded_length(std::int64_t l) const { return l == 5 ? 50 : l; }
    bool operator==(const bumpy&) const = default;
    const char* name() const { return "bumpy"; }
  };
  const auto layout = batch_layout::from_ranks({{5, 7}, {2}});
  expect_invalid([&] { (void)balance(layout, linear_cost{1}, padding_policy(shrinks{})); },
                 {"padding rule 'custom' pads length 2 to 1"});
  expect_invalid(
      [&] { (void)balance(layout, linear_cost{1}, padding_policy(bumpy{})); },
      {"padding rule 'bumpy' is not non-decreasing", "length 5 to 50", "the longer 7 to 7"});
  expect_invalid(
      [&] { (void)makespan_lower_bound(layout, 2, linear_cost{1}, padding_policy(bumpy{})); },
      {"'bumpy' is not non-decreasing"});
}

TEST_CASE("balance: padded on a large batch meets its bound checks and beats lpt") {
  std::mt19937_64 rng(0x5eed0004);
  const batch_layout layout = skewed_layout(rng, 512, 16, false);
  const quadratic_cost q{0.0, 1.0, 1.0 / 512};
  for (const auto policy : {padded, padded_to_multiple(64), bucketed({64, 128, 256, 512})}) {
    const auto pd = balance(layout, q, policy, balancers::padded_exact{});
    const auto lp = balance(layout, q, policy, balancers::lpt{});
    CHECK(pd.proven_optimal);
    CHECK(pd.makespan <= lp.makespan);
    CHECK(pd.makespan >= pd.lower_bound);
    CHECK(balance(layout, q, policy).makespan == pd.makespan);  // auto = padded
  }
}
