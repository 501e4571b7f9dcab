// orchmllm-bench simulate --workload long-context (simulate_cp.hpp).
#include "bench/cli/simulate_cp.hpp"

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/cp_flags.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/cli/simulate.hpp"
#include "bench/support/args.hpp"
#include "bench/support/long_context.hpp"
#include "bench/support/models.hpp"

namespace orchmllm::tool {

std::vector<flag_spec> simulate_cp_flags() {
  std::vector<flag_spec> flags = cp_flags();
  flags.insert(
      flags.begin() + 1,
      {"cp-size", "C", "long-context, scenario cp-static: the one group size; default 8", false});
  flags[0].help = "long-context, scenario cp: the group sizes chosen per sample; default 1,2,4,8";
  flags.push_back({"micro-batches", "M",
                   "long-context: M micro-batches per rank, each synchronising every rank "
                   "(FSDP; compute = the sum over micro-batches of the slowest rank), a sample's "
                   "shards in one; default 1 (--micro-batch-tokens caps one)",
                   false});
  return flags;
}

int run_simulate_cp(const parsed_args& args, std::ostream& out) {
  for (const char* f : {"trace", "gap-tolerance", "auction-tolerance", "schedule", "vision-cost",
                        "audio-cost", "llm-cost", "vision-row-bytes", "output-row-bytes",
                        "text-row-bytes", "sync", "blocking-planning"})
    if (args.has(f))
      throw usage_error("--" + std::string(f) + " does not apply to --workload long-context");
  bench::cp_sim_options o;
  o.ranks = args.require_int("ranks", 1, max_ranks);
  o.gpus_per_node = static_cast<rank_t>(args.require_int("gpus-per-node", 1, max_ranks));
  const std::string sc = args.require("scenario");
  if (sc == "cp-none") {
    o.which = bench::cp_scenario::none;
  } else if (sc == "cp-static") {
    o.which = bench::cp_scenario::fixed;
  } else if (sc == "cp") {
    o.which = bench::cp_scenario::per_sample;
  } else {
    throw usage_error("--scenario is '" + sc +
                      "', expected cp-none, cp-static or cp with --workload long-context");
  }
  if (args.has("cp-size") && o.which != bench::cp_scenario::fixed)
    throw usage_error("--cp-size needs --scenario cp-static");
  if (args.has("cp-sizes") && o.which != bench::cp_scenario::per_sample)
    throw usage_error("--cp-sizes needs --scenario cp");
  o.static_size = args.get_int("cp-size", 8, 1, max_ranks);
  if (const auto sizes = args.get("cp-sizes")) o.sizes = parse_cp_sizes("cp-sizes", *sizes);
  o.token_cap = args.get_int("cp-token-cap", o.token_cap, 1);
  o.min_shard_tokens = args.get_int("min-shard-tokens", 0, 0);
  o.micro_batches = args.get_int("micro-batches", 1, 1);
  o.micro_batch_tokens = args.get_int("micro-batch-tokens", o.micro_batch_tokens, 1);
  const std::string model = args.get("model").value_or("7b");
  if (model != "7b" && model != "72b")
    throw usage_error("--model is '" + model + "', expected 7b or 72b");
  o.model = model == "7b" ? bench::llm_7b() : bench::llm_72b();
  o.seed = static_cast<std::uint64_t>(args.get_int("seed", 1, 0));
  o.samples_per_rank = args.get_int("samples-per-rank", 8, 0, simulate_max_samples);
  if (o.samples_per_rank > simulate_max_samples / o.ranks)
    throw usage_error("--ranks " + std::to_string(o.ranks) + " x --samples-per-rank " +
                      std::to_string(o.samples_per_rank) + " exceeds " +
                      std::to_string(simulate_max_samples) + " samples");
  o.achievable = args.get_double("achievable", o.achievable);
  if (!(o.achievable > 0 && o.achievable <= 1))
    throw usage_error("--achievable is " + args.require("achievable") + ", must be in (0, 1]");
  o.peak_flops = args.get_double("peak-flops", o.peak_flops);
  if (!(o.peak_flops > 0)) throw usage_error("--peak-flops must be positive");
  o.links.intra_bandwidth = args.get_double("intra-bandwidth", o.links.intra_bandwidth);
  o.links.inter_bandwidth = args.get_double("inter-bandwidth", o.links.inter_bandwidth);
  o.links.intra_latency = args.get_double("intra-latency", o.links.intra_latency);
  o.links.inter_latency = args.get_double("inter-latency", o.links.inter_latency);
  if (!(o.links.intra_bandwidth > 0 && o.links.inter_bandwidth > 0 && o.links.intra_latency >= 0 &&
        o.links.inter_latency >= 0))
    throw usage_error("the link bandwidths must be positive and the latencies >= 0");

  const bench::cp_sim_result r = bench::simulate_long_context(o);
  std::string groups = "[";
  for (std::size_t i = 0; i < r.sizes.size(); ++i) {
    json_object g;
    g.add("size", r.sizes[i]).add("samples", r.samples_by_size[i]);
    if (groups.size() > 1) groups += ',';
    groups.append(g.str());
  }
  groups += "]";
  json_object j;
  j.add("simulated", true)
      .add("scenario", std::string(bench::to_string(o.which)))
      .add("workload", "long-context")
      .add("ranks", o.ranks)
      .add("gpus_per_node", static_cast<std::int64_t>(o.gpus_per_node))
      .add("model", model)
      .add("seed", static_cast<std::int64_t>(o.seed))
      .add("samples_per_rank", o.samples_per_rank)
      .add("peak_flops", o.peak_flops)
      .add("achievable", o.achievable)
      .add("cp_sizes", cp_sizes_text(r.sizes))
      .raw("cp_token_cap", o.token_cap == bench::cp_sim_options{}.token_cap
                               ? std::string("null")
                               : std::to_string(o.token_cap))
      .add("min_shard_tokens", o.min_shard_tokens)
      .add("micro_batches", o.micro_batches)
      .raw("micro_batch_tokens", o.micro_batch_tokens == bench::cp_sim_options{}.micro_batch_tokens
                                     ? std::string("null")
                                     : std::to_string(o.micro_batch_tokens))
      .add("step_seconds", r.step_seconds)
      .add("compute_seconds", r.compute_seconds)
      .add("lower_bound_seconds", r.lower_bound_seconds)
      .add("ratio", r.lower_bound_seconds > 0 ? r.compute_seconds / r.lower_bound_seconds : 1.0)
      .add("comm_seconds", r.comm_seconds)
      .add("plan_seconds", r.plan_seconds)
      .add("unoverlapped_plan_seconds", r.unoverlapped_plan_seconds)
      .add("samples", r.samples)
      .add("longest", r.longest)
      .add("sharded", r.sharded)
      .add("chunks", r.chunks)
      .raw("groups", groups)
      .add("max_tokens", r.max_tokens)
      .add("inter_node_bytes", r.inter_node_bytes);
  out << j.str() << "\n";
  return exit_ok;
}

}  // namespace orchmllm::tool
