// Tests for include/orchmllm/config.hpp's compiled mode: this unit is built with
// ORCHMLLM_COMPILED (it links orchmllm::compiled), so `balance`, the statistics, `map_bins` and
// `plan_step` run in the library. Every result must equal the header-only algorithm on the same
// input, which this unit instantiates itself from the detail headers (the same templates the
// library instantiates, on the model directly instead of type-erased): the shipped models, a
// trainer's own unsigned, float and long double models, every algorithm and policy; and the
// mappers: built-in types equal to an any_mapper holding them, the trainer's own mapper called
// from the library (map_bins and a stage declaration in plan_step).

#include <orchmllm/balance/balancer.hpp>
#include <orchmllm/balance/split.hpp>
#include <orchmllm/orchestrator/orchestrator.hpp>
#include <orchmllm/topology/mapper.hpp>
#include <orchmllm/topology/mapping.hpp>

// The header-only bodies, for the reference results.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <orchmllm/detail/balance/balance_impl.hpp>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "support/test_support.hpp"

#if !defined(ORCHMLLM_COMPILED) || ORCHMLLM_USE_COMPILED != 1
#error "this test must be built with ORCHMLLM_COMPILED (linked to orchmllm::compiled)"
#endif

namespace {

using namespace orchmllm;
using orchmllm::test::uniform;

// The unit's entry templates are the compiled-mode ones.
static_assert(std::is_same_v<decltype(&orchmllm::compiled_mode::balance<linear_cost>),
                             decltype(&orchmllm::balance<linear_cost>)>);

struct unsigned_cost {
  unsigned operator()(std::int64_t l) const { return static_cast<unsigned>(2 + l + l * l / 32); }
};
struct float_cost {
  float operator()(std::int64_t l) const { return 0.5f + static_cast<float>(l) * 1.25f; }
};
struct long_double_cost {
  long double operator()(std::int64_t l) const { return 1.0L + static_cast<long double>(l) / 3; }
};

// n items on d ranks, lengths 0..3000, 1..4 bytes per token.
batch_layout random_layout(std::mt19937_64& rng, rank_t d, std::int64_t n) {
  return orchmllm::test::random_uniform_layout(rng, d, n, 0, 3000, std::pair{1, 4});
}

template <class C>
void check_model(const C& cost, const char* name) {
  std::mt19937_64 rng(1234);
  const std::vector<any_balancer> packed_balancers = {
      balancers::identity{}, balancers::lpt{},       balancers::karmarkar_karp{},
      balancers::exact{},    balancers::automatic{}, balancers::locality{}};
  const std::vector<any_balancer> padded_balancers = {
      balancers::lpt{}, balancers::padded_exact{}, balancers::automatic{}, balancers::locality{}};
  for (int trial = 0; trial < 12; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 12));
    const auto layout = random_layout(rng, d, uniform(rng, 0, trial < 6 ? 12 : 300));
    for (const padding_policy policy : {packed, padded, padded_to_multiple(64)}) {
      for (any_balancer b : policy.is_padded() ? padded_balancers : packed_balancers) {
        if (b.name() == balancers::exact::name && layout.num_items() > 12) continue;
        CAPTURE(name);
        CAPTURE(trial);
        CAPTURE(b.name());
        if (auto* l = b.get_if<balancers::locality>()) {
          l->node_of_rank.resize(static_cast<std::size_t>(d));
          for (rank_t r = 0; r < d; ++r) l->node_of_rank[static_cast<std::size_t>(r)] = r / 4;
        }
        const auto got = balance(layout, cost, policy, b);
        const auto want = detail::with_normal_cost(cost, [&](const auto& c) {
          return detail::balance_with(layout, c, policy, b, constraints{});
        });
        static_assert(std::is_same_v<decltype(got), decltype(want)>);
        CHECK(got.plan == want.plan);
        CHECK(got.makespan == want.makespan);
        CHECK(got.lower_bound == want.lower_bound);
        CHECK(got.used == want.used);
        CHECK(got.proven_optimal == want.proven_optimal);
        const auto s = compute_statistics(layout, got.plan, cost, policy);
        const auto r = detail::with_normal_cost(cost, [&](const auto& c) {
          return detail::compute_statistics_impl(layout, want.plan, c, policy, constraints{});
        });
        CHECK(s.load_after == r.load_after);
        CHECK(s.load_before == r.load_before);
        CHECK(s.lower_bound == r.lower_bound);
        CHECK(s.bytes_moved == r.bytes_moved);
        CHECK(rank_loads(layout, cost, policy) == s.load_before);
        CHECK(rank_loads(layout, got.plan, cost, policy) == s.load_after);
        CHECK(makespan_lower_bound(layout, d, cost, policy) == r.lower_bound);
      }
    }
  }
}

}  // namespace

TEST_CASE("compiled mode: balance and statistics equal the header-only algorithms") {
  check_model(linear_cost{3}, "linear_cost");
  check_model(quadratic_cost{1.0, 1.0, 1.0 / 1024}, "quadratic_cost");
  check_model(transformer_flops_cost(
                  transformer_config{.hidden = 256, .layers = 2, .heads = 4, .ffn_hidden = 512}),
              "transformer_flops_cost");
  check_model(unsigned_cost{}, "a trainer's unsigned model");
  check_model(float_cost{}, "a trainer's float model");
  check_model(long_double_cost{}, "a trainer's long double model");
}

TEST_CASE("compiled mode: segmented items balance and split through the library") {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 20; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 12));
    const auto n = uniform(rng, 0, 80);
    const auto layout = orchmllm::test::random_segmented_layout(rng, d, n, 8, 200);
    // with_equal_segments is defined in the library.
    const std::vector<std::int64_t> ones(static_cast<std::size_t>(n), 1);
    CHECK(layout.with_equal_segments(ones).has_segments() == false);
    const quadratic_cost cost{1.0, 1.0, 0.01};
    const auto got = balance(layout, cost);
    const auto want = detail::balance_with(layout, cost, packed, any_balancer{}, constraints{});
    CHECK(got.plan == want.plan);
    CHECK(got.makespan == want.makespan);
    const auto s = balance_split(layout, cost);
    CHECK(s.balance.makespan <= s.guarantee * (1 + 1e-9));
    CHECK(s.balance.makespan >= s.lower_bound * (1 - 1e-9));
    for (std::int64_t g = 0; g < n; ++g)
      CHECK(s.pieces.last_segment(s.pieces.first_piece(g + 1) - 1) == layout.num_segments(g));
  }
}

TEST_CASE("compiled mode: typed and user balancers run in the library with the same plans") {
  // A trainer's balancer: lpt's plan (called from inside it) with one item moved to the last
  // rank; written once as a template, it runs on the library's type-erased problem here and on
  // the model itself in the header-only reference.
  const auto tweak_lpt = [](const auto& p) {
    balancer_plan plan = balancers::lpt{}(p);
    if (plan.destination && !plan.destination->empty())
      plan.destination->front() = p.num_ranks() - 1;
    plan.used = "custom";
    return plan;
  };
  std::mt19937_64 rng(4321);
  for (int trial = 0; trial < 20; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 10));
    const auto layout = random_layout(rng, d, uniform(rng, 0, 200));
    for (const padding_policy policy : {packed, padded}) {
      CAPTURE(trial);
      const quadratic_cost cost{1.0, 1.0, 1.0 / 1024};
      constraints limits;
      limits.max_items = layout.num_items() / d + 2;
      const auto got = balance(layout, cost, policy, tweak_lpt, limits);
      // The reference runs the driver in this unit on the same erased model (built-ins called
      // on a problem reach the library in compiled mode, whatever the caller).
      const auto want =
          detail::balance_with(layout, detail::cost_ref<double>(cost), policy, tweak_lpt, limits);
      // And the tweak by hand on lpt's plan.
      const auto lpt_plan = balance(layout, cost, policy, balancers::lpt{}, limits).plan;
      if (layout.num_items() > 0 && !got.fallback) CHECK(got.plan.destination_of(0).rank == d - 1);
      CHECK(lpt_plan.num_items() == got.plan.num_items());
      CHECK(got.plan == want.plan);
      CHECK(got.makespan == want.makespan);
      CHECK(got.used == want.used);
      CHECK(got.fallback == want.fallback);
      const auto typed = balance(layout, cost, policy, balancers::automatic{}, limits);
      const auto typed_want =
          detail::balance_with(layout, cost, policy, balancers::automatic{}, limits);
      CHECK(typed.plan == typed_want.plan);
      CHECK(typed.used == typed_want.used);
    }
  }
}

TEST_CASE("compiled mode: the trainer's items balance through a projection") {
  struct clip {
    std::int64_t frames;
  };
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 10; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 8));
    std::vector<std::vector<clip>> ranks(static_cast<std::size_t>(d));
    for (auto& r : ranks)
      for (auto n = uniform(rng, 0, 9); n > 0; --n) r.push_back({uniform(rng, 0, 900)});
    const auto cost = [](std::int64_t l) { return l * l / 32 + 1; };
    const auto got = balance(ranks, cost, &clip::frames, padded, balancers::lpt{});
    const auto want = detail::balance_with(make_layout(ranks, &clip::frames), cost, padded,
                                           balancers::lpt{}, constraints{});
    CHECK(got.plan == want.plan);
    const auto moved = apply_by_rank(got.plan, ranks);
    CHECK(moved.size() == ranks.size());
  }
}

TEST_CASE("compiled mode: errors cross the library boundary unchanged") {
  const auto layout = batch_layout::from_ranks({{1, 2}, {3}});
  orchmllm::test::expect_invalid(
      [&] { (void)balance(layout, linear_cost{}, packed, balancers::lpt{.refine_budget = -2}); },
      {"lpt: refine_budget is -2, must be >= -1"});
  orchmllm::test::expect_invalid(
      [&] {
        (void)balance(layout, linear_cost{}, packed,
                      any_balancer(balancers::automatic{.refine_budget = -2}));
      },
      {"automatic: refine_budget is -2, must be >= -1"});
  orchmllm::test::expect_invalid(
      [&] { (void)balance(layout, linear_cost{}, padded, balancers::karmarkar_karp{}); },
      {"karmarkar_karp balances the packed policy only"});
  const auto huge = [](std::int64_t l) {
    return l == 3 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(l);
  };
  CHECK_THROWS_AS((void)balance(layout, huge), invalid_argument_error);
  CHECK_THROWS_AS((void)batch_layout::from_ranks({{1}}, {{1, 2}}), invalid_argument_error);
}

TEST_CASE("compiled mode: map_bins and plan_step run in the library") {
  std::mt19937_64 rng(99);
  const auto layout = random_layout(rng, 8, 200);
  const auto balanced = balance(layout, linear_cost{});
  const auto bytes = layout.item_bytes();
  const auto topo = topology::uniform(8, 4);
  const auto mapped = map_bins(balanced.plan, bytes, topo);
  CHECK(mapped.inter_node_bytes >= mapped.inter_node_bytes_lower_bound);
  CHECK(compute_statistics(layout, mapped.plan, linear_cost{}, packed).makespan ==
        balanced.makespan);

  stage_declarations decl;
  decl.encoders.push_back({.name = "vision", .cost = quadratic_cost{0.0, 1.0, 1e-3}});
  decl.llm.cost = linear_cost{};
  std::vector<local_batch> batches(8);
  for (auto& b : batches) {
    const auto k = uniform(rng, 1, 4);
    for (std::int64_t s = 0; s < k; ++s) {
      b.text_tokens.push_back(uniform(rng, 10, 900));
      b.sub_items.push_back({.modality = 0,
                             .parent = s,
                             .encoder_length = uniform(rng, 16, 1024),
                             .input_rows = 4,
                             .llm_tokens = uniform(rng, 1, 64)});
    }
  }
  const auto meta = make_step_metadata(batches, 1);
  const auto plan = plan_step(decl, meta, topo);
  REQUIRE(plan.stages.size() == 2);
  // The LLM stage is integral (linear_cost): its report equals balance in std::int64_t.
  const auto llm = balance(plan.llm_layout, linear_cost{});
  CHECK(plan.stages[1].makespan_after == static_cast<double>(llm.makespan));
  CHECK(plan.stages[1].lower_bound == static_cast<double>(llm.lower_bound));
  CHECK(plan.alltoalls_per_step() == 4);
}

TEST_CASE("compiled mode: mappers, built-in and the application's, run through the library") {
  std::mt19937_64 rng(2027);
  for (int trial = 0; trial < 10; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 24));
    const auto layout = random_layout(rng, d, uniform(rng, 0, 200));
    const auto balanced = balance(layout, linear_cost{});
    const auto bytes = layout.item_bytes();
    const auto topo = topology::uniform(d, static_cast<rank_t>(uniform(rng, 1, d)));
    CAPTURE(trial);
    for (const std::string_view name : mapper_names()) {
      const any_mapper held = parse_mapper(name);
      const auto by_any = map_bins(balanced.plan, bytes, topo, held);
      held.visit([&](const auto& m) {
        const auto by_type = map_bins(balanced.plan, bytes, topo, m);
        CHECK(by_type.rank_of_bin == by_any.rank_of_bin);
        CHECK(by_type.plan == by_any.plan);
      });
    }
    // The application's mapper, compiled in this unit, called from the library: it reads the
    // view, calls a built-in and evaluate (both in the library), and reverses the answer.
    mapping_result evaluated;
    const auto mine = [&](const bin_mapping_problem& p) {
      auto ranks = mappers::transport{}(p);
      std::reverse(ranks.begin(), ranks.end());
      evaluated = p.evaluate(ranks);
      CHECK(p.num_bins() == d);
      return ranks;
    };
    const auto got = map_bins(balanced.plan, bytes, topo, mine);
    CHECK(got.rank_of_bin == evaluated.rank_of_bin);
    CHECK(got.plan == evaluated.plan);
    CHECK(got.moved_bytes == evaluated.moved_bytes);
    CHECK_THROWS_AS(
        (void)map_bins(balanced.plan, bytes, topo,
                       [](const bin_mapping_problem&) { return std::vector<rank_t>{}; }),
        invalid_argument_error);
  }

  // In a stage declaration: plan_step (in the library) calls the trainer's mapper.
  std::atomic<int> calls{0};
  stage_declarations decl;
  decl.llm.cost = linear_cost{};
  decl.llm.text_row_bytes = 8;
  decl.llm.mapper = stage_mapper(
      [&calls](const bin_mapping_problem& p) {
        ++calls;
        return mappers::bottleneck{}(p);
      },
      "counting bottleneck");
  auto builtin = decl;
  builtin.llm.mapper = mappers::bottleneck{};
  CHECK(fingerprint(decl) != fingerprint(builtin));
  std::vector<local_batch> batches(8);
  for (auto& b : batches)
    for (std::int64_t s = 0, k = uniform(rng, 1, 5); s < k; ++s)
      b.text_tokens.push_back(uniform(rng, 10, 900));
  const auto meta = make_step_metadata(batches, 0);
  const auto topo = topology::uniform(8, 2);
  const auto a = plan_step(decl, meta, topo);
  const auto b = plan_step(builtin, meta, topo);
  CHECK(calls == 1);
  CHECK(a.llm == b.llm);
}
