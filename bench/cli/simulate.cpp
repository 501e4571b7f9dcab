// orchmllm-bench simulate: one simulated training step (simulate.hpp).
#include "bench/cli/simulate.hpp"

#include <cmath>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <variant>

#include "bench/cli/command.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/cli/simulate_cp.hpp"
#include "bench/cli/trace_csv.hpp"
#include "bench/support/args.hpp"
#include "bench/support/simulator.hpp"
#include "orchmllm/core/text_forms.hpp"

namespace orchmllm::tool {

const command& simulate_command() {
  static const command cmd = [] {
    command c;
    c.name = "simulate";
    c.summary = "Simulate one training step of a workload under a rearrangement scenario.";
    c.flags = {
        {"workload", "NAME",
         "vl-sft, omni-pretrain, video-heavy, audio-asr (or --trace), or long-context (its own "
         "scenarios cp-none, cp-static, cp)",
         false},
        {"trace", "FILE",
         "draw the samples from a length trace (sample,image_tokens,text_tokens) instead of "
         "--workload",
         false},
        {"ranks", "D", "number of data-parallel ranks (GPUs)", true},
        {"gpus-per-node", "G", "GPUs per node (nodes are consecutive blocks of G ranks)", true},
        {"scenario", "S",
         "none, llm-only, per-stage, full, beyond, split or cells; long-context: cp-none, "
         "cp-static or cp",
         true},
        {"model", "M", "7b (LLaMA-7B-like LLM, default) or 72b (Qwen2-72B-like)", false},
        {"seed", "S", "random seed of the workload; with --trace the batch number; default 1",
         false},
        {"samples-per-rank", "K", "samples (omni-pretrain: packed sequences) per rank; default 8",
         false},
        {"achievable", "F", "fraction of peak FLOP/s a stage reaches, in (0, 1]; default 0.5",
         false},
        {"gap-tolerance", "X",
         "balancing stops within this fraction of each stage's lower bound "
         "(balancers::automatic::gap_tolerance); default 0",
         false},
        {"auction-tolerance", "X",
         "full and split map every stage by an auction within this fraction of the keepable "
         "bytes (mappers::auction::tolerance), in (0, 1]; default 0.01",
         false},
        {"peak-flops", "FLOPS", "peak FLOP/s per GPU; default 989e12 (H100 bf16 dense)", false},
        {"intra-bandwidth", "B/S", "intra-node bytes/s per GPU per direction; default 450e9",
         false},
        {"inter-bandwidth", "B/S", "inter-node bytes/s per GPU NIC per direction; default 48e9",
         false},
        {"intra-latency", "S", "intra-node seconds per message; default 3e-6", false},
        {"inter-latency", "S", "inter-node seconds per message; default 10e-6", false},
        {"schedule", "direct|node-wise|auto", "all-to-all schedule; default auto", false},
        {"vision-cost", "quadratic:A,B[,C]",
         "the vision stage's measured cost of an item in SECONDS (A*l + B*l^2 + C, l = "
         "patches), replacing its FLOPs / (peak x achievable), also for planning",
         false},
        {"audio-cost", "quadratic:A,B[,C]", "the same for the audio stage (l = frames)", false},
        {"llm-cost", "quadratic:A,B[,C]", "the same for the LLM stage (l = sequence tokens)",
         false},
        {"vision-row-bytes", "B", "bytes of a vision input row; default 2352 (a ViT patch)", false},
        {"output-row-bytes", "B", "bytes of an encoder output row; default 2 x LLM hidden", false},
        {"text-row-bytes", "B", "bytes of a text row; default 8", false},
        {"sync", "stage|step",
         "stage (default): every stage waits for its slowest rank (FSDP); step: only the "
         "all-to-alls and the step's end do (DDP), so stages with no all-to-all between them "
         "run back to back",
         false},
        {"blocking-planning", "",
         "planning runs before the step (adds metadata + planning) instead of overlapping the "
         "previous step",
         false},
        {"micro-batch-tokens", "T",
         "the LLM runs micro-batches of at most T sequence tokens, each synchronising every rank "
         "(FSDP); at least the longest sequence; default 0 (one synchronisation per step); the "
         "cells scenario needs it",
         false},
    };
    for (auto& f : simulate_cp_flags()) c.flags.push_back(std::move(f));
    c.details =
        "SIMULATED figures (simulated: true): per-stage compute = transformer FLOPs (forward +\n"
        "backward) / (peak x achievable), each stage waiting for its slowest rank; every\n"
        "all-to-all timed by the route model (latency + bytes / bandwidth per hop, slowest rank),\n"
        "not overlapped with compute; planning measured for real and overlapped with the\n"
        "previous step. Scenarios: none (no balancing), llm-only (LLM balanced, 2K+1\n"
        "all-to-alls), per-stage (every stage balanced, identity mapping, outputs via their\n"
        "origin, 5K+1), full (plan_step: automatic + auction mapping, composed routes, 3K+1),\n"
        "beyond "
        "(locality balancer + bottleneck mapping, 3K+1), split (full + splitting videos at\n"
        "temporal-group boundaries on the vision stage, 3K+1), cells (full + the LLM planned\n"
        "in cells (rank, micro-batch) under --micro-batch-tokens, 3K+1); K = encoder stages\n"
        "with items. With --micro-batch-tokens T the LLM stage takes the sum over its\n"
        "micro-batches of the slowest rank's (FSDP): the scenarios that balance rank totals cut\n"
        "each rank's received samples greedily under T, cells balances the cells.\n"
        "A video costs the sum of its temporal groups' costs (its segments).\n"
        "--vision-cost, --audio-cost and --llm-cost replace a stage's FLOPs model by a measured\n"
        "cost in seconds (python/benchmarks/real_step.py calibrates them on a real model and\n"
        "compares this figure with its measured step; docs/results.md \"Measured training\n"
        "steps\").\n"
        "--trace FILE draws the batch from a length trace as `workload --trace` does (--seed is\n"
        "the batch number; workload \"trace\", and a trace key names the file).\n"
        "stdout: one JSON object with simulated, scenario, workload, ranks, gpus_per_node,\n"
        "nodes, model, seed, samples_per_rank, schedule, step_seconds, compute_seconds,\n"
        "comm_seconds, plan_seconds (measured: plan_step_seconds + route_seconds),\n"
        "metadata_seconds, unoverlapped_plan_seconds,\n"
        "overhead_fraction, mfu, model_flops, inter_node_bytes, moved_bytes, alltoalls,\n"
        "encoder_stages, stages [{name, imbalance, seconds}; the LLM's also micro_batches with\n"
        "cells], micro_batch_tokens (with T), transfers [{name, moved_bytes,\n"
        "inter_node_bytes, seconds, schedule}] and planner (MEASURED phases: layout_seconds,\n"
        "stages_seconds, compose_seconds, route_seconds, stages [{name, balance_seconds,\n"
        "map_seconds, report_seconds}]).\n"
        "\n"
        "--workload long-context: text sequences of 1K-256K tokens (ByteScale's published mix,\n"
        "bench/support/long_context.hpp) in the LLM alone, planned by\n"
        "orchmllm::balance_context_parallel under the LLM's time model (FLOPs / (peak x\n"
        "achievable), the ring exchange of K and V over the link figures). Scenarios: cp-none\n"
        "(every sample whole, balanced), cp-static (every sample over --cp-size C ranks, as a\n"
        "fixed context-parallel size), cp (the size chosen per sample from --cp-sizes);\n"
        "--cp-token-cap and --min-shard-tokens as for plan; --micro-batches M (default 1) and\n"
        "--micro-batch-tokens T: M micro-batches per rank that each synchronise every rank\n"
        "(FSDP), a sample's shards in one. stdout: one JSON object with simulated, scenario,\n"
        "workload, ranks, gpus_per_node, model, seed, samples_per_rank, peak_flops, achievable,\n"
        "cp_sizes, cp_token_cap, min_shard_tokens, micro_batches, micro_batch_tokens,\n"
        "step_seconds, compute_seconds (the busiest rank; with micro-batches the sum over them\n"
        "of the slowest rank), lower_bound_seconds (no plan with these sizes\n"
        "computes faster), ratio, comm_seconds (the token chunks' all-to-all), plan_seconds\n"
        "(measured), unoverlapped_plan_seconds, samples, longest, sharded, chunks, groups\n"
        "[{size, samples}], max_tokens (the fullest rank) and inter_node_bytes.\n";
    c.run = &run_simulate;
    return c;
  }();
  return cmd;
}

std::string simulation_json(const bench::sim_result& r, const bench::sim_options& o,
                            const std::string& trace) {
  std::string stages = "[";
  for (const auto& s : r.stages) {
    json_object j;
    j.add("name", s.name).add("imbalance", s.imbalance).add("seconds", s.seconds);
    if (s.micro_batches > 0) j.add("micro_batches", s.micro_batches);
    // Appends rather than operator+ (GCC 12's false -Wrestrict, PR 105329).
    if (stages.size() > 1) stages += ',';
    stages.append(j.str());
  }
  stages += "]";
  std::string transfers = "[";
  for (const auto& t : r.transfers) {
    json_object j;
    j.add("name", t.name)
        .add("moved_bytes", t.moved_bytes)
        .add("inter_node_bytes", t.inter_node_bytes)
        .add("seconds", t.seconds)
        .add("schedule", to_string(t.used));
    if (transfers.size() > 1) transfers += ',';
    transfers.append(j.str());
  }
  transfers += "]";
  std::string phases = "[";
  for (const auto& s : r.planner.stages) {
    json_object j;
    j.add("name", s.name)
        .add("balance_seconds", s.balance_seconds)
        .add("map_seconds", s.map_seconds)
        .add("report_seconds", s.report_seconds);
    if (phases.size() > 1) phases += ',';
    phases.append(j.str());
  }
  phases += "]";
  json_object planner;
  planner.add("layout_seconds", r.planner.layout_seconds)
      .add("stages_seconds", r.planner.stages_seconds)
      .add("compose_seconds", r.planner.compose_seconds)
      .add("route_seconds", r.route_seconds)
      .raw("stages", phases);
  json_object j;
  j.add("simulated", true)
      .add("scenario", bench::to_string(r.which))
      .add("workload", trace.empty() ? bench::to_string(r.workload.name) : "trace");
  if (!trace.empty()) j.add("trace", trace);
  j.add("ranks", r.ranks)
      .add("gpus_per_node", r.gpus_per_node)
      .add("nodes", r.nodes)
      .add("model", r.model)
      .add("seed", r.workload.seed)
      .add("samples_per_rank", r.workload.samples_per_rank)
      .add("schedule", to_string(o.sched))
      .add("peak_flops", o.peak_flops)
      .add("achievable", o.achievable)
      .add("gap_tolerance", o.gap_tolerance)
      .add("auction_tolerance", o.auction_tolerance)
      .add("sync", bench::to_string(o.sync))
      .add("planning", o.overlap_planning ? "overlapped" : "blocking");
  static constexpr const char* cost_keys[] = {"vision_cost", "audio_cost", "llm_cost"};
  for (std::size_t k = 0; k < 3; ++k)
    if (o.seconds_costs[k]) j.add(cost_keys[k], to_text(*o.seconds_costs[k]));
  j.add("step_seconds", r.step_seconds)
      .add("compute_seconds", r.compute_seconds)
      .add("comm_seconds", r.comm_seconds)
      .add("plan_seconds", r.plan_seconds)
      .add("plan_step_seconds", r.plan_step_seconds)
      .add("route_seconds", r.route_seconds)
      .add("metadata_seconds", r.metadata_seconds)
      .add("unoverlapped_plan_seconds", r.unoverlapped_plan_seconds)
      .add("overhead_fraction", r.overhead_fraction)
      .add("mfu", r.mfu)
      .add("model_flops", r.model_flops)
      .add("inter_node_bytes", r.inter_node_bytes)
      .add("moved_bytes", r.moved_bytes)
      .add("alltoalls", r.alltoalls)
      .add("encoder_stages", r.encoder_stages);
  if (o.micro_batch_tokens > 0) j.add("micro_batch_tokens", o.micro_batch_tokens);
  j.raw("stages", stages).raw("transfers", transfers).raw("planner", planner.str());
  return j.str();
}

int run_simulate(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(simulate_command(), err, [&] {
    if (args.get("workload") == std::optional<std::string>("long-context"))
      return run_simulate_cp(args, out);
    for (const auto& f : simulate_cp_flags())
      if (args.has(f.name)) throw usage_error("--" + f.name + " needs --workload long-context");
    bench::sim_options o;
    const auto trace = args.get("trace");
    if (trace.has_value() == args.has("workload"))
      throw usage_error("give one of --workload NAME and --trace FILE");
    if (!trace) {
      const std::string workload = args.require("workload");
      try {
        o.workload.name = bench::parse_workload(workload);
      } catch (const invalid_argument_error&) {
        throw usage_error("--workload is '" + workload +
                          "', expected vl-sft, omni-pretrain, video-heavy, audio-asr or "
                          "long-context");
      }
    }
    o.workload.ranks = args.require_int("ranks", 1, max_ranks);
    o.gpus_per_node = static_cast<rank_t>(args.require_int("gpus-per-node", 1, max_ranks));
    const std::string sc = args.require("scenario");
    try {
      o.which = bench::parse_scenario(sc);
    } catch (const invalid_argument_error&) {
      throw usage_error("--scenario is '" + sc +
                        "', expected none, llm-only, per-stage, full, beyond, split or cells");
    }
    if (auto m = args.get("model")) {
      try {
        o.model = bench::model_by_name(*m);
      } catch (const invalid_argument_error&) {
        throw usage_error("--model is '" + *m + "', expected 7b or 72b");
      }
    }
    o.workload.seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0));
    o.workload.samples_per_rank = args.get_int("samples-per-rank", 8, 0, simulate_max_samples);
    if (o.workload.samples_per_rank > simulate_max_samples / o.workload.ranks)
      throw usage_error("--ranks " + std::to_string(o.workload.ranks) + " x --samples-per-rank " +
                        std::to_string(o.workload.samples_per_rank) + " exceeds " +
                        std::to_string(simulate_max_samples) + " samples");
    o.achievable = args.get_double("achievable", o.achievable);
    if (!(o.achievable > 0 && o.achievable <= 1))
      throw usage_error("--achievable is " + args.require("achievable") + ", must be in (0, 1]");
    o.gap_tolerance = args.get_double("gap-tolerance", o.gap_tolerance);
    if (!(o.gap_tolerance >= 0 && std::isfinite(o.gap_tolerance)))
      throw usage_error("--gap-tolerance must be finite and >= 0");
    o.auction_tolerance = args.get_double("auction-tolerance", o.auction_tolerance);
    if (!(o.auction_tolerance > 0 && o.auction_tolerance <= 1))
      throw usage_error("--auction-tolerance must be in (0, 1]");
    o.peak_flops = args.get_double("peak-flops", o.peak_flops);
    if (!(o.peak_flops > 0)) throw usage_error("--peak-flops must be positive");
    o.links.intra_bandwidth = args.get_double("intra-bandwidth", o.links.intra_bandwidth);
    if (!(o.links.intra_bandwidth > 0)) throw usage_error("--intra-bandwidth must be positive");
    o.links.inter_bandwidth = args.get_double("inter-bandwidth", o.links.inter_bandwidth);
    if (!(o.links.inter_bandwidth > 0)) throw usage_error("--inter-bandwidth must be positive");
    o.links.intra_latency = args.get_double("intra-latency", o.links.intra_latency);
    if (!(o.links.intra_latency >= 0 && std::isfinite(o.links.intra_latency)))
      throw usage_error("--intra-latency must be finite and >= 0");
    o.links.inter_latency = args.get_double("inter-latency", o.links.inter_latency);
    if (!(o.links.inter_latency >= 0 && std::isfinite(o.links.inter_latency)))
      throw usage_error("--inter-latency must be finite and >= 0");
    static constexpr const char* stage_names[] = {"vision", "audio", "llm"};
    for (std::size_t k = 0; k < 3; ++k) {
      const std::string flag = std::string(stage_names[k]) + "-cost";
      const auto text = args.get(flag);
      if (!text) continue;
      text_cost_model cost;
      try {
        cost = parse_cost_model(*text);
      } catch (const invalid_argument_error& e) {  // the library's messages start with "cost"
        throw usage_error("--" + std::string(stage_names[k]) + "-" + e.message());
      }
      const auto* q = std::get_if<quadratic_cost>(&cost);
      if (q == nullptr)
        throw usage_error("--" + flag + " is '" + *text +
                          "', expected quadratic:A,B[,C] (seconds per item)");
      o.seconds_costs[k] = *q;
    }
    o.vision_row_bytes = args.get_int("vision-row-bytes", 0, 1);
    o.output_row_bytes = args.get_int("output-row-bytes", 0, 1);
    o.text_row_bytes = args.get_int("text-row-bytes", 0, 1);
    if (auto s = args.get("sync")) {
      if (*s != "stage" && *s != "step")
        throw usage_error("--sync is '" + *s + "', expected stage or step");
      o.sync = *s == "step" ? bench::sync_scope::step : bench::sync_scope::stage;
    }
    o.overlap_planning = !args.has("blocking-planning");
    if (auto s = args.get("schedule")) {
      try {
        o.sched = parse_schedule(*s);
      } catch (const invalid_argument_error&) {
        throw usage_error("--schedule is '" + *s + "', expected direct, node-wise or auto");
      }
    }
    o.micro_batch_tokens = args.get_int("micro-batch-tokens", 0, 0);
    if (o.which == bench::scenario::cells && o.micro_batch_tokens == 0)
      throw usage_error(
          "--scenario cells needs --micro-batch-tokens T (the LLM's micro-batch cap)");
    if (o.sync == bench::sync_scope::step && o.micro_batch_tokens > 0)
      throw usage_error(
          "--sync step and --micro-batch-tokens exclude each other (micro-batches "
          "synchronise every micro-batch)");
    const auto r =
        trace ? bench::simulate(bench::trace_workload(read_trace_file(*trace), o.workload.ranks,
                                                      o.workload.samples_per_rank, o.workload.seed),
                                o)
              : bench::simulate(o);
    out << simulation_json(r, o, trace ? *trace : std::string()) << "\n";
    return exit_ok;
  });
}

}  // namespace orchmllm::tool
