// Tests for include/orchmllm/orchestrator/orchestrator.hpp: every route of a step, end to end on
// the local backend (ranks_per_node fakes nodes).
//
// Payload rows encode (tag, modality, global sub-item id or sample id, row index)
// (support/orchestrator_fixtures.hpp); every route is dispatched as the orchestrator.hpp file
// comment shows and every received payload is compared byte for byte with a reference computed
// from the raw batches (not from the routes under test): encoder inputs, text, encoder outputs
// (composed route) — also against the naive two hops through the origin — and gradients back to
// the encoder ranks, also with every stage in micro-batches (slots grouped by micro-batch, not
// canonical). gather_step_metadata equals make_step_metadata on every rank. Prebuilt
// routes: the collective plan_step agrees once, then every transfer is its hops' all-to-alls.
//
// doctest macros are not thread-safe: rank functions record failures as strings (one slot per
// rank) and every CHECK runs on the main thread after `run` returns.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/local.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/counting_communicator.hpp"
#include "support/orchestrator_fixtures.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::local_batch;
using orchmllm::ragged_payload;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::stage_declarations;
using orchmllm::step_metadata;
using orchmllm::step_plan;
using orchmllm::topology;
using orchmllm::test::uniform;
using namespace orchmllm::test::orchestrator_fixtures;  // support/orchestrator_fixtures.hpp
using namespace std::chrono_literals;

}  // namespace

// ---------------------------------------------------------------------------------------------
// End to end on the local backend.

namespace {

struct rank_outcome {
  std::vector<std::string> failures;
  step_metadata meta;
  std::uint64_t plan_print = 0;
};

std::uint64_t plan_fingerprint(const step_plan& p) {
  std::uint64_t h = orchmllm::fingerprint(p.llm);
  for (const auto& e : p.encoders)
    h = h * 31 + orchmllm::fingerprint(e.input) * 7 + orchmllm::fingerprint(e.output);
  return h;
}

// Rank r's text payload (its samples in origin order) and what it must receive along Π_M (the
// samples of its LLM slots, in slot order), rows of width w.
std::pair<ragged_payload, ragged_payload> text_payloads(const reference& ref, rank_t r,
                                                        const vec& samples, std::int64_t w) {
  std::vector<item_ref> mine, want;
  for (auto g : range(ref.sample_offsets[static_cast<std::size_t>(r)],
                      ref.sample_offsets[static_cast<std::size_t>(r) + 1]))
    mine.push_back({tag_text * 100, g, ref.text[static_cast<std::size_t>(g)]});
  for (auto g : samples) want.push_back({tag_text * 100, g, ref.text[static_cast<std::size_t>(g)]});
  return {build_payload(mine, w), build_payload(want, w)};
}

// One rank's step: every route as the orchestrator.hpp file comment shows it, each payload
// checked against the reference.
void run_step(orchmllm::local::communicator& comm, const stage_declarations& decl,
              const std::vector<local_batch>& batches, const reference& ref, const topology& topo,
              rank_outcome& out) {
  const rank_t r = comm.rank();
  auto fail = [&](std::string s) {
    if (!s.empty()) out.failures.push_back(std::move(s));
  };
  out.meta = orchmllm::gather_step_metadata(comm, decl, batches[static_cast<std::size_t>(r)]);
  const auto plan = orchmllm::plan_step(decl, out.meta, topo);
  out.plan_print = plan_fingerprint(plan);
  const auto view = plan.llm_view(out.meta, r);
  const auto samples = llm_samples(plan, r);
  if (view.samples != samples) fail("llm_view samples differ from the plan's slots");

  // Text: origin → Π_M, arriving in LLM slot order.
  {
    const auto [mine, want] = text_payloads(ref, r, samples, decl.llm.text_row_bytes);
    fail(compare("text", r, -1, orchmllm::dispatch(comm, plan.llm, mine), want));
  }

  for (std::int32_t k = 0; k < decl.num_encoders(); ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const auto& er = plan.encoders[uk];
    const auto w_in = decl.encoders[uk].input_row_bytes;
    const auto w_out = decl.encoders[uk].output_row_bytes;
    const auto mine = range(ref.mod_offsets[uk][static_cast<std::size_t>(r)],
                            ref.mod_offsets[uk][static_cast<std::size_t>(r) + 1]);
    // Encoder inputs: origin → Π_E_k.
    const auto at_encoder = received_ids(er.input, r);
    const auto pixels = orchmllm::dispatch(
        comm, er.input, modality_payload(tag_input, k, mine, ref.input_rows[uk], w_in));
    fail(compare("encoder input", r, k, pixels,
                 modality_payload(tag_input, k, at_encoder, ref.input_rows[uk], w_in)));
    // "Encoder forward": one output row per LLM token of every item this rank encoded.
    const auto enc_out = modality_payload(tag_output, k, at_encoder, ref.llm_tokens[uk], w_out);
    // Composed route: Π_E_k → Π_M, in the documented order (reference, not the route).
    const auto llm_ids = expected_llm_items(ref, samples, k);
    const auto emb = orchmllm::dispatch(comm, er.output, enc_out);
    fail(compare("encoder output", r, k, emb,
                 modality_payload(tag_output, k, llm_ids, ref.llm_tokens[uk], w_out)));
    // The view's row offsets locate every item in the received payload.
    if (view.row_offsets[uk].size() != emb.rows.size() + 1) {
      fail("llm_view row offsets have the wrong size");
    } else {
      for (std::size_t i = 0; i < emb.rows.size(); ++i)
        if (view.row_offsets[uk][i + 1] - view.row_offsets[uk][i] != emb.rows[i])
          fail("llm_view row offsets disagree with the received rows");
    }
    // Assemble every sample's encoder rows through the view and compare with the reference:
    // the rows of its sub-items of modality k, in original order.
    for (std::size_t s = 0; s < samples.size(); ++s) {
      std::vector<std::byte> got, want;
      for (auto j = view.sub_item_offsets[s]; j < view.sub_item_offsets[s + 1]; ++j) {
        const auto& [m, idx] = view.sub_items[static_cast<std::size_t>(j)];
        if (m != k) continue;
        const auto b = view.row_offsets[uk][static_cast<std::size_t>(idx)] * w_out;
        const auto e = view.row_offsets[uk][static_cast<std::size_t>(idx) + 1] * w_out;
        got.insert(got.end(), emb.data.begin() + b, emb.data.begin() + e);
      }
      vec ids;
      for (const auto& [m, id] : ref.subs[static_cast<std::size_t>(samples[s])])
        if (m == k) ids.push_back(id);
      want = modality_payload(tag_output, k, ids, ref.llm_tokens[uk], w_out).data;
      if (got != want)
        fail("sample assembled through llm_view differs (slot " + std::to_string(s) + ")");
    }
    // Naive two hops: back to the origin along Π_E_k, then along the lifted plan.
    const auto at_origin = orchmllm::combine(comm, er.input, enc_out);
    fail(compare("outputs combined to the origin", r, k, at_origin,
                 modality_payload(tag_output, k, mine, ref.llm_tokens[uk], w_out)));
    const auto two_hops = orchmllm::dispatch(comm, er.lifted, at_origin);
    fail(compare("two hops vs composed route", r, k, two_hops, emb));
    // Backward: gradients of the outputs go back to where the encoder ran.
    const auto grads = orchmllm::dispatch(
        comm, er.gradient, modality_payload(tag_gradient, k, llm_ids, ref.llm_tokens[uk], w_out));
    fail(compare("gradient", r, k, grads,
                 modality_payload(tag_gradient, k, at_encoder, ref.llm_tokens[uk], w_out)));
    // And the embeddings themselves come back byte-identical.
    fail(compare("outputs sent back", r, k, orchmllm::dispatch(comm, er.gradient, emb), enc_out));
  }
}

}  // namespace

TEST_CASE("end to end on the local backend: every route delivers the documented bytes") {
  std::mt19937_64 rng(77001);
  int cases = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const auto d = static_cast<rank_t>(trial < 4 ? trial + 1 : uniform(rng, 1, 16));
    const int k_count = static_cast<int>(trial % 4);
    const auto rpn = static_cast<rank_t>(uniform(rng, 0, 5));
    auto decl = random_decl(rng, k_count);
    // Every third trial: every stage in micro-batches, so no plan has canonical slots.
    if (trial % 3 == 2) {
      const auto micro = [&] {
        orchmllm::micro_batching m;
        m.count = uniform(rng, 1, 3);
        m.allow_empty = true;
        m.sync = uniform(rng, 0, 1) == 0 ? orchmllm::sync_model::step
                                         : orchmllm::sync_model::micro_batch;
        return m;
      };
      for (auto& e : decl.encoders) e.micro_batches = micro();
      decl.llm.micro_batches = micro();
    }
    const auto batches = random_batches(rng, d, k_count);
    const auto ref = make_reference(batches, k_count);
    // The plan's topology: the group's own nodes, or (odd trials) another, uneven one — the
    // routes are correct for any topology; it only steers the mapping.
    const auto topo = trial % 2 == 0 ? topology::uniform(d, rpn) : random_topology(rng, d);
    std::vector<rank_outcome> outcomes(static_cast<std::size_t>(d));
    orchmllm::local::run(d,
                         [&](orchmllm::local::communicator& comm) {
                           run_step(comm, decl, batches, ref, topo,
                                    outcomes[static_cast<std::size_t>(comm.rank())]);
                         },
                         {.ranks_per_node = rpn, .timeout = 60s});
    INFO("trial ", trial, ", d = ", d, ", K = ", k_count, ", ranks per node = ", rpn);
    const auto meta = orchmllm::make_step_metadata(batches, k_count);
    // The reference receive lists partition every modality's sub-items: each arrives exactly
    // once, on one rank.
    const auto plan = orchmllm::plan_step(decl, meta, topo);
    for (std::int32_t k = 0; k < k_count; ++k) {
      vec all;
      for (rank_t r = 0; r < d; ++r) {
        const auto ids = expected_llm_items(ref, llm_samples(plan, r), k);
        all.insert(all.end(), ids.begin(), ids.end());
      }
      std::sort(all.begin(), all.end());
      CHECK(all ==
            range(0, static_cast<std::int64_t>(ref.parent[static_cast<std::size_t>(k)].size())));
    }
    for (rank_t r = 0; r < d; ++r) {
      const auto& o = outcomes[static_cast<std::size_t>(r)];
      INFO("rank ", r, ": ", o.failures.empty() ? std::string("ok") : o.failures.front());
      CHECK(o.failures.empty());
      CHECK(same_metadata(o.meta, meta));
      CHECK(o.plan_print == plan_fingerprint(plan));
    }
    ++cases;
  }
  CHECK(cases == 48);
}

// ---------------------------------------------------------------------------------------------
// Prebuilt routes: the collective plan_step agrees once, then every transfer of the step is its
// hops' all-to-alls and nothing else, delivering what the plan dispatches deliver.

namespace {

struct routes_outcome {
  std::vector<std::string> failures;
  std::int64_t planning_calls = -1;  // collectives of the collective plan_step
  std::int64_t transfers = 0;
  std::uint64_t plan_print = 0;
};

void run_step_routes(orchmllm::local::communicator& comm, const stage_declarations& decl,
                     const std::vector<local_batch>& batches, const reference& ref,
                     const topology& topo, orchmllm::schedule sched, routes_outcome& out) {
  const rank_t r = comm.rank();
  auto fail = [&](std::string s) {
    if (!s.empty()) out.failures.push_back(std::move(s));
  };
  orchmllm::test::counting_communicator counted{comm};
  const auto meta =
      orchmllm::gather_step_metadata(counted, decl, batches[static_cast<std::size_t>(r)]);
  counted.reset();
  const auto step = orchmllm::plan_step(counted, decl, meta, topo, {.sched = sched});
  out.planning_calls = counted.total();
  out.plan_print = plan_fingerprint(step);
  const auto& routes = step.routes;
  if (routes.rank != r || routes.num_encoders() != decl.num_encoders())
    fail("the step's routes are not this rank's");
  // One transfer: only its hops' all-to-alls; the schedule asked for.
  auto move = [&](const orchmllm::route& rt, const ragged_payload& p) {
    counted.reset();
    auto moved = orchmllm::dispatch(counted, rt, p);
    ++out.transfers;
    if (counted.total() != static_cast<std::int64_t>(rt.hops().size()) ||
        counted.all_to_allvs != counted.total())
      fail("a transfer issued " + std::to_string(counted.total()) + " collectives for " +
           std::to_string(rt.hops().size()) + " hops");
    if (sched != orchmllm::schedule::automatic && rt.used() != sched)
      fail("a route does not use the schedule asked for");
    return moved;
  };
  const auto samples = llm_samples(step, r);
  {
    const auto [mine, want] = text_payloads(ref, r, samples, decl.llm.text_row_bytes);
    fail(compare("text", r, -1, move(routes.text(), mine), want));
  }
  for (std::int32_t k = 0; k < decl.num_encoders(); ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const auto w_in = decl.encoders[uk].input_row_bytes;
    const auto w_out = decl.encoders[uk].output_row_bytes;
    const auto mine = range(ref.mod_offsets[uk][static_cast<std::size_t>(r)],
                            ref.mod_offsets[uk][static_cast<std::size_t>(r) + 1]);
    const auto at_encoder = received_ids(step.encoders[uk].input, r);
    fail(compare("encoder input", r, k,
                 move(routes.encoder_input(k),
                      modality_payload(tag_input, k, mine, ref.input_rows[uk], w_in)),
                 modality_payload(tag_input, k, at_encoder, ref.input_rows[uk], w_in)));
    const auto llm_ids = expected_llm_items(ref, samples, k);
    fail(compare("encoder output", r, k,
                 move(routes.encoder_output(k),
                      modality_payload(tag_output, k, at_encoder, ref.llm_tokens[uk], w_out)),
                 modality_payload(tag_output, k, llm_ids, ref.llm_tokens[uk], w_out)));
    fail(compare("gradient", r, k,
                 move(routes.encoder_gradient(k),
                      modality_payload(tag_gradient, k, llm_ids, ref.llm_tokens[uk], w_out)),
                 modality_payload(tag_gradient, k, at_encoder, ref.llm_tokens[uk], w_out)));
  }
}

}  // namespace

TEST_CASE("prebuilt routes: one agreement per step, one all-to-all(v) per hop, the same bytes") {
  std::mt19937_64 rng(77003);
  for (int trial = 0; trial < 24; ++trial) {
    const auto d = static_cast<rank_t>(trial < 3 ? trial + 1 : uniform(rng, 1, 12));
    const int k_count = static_cast<int>(trial % 4);
    const auto rpn = static_cast<rank_t>(uniform(rng, 0, 4));
    const auto decl = random_decl(rng, k_count);
    const auto batches = random_batches(rng, d, k_count);
    const auto ref = make_reference(batches, k_count);
    const auto topo = topology::uniform(d, rpn);
    const auto sched = static_cast<orchmllm::schedule>(trial % 3);
    std::vector<routes_outcome> outcomes(static_cast<std::size_t>(d));
    orchmllm::local::run(d,
                         [&](orchmllm::local::communicator& comm) {
                           run_step_routes(comm, decl, batches, ref, topo, sched,
                                           outcomes[static_cast<std::size_t>(comm.rank())]);
                         },
                         {.ranks_per_node = rpn, .timeout = 60s});
    INFO("trial ", trial, ", d = ", d, ", K = ", k_count, ", ranks per node = ", rpn, ", schedule ",
         std::string(to_string(sched)));
    // The plans are the pure plan_step's; its routes are route::build's for this rank.
    const auto meta = orchmllm::make_step_metadata(batches, k_count);
    const auto plan = orchmllm::plan_step(decl, meta, topo);
    CHECK(plan.routes.empty());
    const auto with_routes =
        orchmllm::plan_step(decl, meta, topo, {.routes_for = d - 1, .sched = sched});
    REQUIRE(with_routes.routes.all.size() == static_cast<std::size_t>(3 * k_count + 1));
    // The phase timers are laps of one clock inside plan_step's own time.
    const auto& w = with_routes;
    CHECK(w.layout_seconds >= 0);
    CHECK(w.stages_seconds >= 0);
    CHECK(w.compose_seconds >= 0);
    CHECK(w.routes_seconds >= 0);
    CHECK(w.layout_seconds + w.stages_seconds + w.compose_seconds + w.routes_seconds <=
          w.plan_seconds * (1 + 1e-9) + 1e-12);  // (rounding of four sums of nanoseconds)
    for (const auto& st : w.stages)
      CHECK((st.balance_seconds >= 0 && st.map_seconds >= 0 && st.report_seconds >= 0));
    CHECK(with_routes.routes.text().fingerprint() ==
          orchmllm::route::build(
              plan.llm,
              [&] {
                vec b;
                for (auto t : meta.text_tokens) b.push_back(t * decl.llm.text_row_bytes);
                return b;
              }(),
              topo, d - 1, sched)
              .fingerprint());
    // build_routes: any rank's routes from the plan alone, the ones plan_step builds for it.
    const auto same_routes = [](const orchmllm::step_routes& a, const orchmllm::step_routes& b) {
      if (a.all.size() != b.all.size()) return false;
      for (std::size_t i = 0; i < a.all.size(); ++i)
        if (a.all[i].fingerprint() != b.all[i].fingerprint()) return false;
      return true;
    };
    CHECK(same_routes(orchmllm::build_routes(plan, decl, meta, topo, d - 1, sched),
                      with_routes.routes));
    CHECK(same_routes(
        orchmllm::build_routes(plan, decl, meta, topo, 0, sched),
        orchmllm::plan_step(decl, meta, topo, {.routes_for = 0, .sched = sched}).routes));
    CHECK_THROWS_AS(orchmllm::build_routes(plan, decl, meta, topo, d, sched),
                    orchmllm::invalid_argument_error);
    CHECK_THROWS_AS(orchmllm::build_routes(plan, decl, meta, topology::uniform(d + 1, rpn), 0),
                    orchmllm::invalid_argument_error);
    for (rank_t r = 0; r < d; ++r) {
      const auto& o = outcomes[static_cast<std::size_t>(r)];
      INFO("rank ", r, ": ", o.failures.empty() ? std::string("ok") : o.failures.front());
      CHECK(o.failures.empty());
      CHECK(o.planning_calls == 1);
      CHECK(o.transfers == 3 * k_count + 1);
      CHECK(o.plan_print == plan_fingerprint(plan));
    }
  }
}
