// Tests for include/orchmllm/orchestrator/step_plan.hpp with segmented sub-items and splitting
// (segments cut across ranks): `encoder_routes::pieces` / `units()`, `step_plan::encoder_view`, and
// `llm_view` over a stage whose plan moves pieces; with the segment fields of stages.hpp /
// samples.hpp that feed them.
//
//  1. Zero cost when unused: random steps (fixed seeds) planned with every sub-item at S = 1
//     and splitting off, and again with `encoder_stage::split` set (S = 1 everywhere, or
//     segments on a stage without split), give identical plans (every rearrangement ==),
//     reports and route fingerprints of every rank.
//  2. Splitting end to end on the local backend: random steps with segmented sub-items (one
//     long video per step, so pieces really are cut); payload rows encode (tag, sample,
//     modality, sub-item, segment, row in segment); inputs along encoder_input(k) arrive as
//     the units encoder_view lists, outputs along the composed route assemble every sub-item's
//     rows in order at llm_view's offsets on its sample's LLM rank, and gradients along
//     encoder_gradient(k) come back to the units that produced them.
//  3. Bad input (segmented sub-items on a padded stage, split or not, now plan; split on a stage
//  without segments plans as before), and a rank whose segments
//     do not divide its sizes fails gather_step_metadata on every rank alike. (The metadata and
//     declaration checks themselves: tests/orchestrator/stages_test.cpp; make_local_batch's
//     segments: samples_test.cpp.)
//
// doctest macros are not thread-safe: rank functions record failures as strings and every CHECK
// runs on the main thread after `run` returns.

#include "orchmllm/orchestrator/step_plan.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/local.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/samples.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/topology.hpp"
#include "support/counting_communicator.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::invalid_argument_error;
using orchmllm::local_batch;
using orchmllm::ragged_payload;
using orchmllm::rank_t;
using orchmllm::stage_declarations;
using orchmllm::step_metadata;
using orchmllm::step_plan;
using orchmllm::sub_item;
using orchmllm::topology;
using orchmllm::test::uniform;
using namespace std::chrono_literals;

// Two packed encoder stages: "video" (floating attention-like cost) and "audio" (integral).
stage_declarations declarations(bool split) {
  stage_declarations decl;
  orchmllm::encoder_stage video;
  video.name = "video";
  video.cost = orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 16};
  video.input_row_bytes = 48;  // one row: 6 int64 (see row_key)
  video.output_row_bytes = 48;
  orchmllm::encoder_stage audio;
  audio.name = "audio";
  audio.cost = orchmllm::linear_cost{};
  audio.input_row_bytes = 48;
  audio.output_row_bytes = 48;
  if (split) {
    video.split = orchmllm::split_options{};
    audio.split = orchmllm::split_options{.min_piece_segments = 2, .max_pieces = 3};
  }
  decl.encoders = {video, audio};
  decl.llm.cost = orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 256};
  decl.llm.text_row_bytes = 8;
  return decl;
}

// Random batches; with `segmented`, sub-items of S ∈ {1, 2, 3, 4, 8} equal segments and one
// long video (12 segments of 40) on a random rank, which any balanced plan must cut.
std::vector<local_batch> random_batches(std::mt19937_64& rng, rank_t d, bool segmented) {
  std::vector<local_batch> out(static_cast<std::size_t>(d));
  const auto long_video_rank = uniform(rng, 0, d - 1);
  for (rank_t r = 0; r < d; ++r) {
    auto& b = out[static_cast<std::size_t>(r)];
    const auto n = uniform(rng, r == long_video_rank ? 1 : 0, 5);
    for (std::int64_t s = 0; s < n; ++s) {
      b.text_tokens.push_back(uniform(rng, 0, 20));
      for (auto j = uniform(rng, 0, 3); j > 0; --j) {
        constexpr std::array<std::int64_t, 5> counts{1, 2, 3, 4, 8};
        const std::int64_t segs =
            segmented ? counts[static_cast<std::size_t>(uniform(rng, 0, 4))] : 1;
        b.sub_items.push_back({static_cast<std::int32_t>(uniform(rng, 0, 1)), s,
                               segs * uniform(rng, 0, 6), segs * uniform(rng, 0, 4),
                               segs * uniform(rng, 0, 3), segs});
      }
    }
    if (segmented && r == long_video_rank)
      b.sub_items.push_back({0, uniform(rng, 0, n - 1), 12 * 40, 12 * 3, 12 * 2, 12});
  }
  return out;
}

// Everything plan_step decides, compared exactly.
void check_same_plans(const step_plan& a, const step_plan& b) {
  REQUIRE(a.encoders.size() == b.encoders.size());
  for (std::size_t k = 0; k < a.encoders.size(); ++k) {
    CHECK(a.encoders[k].units() == b.encoders[k].units());
    CHECK(a.encoders[k].input == b.encoders[k].input);
    CHECK(a.encoders[k].lifted == b.encoders[k].lifted);
    CHECK(a.encoders[k].output == b.encoders[k].output);
    CHECK(a.encoders[k].gradient == b.encoders[k].gradient);
  }
  CHECK(a.llm == b.llm);
  CHECK(a.llm_layout == b.llm_layout);
  REQUIRE(a.stages.size() == b.stages.size());
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    CHECK(a.stages[s].makespan_after == b.stages[s].makespan_after);
    CHECK(a.stages[s].lower_bound == b.stages[s].lower_bound);
    CHECK(a.stages[s].moved_bytes == b.stages[s].moved_bytes);
    CHECK(a.stages[s].inter_node_bytes == b.stages[s].inter_node_bytes);
  }
}

// Every route's fingerprint (its plan, item sizes, nodes and schedule), in step order.
std::vector<std::uint64_t> routes_print(const step_plan& p) {
  std::vector<std::uint64_t> out;
  for (const auto& r : p.routes.all) out.push_back(r.fingerprint());
  return out;
}

}  // namespace

TEST_CASE("S = 1 and splitting off or on: the same plans and routes as without segments") {
  std::mt19937_64 rng(140201);
  for (int trial = 0; trial < 24; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 12));
    const auto topo = topology::uniform(d, static_cast<rank_t>(uniform(rng, 1, 4)));
    const auto batches = random_batches(rng, d, false);
    INFO("trial ", trial, ", d = ", d);
    const auto meta = orchmllm::make_step_metadata(batches, 2);
    for (const auto& mod : meta.modalities)
      CHECK(mod.segments == std::vector<std::int64_t>(mod.parent.size(), 1));
    const auto off = declarations(false), on = declarations(true);
    CHECK(orchmllm::fingerprint(off) != orchmllm::fingerprint(on));
    for (rank_t r = 0; r < d; r += std::max<rank_t>(1, d / 3)) {
      const auto a = orchmllm::plan_step(off, meta, topo, {.routes_for = r});
      const auto b = orchmllm::plan_step(on, meta, topo, {.routes_for = r});
      CHECK(!a.encoders[0].pieces);
      REQUIRE(b.encoders[0].pieces);
      CHECK(b.encoders[0].pieces->is_whole());
      check_same_plans(a, b);
      CHECK(routes_print(a) == routes_print(b));
      // encoder_view: whole sub-items, one per received item, in Π_E slot order.
      const auto units = b.encoder_view(meta, 0, r);
      CHECK(units == a.encoder_view(meta, 0, r));
      for (const auto& u : units) CHECK(u.whole());
      // Metadata built by hand without segment counts means S = 1 for all.
      auto bare = meta;
      for (auto& mod : bare.modalities) mod.segments.clear();
      const auto c = orchmllm::plan_step(on, bare, topo, {.routes_for = r});
      check_same_plans(b, c);
      CHECK(routes_print(c) == routes_print(b));
      CHECK(c.encoder_view(bare, 0, r) == units);
    }
  }
}

TEST_CASE("segments on a stage that does not split: per-segment costs, sub-items stay whole") {
  std::mt19937_64 rng(140202);
  for (int trial = 0; trial < 12; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 8));
    const auto topo = topology::uniform(d, 2);
    const auto batches = random_batches(rng, d, true);
    const auto meta = orchmllm::make_step_metadata(batches, 2);
    const auto plan = orchmllm::plan_step(declarations(false), meta, topo);
    for (std::size_t k = 0; k < 2; ++k) {
      const auto& er = plan.encoders[k];
      CHECK(!er.pieces);
      CHECK(er.units().num_items() == meta.modalities[k].size());
      for (std::int64_t g = 0; g < er.layout.num_items(); ++g)
        CHECK(er.layout.num_segments(g) ==
              meta.modalities[k].segments[static_cast<std::size_t>(g)]);
    }
    // Costs are per segment: rank r's load as sampled is Σ S · cost(length / S).
    double makespan = 0;
    const orchmllm::quadratic_cost cost{0.0, 1.0, 1.0 / 16};
    const auto& vid = meta.modalities[0];
    for (rank_t r = 0; r < d; ++r) {
      double load = 0;
      for (auto i = vid.offsets[static_cast<std::size_t>(r)];
           i < vid.offsets[static_cast<std::size_t>(r) + 1]; ++i) {
        const auto S = vid.segments[static_cast<std::size_t>(i)];
        load += static_cast<double>(S) * cost(vid.encoder_length[static_cast<std::size_t>(i)] / S);
      }
      makespan = std::max(makespan, load);
    }
    CHECK(plan.stages[0].makespan_before == doctest::Approx(makespan));
    // The plans match a plan over the same layouts built by hand with equal segments.
    const auto& lay = plan.encoders[0].layout;
    const auto by_hand =
        orchmllm::batch_layout(meta.modalities[0].offsets, meta.modalities[0].encoder_length)
            .with_equal_segments(meta.modalities[0].segments);
    CHECK(std::vector<std::int64_t>(lay.segment_lengths().begin(), lay.segment_lengths().end()) ==
          std::vector<std::int64_t>(by_hand.segment_lengths().begin(),
                                    by_hand.segment_lengths().end()));
  }
}

namespace {

// One payload row: what it is and where it belongs.
constexpr std::int64_t tag_input = 1, tag_output = 2, tag_gradient = 3;
using row_key = std::array<std::int64_t, 6>;  // tag, sample, modality, sub-item, segment, row

void append_rows(ragged_payload& p, const std::vector<row_key>& rows) {
  const auto at = p.data.size();
  p.rows.push_back(static_cast<std::int64_t>(rows.size()));
  p.data.resize(at + rows.size() * sizeof(row_key));
  if (!rows.empty()) std::memcpy(p.data.data() + at, rows.data(), rows.size() * sizeof(row_key));
}

row_key read_row(const ragged_payload& p, std::int64_t row) {
  row_key k{};
  std::memcpy(k.data(), p.data.data() + row * p.row_bytes, sizeof k);
  return k;
}

// Rows of segments [first, last) of sub-item `id` of modality k: `per_segment` rows each.
std::vector<row_key> unit_rows(std::int64_t tag, const step_metadata& meta, int k, std::int64_t id,
                               std::int64_t first, std::int64_t last, std::int64_t per_segment) {
  const auto sample =
      meta.modalities[static_cast<std::size_t>(k)].parent[static_cast<std::size_t>(id)];
  std::vector<row_key> rows;
  for (auto s = first; s < last; ++s)
    for (std::int64_t i = 0; i < per_segment; ++i) rows.push_back({tag, sample, k, id, s, i});
  return rows;
}

struct rank_outcome {
  std::vector<std::string> failures;
  std::int64_t units = 0;  // received by this rank's encoders
};

void run_split_step(orchmllm::local::communicator& comm, const stage_declarations& decl,
                    const std::vector<local_batch>& batches, const topology& topo,
                    rank_outcome& out) {
  const rank_t me = comm.rank();
  auto fail = [&](const std::string& what) { out.failures.push_back(what); };
  const auto meta =
      orchmllm::gather_step_metadata(comm, decl, batches[static_cast<std::size_t>(me)], topo);
  for (std::size_t k = 0; k < 2; ++k)
    if (meta.modalities[k].segments !=
        orchmllm::make_step_metadata(batches, 2).modalities[k].segments)
      fail("gathered segments differ from make_step_metadata's");
  const auto step = orchmllm::plan_step(comm, decl, meta, topo);
  std::vector<ragged_payload> emb(2);
  std::vector<std::vector<orchmllm::encoder_unit>> units(2);
  for (int k = 0; k < 2; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const auto& mod = meta.modalities[uk];
    // Inputs: this rank's modality-k sub-items in local order, whole.
    ragged_payload in{.row_bytes = 48};
    for (auto id = mod.offsets[static_cast<std::size_t>(me)];
         id < mod.offsets[static_cast<std::size_t>(me) + 1]; ++id) {
      const auto S = mod.segments[static_cast<std::size_t>(id)];
      append_rows(in, unit_rows(tag_input, meta, k, id, 0, S,
                                mod.input_rows[static_cast<std::size_t>(id)] / S));
    }
    const auto got = orchmllm::dispatch(comm, step.routes.encoder_input(k), in);
    units[uk] = step.encoder_view(meta, k, me);
    out.units += static_cast<std::int64_t>(units[uk].size());
    if (got.num_items() != static_cast<std::int64_t>(units[uk].size())) {
      fail("encoder input: " + std::to_string(got.num_items()) + " items for " +
           std::to_string(units[uk].size()) + " units");
      return;
    }
    // Each unit's rows are its segments' rows; its outputs are its segments' tokens.
    ragged_payload outputs{.row_bytes = 48};
    std::int64_t row = 0;
    for (std::size_t i = 0; i < units[uk].size(); ++i) {
      const auto& u = units[uk][i];
      const auto want =
          unit_rows(tag_input, meta, k, u.sub_item, u.first_segment, u.last_segment,
                    mod.input_rows[static_cast<std::size_t>(u.sub_item)] / u.segments);
      if (got.rows[i] != u.input_rows || static_cast<std::int64_t>(want.size()) != u.input_rows)
        fail("encoder input: a unit of the wrong size");
      for (std::size_t j = 0; j < want.size() && j < static_cast<std::size_t>(got.rows[i]); ++j)
        if (read_row(got, row + static_cast<std::int64_t>(j)) != want[j])
          fail("encoder input: a row out of place");
      row += got.rows[i];
      const auto tokens =
          unit_rows(tag_output, meta, k, u.sub_item, u.first_segment, u.last_segment,
                    mod.llm_tokens[static_cast<std::size_t>(u.sub_item)] / u.segments);
      if (static_cast<std::int64_t>(tokens.size()) != u.llm_tokens) fail("unit llm_tokens");
      append_rows(outputs, tokens);
    }
    emb[uk] = orchmllm::dispatch(comm, step.routes.encoder_output(k), outputs);
  }
  // LLM rank: every sub-item's rows, in order, at llm_view's offsets.
  const auto view = step.llm_view(meta, me);
  for (std::size_t s = 0; s < view.samples.size(); ++s) {
    const auto g = static_cast<std::size_t>(view.samples[s]);
    const auto count = view.sub_item_offsets[s + 1] - view.sub_item_offsets[s];
    if (count != meta.sample_sub_offsets[g + 1] - meta.sample_sub_offsets[g]) {
      fail("llm_view: wrong sub-item count");
      continue;
    }
    for (std::int64_t e = 0; e < count; ++e) {
      const auto [k, j] = view.sub_items[static_cast<std::size_t>(view.sub_item_offsets[s] + e)];
      const auto [m, id] =
          meta.sample_sub_items[static_cast<std::size_t>(meta.sample_sub_offsets[g] + e)];
      if (k != m) fail("llm_view: wrong modality");
      const auto uk = static_cast<std::size_t>(k);
      const auto& mod = meta.modalities[uk];
      const auto S = mod.segments[static_cast<std::size_t>(id)];
      const auto want = unit_rows(tag_output, meta, k, id, 0, S,
                                  mod.llm_tokens[static_cast<std::size_t>(id)] / S);
      const auto first = view.row_offsets[uk][static_cast<std::size_t>(j)];
      if (view.row_offsets[uk][static_cast<std::size_t>(j) + 1] - first !=
          static_cast<std::int64_t>(want.size())) {
        fail("llm_view: wrong row count");
        continue;
      }
      for (std::size_t t = 0; t < want.size(); ++t)
        if (read_row(emb[uk], first + static_cast<std::int64_t>(t)) != want[t])
          fail("encoder output: a row out of place on the LLM rank");
    }
  }
  // Gradients: the outputs' rows, retagged, back along the inverse route to their units.
  for (int k = 0; k < 2; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    if (emb[uk].total_rows() != view.row_offsets[uk].back()) fail("output rows != llm_view's");
    ragged_payload grads = emb[uk];
    for (std::int64_t r = 0; r < grads.total_rows(); ++r) {
      const std::int64_t tag = tag_gradient;
      std::memcpy(grads.data.data() + r * grads.row_bytes, &tag, sizeof tag);
    }
    const auto back = orchmllm::dispatch(comm, step.routes.encoder_gradient(k), grads);
    if (back.num_items() != static_cast<std::int64_t>(units[uk].size())) {
      fail("gradients: wrong unit count");
      continue;
    }
    std::int64_t row = 0;
    for (std::size_t i = 0; i < units[uk].size(); ++i) {
      const auto& u = units[uk][i];
      const auto want = unit_rows(
          tag_gradient, meta, k, u.sub_item, u.first_segment, u.last_segment,
          meta.modalities[uk].llm_tokens[static_cast<std::size_t>(u.sub_item)] / u.segments);
      if (back.rows[i] != static_cast<std::int64_t>(want.size())) {
        fail("gradients: a unit of the wrong size");
        break;
      }
      for (std::size_t t = 0; t < want.size(); ++t)
        if (read_row(back, row + static_cast<std::int64_t>(t)) != want[t])
          fail("gradients: a row back at the wrong unit");
      row += back.rows[i];
    }
  }
}

}  // namespace

TEST_CASE("splitting end to end: pieces' rows reassemble on the LLM rank, gradients return") {
  std::mt19937_64 rng(140203);
  std::int64_t cut_items = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 2, 10));
    const auto rpn = static_cast<rank_t>(uniform(rng, 1, 4));
    const auto topo = topology::uniform(d, rpn);
    const auto batches = random_batches(rng, d, true);
    const auto decl = declarations(true);
    std::vector<rank_outcome> outcomes(static_cast<std::size_t>(d));
    orchmllm::local::run(d,
                         [&](orchmllm::local::communicator& comm) {
                           run_split_step(comm, decl, batches, topo,
                                          outcomes[static_cast<std::size_t>(comm.rank())]);
                         },
                         {.ranks_per_node = rpn, .timeout = 60s});
    INFO("trial ", trial, ", d = ", d, ", ranks per node = ", rpn);
    const auto meta = orchmllm::make_step_metadata(batches, 2);
    const auto plan = orchmllm::plan_step(decl, meta, topo);
    std::int64_t units = 0;
    for (rank_t r = 0; r < d; ++r) {
      const auto& o = outcomes[static_cast<std::size_t>(r)];
      INFO("rank ", r, ": ", o.failures.empty() ? std::string("ok") : o.failures.front());
      CHECK(o.failures.empty());
      units += o.units;
    }
    for (std::size_t k = 0; k < 2; ++k) {
      const auto& pieces = *plan.encoders[k].pieces;
      CHECK(units >= pieces.num_pieces());
      for (std::int64_t g = 0; g < pieces.items().num_items(); ++g)
        if (pieces.num_pieces_of(g) > 1) ++cut_items;
      // Deterministic: planning again gives the same cut and plans.
      const auto again = orchmllm::plan_step(decl, meta, topo);
      CHECK(*again.encoders[k].pieces == pieces);
      CHECK(again.encoders[k].output == plan.encoders[k].output);
    }
    CHECK(units == plan.encoders[0].pieces->num_pieces() + plan.encoders[1].pieces->num_pieces());
    // The long video is above the average load: its stage's bound is the split bound.
    CHECK(plan.stages[0].makespan_after <= 2 * plan.stages[0].lower_bound);
  }
  CHECK(cut_items >= 16);  // every step cut at least its long video
}

TEST_CASE("padded encoder stages with segmented sub-items: rows per segment, routes") {
  // Video padded to a multiple of 4, audio padded: every segment is a padded row of the rank's
  // longest segment. Without split the sub-items stay whole; with it they may be cut into
  // pieces. Either way every row reaches its unit and its LLM rank in order, and gradients
  // come back.
  std::mt19937_64 rng(140204);
  std::int64_t cut_items = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const bool split = trial % 2 == 1;
    const auto d = static_cast<rank_t>(uniform(rng, 2, 8));
    const auto rpn = static_cast<rank_t>(uniform(rng, 1, 4));
    const auto topo = topology::uniform(d, rpn);
    const auto batches = random_batches(rng, d, true);
    auto decl = declarations(split);
    decl.encoders[0].policy = orchmllm::padded_to_multiple(4);
    decl.encoders[1].policy = orchmllm::padded;
    std::vector<rank_outcome> outcomes(static_cast<std::size_t>(d));
    orchmllm::local::run(d,
                         [&](orchmllm::local::communicator& comm) {
                           run_split_step(comm, decl, batches, topo,
                                          outcomes[static_cast<std::size_t>(comm.rank())]);
                         },
                         {.ranks_per_node = rpn, .timeout = 60s});
    INFO("trial ", trial, ", d = ", d, ", ranks per node = ", rpn, ", split ", split);
    for (rank_t r = 0; r < d; ++r) {
      const auto& o = outcomes[static_cast<std::size_t>(r)];
      INFO("rank ", r, ": ", o.failures.empty() ? std::string("ok") : o.failures.front());
      CHECK(o.failures.empty());
    }
    const auto meta = orchmllm::make_step_metadata(batches, 2);
    const auto plan = orchmllm::plan_step(decl, meta, topo);
    for (std::size_t k = 0; k < 2; ++k) {
      const auto& er = plan.encoders[k];
      CHECK(er.pieces.has_value() == split);
      if (!split) CHECK(er.units().num_items() == meta.modalities[k].size());
      if (split)
        for (std::int64_t g = 0; g < er.pieces->items().num_items(); ++g)
          if (er.pieces->num_pieces_of(g) > 1) ++cut_items;
      // The stage's makespan is the padded-row load of its plan over its units (sub-items or
      // pieces), from first principles: a unit of S segments is S rows of its segment length.
      const auto& units = er.units();
      const auto dst = er.input.dst_ranks();
      std::vector<std::int64_t> rows(static_cast<std::size_t>(d), 0), longest(rows);
      for (std::size_t i = 0; i < dst.size(); ++i) {
        const auto r = static_cast<std::size_t>(dst[i]);
        const auto u = static_cast<std::int64_t>(i);
        rows[r] += units.num_segments(u);
        longest[r] = std::max(longest[r], units.length(u) / units.num_segments(u));
      }
      double makespan = 0;
      for (std::size_t r = 0; r < rows.size(); ++r) {
        if (rows[r] == 0) continue;
        const double load = k == 0
                                ? static_cast<double>(rows[r]) *
                                      orchmllm::quadratic_cost{0.0, 1.0, 1.0 / 16}(
                                          orchmllm::padded_to_multiple(4).padded_length(longest[r]))
                                : static_cast<double>(rows[r] * longest[r]);
        makespan = std::max(makespan, load);
      }
      CHECK(plan.stages[k].makespan_after == doctest::Approx(makespan));
    }
  }
  CHECK(cut_items >= 1);  // the long videos (12 segments) are cut on some split step
}

TEST_CASE("encoder_view: a hand-checked cut, and its range checks") {
  const std::vector<local_batch> batches = {
      {{10, 4}, {{0, 0, 8, 4, 2, 2}, {0, 1, 480, 36, 24, 12}}}, {{3}, {{1, 0, 6, 6, 3, 3}}}};
  const auto meta = orchmllm::make_step_metadata(batches, 2);
  CHECK(meta.modalities[0].segments == std::vector<std::int64_t>{2, 12});
  CHECK(meta.modalities[1].segments == std::vector<std::int64_t>{3});
  const auto plan = orchmllm::plan_step(declarations(true), meta, topology::uniform(2, 2));
  CHECK_THROWS_AS((void)plan.encoder_view(meta, 2, 0), invalid_argument_error);
  CHECK_THROWS_AS((void)plan.encoder_view(meta, 0, 2), invalid_argument_error);
  // The 12-segment video (cost 12 · (40 + 100) = 1680 of 1680 + 2 · (4 + 1) in all) is cut in
  // two pieces of 6 segments, one per rank.
  const auto& pieces = *plan.encoders[0].pieces;
  CHECK(pieces.num_pieces_of(1) == 2);
  std::int64_t rows = 0;
  for (rank_t r = 0; r < 2; ++r)
    for (const auto& u : plan.encoder_view(meta, 0, r))
      if (u.sub_item == 1) {
        CHECK(u.last_segment - u.first_segment == 6);
        CHECK(u.input_rows == 18);
        CHECK(u.llm_tokens == 12);
        rows += u.llm_tokens;
      }
  CHECK(rows == 24);
}

TEST_CASE("segments and split: bad input raises a clear error") {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const invalid_argument_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Segmented sub-items on a padded stage: planned, whole or split.
  {
    auto decl = declarations(false);
    decl.encoders[1].policy = orchmllm::padded;
    const std::vector<local_batch> batches = {{{1}, {{1, 0, 8, 4, 2, 2}}}};
    CHECK_NOTHROW((void)orchmllm::plan_step(decl, orchmllm::make_step_metadata(batches, 2),
                                            topology::uniform(1, 1)));
    decl.encoders[1].split = orchmllm::split_options{};
    CHECK_NOTHROW((void)orchmllm::plan_step(decl, orchmllm::make_step_metadata(batches, 2),
                                            topology::uniform(1, 1)));
    // Without segments the padded stage plans as before, split or not.
    decl.encoders[1].split = orchmllm::split_options{};
    const std::vector<local_batch> plain = {{{1}, {{1, 0, 8, 4, 2}}}};
    CHECK_NOTHROW((void)orchmllm::plan_step(decl, orchmllm::make_step_metadata(plain, 2),
                                            topology::uniform(1, 1)));
  }
  // gather_step_metadata: one rank's bad segments fail every rank alike.
  {
    const auto decl = declarations(true);
    std::vector<std::string> errors(3);
    orchmllm::local::run(3,
                         [&](orchmllm::local::communicator& comm) {
                           local_batch b{{2}, {{0, 0, 6, 6, 3, comm.rank() == 2 ? 4 : 3}}};
                           errors[static_cast<std::size_t>(comm.rank())] = message(
                               [&] { (void)orchmllm::gather_step_metadata(comm, decl, b); });
                         },
                         {.timeout = 60s});
    for (const auto& e : errors)
      CHECK(e.find("rank 2: sub-item 0 has 4 segments") != std::string::npos);
  }
}

namespace {

// Records the bytes every all-gatherv of this rank sends.
struct recording_communicator
    : orchmllm::test::counting_communicator<orchmllm::local::communicator> {
  std::vector<std::vector<std::int64_t>> sent;
  void all_gatherv(const std::byte* s, std::int64_t b, std::byte* r,
                   std::span<const std::int64_t> c, std::span<const std::int64_t> o) {
    std::vector<std::int64_t> words(static_cast<std::size_t>(b) / sizeof(std::int64_t));
    if (b > 0) std::memcpy(words.data(), s, static_cast<std::size_t>(b));
    sent.push_back(std::move(words));
    counting_communicator::all_gatherv(s, b, r, c, o);
  }
};

}  // namespace

TEST_CASE("gather_step_metadata: S = 1 sends the words of a batch without segments") {
  std::mt19937_64 rng(140204);
  for (const bool segmented : {false, true}) {
    const auto batches = random_batches(rng, 4, segmented);
    std::vector<std::vector<std::vector<std::int64_t>>> sent(4);
    std::vector<std::string> failures(4);
    orchmllm::local::run(
        4,
        [&](orchmllm::local::communicator& comm) {
          recording_communicator rec{{comm}, {}};
          const auto meta = orchmllm::gather_step_metadata(
              rec, declarations(true), batches[static_cast<std::size_t>(comm.rank())]);
          const auto want = orchmllm::make_step_metadata(batches, 2);
          for (std::size_t k = 0; k < 2; ++k)
            if (meta.modalities[k].segments != want.modalities[k].segments ||
                meta.modalities[k].parent != want.modalities[k].parent ||
                meta.modalities[k].llm_tokens != want.modalities[k].llm_tokens)
              failures[static_cast<std::size_t>(comm.rank())] = "gathered metadata differs";
          sent[static_cast<std::size_t>(comm.rank())] = std::move(rec.sent);
        },
        {.timeout = 60s});
    for (std::size_t r = 0; r < 4; ++r) {
      INFO("segmented ", segmented, ", rank ", r, " ", failures[r]);
      CHECK(failures[r].empty());
      // The format before segments: text tokens, then (modality, parent, length, rows, tokens)
      // per sub-item; S − 1 in the high half of the modality word.
      std::vector<std::int64_t> words = batches[r].text_tokens;
      for (const auto& si : batches[r].sub_items)
        words.insert(words.end(), {si.modality + ((si.segments - 1) << 32), si.parent,
                                   si.encoder_length, si.input_rows, si.llm_tokens});
      REQUIRE(sent[r].size() == 1);
      CHECK(sent[r][0] == words);
      bool any = false;
      for (const auto& si : batches[r].sub_items) any = any || si.segments != 1;
      if (!any) {  // literally the old words
        std::vector<std::int64_t> old = batches[r].text_tokens;
        for (const auto& si : batches[r].sub_items)
          old.insert(old.end(), {std::int64_t{si.modality}, si.parent, si.encoder_length,
                                 si.input_rows, si.llm_tokens});
        CHECK(sent[r][0] == old);
      }
    }
  }
}
