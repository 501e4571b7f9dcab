// Tests for include/orchmllm/orchestrator/orchestrator.hpp: planning a step (pure, no
// communicator).
//
// Random multimodal steps (support/orchestrator_fixtures.hpp): valid plans over the right
// layouts; compose(output, input) == lifted, compose(lifted, input⁻¹) == output, gradient ==
// output⁻¹; a sub-item's lifted rank is its parent's LLM rank, in (parent's LLM slot, original
// order); every report figure recomputed independently (balancer rerun, loads/tokens/bytes by
// brute force, moved and inter-node bytes from the plan); llm_view against a reference built
// from the raw batches. Also: stages declared with balancer objects and a trainer's balancer, a
// hand-checked step, a step of 10^5 sub-items per modality and stages and routes planned in
// parallel against the serial ones.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/orchestrator_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

namespace balancers = orchmllm::balancers;
namespace mappers = orchmllm::mappers;
using orchmllm::batch_layout;
using orchmllm::encoder_stage;
using orchmllm::invalid_argument_error;
using orchmllm::local_batch;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::stage_declarations;
using orchmllm::sub_item;
using orchmllm::topology;
using orchmllm::test::uniform;
using namespace orchmllm::test::orchestrator_fixtures;  // support/orchestrator_fixtures.hpp

// ---------------------------------------------------------------------------------------------
// Invariant checks of one plan (main thread).

// A trainer's balancer for stage declarations: lpt's plan, then the heaviest item of the
// fullest rank moved to rank 0 when that keeps the makespan (a toy "prefer rank 0" tweak).
struct prefer_rank_zero {
  template <class C>
  orchmllm::balancer_plan operator()(const orchmllm::balance_problem<C>& p) const {
    auto plan = orchmllm::balancers::lpt{}(p);
    plan.used = "custom";
    if (!plan.destination || p.num_items() == 0) return plan;
    auto moved = *plan.destination;
    moved[static_cast<std::size_t>(p.order().front())] = 0;
    if (p.satisfies(moved) && p.makespan(moved) <= p.makespan(*plan.destination))
      plan.destination = std::move(moved);
    return plan;
  }
};

template <class Stage>
void check_report(const Stage& st, const batch_layout& layout, const rearrangement& planned,
                  const orchmllm::stage_report& rep, const topology& topo) {
  const rank_t d = topo.num_ranks();
  CHECK(rep.name == st.name);
  // Rerun the balancer and the mapping: same choice, same plan (determinism). A locality
  // balancer without a node map gets the topology's.
  orchmllm::any_balancer builtin;
  if (st.balancer.builtin()) builtin = *st.balancer.builtin();
  if (auto* loc = builtin.get_if<balancers::locality>(); loc && loc->node_of_rank.empty())
    loc->node_of_rank.assign(topo.node_map().begin(), topo.node_map().end());
  REQUIRE(st.mapper.builtin() != nullptr);
  // The stage is balanced in its model's own value type: exact std::int64_t for integral
  // models, double otherwise.
  const auto bytes = layout.item_bytes();
  st.cost.visit([&](const auto& cost) {
    using value = decltype(cost(0));
    CHECK(std::is_integral_v<value> == st.cost.integral());
    // A stage with the application's balancer: the same balancer, directly (it must not see
    // a difference between the stage's erased model and the model itself).
    const auto balanced =
        st.balancer.custom()
            ? orchmllm::balance(layout, cost, st.policy, prefer_rank_zero{}, st.limits)
            : orchmllm::balance(layout, cost, st.policy, builtin, st.limits);
    CHECK(rep.used == balanced.used);
    const auto mapped = orchmllm::map_bins(balanced.plan, bytes, topo, *st.mapper.builtin());
    CHECK(mapped.plan == planned);
    CHECK(rep.makespan_after == static_cast<double>(balanced.makespan));
    CHECK(rep.lower_bound == static_cast<double>(balanced.lower_bound));
  });

  // Loads, tokens and bytes by brute force.
  std::vector<rank_t> origin(static_cast<std::size_t>(layout.num_items()));
  for (rank_t r = 0; r < d; ++r)
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g)
      origin[static_cast<std::size_t>(g)] = r;
  const auto before = orchmllm::test::figures(layout, origin, d, st.cost, st.policy);
  const auto after = orchmllm::test::figures(layout, planned.dst_ranks(), d, st.cost, st.policy);
  auto max_of = [](const auto& v) { return *std::max_element(v.begin(), v.end()); };
  auto imbalance = [](const std::vector<double>& v) {
    double t = 0;
    for (auto x : v) t += x;
    const double mean = t / static_cast<double>(v.size());
    return mean > 0 ? *std::max_element(v.begin(), v.end()) / mean : 1.0;
  };
  CHECK(rep.makespan_before == max_of(before.load));
  CHECK(rep.makespan_after == max_of(after.load));
  CHECK(rep.imbalance_before == doctest::Approx(imbalance(before.load)).epsilon(1e-12));
  CHECK(rep.imbalance_after == doctest::Approx(imbalance(after.load)).epsilon(1e-12));
  CHECK(rep.max_tokens_before == max_of(before.tokens));
  CHECK(rep.max_tokens_after == max_of(after.tokens));
  CHECK(rep.max_bytes_before == max_of(before.bytes));
  CHECK(rep.max_bytes_after == max_of(after.bytes));
  // Guaranteed: no plan beats the lower bound (a few ulps of slack for floating sums), and the
  // baseline balancer leaves the makespan unchanged (the mapping only permutes whole bins).
  CHECK(rep.makespan_after >= rep.lower_bound * (1 - 1e-12));
  if (st.balancer.builtin() && st.balancer.builtin()->template get_if<balancers::identity>())
    CHECK(rep.makespan_after == rep.makespan_before);
  // Moved and inter-node bytes from the plan itself.
  std::int64_t moved = 0, inter = 0;
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    const auto from = origin[static_cast<std::size_t>(g)];
    const auto to = planned.destination_of(g).rank;
    if (from != to) moved += layout.bytes(g);
    if (!topo.same_node(from, to)) inter += layout.bytes(g);
  }
  CHECK(rep.moved_bytes == moved);
  CHECK(rep.inter_node_bytes == inter);
}

void check_plan(const stage_declarations& decl, const std::vector<local_batch>& batches,
                const topology& topo, const reference& ref) {
  const rank_t d = topo.num_ranks();
  const auto meta = orchmllm::make_step_metadata(batches, decl.num_encoders());
  REQUIRE(matches_reference(meta, ref));
  const auto plan = orchmllm::plan_step(decl, meta, topo);
  const auto kc = static_cast<std::size_t>(decl.num_encoders());
  REQUIRE(plan.encoders.size() == kc);
  REQUIRE(plan.stages.size() == kc + 1);
  CHECK(plan.alltoalls_per_step() == 3 * static_cast<int>(kc) + 1);
  CHECK(plan.plan_seconds >= 0);

  // Π_M over samples.
  CHECK_NOTHROW(plan.llm.validate());
  CHECK(std::ranges::equal(plan.llm.src_offsets(), ref.sample_offsets));
  CHECK(plan.llm.num_dst_ranks() == d);
  CHECK(std::ranges::equal(plan.llm_layout.offsets(), ref.sample_offsets));
  for (std::int64_t g = 0; g < meta.num_samples(); ++g) {
    CHECK(plan.llm_layout.length(g) == ref.sequence_length(g));
    std::int64_t b = ref.text[static_cast<std::size_t>(g)] * decl.llm.text_row_bytes;
    for (const auto& [m, id] : ref.subs[static_cast<std::size_t>(g)])
      b += ref.llm_tokens[static_cast<std::size_t>(m)][static_cast<std::size_t>(id)] *
           decl.encoders[static_cast<std::size_t>(m)].output_row_bytes;
    CHECK(plan.llm_layout.bytes(g) == b);
  }
  // LLM slot order: increasing origin sample id on every rank.
  for (rank_t r = 0; r < d; ++r) {
    const auto s = llm_samples(plan, r);
    CHECK(std::is_sorted(s.begin(), s.end()));
  }
  check_report(decl.llm, plan.llm_layout, plan.llm, plan.stages[kc], topo);

  for (std::size_t k = 0; k < kc; ++k) {
    const auto& er = plan.encoders[k];
    const auto& st = decl.encoders[k];
    INFO("modality ", k);
    // Π_E_k over the stage's layout.
    CHECK(std::ranges::equal(er.layout.offsets(), ref.mod_offsets[k]));
    CHECK(std::ranges::equal(er.layout.lengths(), ref.encoder_length[k]));
    CHECK(std::ranges::equal(er.layout.parents(), ref.parent[k]));
    for (std::int64_t i = 0; i < er.layout.num_items(); ++i)
      CHECK(er.layout.bytes(i) ==
            ref.input_rows[k][static_cast<std::size_t>(i)] * st.input_row_bytes);
    for (const auto* p : {&er.input, &er.lifted, &er.output, &er.gradient}) {
      CHECK_NOTHROW(p->validate());
      CHECK(p->num_src_ranks() == d);
      CHECK(p->num_dst_ranks() == d);
    }
    CHECK(std::ranges::equal(er.input.src_offsets(), ref.mod_offsets[k]));
    CHECK(std::ranges::equal(er.lifted.src_offsets(), ref.mod_offsets[k]));
    CHECK(std::ranges::equal(er.output.src_offsets(), er.input.dst_offsets()));
    CHECK(std::ranges::equal(er.output.dst_offsets(), er.lifted.dst_offsets()));
    // The algebra.
    CHECK(orchmllm::compose(er.output, er.input) == er.lifted);
    CHECK(orchmllm::compose(er.lifted, er.input.inverse()) == er.output);
    CHECK(er.gradient == er.output.inverse());
    CHECK(orchmllm::compose(er.gradient, er.output) ==
          rearrangement::identity(er.input.dst_offsets()));
    // Lifted: a sub-item goes to its parent's LLM rank, in (parent's LLM slot, original order).
    for (std::int64_t i = 0; i < er.layout.num_items(); ++i)
      CHECK(er.lifted.destination_of(i).rank ==
            plan.llm.destination_of(ref.parent[k][static_cast<std::size_t>(i)]).rank);
    for (rank_t r = 0; r < d; ++r)
      CHECK(received_ids(er.lifted, r) ==
            expected_llm_items(ref, llm_samples(plan, r), static_cast<std::int32_t>(k)));
    check_report(st, er.layout, er.input, plan.stages[k], topo);
  }

  // llm_view against the reference.
  for (rank_t r = 0; r < d; ++r) {
    const auto v = plan.llm_view(meta, r);
    const auto samples = llm_samples(plan, r);
    CHECK(v.samples == samples);
    REQUIRE(v.item_offsets.size() == kc);
    REQUIRE(v.row_offsets.size() == kc);
    REQUIRE(v.sub_item_offsets.size() == samples.size() + 1);
    std::vector<vec> received(kc);  // per modality: ids in payload order
    for (std::size_t k = 0; k < kc; ++k)
      received[k] = expected_llm_items(ref, samples, static_cast<std::int32_t>(k));
    for (std::size_t k = 0; k < kc; ++k) {
      vec items{0}, rows{0};
      for (auto g : samples) {
        std::int64_t c = 0;
        for (const auto& [m, id] : ref.subs[static_cast<std::size_t>(g)])
          if (static_cast<std::size_t>(m) == k) {
            ++c;
            rows.push_back(rows.back() + ref.llm_tokens[k][static_cast<std::size_t>(id)]);
          }
        items.push_back(items.back() + c);
      }
      CHECK(v.item_offsets[k] == items);
      CHECK(v.row_offsets[k] == rows);
    }
    for (std::size_t s = 0; s < samples.size(); ++s) {
      const auto& want = ref.subs[static_cast<std::size_t>(samples[s])];
      const auto b = v.sub_item_offsets[s];
      REQUIRE(v.sub_item_offsets[s + 1] - b == static_cast<std::int64_t>(want.size()));
      for (std::size_t j = 0; j < want.size(); ++j) {
        const auto& [m, idx] = v.sub_items[static_cast<std::size_t>(b) + j];
        CHECK(m == want[j].first);
        // The index points at this very sub-item in modality m's payload.
        CHECK(received[static_cast<std::size_t>(m)][static_cast<std::size_t>(idx)] ==
              want[j].second);
      }
    }
  }
  CHECK_THROWS_AS((void)plan.llm_view(meta, -1), invalid_argument_error);
  CHECK_THROWS_AS((void)plan.llm_view(meta, d), invalid_argument_error);

  // Determinism: planning again gives the same plans.
  const auto again = orchmllm::plan_step(decl, meta, topo);
  CHECK(again.llm == plan.llm);
  for (std::size_t k = 0; k < kc; ++k) {
    CHECK(again.encoders[k].input == plan.encoders[k].input);
    CHECK(again.encoders[k].output == plan.encoders[k].output);
  }
}

}  // namespace

TEST_CASE("plan_step: invariants on random multimodal steps") {
  std::mt19937_64 rng(20260501);
  int with_items = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 16));
    const int k_count = static_cast<int>(trial % 4);
    const auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);
    const auto topo = random_topology(rng, d);
    const auto ref = make_reference(batches, k_count);
    for (int k = 0; k < k_count; ++k)
      with_items += ref.parent[static_cast<std::size_t>(k)].empty() ? 0 : 1;
    INFO("trial ", trial, ", d = ", d, ", K = ", k_count);
    check_plan(decl, batches, topo, ref);
  }
  CHECK(with_items > 300);  // the generator really produces sub-items
}

TEST_CASE("plan_step: stages declared with balancer objects") {
  std::mt19937_64 rng(4242);
  for (int trial = 0; trial < 40; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 12));
    const int k_count = 1 + static_cast<int>(trial % 2);
    auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);
    const auto topo = random_topology(rng, d);
    const auto meta = orchmllm::make_step_metadata(batches, k_count);
    INFO("trial ", trial, ", d = ", d);
    // A built-in object plans exactly like a parsed any_balancer with the same knobs.
    auto typed = decl;
    typed.llm.balancer = balancers::lpt{.refine = true};
    auto parsed = decl;
    auto lpt = orchmllm::parse_balancer("lpt");
    lpt.get_if<balancers::lpt>()->refine = true;
    parsed.llm.balancer = lpt;
    CHECK(orchmllm::fingerprint(typed) == orchmllm::fingerprint(parsed));
    const auto a = orchmllm::plan_step(typed, meta, topo);
    const auto b = orchmllm::plan_step(parsed, meta, topo);
    CHECK(a.llm == b.llm);
    CHECK(a.stages.back().used == b.stages.back().used);
    CHECK(a.stages.back().used == "lpt");
    // The application's balancer on an encoder stage: every invariant of check_plan holds.
    auto custom = decl;
    if (!custom.encoders[0].policy.is_padded()) {
      custom.encoders[0].balancer = orchmllm::stage_balancer(prefer_rank_zero{}, "prefer-rank-0");
      check_plan(custom, batches, topo, make_reference(batches, k_count));
      const auto c = orchmllm::plan_step(custom, meta, topo);
      CHECK(c.stages[0].used == "custom");
      CHECK(orchmllm::fingerprint(custom) != orchmllm::fingerprint(decl));
      auto renamed = custom;
      renamed.encoders[0].balancer = orchmllm::stage_balancer(prefer_rank_zero{}, "other");
      CHECK(orchmllm::fingerprint(renamed) != orchmllm::fingerprint(custom));
      CHECK_NOTHROW(custom.validate());
    }
  }
}

TEST_CASE("plan_step: a hand-checked step") {
  // 2 ranks, one node each. Rank 0: sample 0 (text 10) with two images, sample 1 (text 1, no
  // image). Rank 1: sample 2 (text 1) with one image. LLM cost = length, packed.
  stage_declarations decl;
  decl.encoders.push_back(
      encoder_stage{.name = "vision", .input_row_bytes = 8, .output_row_bytes = 8});
  decl.llm.text_row_bytes = 8;
  local_batch r0{
      .text_tokens = {10, 1},
      .sub_items = {
          sub_item{
              .modality = 0, .parent = 0, .encoder_length = 9, .input_rows = 9, .llm_tokens = 2},
          sub_item{
              .modality = 0, .parent = 0, .encoder_length = 8, .input_rows = 8, .llm_tokens = 2}}};
  local_batch r1{
      .text_tokens = {1},
      .sub_items = {sub_item{
          .modality = 0, .parent = 0, .encoder_length = 1, .input_rows = 1, .llm_tokens = 20}}};
  const auto meta = orchmllm::make_step_metadata({r0, r1}, 1);
  const auto plan = orchmllm::plan_step(decl, meta, topology::uniform(2, 1));
  // LLM lengths 14, 1, 21: the best split is {14, 1} | {21}, which is where they already are.
  CHECK(plan.llm == rearrangement::identity(plan.llm_layout));
  CHECK(plan.stages[1].makespan_before == 21);
  CHECK(plan.stages[1].makespan_after == 21);
  CHECK(plan.stages[1].moved_bytes == 0);
  // Vision lengths 9, 8 | 1: balanced as {9} | {8, 1}; the mapping keeps the most bytes in
  // place (rank 0 keeps its 9; the 8 moves to rank 1, which holds the 1).
  const auto& e = plan.encoders[0];
  CHECK(e.input.destination_of(0) == orchmllm::placement{0, 0});
  CHECK(e.input.destination_of(1) == orchmllm::placement{1, 0});
  CHECK(e.input.destination_of(2) == orchmllm::placement{1, 1});
  CHECK(plan.stages[0].moved_bytes == 64);
  CHECK(plan.stages[0].inter_node_bytes == 64);
  CHECK(plan.stages[0].makespan_before == 17);
  CHECK(plan.stages[0].makespan_after == 9);
  CHECK(plan.stages[0].imbalance_before == doctest::Approx(17.0 / 9.0));
  CHECK(plan.stages[0].imbalance_after == 1.0);
  CHECK(plan.stages[0].max_tokens_before == 17);
  CHECK(plan.stages[0].max_tokens_after == 9);
  CHECK(plan.stages[0].max_bytes_before == 136);
  CHECK(plan.stages[0].max_bytes_after == 72);
  // Lifted: both images of sample 0 to rank 0 slots 0, 1; the image of sample 2 to rank 1.
  CHECK(e.lifted.destination_of(0) == orchmllm::placement{0, 0});
  CHECK(e.lifted.destination_of(1) == orchmllm::placement{0, 1});
  CHECK(e.lifted.destination_of(2) == orchmllm::placement{1, 0});
  // Output: from the encoder ranks (rank 0 slot 0 = item 0; rank 1 slot 0 = item 1, slot 1 =
  // item 2) to the LLM ranks.
  CHECK(e.output.destination_of(0) == orchmllm::placement{0, 0});
  CHECK(e.output.destination_of(1) == orchmllm::placement{0, 1});
  CHECK(e.output.destination_of(2) == orchmllm::placement{1, 0});
  const auto v0 = plan.llm_view(meta, 0);
  CHECK(v0.samples == vec{0, 1});
  CHECK(v0.item_offsets[0] == vec{0, 2, 2});
  CHECK(v0.row_offsets[0] == vec{0, 2, 4});
  CHECK(v0.sub_item_offsets == vec{0, 2, 2});
  using item = std::pair<std::int32_t, std::int64_t>;
  CHECK(v0.sub_items == std::vector<item>{{0, 0}, {0, 1}});
  const auto v1 = plan.llm_view(meta, 1);
  CHECK(v1.samples == vec{2});
  CHECK(v1.row_offsets[0] == vec{0, 20});
}

TEST_CASE("plan_step: a step with 10^5 sub-items per modality, parallel as serial") {
  // Large enough that the composition writes its samples on two threads and the mappings
  // compute their worst-node bounds beside the solver.
  std::mt19937_64 rng(8080);
  const rank_t d = 64;
  std::vector<local_batch> batches(static_cast<std::size_t>(d));
  for (auto& b : batches) {
    for (std::int64_t i = 0; i < 1200; ++i) {
      b.text_tokens.push_back(uniform(rng, 1, 400));
      for (std::int64_t s = uniform(rng, 1, 3); s > 0; --s)
        b.sub_items.push_back(sub_item{.modality = static_cast<std::int32_t>(uniform(rng, 0, 1)),
                                       .parent = i,
                                       .encoder_length = uniform(rng, 1, 900),
                                       .input_rows = uniform(rng, 1, 9),
                                       .llm_tokens = uniform(rng, 1, 60)});
    }
  }
  const auto meta = orchmllm::make_step_metadata(batches, 2);
  REQUIRE(meta.modalities[0].parent.size() >= (std::size_t{1} << 16));
  REQUIRE(meta.modalities[1].parent.size() >= (std::size_t{1} << 16));
  stage_declarations decl;
  decl.encoders.resize(2);
  decl.encoders[0].name = "vision";
  decl.encoders[1].name = "audio";
  decl.encoders[1].policy = orchmllm::padded;
  decl.llm.mapper = mappers::auction{};
  const auto topo = topology::uniform(d, 8);
  orchmllm::plan_options serial, parallel;
  serial.parallel_stages = false;
  const auto a = orchmllm::plan_step(decl, meta, topo, parallel);
  const auto b = orchmllm::plan_step(decl, meta, topo, serial);
  CHECK(a.llm == b.llm);
  for (std::size_t k = 0; k < 2; ++k) {
    CHECK(a.encoders[k].input == b.encoders[k].input);
    CHECK(a.encoders[k].lifted == b.encoders[k].lifted);
    CHECK(a.encoders[k].output == b.encoders[k].output);
    CHECK(a.encoders[k].gradient == b.encoders[k].gradient);
  }
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(a.stages[k].makespan_after == b.stages[k].makespan_after);
    CHECK(a.stages[k].moved_bytes == b.stages[k].moved_bytes);
    CHECK(a.stages[k].inter_node_bytes == b.stages[k].inter_node_bytes);
  }
  // And the composition is the one its definition gives: the gradient undoes the output.
  for (std::size_t k = 0; k < 2; ++k) {
    CHECK(a.encoders[k].gradient == a.encoders[k].output.inverse());
    a.encoders[k].lifted.validate();
  }
}

TEST_CASE("plan_step: stages and routes planned in parallel give the serial ones") {
  std::mt19937_64 rng(777);
  for (int trial = 0; trial < 60; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 16));
    const int k_count = 1 + static_cast<int>(trial % 3);
    const auto decl = random_decl(rng, k_count);
    const auto meta = orchmllm::make_step_metadata(random_batches(rng, d, k_count), k_count);
    const auto topo = random_topology(rng, d);
    INFO("trial ", trial, ", d = ", d, ", K = ", k_count);
    // Routes too: built on threads by default, one after another when serial.
    const auto me = static_cast<rank_t>(uniform(rng, 0, d - 1));
    orchmllm::plan_options serial, parallel;
    serial.parallel_stages = false;
    serial.routes_for = parallel.routes_for = me;
    const auto a = orchmllm::plan_step(decl, meta, topo, parallel);
    const auto b = orchmllm::plan_step(decl, meta, topo, serial);
    REQUIRE(a.routes.all.size() == b.routes.all.size());
    CHECK(a.routes.all.size() == 3 * a.encoders.size() + 1);
    for (std::size_t i = 0; i < a.routes.all.size(); ++i) {
      const auto& x = a.routes.all[i];
      const auto& y = b.routes.all[i];
      CHECK(x.fingerprint() == y.fingerprint());
      CHECK(x.used() == y.used());
      CHECK(x.sent() == y.sent());
      CHECK(x.input_bytes() == y.input_bytes());
      CHECK(x.output_bytes() == y.output_bytes());
      REQUIRE(x.hops().size() == y.hops().size());
      for (std::size_t h = 0; h < x.hops().size(); ++h) {
        CHECK(x.hops()[h].send_counts == y.hops()[h].send_counts);
        CHECK(x.hops()[h].recv_counts == y.hops()[h].recv_counts);
      }
    }
    CHECK(a.llm == b.llm);
    REQUIRE(a.encoders.size() == b.encoders.size());
    for (std::size_t k = 0; k < a.encoders.size(); ++k) {
      CHECK(a.encoders[k].input == b.encoders[k].input);
      CHECK(a.encoders[k].output == b.encoders[k].output);
      CHECK(a.encoders[k].gradient == b.encoders[k].gradient);
    }
    REQUIRE(a.stages.size() == b.stages.size());
    for (std::size_t k = 0; k < a.stages.size(); ++k) {
      CHECK(a.stages[k].name == b.stages[k].name);
      CHECK(a.stages[k].makespan_after == b.stages[k].makespan_after);
      CHECK(a.stages[k].moved_bytes == b.stages[k].moved_bytes);
      CHECK(a.stages[k].max_bytes_after == b.stages[k].max_bytes_after);
    }
    // The reports (computed from the balanced plans, beside the mappings) are the mapped
    // plans' own figures.
    const auto llm_stats =
        orchmllm::compute_statistics(a.llm_layout, a.llm, decl.llm.cost, decl.llm.policy);
    CHECK(a.stages.back().makespan_after == static_cast<double>(llm_stats.makespan));
    CHECK(a.stages.back().max_tokens_after == llm_stats.max_tokens);
    CHECK(a.stages.back().max_bytes_after == llm_stats.max_bytes);
    for (std::size_t k = 0; k < a.encoders.size(); ++k) {
      const auto& er = a.encoders[k];
      const auto st = orchmllm::compute_statistics(er.units(), er.input, decl.encoders[k].cost,
                                                   decl.encoders[k].policy);
      CHECK(a.stages[k].makespan_after == static_cast<double>(st.makespan));
      CHECK(a.stages[k].max_tokens_after == st.max_tokens);
      CHECK(a.stages[k].max_bytes_after == st.max_bytes);
    }
  }
}
