// Tests of the step simulator (bench/support/simulator.hpp) and of `orchmllm-bench simulate`
// (bench/cli/simulate.hpp): exact compute figures on a hand-made batch, the all-to-all count
// and the guarantees each scenario has (and only those), determinism, bad options, and the
// subcommand's JSON keys and exit codes.

#include "bench/support/simulator.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cli/file_io.hpp"
#include "bench/cli/simulate.hpp"
#include "bench/cli/trace_csv.hpp"
#include "support/scratch_dir.hpp"

using namespace orchmllm;
using namespace orchmllm::bench;

namespace {

// Four ranks on two nodes of two; both modalities; rank 3 has no sub-item.
workload_batch tiny_batch() {
  workload_batch w;
  w.options.name = workload_name::omni_pretrain;
  w.options.ranks = 4;
  w.options.samples_per_rank = 2;
  w.ranks.resize(4);
  w.ranks[0].text_tokens = {10, 20};
  w.ranks[0].sub_items = {{vision_modality, 0, 64, 64, 16}, {audio_modality, 1, 1500, 300, 75}};
  w.ranks[1].text_tokens = {5};
  w.ranks[1].sub_items = {{vision_modality, 0, 256, 256, 64}, {vision_modality, 0, 16, 16, 4}};
  w.ranks[2].text_tokens = {30, 7};
  w.ranks[2].sub_items = {{audio_modality, 0, 3000, 3500, 875}};
  w.ranks[3].text_tokens = {1};
  return w;
}

sim_options tiny_options(scenario s) {
  sim_options o;
  o.workload = tiny_batch().options;
  o.gpus_per_node = 2;
  o.which = s;
  if (s == scenario::cells) o.micro_batch_tokens = 1000;  // the longest sequence is 905
  return o;
}

sim_options omni_options(scenario s, std::int64_t ranks = 32) {
  sim_options o;
  o.workload.name = workload_name::omni_pretrain;
  o.workload.ranks = ranks;
  o.workload.samples_per_rank = 4;
  o.workload.seed = 3;
  o.gpus_per_node = 4;
  o.which = s;
  if (s == scenario::cells) o.micro_batch_tokens = std::int64_t{1} << 40;  // one micro-batch
  return o;
}

const stage_figures& stage(const sim_result& r, std::string_view name) {
  for (const auto& s : r.stages)
    if (s.name == name) return s;
  const std::string msg = "no stage " + std::string(name);
  FAIL(msg);
  return r.stages.front();
}

const transfer_figures& transfer(const sim_result& r, std::string_view name) {
  for (const auto& t : r.transfers)
    if (t.name == name) return t;
  const std::string msg = "no transfer " + std::string(name);
  FAIL(msg);
  return r.transfers.front();
}

// Every deterministic figure of two results is equal (plan_seconds excluded).
void check_same(const sim_result& a, const sim_result& b) {
  CHECK(a.unoverlapped_plan_seconds == 0);  // planning fits under the compute here
  CHECK(b.unoverlapped_plan_seconds == 0);
  CHECK(a.step_seconds == b.step_seconds);
  CHECK(a.compute_seconds == b.compute_seconds);
  CHECK(a.comm_seconds == b.comm_seconds);
  CHECK(a.metadata_seconds == b.metadata_seconds);
  CHECK(a.mfu == b.mfu);
  CHECK(a.overhead_fraction == b.overhead_fraction);
  CHECK(a.model_flops == b.model_flops);
  CHECK(a.inter_node_bytes == b.inter_node_bytes);
  CHECK(a.moved_bytes == b.moved_bytes);
  CHECK(a.alltoalls == b.alltoalls);
  REQUIRE(a.stages.size() == b.stages.size());
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    CHECK(a.stages[i].name == b.stages[i].name);
    CHECK(a.stages[i].imbalance == b.stages[i].imbalance);
    CHECK(a.stages[i].seconds == b.stages[i].seconds);
    CHECK(a.stages[i].micro_batches == b.stages[i].micro_batches);
  }
  REQUIRE(a.transfers.size() == b.transfers.size());
  for (std::size_t i = 0; i < a.transfers.size(); ++i) {
    CHECK(a.transfers[i].name == b.transfers[i].name);
    CHECK(a.transfers[i].moved_bytes == b.transfers[i].moved_bytes);
    CHECK(a.transfers[i].inter_node_bytes == b.transfers[i].inter_node_bytes);
    CHECK(a.transfers[i].seconds == b.transfers[i].seconds);
    CHECK(a.transfers[i].used == b.transfers[i].used);
  }
}

}  // namespace

TEST_CASE("models and scenario names") {
  const auto m7 = model_by_name("7b");
  CHECK(m7.name == "7b");
  CHECK(m7.llm.hidden == 4096);
  CHECK(m7.llm.vocab == 32000);
  CHECK(m7.output_row_bytes() == 8192);
  CHECK(m7.vision.hidden == 1280);
  CHECK_FALSE(m7.vision.causal);
  CHECK(m7.audio.heads == 20);
  const auto m72 = model_by_name("72b");
  CHECK(m72.llm.hidden == 8192);
  CHECK(m72.llm.layers == 80);
  CHECK(m72.llm.kv_heads == 8);
  CHECK(m72.llm.vocab == 152064);
  CHECK(m72.output_row_bytes() == 16384);
  CHECK_THROWS_AS((void)model_by_name("13b"), invalid_argument_error);
  for (auto s : all_scenarios) CHECK(parse_scenario(to_string(s)) == s);
  CHECK(to_string(scenario::llm_only) == "llm-only");
  CHECK(to_string(scenario::per_stage) == "per-stage");
  CHECK(to_string(scenario::split) == "split");
  CHECK(to_string(scenario::cells) == "cells");
  CHECK(all_scenarios.back() == scenario::cells);
  CHECK_THROWS_AS((void)parse_scenario("llm_only"), invalid_argument_error);
}

TEST_CASE("none: the compute figures follow the formula exactly and nothing moves") {
  const auto w = tiny_batch();
  const auto o = tiny_options(scenario::none);
  const auto r = simulate(w, o);
  const transformer_flops_cost fv(o.model.vision), fa(o.model.audio), fl(o.model.llm);
  const double rate = o.peak_flops * o.achievable;
  // Per-rank loads, written out by hand from tiny_batch().
  const std::vector<double> vision = {fv(64), fv(256) + fv(16), 0, 0};
  const std::vector<double> audio = {1.0 * fa(1500), 0, 1.0 * fa(3000), 0};
  const std::vector<double> llm = {fl(10 + 16) + fl(20 + 75), fl(5 + 64 + 4), fl(30 + 875) + fl(7),
                                   fl(1)};
  auto seconds = [&](const std::vector<double>& l) {
    return *std::max_element(l.begin(), l.end()) / rate;
  };
  auto imbalance = [&](const std::vector<double>& l) {
    double sum = 0;
    for (double x : l) sum += x;
    return *std::max_element(l.begin(), l.end()) / (sum / 4);
  };
  REQUIRE(r.stages.size() == 3);
  CHECK(r.stages[0].name == "vision");
  CHECK(r.stages[1].name == "audio");
  CHECK(r.stages[2].name == "llm");
  CHECK(stage(r, "vision").seconds == seconds(vision));
  CHECK(stage(r, "audio").seconds == seconds(audio));
  CHECK(stage(r, "llm").seconds == seconds(llm));
  CHECK(stage(r, "vision").imbalance == imbalance(vision));
  CHECK(stage(r, "audio").imbalance == imbalance(audio));
  CHECK(stage(r, "llm").imbalance == imbalance(llm));
  CHECK(r.compute_seconds == seconds(vision) + seconds(audio) + seconds(llm));
  double flops = fv(64) + fv(256) + fv(16) + fa(1500) + fa(3000);
  for (double x : llm) flops += x;
  CHECK(r.model_flops == doctest::Approx(flops).epsilon(1e-14));
  CHECK(r.comm_seconds == 0);
  CHECK(r.moved_bytes == 0);
  CHECK(r.inter_node_bytes == 0);
  CHECK(r.alltoalls == 0);
  CHECK(r.transfers.empty());
  CHECK(r.plan_seconds == 0);
  CHECK(r.metadata_seconds == 0);
  CHECK(r.step_seconds == r.compute_seconds);
  CHECK(r.overhead_fraction == 0);
  CHECK(r.mfu == r.model_flops / (r.step_seconds * 4 * o.peak_flops));
  CHECK(r.ranks == 4);
  CHECK(r.nodes == 2);
  CHECK(r.encoder_stages == 2);
}

TEST_CASE("measured costs in seconds, row widths, sync per step and blocking planning") {
  const auto w = tiny_batch();
  // Per-item costs in seconds (a calibrated run's): stage time = max over ranks of Σ cost.
  const quadratic_cost cv{0.01, 1e-4, 1e-7}, ca{0.02, 2e-5, 0}, cl{0.005, 2e-4, 3e-7};
  const std::vector<double> vision = {cv(64), cv(256) + cv(16), 0, 0};
  const std::vector<double> audio = {ca(1500), 0, ca(3000), 0};
  const std::vector<double> llm = {cl(10 + 16) + cl(20 + 75), cl(5 + 64 + 4), cl(30 + 875) + cl(7),
                                   cl(1)};
  const auto max_of = [](const std::vector<double>& l) {
    return *std::max_element(l.begin(), l.end());
  };
  auto o = tiny_options(scenario::none);
  o.seconds_costs = {cv, ca, cl};
  const auto stage_sync = simulate(w, o);
  CHECK(stage(stage_sync, "vision").seconds == max_of(vision));
  CHECK(stage(stage_sync, "audio").seconds == max_of(audio));
  CHECK(stage(stage_sync, "llm").seconds == max_of(llm));
  CHECK(stage_sync.compute_seconds == max_of(vision) + max_of(audio) + max_of(llm));
  // The useful FLOPs stay the model's, whatever the stage times.
  CHECK(stage_sync.model_flops == simulate(w, tiny_options(scenario::none)).model_flops);

  // sync per step: without rearrangement the whole step runs back to back on every rank.
  o.sync = sync_scope::step;
  const auto step_sync = simulate(w, o);
  std::vector<double> sum(4);
  for (std::size_t r = 0; r < 4; ++r) sum[r] = vision[r] + audio[r] + llm[r];
  CHECK(step_sync.compute_seconds == doctest::Approx(max_of(sum)).epsilon(1e-15));
  CHECK(step_sync.compute_seconds < stage_sync.compute_seconds);
  CHECK(stage(step_sync, "llm").seconds == max_of(llm));  // stage figures unchanged

  // With rearrangement: the encoders back to back, then the LLM after its all-to-alls.
  for (auto s : {scenario::llm_only, scenario::per_stage, scenario::full}) {
    CAPTURE(to_string(s));
    auto f = tiny_options(s);
    f.seconds_costs = {cv, ca, cl};
    const auto staged = simulate(w, f);
    f.sync = sync_scope::step;
    const auto stepped = simulate(w, f);
    CHECK(stepped.compute_seconds <= staged.compute_seconds);
    CHECK(stepped.compute_seconds >=
          stage(staged, "llm").seconds +
              std::max(stage(staged, "vision").seconds, stage(staged, "audio").seconds));
    if (s == scenario::llm_only) {  // encoders where their items were sampled
      std::vector<double> enc(4);
      for (std::size_t r = 0; r < 4; ++r) enc[r] = vision[r] + audio[r];
      CHECK(stepped.compute_seconds ==
            doctest::Approx(max_of(enc) + stage(staged, "llm").seconds).epsilon(1e-15));
    }
    // Blocking planning adds the whole metadata + planning time.
    f.overlap_planning = false;
    const auto blocking = simulate(w, f);
    CHECK(blocking.unoverlapped_plan_seconds == blocking.metadata_seconds + blocking.plan_seconds);
    CHECK(blocking.step_seconds ==
          blocking.compute_seconds + blocking.comm_seconds + blocking.unoverlapped_plan_seconds);
  }

  // Row widths: the bytes of every transfer follow them (identity mapping: the same rows move).
  auto a = tiny_options(scenario::per_stage);
  auto b = a;
  b.vision_row_bytes = 384;
  b.output_row_bytes = 1024;
  b.text_row_bytes = 16;
  const auto ra = simulate(w, a), rb = simulate(w, b);
  CHECK(transfer(rb, "vision.input").moved_bytes * 2352 ==
        transfer(ra, "vision.input").moved_bytes * 384);
  CHECK(transfer(rb, "vision.output.to_llm").moved_bytes * a.model.output_row_bytes() ==
        transfer(ra, "vision.output.to_llm").moved_bytes * 1024);
  CHECK(transfer(rb, "text").moved_bytes * 8 == transfer(ra, "text").moved_bytes * 16);
  CHECK(transfer(rb, "audio.input").moved_bytes == transfer(ra, "audio.input").moved_bytes);
  CHECK(to_string(sync_scope::step) == "step");
  CHECK(to_string(sync_scope::stage) == "stage");
}

TEST_CASE(
    "all-to-alls: 0 / 2K+1 / 5K+1 / 3K+1 / 3K+1 / 3K+1 / 3K+1, K = encoder stages with "
    "items") {
  const auto w = tiny_batch();
  const int expected[] = {0, 5, 11, 7, 7, 7, 7};  // K = 2
  for (std::size_t i = 0; i < all_scenarios.size(); ++i) {
    CAPTURE(to_string(all_scenarios[i]));
    const auto r = simulate(w, tiny_options(all_scenarios[i]));
    CHECK(r.alltoalls == expected[i]);
    CHECK(static_cast<int>(r.transfers.size()) == r.alltoalls);
  }
  // vl-sft has no audio: K = 1.
  sim_options o;
  o.workload.name = workload_name::vl_sft;
  o.workload.ranks = 16;
  o.workload.samples_per_rank = 4;
  const auto vl = make_workload(o.workload);
  const int expected_vl[] = {0, 3, 6, 4, 4, 4, 4};
  for (std::size_t i = 0; i < all_scenarios.size(); ++i) {
    CAPTURE(to_string(all_scenarios[i]));
    o.which = all_scenarios[i];
    o.micro_batch_tokens = o.which == scenario::cells ? std::int64_t{1} << 40 : 0;
    const auto r = simulate(vl, o);
    CHECK(r.encoder_stages == 1);
    CHECK(r.alltoalls == expected_vl[i]);
    CHECK(stage(r, "audio").seconds == 0);
    CHECK(stage(r, "audio").imbalance == 1);
  }
  // The transfers of each scheme.
  const auto per_stage = simulate(w, tiny_options(scenario::per_stage));
  for (const char* n : {"vision.input", "vision.output.to_origin", "vision.output.to_llm",
                        "vision.gradient.to_origin", "vision.gradient.to_encoder", "text"})
    CHECK(transfer(per_stage, n).seconds >= 0);
  const auto llm_only = simulate(w, tiny_options(scenario::llm_only));
  for (const char* n :
       {"vision.output", "vision.gradient", "audio.output", "audio.gradient", "text"})
    CHECK(transfer(llm_only, n).seconds >= 0);
}

TEST_CASE("transfer figures are the route model's and the plan's bytes") {
  const auto w = tiny_batch();
  const auto o = tiny_options(scenario::full);
  const auto r = simulate(w, o);
  // Recompute the text all-to-all independently from plan_step.
  const auto meta = make_step_metadata(w.ranks, 2);
  const auto topo = topology::uniform(4, 2);
  const auto step = plan_step(make_declarations(o.model, scenario::full), meta, topo);
  std::vector<std::int64_t> text;
  for (auto t : meta.text_tokens) text.push_back(8 * t);
  const auto rt = route::build(step.llm, text, topo, 0, schedule::automatic);
  CHECK(transfer(r, "text").seconds == rt.predicted_seconds());
  std::int64_t moved = 0, inter = 0;
  for (rank_t s = 0; s < 4; ++s)
    for (auto g = meta.sample_offsets[static_cast<std::size_t>(s)];
         g < meta.sample_offsets[static_cast<std::size_t>(s) + 1]; ++g) {
      const auto to = step.llm.destination_of(g).rank;
      if (to != s) moved += text[static_cast<std::size_t>(g)];
      if (topo.node_of(to) != topo.node_of(s)) inter += text[static_cast<std::size_t>(g)];
    }
  CHECK(transfer(r, "text").moved_bytes == moved);
  CHECK(transfer(r, "text").inter_node_bytes == inter);
  // Sums and the step.
  double comm = 0;
  std::int64_t all_moved = 0, all_inter = 0;
  for (const auto& t : r.transfers) {
    comm += t.seconds;
    all_moved += t.moved_bytes;
    all_inter += t.inter_node_bytes;
  }
  CHECK(r.comm_seconds == comm);
  CHECK(r.moved_bytes == all_moved);
  CHECK(r.inter_node_bytes == all_inter);
  // Metadata all-gather: ⌈log2 4⌉ · 10 µs + (48·4 + 8·(6 + 5·5)) · 3/4 / 48e9.
  CHECK(r.metadata_seconds ==
        doctest::Approx(2 * 10e-6 + (48.0 * 4 + 8.0 * (6 + 5 * 5)) * 0.75 / 48e9).epsilon(1e-12));
  CHECK(r.plan_seconds == r.plan_step_seconds + r.route_seconds);
  CHECK(r.unoverlapped_plan_seconds ==
        std::max(0.0, r.metadata_seconds + r.plan_seconds - r.compute_seconds));
  CHECK(r.step_seconds == r.compute_seconds + r.comm_seconds + r.unoverlapped_plan_seconds);
  CHECK(r.overhead_fraction == (r.comm_seconds + r.unoverlapped_plan_seconds) / r.step_seconds);
  CHECK(r.mfu == r.model_flops / (r.step_seconds * 4 * o.peak_flops));
}

TEST_CASE("scenarios keep the guarantees of their balancers and mappings") {
  const auto o = omni_options(scenario::none);
  const auto w = make_workload(o.workload);
  std::vector<sim_result> r;
  for (auto s : all_scenarios) r.push_back(simulate(w, omni_options(s)));
  const auto &none = r[0], &llm_only = r[1], &per_stage = r[2], &full = r[3], &beyond = r[4];
  REQUIRE(full.encoder_stages == 2);
  // Useful work is the same everywhere; mfu follows it exactly.
  for (const auto& x : r) {
    CHECK(x.model_flops == none.model_flops);
    CHECK(x.mfu == x.model_flops / (x.step_seconds * 32 * o.peak_flops));
  }
  // llm-only leaves the encoders where they were.
  CHECK(stage(llm_only, "vision").seconds == stage(none, "vision").seconds);
  CHECK(stage(llm_only, "audio").seconds == stage(none, "audio").seconds);
  // Same bins in per-stage and full (same balancer on the same layouts; mappings only permute).
  for (const char* n : {"vision", "audio", "llm"}) {
    CHECK(stage(per_stage, n).seconds == stage(full, n).seconds);
    CHECK(stage(per_stage, n).imbalance == stage(full, n).imbalance);
  }
  CHECK(stage(llm_only, "llm").seconds == stage(full, "llm").seconds);
  // transport minimises inter-node bytes over all bijections of the same bins; the encoder
  // input all-to-all carries exactly the bytes the mapping counted.
  for (const char* n : {"vision.input", "audio.input"}) {
    CAPTURE(n);
    CHECK(transfer(full, n).inter_node_bytes <= transfer(per_stage, n).inter_node_bytes);
  }
  const double eps = 1 + 1e-12;
  // Padded audio: `automatic` runs the exact padded algorithm, optimal, so never above the
  // sampled placement. Packed stages: automatic is never worse than lpt, which is within
  // 4/3 − 1/(3d) of the optimum (Graham), itself at most the sampled placement.
  CHECK(stage(full, "audio").seconds <= stage(none, "audio").seconds * eps);
  const double graham = 4.0 / 3.0 - 1.0 / (3.0 * 32);
  for (const char* n : {"vision", "llm"})
    CHECK(stage(full, n).seconds <= graham * stage(none, n).seconds * eps);
  // locality: makespan within its tolerance (0.001) of automatic's.
  for (const char* n : {"vision", "audio", "llm"})
    CHECK(stage(beyond, n).seconds <= stage(full, n).seconds * 1.001 * eps);
  // gap_tolerance: every stage within (1 + gap) of gap 0's slowest rank (the stage times are
  // the balancers' costs over one rate), and the useful work unchanged.
  {
    auto go = o;
    go.which = scenario::full;
    go.gap_tolerance = 0.02;
    const auto gapped = simulate(w, go);
    CHECK(gapped.model_flops == full.model_flops);
    for (const char* n : {"vision", "audio", "llm"}) {
      CAPTURE(n);
      CHECK(stage(gapped, n).seconds <= stage(full, n).seconds * 1.02 * eps);
    }
  }
  // auction_tolerance: only the mapping changes (a permutation of the same bins: the same stage
  // times); the declarations hold an auction of that tolerance, and a scenario without an
  // auction ignores it.
  {
    auto lo = o;
    lo.which = scenario::full;
    lo.auction_tolerance = 1.0;
    const auto loose = simulate(w, lo);
    for (const char* n : {"vision", "audio", "llm"}) {
      CAPTURE(n);
      CHECK(stage(loose, n).seconds == stage(full, n).seconds);
    }
    // The auction of a stage's mapper, or null.
    const auto auction_of = [](const stage_mapper& m) {
      return m.builtin() ? m.builtin()->get_if<mappers::auction>() : nullptr;
    };
    const auto plain = make_declarations(o.model, scenario::full);
    REQUIRE(auction_of(plain.llm.mapper) != nullptr);
    CHECK(auction_of(plain.llm.mapper)->tolerance == mappers::auction::default_tolerance);
    const auto tuned = make_declarations(o.model, scenario::full, 0, 0.2);
    for (const auto& e : tuned.encoders) {
      REQUIRE(auction_of(e.mapper) != nullptr);
      CHECK(auction_of(e.mapper)->tolerance == 0.2);
    }
    CHECK(tuned.llm.mapper.name() == "auction");
    CHECK(fingerprint(tuned) != fingerprint(plain));
    const auto bottlenecked = make_declarations(o.model, scenario::beyond, 0, 0.2);
    REQUIRE(bottlenecked.llm.mapper.builtin() != nullptr);
    CHECK(bottlenecked.llm.mapper.builtin()->get_if<mappers::bottleneck>() != nullptr);
    CHECK(fingerprint(bottlenecked) == fingerprint(make_declarations(o.model, scenario::beyond)));
  }
  // per-stage moves encoder outputs and gradients twice: more all-to-alls than full.
  CHECK(per_stage.alltoalls == 11);
  CHECK(full.alltoalls == 7);
  CHECK(none.comm_seconds == 0);
  CHECK(none.inter_node_bytes == 0);
}

TEST_CASE("segments: a video costs the sum of its temporal groups") {
  // One rank, one video of 4 segments (groups) of 64 patches and one image of 64 patches.
  workload_batch w;
  w.options.name = workload_name::video_heavy;
  w.options.ranks = 1;
  w.ranks.resize(1);
  w.ranks[0].text_tokens = {10, 10};
  w.ranks[0].sub_items = {vision_sub_item(64, 4), vision_sub_item(16)};
  w.ranks[0].sub_items[1].parent = 1;
  sim_options o;
  o.workload = w.options;
  o.gpus_per_node = 1;
  o.which = scenario::none;
  const auto r = simulate(w, o);
  const auto vit = transformer_flops_cost(o.model.vision);
  const double rate = o.peak_flops * o.achievable;
  CHECK(stage(r, "vision").seconds == doctest::Approx((4 * vit(64) + vit(64)) / rate));
  CHECK(stage(r, "vision").seconds < (vit(256) + vit(64)) / rate);  // not one 256-patch sequence
}

TEST_CASE("split: vision balanced over pieces of videos, never worse than full here") {
  // 16 ranks x 2 samples of video-heavy (seed 7), 2 nodes of 8.
  sim_options o{.workload = {workload_name::video_heavy, 16, 2, 7}, .gpus_per_node = 8};
  const auto w = make_workload(o.workload);
  o.which = scenario::none;
  const auto none = simulate(w, o);
  o.which = scenario::full;
  const auto full = simulate(w, o);
  o.which = scenario::split;
  const auto split = simulate(w, o);
  // The same useful work, redistributed.
  CHECK(split.model_flops == full.model_flops);
  CHECK(split.alltoalls == full.alltoalls);
  // Whole videos cannot be balanced here (full stays far from 1); pieces can.
  CHECK(stage(full, "vision").imbalance > 1.2);
  CHECK(stage(split, "vision").imbalance <= stage(full, "vision").imbalance);
  CHECK(stage(split, "vision").imbalance < 1.05);
  CHECK(stage(split, "vision").seconds <= stage(full, "vision").seconds);
  // The LLM stage is planned as in full.
  CHECK(stage(split, "llm").seconds == stage(full, "llm").seconds);
  CHECK(split.step_seconds < none.step_seconds);
  // Deterministic: the same figures again (check_same also requires planning to fit).
  check_same(split, simulate(w, o));
  // Without segmented sub-items (vl-sft: images only), split is full.
  sim_options v = o;
  v.workload.name = workload_name::vl_sft;
  const auto vl = make_workload(v.workload);
  v.which = scenario::full;
  const auto vl_full = simulate(vl, v);
  v.which = scenario::split;
  check_same(simulate(vl, v), vl_full);
}

TEST_CASE("micro-batches: the LLM pays Σ_m max_r; cells plans it, rank totals leave the cut") {
  auto o = omni_options(scenario::full, 64);
  o.workload.samples_per_rank = 8;
  const auto w = make_workload(o.workload);
  const auto meta = make_step_metadata(w.ranks, 2);
  std::int64_t longest = 0, total = 0;
  for (std::int64_t g = 0; g < meta.num_samples(); ++g) {
    longest = std::max(longest, meta.sequence_length(g));
    total += meta.sequence_length(g);
  }
  const auto once = simulate(w, o);
  // A cap of about half a rank's tokens: two or three micro-batches per rank.
  o.micro_batch_tokens = std::max(longest, total / 64 / 2);
  const auto full = simulate(w, o);
  o.which = scenario::cells;
  const auto cells = simulate(w, o);
  // Only the LLM's compute changes with the cap; per micro-batch it cannot cost less.
  CHECK(stage(full, "vision").seconds == stage(once, "vision").seconds);
  CHECK(stage(full, "audio").seconds == stage(once, "audio").seconds);
  CHECK(stage(full, "llm").imbalance == stage(once, "llm").imbalance);
  CHECK(stage(full, "llm").seconds >= stage(once, "llm").seconds);
  CHECK(stage(full, "llm").micro_batches == 0);
  CHECK(full.comm_seconds == once.comm_seconds);
  // cells: the same encoders and traffic shape, the LLM balanced per micro-batch. Its
  // objective is at least the rank-level bound (a micro-batch's max is at least its mean) and,
  // on this batch, below the greedy cut of the rank-total plan.
  CHECK(stage(cells, "vision").seconds == stage(full, "vision").seconds);
  CHECK(cells.alltoalls == full.alltoalls);
  const auto m = stage(cells, "llm").micro_batches;
  CHECK(m >= 2);
  const double rate = o.peak_flops * o.achievable;
  const double mean_rank = stage(once, "llm").seconds / stage(once, "llm").imbalance;
  CHECK(stage(cells, "llm").seconds >= mean_rank * (1 - 1e-12));
  CHECK(stage(cells, "llm").seconds < stage(full, "llm").seconds);
  double compute = 0;
  for (const auto& st : cells.stages) compute += st.seconds;
  CHECK(cells.compute_seconds == compute);
  CHECK(cells.step_seconds ==
        cells.compute_seconds + cells.comm_seconds + cells.unoverlapped_plan_seconds);
  // The planned cells are plan_step's with the cap on the LLM stage.
  const auto decl = make_declarations(o.model, scenario::cells, 0,
                                      mappers::auction::default_tolerance, o.micro_batch_tokens);
  REQUIRE(decl.llm.micro_batches.has_value());
  CHECK(decl.llm.micro_batches->limits.tokens == o.micro_batch_tokens);
  const auto step = plan_step(decl, meta, topology::uniform(64, 4));
  CHECK(step.micro_batches.back().count == m);
  CHECK(stage(cells, "llm").seconds == step.stages.back().objective_after / rate);
}

TEST_CASE("determinism: everything but plan_seconds repeats") {
  const auto w = make_workload(omni_options(scenario::none, 16).workload);
  for (auto s : all_scenarios) {
    CAPTURE(to_string(s));
    auto o = omni_options(s, 16);
    o.sched = s == scenario::full ? schedule::node_wise : schedule::automatic;
    check_same(simulate(w, o), simulate(w, o));
  }
  // The generating overload simulates the same batch.
  const auto o = omni_options(scenario::beyond, 16);
  check_same(simulate(o), simulate(w, o));
}

TEST_CASE("schedules and bandwidths change only the communication figures") {
  const auto w = tiny_batch();
  auto o = tiny_options(scenario::full);
  o.sched = schedule::direct;
  const auto direct = simulate(w, o);
  for (const auto& t : direct.transfers) CHECK(t.used == schedule::direct);
  o.links.inter_bandwidth /= 4;
  const auto slow = simulate(w, o);
  CHECK(slow.compute_seconds == direct.compute_seconds);
  CHECK(slow.inter_node_bytes == direct.inter_node_bytes);
  CHECK(slow.comm_seconds > direct.comm_seconds);
  o = tiny_options(scenario::full);
  o.achievable = 0.25;
  const auto half = simulate(w, o);
  CHECK(half.compute_seconds == doctest::Approx(2 * direct.compute_seconds).epsilon(1e-12));
}

TEST_CASE("bad options throw invalid_argument_error") {
  const auto w = tiny_batch();
  auto bad = [&](auto change) {
    auto o = tiny_options(scenario::full);
    change(o);
    CHECK_THROWS_AS((void)simulate(w, o), invalid_argument_error);
  };
  bad([](sim_options& o) { o.gpus_per_node = 0; });
  bad([](sim_options& o) { o.peak_flops = 0; });
  bad([](sim_options& o) { o.peak_flops = std::numeric_limits<double>::quiet_NaN(); });
  bad([](sim_options& o) { o.achievable = 0; });
  bad([](sim_options& o) { o.achievable = 1.5; });
  bad([](sim_options& o) { o.gap_tolerance = -1; });
  bad([](sim_options& o) { o.auction_tolerance = 0; });
  bad([](sim_options& o) { o.auction_tolerance = 1.5; });
  bad([](sim_options& o) { o.links.inter_bandwidth = 0; });
  bad([](sim_options& o) { o.model.llm.heads = 3; });  // does not divide hidden
  bad([](sim_options& o) { o.micro_batch_tokens = -1; });
  bad([](sim_options& o) { o.which = scenario::cells; });   // without micro_batch_tokens
  bad([](sim_options& o) { o.micro_batch_tokens = 100; });  // below the longest sequence (905)
  bad([](sim_options& o) {  // micro-batches synchronise every micro-batch
    o.sync = sync_scope::step;
    o.micro_batch_tokens = 1000;
  });
  bad([](sim_options& o) { o.vision_row_bytes = -1; });
  bad([](sim_options& o) { o.seconds_costs[2] = quadratic_cost{-1, 1, 0}; });
  auto o = tiny_options(scenario::full);
  CHECK_THROWS_AS((void)simulate(workload_batch{}, o), invalid_argument_error);
  auto malformed = w;
  malformed.ranks[1].sub_items[0].modality = 2;  // only vision and audio exist
  CHECK_THROWS_AS((void)simulate(malformed, o), invalid_argument_error);
  o.workload.ranks = 0;
  CHECK_THROWS_AS((void)simulate(o), invalid_argument_error);
}

TEST_CASE("orchmllm-bench simulate: JSON keys and exit codes") {
  auto run = [](std::vector<std::string> args, std::string& out, std::string& err) {
    std::ostringstream o, e;
    int rc = 0;
    try {
      const auto parsed = tool::parse_flags(tool::simulate_command().flags, args);
      rc = tool::run_simulate(parsed, o, e);
    } catch (const tool::usage_error& x) {  // what tool::run turns into exit 2
      e << x.what();
      rc = tool::exit_error;
    }
    out = o.str();
    err = e.str();
    return rc;
  };
  // The message line (the usage line after it names every flag).
  auto first_line = [](const std::string& text) { return text.substr(0, text.find('\n')); };
  std::string out, err;
  REQUIRE(run({"--workload",
               "omni-pretrain",
               "--ranks",
               "16",
               "--gpus-per-node",
               "8",
               "--scenario",
               "full",
               "--samples-per-rank",
               "2",
               "--seed",
               "5",
               "--model",
               "72b",
               "--schedule",
               "node-wise",
               "--achievable",
               "0.4",
               "--gap-tolerance",
               "0.002",
               "--auction-tolerance",
               "0.2"},
              out, err) == 0);
  CHECK(err.empty());
  CHECK(std::count(out.begin(), out.end(), '\n') == 1);
  for (const char* key : {"\"simulated\":true",
                          "\"scenario\":\"full\"",
                          "\"workload\":\"omni-pretrain\"",
                          "\"ranks\":16",
                          "\"gpus_per_node\":8",
                          "\"nodes\":2",
                          "\"model\":\"72b\"",
                          "\"seed\":5",
                          "\"samples_per_rank\":2",
                          "\"schedule\":\"node-wise\"",
                          "\"achievable\":0.4",
                          "\"gap_tolerance\":0.002",
                          "\"auction_tolerance\":0.2",
                          "\"step_seconds\":",
                          "\"compute_seconds\":",
                          "\"comm_seconds\":",
                          "\"plan_seconds\":",
                          "\"plan_step_seconds\":",
                          "\"route_seconds\":",
                          "\"overhead_fraction\":",
                          "\"mfu\":",
                          "\"inter_node_bytes\":",
                          "\"moved_bytes\":",
                          "\"alltoalls\":7",
                          "\"stages\":[{\"name\":\"vision\",\"imbalance\":",
                          "{\"name\":\"audio\",\"imbalance\":",
                          "{\"name\":\"llm\",\"imbalance\":",
                          "\"transfers\":[{\"name\":\"vision.input\""}) {
    CAPTURE(key);
    CHECK(out.find(key) != std::string::npos);
  }
  // The same figures as the library call.
  sim_options o;
  o.workload.name = workload_name::omni_pretrain;
  o.workload.ranks = 16;
  o.workload.samples_per_rank = 2;
  o.workload.seed = 5;
  o.gpus_per_node = 8;
  o.which = scenario::full;
  o.model = model_by_name("72b");
  o.sched = schedule::node_wise;
  o.achievable = 0.4;
  o.gap_tolerance = 0.002;
  o.auction_tolerance = 0.2;
  const auto r = simulate(o);
  CHECK(out.find("\"compute_seconds\":" + tool::json_number(r.compute_seconds)) !=
        std::string::npos);
  CHECK(out.find("\"inter_node_bytes\":" + std::to_string(r.inter_node_bytes)) !=
        std::string::npos);

  // Defaults: model 7b, schedule auto, 8 samples per rank.
  REQUIRE(
      run({"--workload", "vl-sft", "--ranks", "8", "--gpus-per-node", "4", "--scenario", "none"},
          out, err) == 0);
  CHECK(out.find("\"model\":\"7b\"") != std::string::npos);
  CHECK(out.find("\"schedule\":\"auto\"") != std::string::npos);
  CHECK(out.find("\"samples_per_rank\":8") != std::string::npos);
  CHECK(out.find("\"gap_tolerance\":0,") != std::string::npos);
  CHECK(out.find("\"auction_tolerance\":0.01,") != std::string::npos);
  CHECK(out.find("\"alltoalls\":0") != std::string::npos);

  // Usage errors: exit 2, nothing on stdout, the message names the flag.
  const std::vector<std::string> base = {"--workload", "vl-sft",          "--ranks",
                                         "8",          "--gpus-per-node", "4"};
  auto usage = [&](std::vector<std::string> extra, const std::string& flag) {
    CAPTURE(flag);
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    CHECK(run(args, out, err) == tool::exit_error);
    CHECK(out.empty());
    CHECK(first_line(err).find(flag) != std::string::npos);
  };
  usage({}, "--scenario");  // missing
  usage({"--scenario", "all"}, "--scenario");
  // split is a scenario of its own.
  REQUIRE(run({"--workload", "video-heavy", "--ranks", "8", "--gpus-per-node", "4", "--scenario",
               "split", "--samples-per-rank", "2"},
              out, err) == 0);
  CHECK(out.find("\"scenario\":\"split\"") != std::string::npos);
  CHECK(out.find("\"alltoalls\":4") != std::string::npos);  // K = 1: 3K + 1
  // cells: the LLM in micro-batches under --micro-batch-tokens (needed), and its M in the JSON.
  usage({"--scenario", "cells"}, "--micro-batch-tokens");
  usage({"--scenario", "full", "--micro-batch-tokens", "-1"}, "--micro-batch-tokens");
  REQUIRE(run({"--workload", "vl-sft", "--ranks", "8", "--gpus-per-node", "4", "--scenario",
               "cells", "--micro-batch-tokens", "100000"},
              out, err) == 0);
  CHECK(out.find("\"scenario\":\"cells\"") != std::string::npos);
  CHECK(out.find("\"micro_batch_tokens\":100000") != std::string::npos);
  CHECK(out.find("\"micro_batches\":") != std::string::npos);
  REQUIRE(
      run({"--workload", "vl-sft", "--ranks", "8", "--gpus-per-node", "4", "--scenario", "full"},
          out, err) == 0);
  CHECK(out.find("micro_batch") == std::string::npos);  // without the flag, as before
  // --trace: batch --seed of a length trace, the same figures as simulate(trace_workload(...)).
  {
    const orchmllm::test::scratch_dir dir("orchmllm_simulate_trace_");
    const std::string trace = (dir.path() / "trace.csv").string();
    tool::write_file_atomically(
        trace, tool::format_trace(make_workload({workload_name::vl_sft, 4, 16, 2})));
    REQUIRE(run({"--trace", trace, "--ranks", "8", "--gpus-per-node", "4", "--scenario", "full",
                 "--samples-per-rank", "4", "--seed", "3"},
                out, err) == 0);
    CHECK(out.find("\"workload\":\"trace\",\"trace\":\"" + trace + "\"") != std::string::npos);
    sim_options t;
    t.workload.ranks = 8;
    t.gpus_per_node = 4;
    t.which = scenario::full;
    const auto rt = simulate(trace_workload(tool::read_trace_file(trace), 8, 4, 3), t);
    CHECK(out.find("\"compute_seconds\":" + tool::json_number(rt.compute_seconds)) !=
          std::string::npos);
    usage({"--scenario", "full", "--trace", trace}, "give one of --workload NAME and --trace FILE");
  }
  // Measured costs, row widths, links, sync and planning: echoed, and the library's figures.
  REQUIRE(run({"--workload",
               "vl-sft",
               "--ranks",
               "8",
               "--gpus-per-node",
               "8",
               "--scenario",
               "per-stage",
               "--vision-cost",
               "quadratic:8e-5,1e-7,0.001",
               "--llm-cost",
               "quadratic:1.5e-4,4e-7",
               "--vision-row-bytes",
               "384",
               "--output-row-bytes",
               "1024",
               "--text-row-bytes",
               "16",
               "--intra-latency",
               "1e-4",
               "--intra-bandwidth",
               "1e9",
               "--sync",
               "step",
               "--blocking-planning"},
              out, err) == 0);
  for (const char* key : {"\"sync\":\"step\"", "\"planning\":\"blocking\"",
                          "\"vision_cost\":\"quadratic:8e-05,1e-07,0.001\"",
                          "\"llm_cost\":\"quadratic:0.00015,4e-07\""}) {
    CAPTURE(key);
    CHECK(out.find(key) != std::string::npos);
  }
  CHECK(out.find("audio_cost") == std::string::npos);
  {
    sim_options m;
    m.workload.ranks = 8;
    m.gpus_per_node = 8;
    m.which = scenario::per_stage;
    m.seconds_costs[0] = quadratic_cost{0.001, 8e-5, 1e-7};
    m.seconds_costs[2] = quadratic_cost{0, 1.5e-4, 4e-7};
    m.vision_row_bytes = 384;
    m.output_row_bytes = 1024;
    m.text_row_bytes = 16;
    m.links.intra_latency = 1e-4;
    m.links.intra_bandwidth = 1e9;
    m.sync = sync_scope::step;
    m.overlap_planning = false;
    const auto rm = simulate(m);
    CHECK(out.find("\"compute_seconds\":" + tool::json_number(rm.compute_seconds)) !=
          std::string::npos);
    CHECK(out.find("\"comm_seconds\":" + tool::json_number(rm.comm_seconds)) != std::string::npos);
  }
  usage({"--scenario", "full", "--vision-cost", "cubic"}, "--vision-cost is 'cubic'");
  usage({"--scenario", "full", "--llm-cost", "linear"}, "--llm-cost is 'linear'");
  usage({"--scenario", "full", "--audio-cost", "quadratic:-1,0"}, "--audio-cost 'quadratic:-1,0'");
  usage({"--scenario", "full", "--sync", "layer"}, "--sync");
  usage({"--scenario", "full", "--sync", "step", "--micro-batch-tokens", "100000"}, "--sync");
  usage({"--scenario", "full", "--text-row-bytes", "0"}, "--text-row-bytes");
  usage({"--scenario", "full", "--intra-latency", "-1"}, "--intra-latency");
  usage({"--scenario", "full", "--model", "13b"}, "--model");
  usage({"--scenario", "full", "--schedule", "ring"}, "--schedule");
  usage({"--scenario", "full", "--achievable", "1.5"}, "--achievable");
  usage({"--scenario", "full", "--achievable", "0"}, "--achievable");
  usage({"--scenario", "full", "--gap-tolerance", "-0.1"}, "--gap-tolerance");
  usage({"--scenario", "full", "--auction-tolerance", "0"}, "--auction-tolerance");
  usage({"--scenario", "full", "--auction-tolerance", "2"}, "--auction-tolerance");
  usage({"--scenario", "full", "--inter-bandwidth", "-1"}, "--inter-bandwidth");
  usage({"--scenario", "full", "--samples-per-rank", "-1"}, "--samples-per-rank");
  CHECK(run({"--workload", "vl-sft", "--ranks", "0", "--gpus-per-node", "4", "--scenario", "full"},
            out, err) == tool::exit_error);
  CHECK(first_line(err).find("--ranks") != std::string::npos);
  CHECK(run({"--workload", "text", "--ranks", "8", "--gpus-per-node", "4", "--scenario", "full"},
            out, err) == tool::exit_error);
  CHECK(first_line(err).find("--workload") != std::string::npos);
  CHECK(run({"--workload", "vl-sft", "--ranks", "8", "--gpus-per-node", "0", "--scenario", "full"},
            out, err) == tool::exit_error);
  CHECK(first_line(err).find("--gpus-per-node") != std::string::npos);
}
