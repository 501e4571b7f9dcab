// Tests of the built-in balancers as types and of `any_balancer` (balance/balancers.hpp): every
// built-in object plans exactly like an `any_balancer` holding it (the plan, the figures and the
// reported name), on random inputs with and without constraints, for integral and floating
// costs; a built-in called from the application's own balancer returns the plan `balance`
// keeps; `parse_balancer` gives back every name of `balancer_names()` and names the valid ones
// for any other; knobs are checked when the balancer runs.

#include "orchmllm/balance/balancers.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;

static_assert(balancer<balancers::lpt, linear_cost>);
static_assert(balancer<balancers::locality, quadratic_cost>);
static_assert(balancer<balancers::karmarkar_karp_equal, linear_cost>);
static_assert(balancer<any_balancer, quadratic_cost>);
static_assert(balancer_for<balancers::automatic, linear_cost>);
static_assert(balancer_for<any_balancer, linear_cost>);
static_assert(is_builtin_balancer_v<balancers::padded_exact>);
static_assert(is_builtin_balancer_v<balancers::karmarkar_karp_equal>);
static_assert(!is_builtin_balancer_v<any_balancer>);
static_assert(!is_builtin_balancer_v<int>);
static_assert(!balancer<int, linear_cost>);
static_assert(std::is_convertible_v<balancers::lpt, any_balancer>);
static_assert(!std::is_convertible_v<int, any_balancer>);
static_assert(balancer_names().size() == std::variant_size_v<any_balancer::variant>);

// n items on d ranks, lengths 1..2000, 1..3 bytes per token.
batch_layout random_byte_layout(std::mt19937_64& rng, rank_t d, std::int64_t n) {
  return orchmllm::test::random_uniform_layout(rng, d, n, 1, 2000, std::pair{1, 3});
}

// Random knobs for the automatic balancer (also locality's base).
void randomize(std::mt19937_64& rng, balancers::automatic& a) {
  a.refine_budget = uniform(rng, 0, 2) == 0 ? uniform(rng, 0, 20) : -1;
  a.exact_node_budget = uniform(rng, 1000, 20000);
  a.exact_max_items = uniform(rng, 0, 12);
  a.gap_tolerance = uniform(rng, 0, 2) == 0 ? uniform(rng, 1, 30) * 0.001 : 0.0;
}

// The balancer named `name` with random knobs that apply to d ranks.
any_balancer random_balancer(std::mt19937_64& rng, std::string_view name, rank_t d) {
  any_balancer b = parse_balancer(name);
  const bool refine = uniform(rng, 0, 1) == 1;
  const std::int64_t budget = uniform(rng, 0, 2) == 0 ? uniform(rng, 0, 20) : -1;
  if (auto* x = b.get_if<balancers::lpt>()) *x = {.refine = refine, .refine_budget = budget};
  if (auto* x = b.get_if<balancers::karmarkar_karp>())
    *x = {.refine = refine, .refine_budget = budget};
  if (auto* x = b.get_if<balancers::karmarkar_karp_equal>())
    *x = {.refine = refine, .refine_budget = budget};
  if (auto* x = b.get_if<balancers::exact>()) x->node_budget = uniform(rng, 1000, 20000);
  if (auto* x = b.get_if<balancers::padded_exact>()) x->refine_budget = budget;
  if (auto* x = b.get_if<balancers::automatic>()) randomize(rng, *x);
  if (auto* x = b.get_if<balancers::locality>()) {
    randomize(rng, x->base);
    x->tolerance = uniform(rng, 0, 3) * 0.01;
    if (uniform(rng, 0, 1) == 1)
      for (rank_t r = 0; r < d; ++r) x->node_of_rank.push_back(r / 2);
  }
  return b;
}

// Random constraints (often none) that leave room for a plan.
constraints random_room_limits(std::mt19937_64& rng, const batch_layout& layout,
                               padding_policy policy) {
  constraints limits;
  if (uniform(rng, 0, 2) != 0) return limits;
  const rank_t d = layout.num_ranks();
  const std::int64_t n = layout.num_items();
  std::int64_t total = 0, largest = 0;
  for (std::int64_t g = 0; g < n; ++g) {
    total += policy.padded_length(layout.length(g));
    largest = std::max(largest, policy.padded_length(layout.length(g)));
  }
  const std::int64_t per = d > 0 ? (n + d - 1) / d : 0;
  limits.cap = capacity{
      capacity::measure::tokens,
      policy.is_padded() ? largest * (per + 1) : std::max(largest, total / std::max(d, 1) * 6 / 5)};
  if (uniform(rng, 0, 1) == 1) limits.max_items = per + 1;
  return limits;
}

// The names `balance_result::used` may report for a plan of the balancer named `name`: its own,
// and for automatic and locality (whose base plan it keeps when it misses its target) the
// candidates of automatic's search.
bool reportable(std::string_view name, std::string_view used) {
  if (name != balancers::automatic::name && name != balancers::locality::name) return used == name;
  if (name == balancers::locality::name && used == name) return true;
  for (const std::string_view c :
       {balancers::lpt::name, balancers::karmarkar_karp_equal::name,
        balancers::karmarkar_karp::name, balancers::exact::name, balancers::padded_exact::name})
    if (used == c) return true;
  return false;
}

template <class C>
void check_same(const batch_layout& layout, const C& cost, padding_policy policy,
                const any_balancer& b, const constraints& limits) {
  std::optional<balance_result<cost_type_t<C>>> held;
  bool infeasible = false;
  try {
    held = balance(layout, cost, policy, b, limits);
  } catch (const infeasible_error&) {
    infeasible = true;
  }
  if (held) CHECK(reportable(b.name(), held->used));
  b.visit([&](const auto& typed_balancer) {
    CHECK(typed_balancer.name == b.name());
    if (infeasible) {
      CHECK_THROWS_AS((void)balance(layout, cost, policy, typed_balancer, limits),
                      infeasible_error);
      return;
    }
    const auto typed = balance(layout, cost, policy, typed_balancer, limits);
    CHECK(typed.plan == held->plan);
    CHECK(typed.used == held->used);
    CHECK(typed.makespan == held->makespan);
    CHECK(typed.lower_bound == held->lower_bound);
    CHECK(typed.proven_optimal == held->proven_optimal);
    CHECK(typed.fallback == held->fallback);
    // The same balancer called from the application's own: `balance` keeps its plan.
    const auto wrapped = balance(
        layout, cost, policy, [&typed_balancer](const auto& p) { return typed_balancer(p); },
        limits);
    CHECK(wrapped.plan == typed.plan);
    CHECK(wrapped.used == typed.used);
    CHECK(wrapped.makespan == typed.makespan);
  });
}

}  // namespace

TEST_CASE("balancers: every built-in type plans exactly like an any_balancer holding it") {
  std::mt19937_64 rng(0xba1a);
  const std::vector<std::string_view> packed_names = {
      balancers::identity::name,       balancers::lpt::name,
      balancers::karmarkar_karp::name, balancers::karmarkar_karp_equal::name,
      balancers::exact::name,          balancers::automatic::name,
      balancers::locality::name};
  const std::vector<std::string_view> padded_names = {
      balancers::identity::name,     balancers::lpt::name,       balancers::exact::name,
      balancers::padded_exact::name, balancers::automatic::name, balancers::locality::name};
  for (int trial = 0; trial < 120; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 9));
    const auto layout = random_byte_layout(rng, d, uniform(rng, 0, trial % 3 == 0 ? 11 : 120));
    for (const padding_policy policy : {packed, padded, padded_to_multiple(64)}) {
      for (const std::string_view name : policy.is_padded() ? padded_names : packed_names) {
        if (name == balancers::exact::name && layout.num_items() > 11) continue;
        const any_balancer b = random_balancer(rng, name, d);
        const constraints limits = random_room_limits(rng, layout, policy);
        CAPTURE(trial);
        CAPTURE(name);
        CAPTURE(policy.is_padded());
        check_same(layout, linear_cost{1}, policy, b, limits);
        check_same(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, policy, b, limits);
      }
    }
  }
}

TEST_CASE("balancers: the default balancer is automatic with its default knobs") {
  std::mt19937_64 rng(0xdefa);
  CHECK(any_balancer{}.name() == "automatic");
  REQUIRE(any_balancer{}.get_if<balancers::automatic>() != nullptr);
  CHECK(any_balancer{}.get_if<balancers::lpt>() == nullptr);
  for (int trial = 0; trial < 20; ++trial) {
    const auto layout =
        random_byte_layout(rng, static_cast<rank_t>(uniform(rng, 1, 8)), uniform(rng, 0, 60));
    const auto by_default = balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512});
    const auto automatic =
        balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed, balancers::automatic{});
    const auto held = balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed, any_balancer{});
    CHECK(by_default.plan == automatic.plan);
    CHECK(by_default.plan == held.plan);
    CHECK(by_default.used == automatic.used);
    CHECK(by_default.makespan == held.makespan);
  }
}

// gap_tolerance (automatic): the search stops once its plan is within lower bound · (1 + gap);
// so the result is either within that target or exactly the plan of gap 0 (a search that never
// reaches the target takes the same steps). locality runs its base with the knob.
template <class C>
void check_gap(const batch_layout& layout, const C& cost, padding_policy policy,
               const constraints& limits, double gap) {
  using Cost = cost_type_t<C>;
  const balancers::automatic relaxed_balancer{.gap_tolerance = gap};
  std::optional<balance_result<Cost>> exact_run;
  try {
    exact_run = balance(layout, cost, policy, balancers::automatic{}, limits);
  } catch (const infeasible_error&) {
    CHECK_THROWS_AS((void)balance(layout, cost, policy, relaxed_balancer, limits),
                    infeasible_error);
    return;
  }
  const auto relaxed = balance(layout, cost, policy, relaxed_balancer, limits);
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
  // An any_balancer holding the knob plans the same.
  const auto held = balance(layout, cost, policy, any_balancer(relaxed_balancer), limits);
  CHECK(held.plan == relaxed.plan);
  // locality's base run takes the knob: its target is that run's makespan · (1 + tolerance).
  const balancers::locality local_balancer{.base = relaxed_balancer};
  const auto local = balance(layout, cost, policy, local_balancer, limits);
  CHECK(static_cast<long double>(local.makespan) <=
        static_cast<long double>(relaxed.makespan) *
            (1.0L + static_cast<long double>(local_balancer.tolerance)) * (1 + 1e-12L));
}

TEST_CASE("balancers: gap_tolerance gives a plan within the gap or the plan of gap 0") {
  std::mt19937_64 rng(0x9a9);
  int differed = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 12));
    const auto layout = random_byte_layout(rng, d, uniform(rng, 0, trial % 4 == 0 ? 12 : 300));
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
    const auto a = balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed,
                           balancers::automatic{}, limits);
    const auto b = balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed,
                           balancers::automatic{.gap_tolerance = gap}, limits);
    differed += a.plan != b.plan ? 1 : 0;
  }
  CHECK(differed > 10);
  CHECK(differed < 150);
}

TEST_CASE("balancers: knobs are checked when the balancer runs") {
  const auto layout = batch_layout::from_ranks({{5, 4}, {3}});
  // Each check holds for the object and for an any_balancer holding it.
  const auto both = [&](const auto& b, padding_policy policy,
                        const std::vector<std::string>& needles) {
    expect_invalid([&] { (void)balance(layout, linear_cost{1}, policy, b); }, needles);
    expect_invalid([&] { (void)balance(layout, linear_cost{1}, policy, any_balancer(b)); },
                   needles);
  };
  both(balancers::karmarkar_karp{}, padded,
       {"karmarkar_karp balances the packed policy only; use padded_exact or automatic for "
        "padded batches"});
  both(balancers::karmarkar_karp_equal{}, padded_to_multiple(8),
       {"karmarkar_karp_equal balances the packed policy only"});
  both(balancers::padded_exact{}, packed,
       {"padded_exact needs a padded policy; use lpt, karmarkar_karp or automatic for packed "
        "batches"});
  both(balancers::lpt{.refine_budget = -2}, packed, {"lpt: refine_budget is -2, must be >= -1"});
  both(balancers::karmarkar_karp{.refine_budget = -3}, packed,
       {"karmarkar_karp: refine_budget is -3"});
  both(balancers::padded_exact{.refine_budget = -5}, padded, {"padded_exact: refine_budget is -5"});
  both(balancers::exact{-1}, packed, {"exact: node_budget is -1, must be >= 0"});
  both(balancers::automatic{.exact_node_budget = -1}, packed,
       {"automatic: exact_node_budget -1 and exact_max_items 14 must be >= 0"});
  both(balancers::locality{.tolerance = -1}, packed,
       {"locality: tolerance is -1, must be finite and >= 0"});
  both(balancers::locality{.base = {.refine_budget = -4}}, packed,
       {"locality: refine_budget is -4"});
  both(balancers::automatic{.gap_tolerance = -0.5}, packed,
       {"automatic: gap_tolerance is -0.5, must be finite and >= 0"});
  both(balancers::automatic{.gap_tolerance = std::numeric_limits<double>::infinity()}, packed,
       {"automatic: gap_tolerance is inf", "must be finite and >= 0"});
  both(balancers::automatic{.gap_tolerance = std::numeric_limits<double>::quiet_NaN()}, packed,
       {"automatic: gap_tolerance is nan"});
  both(balancers::locality{.node_of_rank = {0, 0, 0}}, packed,
       {"locality: node_of_rank has 3 entries, expected 2 (one per rank) or none"});
  both(balancers::locality{.node_of_rank = {0, 2}}, packed,
       {"locality: node_of_rank[1] is 2, must be a node id in [0, 2)"});
  // detail::check_balancer prefixes its caller's context.
  expect_invalid(
      [] { detail::check_balancer(balancers::lpt{.refine_budget = -7}, packed, 4, "stage 'x': "); },
      {"stage 'x': lpt: refine_budget is -7"});
  // The identity plan must already satisfy the constraints.
  CHECK_THROWS_AS((void)balance(layout, linear_cost{1}, packed, balancers::identity{},
                                constraints{.max_items = 1}),
                  infeasible_error);
  CHECK_THROWS_AS((void)balance(layout, linear_cost{1}, packed, any_balancer(balancers::identity{}),
                                constraints{.max_items = 1}),
                  infeasible_error);
}

TEST_CASE("balancers: parse_balancer gives back every name and rejects any other") {
  const std::vector<std::string_view> expected = {
      "identity", "lpt",          "karmarkar_karp", "karmarkar_karp_equal",
      "exact",    "padded_exact", "automatic",      "locality"};
  REQUIRE(balancer_names().size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const std::string_view n = balancer_names()[i];
    CHECK(n == expected[i]);
    const any_balancer b = parse_balancer(n);
    CHECK(b.name() == n);
    // The parsed balancer holds the type of that name with its default knobs.
    b.visit([&](const auto& x) { CHECK(x.name == n); });
  }
  CHECK(parse_balancer("identity").get_if<balancers::identity>() != nullptr);
  CHECK(parse_balancer("karmarkar_karp").get_if<balancers::karmarkar_karp>() != nullptr);
  CHECK(parse_balancer("karmarkar_karp_equal").get_if<balancers::karmarkar_karp_equal>() !=
        nullptr);
  CHECK(parse_balancer("karmarkar_karp").get_if<balancers::karmarkar_karp_equal>() == nullptr);
  const any_balancer parsed_lpt = parse_balancer("lpt");
  const auto* lpt = parsed_lpt.get_if<balancers::lpt>();
  REQUIRE(lpt != nullptr);
  CHECK_FALSE(lpt->refine);
  CHECK(lpt->refine_budget == -1);
  const any_balancer automatic = parse_balancer("automatic");
  REQUIRE(automatic.get_if<balancers::automatic>() != nullptr);
  CHECK(automatic.get_if<balancers::automatic>()->gap_tolerance == 0);
  CHECK(automatic.get_if<balancers::automatic>()->exact_max_items == 14);
  const any_balancer locality = parse_balancer("locality");
  REQUIRE(locality.get_if<balancers::locality>() != nullptr);
  CHECK(locality.get_if<balancers::locality>()->tolerance == 0.001);
  CHECK(locality.get_if<balancers::locality>()->node_of_rank.empty());

  const std::string list =
      "; expected one of: identity, lpt, karmarkar_karp, karmarkar_karp_equal, exact, "
      "padded_exact, automatic, locality";
  expect_invalid([] { (void)parse_balancer("auto"); },
                 {"unknown balancer 'auto' (did you mean 'automatic'?)" + list});
  expect_invalid([] { (void)parse_balancer("kk"); },
                 {"unknown balancer 'kk' (did you mean 'karmarkar_karp'?)"});
  expect_invalid([] { (void)parse_balancer("kk-equal"); },
                 {"unknown balancer 'kk-equal' (did you mean 'karmarkar_karp_equal'?)"});
  expect_invalid([] { (void)parse_balancer("none"); },
                 {"unknown balancer 'none' (did you mean 'identity'?)"});
  expect_invalid([] { (void)parse_balancer("padded"); },
                 {"unknown balancer 'padded' (did you mean 'padded_exact'?)"});
  // "custom" is what a plan of the application's balancer reports; it names no built-in.
  expect_invalid([] { (void)parse_balancer("custom"); }, {"unknown balancer 'custom'" + list});
  expect_invalid([] { (void)parse_balancer(""); }, {"unknown balancer ''" + list});
  expect_invalid([] { (void)parse_balancer("LPT"); }, {"unknown balancer 'LPT'" + list});
}

TEST_CASE("balancers: an any_balancer's knobs can be set through get_if") {
  std::mt19937_64 rng(0x6e7);
  const auto layout = random_byte_layout(rng, 6, 200);
  any_balancer b = parse_balancer("lpt");
  REQUIRE(b.get_if<balancers::lpt>() != nullptr);
  b.get_if<balancers::lpt>()->refine = true;
  const auto held = balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed, b);
  const auto typed =
      balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed, balancers::lpt{.refine = true});
  CHECK(held.plan == typed.plan);
  CHECK(held.used == "lpt");
  // The knob matters on this input: the unrefined plan differs.
  const auto plain = balance(layout, quadratic_cost{1.0, 0.5, 1.0 / 512}, packed, balancers::lpt{});
  CHECK(plain.makespan > held.makespan);
  // A balancer fills in locality's node map of a parsed balancer.
  any_balancer local = parse_balancer("locality");
  local.get_if<balancers::locality>()->node_of_rank = {0, 0, 0, 1, 1, 1};
  const auto by_node = balance(layout, linear_cost{1}, packed, local);
  const auto typed_local = balance(layout, linear_cost{1}, packed,
                                   balancers::locality{.node_of_rank = {0, 0, 0, 1, 1, 1}});
  CHECK(by_node.plan == typed_local.plan);
}
