// Tests of the built-in balancers as types (balance/balancers.hpp): each gives the plan, the
// figures and the name that the runtime selector (`balance_options`) gives, on random inputs
// with and without constraints, for integral and floating costs; `options()` and
// `visit_balancer` are inverse; a built-in called on a problem returns the plan `balance` keeps.

#include "orchmllm/balance/balancers.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using orchmllm::test::expect_invalid;
using orchmllm::test::random_offsets;
using orchmllm::test::uniform;

static_assert(balancer<balancers::lpt, linear_cost>);
static_assert(balancer<balancers::locality, quadratic_cost>);
static_assert(balancer_for<balancers::automatic, linear_cost>);
static_assert(is_builtin_balancer_v<balancers::padded_exact>);
static_assert(!is_builtin_balancer_v<balance_options>);
static_assert(!balancer<balance_options, linear_cost>);
static_assert(!balancer<int, linear_cost>);

batch_layout random_layout(std::mt19937_64& rng, rank_t d, std::int64_t n) {
  const auto offsets = random_offsets(rng, d, n);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(n)), bytes(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    lengths[i] = uniform(rng, 1, 2000);
    bytes[i] = lengths[i] * uniform(rng, 1, 3);
  }
  return batch_layout(offsets, lengths, bytes);
}

// A random configuration of one algorithm that applies to `policy`.
balance_options random_options(std::mt19937_64& rng, balance_method m, const batch_layout& layout,
                               padding_policy policy) {
  balance_options o;
  o.method = m;
  o.refine = uniform(rng, 0, 1) == 1;
  o.refine_budget = uniform(rng, 0, 2) == 0 ? uniform(rng, 0, 20) : -1;
  o.exact_node_budget = uniform(rng, 1000, 20000);
  o.exact_max_items = uniform(rng, 0, 12);
  o.locality_tolerance = uniform(rng, 0, 3) * 0.01;
  o.gap_tolerance = uniform(rng, 0, 2) == 0 ? uniform(rng, 1, 30) * 0.001 : 0.0;
  const rank_t d = layout.num_ranks();
  if (m == balance_method::locality && uniform(rng, 0, 1) == 1)
    for (rank_t r = 0; r < d; ++r) o.node_of_rank.push_back(r / 2);
  if (uniform(rng, 0, 2) == 0) {
    const std::int64_t n = layout.num_items();
    std::int64_t total = 0, largest = 0;
    for (std::int64_t g = 0; g < n; ++g) {
      total += policy.padded_length(layout.length(g));
      largest = std::max(largest, policy.padded_length(layout.length(g)));
    }
    const std::int64_t per = d > 0 ? (n + d - 1) / d : 0;
    o.limits.cap = capacity{capacity::measure::tokens,
                            policy.is_padded() ? largest * (per + 1)
                                               : std::max(largest, total / std::max(d, 1) * 6 / 5)};
    if (uniform(rng, 0, 1) == 1) o.limits.max_items = per + 1;
  }
  return o;
}

template <class C>
void check_same(const batch_layout& layout, const C& cost, padding_policy policy,
                const balance_options& o) {
  std::optional<balance_result<cost_type_t<C>>> by_enum;
  bool enum_infeasible = false;
  try {
    by_enum = balance(layout, cost, policy, o);
  } catch (const infeasible_error&) {
    enum_infeasible = true;
  }
  visit_balancer(o, [&](const auto& b) {
    // options() gives back the selector.
    const balance_options back = b.options(o.limits);
    CHECK(back.method == o.method);
    CHECK(back.limits == o.limits);
    if (enum_infeasible) {
      CHECK_THROWS_AS((void)balance(layout, cost, policy, b, o.limits), infeasible_error);
      return;
    }
    const auto typed = balance(layout, cost, policy, b, o.limits);
    CHECK(typed.plan == by_enum->plan);
    CHECK(typed.used == by_enum->used);
    CHECK(typed.makespan == by_enum->makespan);
    CHECK(typed.lower_bound == by_enum->lower_bound);
    CHECK(typed.proven_optimal == by_enum->proven_optimal);
    CHECK(typed.fallback == by_enum->fallback);
    // The same balancer called from the application's own: `balance` keeps its plan.
    const auto wrapped = balance(layout, cost, policy,
                                 [&b](const auto& p) { return b(p); }, o.limits);
    CHECK(wrapped.plan == typed.plan);
    CHECK(wrapped.used == typed.used);
    CHECK(wrapped.makespan == typed.makespan);
  });
}

}  // namespace

TEST_CASE("balancers: every built-in type plans exactly like its balance_options selector") {
  std::mt19937_64 rng(0xba1a);
  const balance_method packed_methods[] = {balance_method::none,    balance_method::lpt,
                                           balance_method::kk,      balance_method::kk_equal,
                                           balance_method::exact,   balance_method::automatic,
                                           balance_method::locality};
  const balance_method padded_methods[] = {balance_method::none,      balance_method::lpt,
                                           balance_method::exact,     balance_method::padded_exact,
                                           balance_method::automatic, balance_method::locality};
  for (int trial = 0; trial < 120; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 9));
    const auto layout = random_layout(rng, d, uniform(rng, 0, trial % 3 == 0 ? 11 : 120));
    for (const padding_policy policy : {packed, padded, padded_to_multiple(64)}) {
      const auto& methods =
          policy.is_padded()
              ? std::vector<balance_method>(std::begin(padded_methods), std::end(padded_methods))
              : std::vector<balance_method>(std::begin(packed_methods), std::end(packed_methods));
      for (const balance_method m : methods) {
        if (m == balance_method::exact && layout.num_items() > 11) continue;
        const auto o = random_options(rng, m, layout, policy);
        CAPTURE(trial);
        CAPTURE(to_string(m));
        CAPTURE(policy.is_padded());
        check_same(layout, linear_cost{1}, policy, o);
        check_same(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, policy, o);
      }
    }
  }
}

// gap_tolerance (automatic): the search stops once its plan is within lower bound · (1 + gap);
// so the result is either within that target or exactly the plan of gap 0 (a search that never
// reaches the target takes the same steps). locality runs its base with the knob.
template <class C>
void check_gap(const batch_layout& layout, const C& cost, padding_policy policy,
               const constraints& limits, double gap) {
  using Cost = cost_type_t<C>;
  balance_options o;
  o.limits = limits;
  std::optional<balance_result<Cost>> exact_run;
  try {
    exact_run = balance(layout, cost, policy, o);
  } catch (const infeasible_error&) {
    o.gap_tolerance = gap;
    CHECK_THROWS_AS((void)balance(layout, cost, policy, o), infeasible_error);
    return;
  }
  o.gap_tolerance = gap;
  const auto relaxed = balance(layout, cost, policy, o);
  CHECK(relaxed.lower_bound == exact_run->lower_bound);
  CHECK(relaxed.makespan >= exact_run->lower_bound);
  const long double target =
      static_cast<long double>(exact_run->lower_bound) * (1.0L + static_cast<long double>(gap));
  if (relaxed.plan != exact_run->plan) {
    CHECK(static_cast<long double>(relaxed.makespan) <= target * (1 + 1e-12L));
  } else {
    CHECK(relaxed.makespan == exact_run->makespan);
  }
  // Never more than the gap above gap 0's makespan (which is >= the bound).
  CHECK(static_cast<long double>(relaxed.makespan) <=
        std::max(static_cast<long double>(exact_run->makespan), target * (1 + 1e-12L)));
  // The typed balancer carries the knob too.
  const auto typed = balance(layout, cost, policy, balancers::automatic{.gap_tolerance = gap},
                             limits);
  CHECK(typed.plan == relaxed.plan);
  CHECK(balancers::automatic{.gap_tolerance = gap}.options().gap_tolerance == gap);
  // locality's base run takes the knob: its target is that run's makespan · (1 + tolerance).
  o.method = balance_method::locality;
  const auto local = balance(layout, cost, policy, o);
  CHECK(static_cast<long double>(local.makespan) <=
        static_cast<long double>(relaxed.makespan) *
            (1.0L + static_cast<long double>(o.locality_tolerance)) * (1 + 1e-12L));
  CHECK(balancers::locality{.base = {.gap_tolerance = gap}}.options().gap_tolerance == gap);
}

TEST_CASE("balancers: gap_tolerance gives a plan within the gap or the plan of gap 0") {
  std::mt19937_64 rng(0x9a9);
  int differed = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 12));
    const auto layout = random_layout(rng, d, uniform(rng, 0, trial % 4 == 0 ? 12 : 300));
    const double gap = uniform(rng, 1, 40) * 0.001;
    constraints limits;
    if (uniform(rng, 0, 3) == 0) limits.max_items = (layout.num_items() + d - 1) / d + 1;
    CAPTURE(trial);
    CAPTURE(gap);
    for (const padding_policy policy : {packed, padded}) {
      check_gap(layout, linear_cost{1}, policy, limits, gap);
      check_gap(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, policy, limits, gap);
    }
    // Count the inputs where the knob changed the packed plan (the test must exercise both
    // branches of check_gap).
    balance_options o;
    o.limits = limits;
    const auto a = balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed, o);
    o.gap_tolerance = gap;
    const auto b = balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed, o);
    differed += a.plan != b.plan ? 1 : 0;
  }
  CHECK(differed > 10);
  CHECK(differed < 150);
}

TEST_CASE("balancers: knobs are checked when the balancer runs") {
  const auto layout = batch_layout::from_ranks({{5, 4}, {3}});
  expect_invalid([&] { (void)balance(layout, linear_cost{1}, padded, balancers::karmarkar_karp{}); },
                 {"kk balances the packed policy only"});
  expect_invalid([&] { (void)balance(layout, linear_cost{1}, packed, balancers::padded_exact{}); },
                 {"needs a padded policy"});
  expect_invalid([&] { (void)balance(layout, linear_cost{1}, packed, balancers::lpt{.refine_budget = -2}); },
                 {"refine_budget is -2"});
  expect_invalid([&] { (void)balance(layout, linear_cost{1}, packed, balancers::exact{-1}); },
                 {"exact budgets"});
  expect_invalid(
      [&] {
        (void)balance(layout, linear_cost{1}, packed,
                      balancers::locality{.tolerance = -1});
      },
      {"locality_tolerance is -1"});
  expect_invalid(
      [&] {
        (void)balance(layout, linear_cost{1}, packed, balancers::automatic{.gap_tolerance = -0.5});
      },
      {"gap_tolerance is -0.5"});
  balance_options bad_gap;
  bad_gap.gap_tolerance = std::numeric_limits<double>::infinity();
  expect_invalid([&] { (void)balance(layout, linear_cost{1}, packed, bad_gap); },
                 {"gap_tolerance is inf", "must be finite and >= 0"});
  expect_invalid(
      [&] {
        (void)balance(layout, linear_cost{1}, packed,
                      balancers::locality{.node_of_rank = {0, 0, 0}});
      },
      {"node_of_rank has 3 entries, expected 2"});
  // The identity plan must already satisfy the constraints.
  CHECK_THROWS_AS((void)balance(layout, linear_cost{1}, packed, balancers::identity{},
                                constraints{.max_items = 1}),
                  infeasible_error);
  // `custom` selects nothing.
  balance_options o;
  o.method = balance_method::custom;
  expect_invalid([&] { (void)balance(layout, linear_cost{1}, packed, o); },
                 {"balance_method::custom selects no balancer"});
  CHECK(to_string(balance_method::custom) == "custom");
  expect_invalid([] { (void)parse_algorithm("custom"); }, {"unknown algorithm 'custom'"});
}

TEST_CASE("balancers: to_string and parse round-trip for every method enum") {
  for (const mapping_method m :
       {mapping_method::identity, mapping_method::transport, mapping_method::bottleneck}) {
    CHECK(parse_mapping_method(to_string(m)) == m);
    CHECK(parse_mapping(to_string(m)) == m);  // the former name
  }
  static_assert(std::is_same_v<algorithm, balance_method>);  // the former name
  for (const balance_method a :
       {balance_method::none, balance_method::lpt, balance_method::kk, balance_method::kk_equal,
        balance_method::exact, balance_method::padded_exact, balance_method::automatic,
        balance_method::locality}) {
    CHECK(parse_balance_method(to_string(a)) == a);
    CHECK(parse_algorithm(to_string(a)) == a);  // the former name
    balance_options o;
    o.method = a;
    visit_balancer(o, [&](const auto& b) { CHECK(b.options().method == a); });
  }
}
