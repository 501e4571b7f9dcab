// orchmllm-bench plan --cp-sizes: context-parallel sharding (plan_cp.hpp).
#include "bench/cli/plan_cp.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <orchmllm/balance/context_parallel.hpp>
#include <orchmllm/comm/route.hpp>
#include <orchmllm/core/batch_layout.hpp>
#include <orchmllm/topology/topology.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/cp_flags.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"
#include "bench/support/models.hpp"

namespace orchmllm::tool {

std::string format_cp_plan(const batch_layout& items, const cp_result& plan, bool micro_batches) {
  std::string text = micro_batches
                         ? "rank,slot,dst_rank,dst_slot,token_begin,token_end,dst_micro_batch\n"
                         : "rank,slot,dst_rank,dst_slot,token_begin,token_end\n";
  for (rank_t r = 0; r < items.num_ranks(); ++r)
    for (std::int64_t g = items.offset(r); g < items.offset(r + 1); ++g)
      for (std::int64_t k = plan.chunk_offsets[static_cast<std::size_t>(g)];
           k < plan.chunk_offsets[static_cast<std::size_t>(g) + 1]; ++k) {
        const placement dst = plan.plan.destination_of(k);
        const token_range range = plan.chunk_range(k);
        text += std::to_string(r) + ',' + std::to_string(g - items.offset(r)) + ',' +
                std::to_string(dst.rank) + ',' + std::to_string(dst.slot) + ',' +
                std::to_string(range.begin) + ',' + std::to_string(range.end);
        if (micro_batches)
          text += ',' + std::to_string(plan.micro_batch[static_cast<std::size_t>(g)]);
        text += '\n';
      }
  return text;
}

int run_plan_cp(const parsed_args& args, const cp_options& options, std::ostream& out) {
  for (const char* f :
       {"algorithm", "policy", "pad-multiple", "cost", "cap", "cap-bytes", "min-items", "max-items",
        "mapping", "mapping-time-limit", "locality-tolerance", "gap-tolerance"})
    if (args.has(f))
      throw usage_error("--" + std::string(f) +
                        " does not apply with --cp-sizes (the time model of --cp-model decides; "
                        "--cp-token-cap caps a rank)");
  for (const char* f : {"micro-batch-multiple", "min-micro-batches", "sync"})
    if (args.has(f))
      throw usage_error("--" + std::string(f) +
                        " does not apply with --cp-sizes (--micro-batches M and "
                        "--micro-batch-tokens T do)");
  cp_options o = options;
  const bool micro = args.has("micro-batches") || args.has("micro-batch-tokens");
  if (const auto m = args.get("micro-batches"); m && *m == "auto")
    throw usage_error("--micro-batches auto does not apply with --cp-sizes (give a count)");
  o.micro_batches = args.get_int("micro-batches", 1, 1);
  o.micro_batch_tokens = args.get_int("micro-batch-tokens", o.micro_batch_tokens, 1);
  const auto ranks = static_cast<rank_t>(args.require_int("ranks", 1, max_ranks));
  const auto gpus = static_cast<rank_t>(args.get_int("gpus-per-node", 0, 1, max_ranks));
  const std::string model = args.get("cp-model").value_or("7b");
  if (model != "7b" && model != "72b")
    throw usage_error("--cp-model is '" + model + "', expected 7b or 72b");
  const double flops = args.get_double("cp-flops", 989e12 * 0.5);
  if (!(flops > 0)) throw usage_error("--cp-flops must be positive");
  const std::string items_path = args.require("items");
  const std::string out_path = args.require("out");
  const batch_layout items = read_items_file(items_path, ranks);
  const topology topo = topology::uniform(ranks, gpus);
  const cp_cost cost =
      cp_cost::from_transformer(model == "7b" ? bench::llm_7b() : bench::llm_72b(), flops);

  const auto start = std::chrono::steady_clock::now();
  const cp_result plan = balance_context_parallel(items, cost, topo, o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::int64_t moved = 0, inter = 0, max_tokens = 0;
  for (const auto& t : plan_traffic(plan.plan, plan.chunks.item_bytes(), topo)) {
    moved += t.moved_bytes();
    inter += t.inter_node_bytes;
  }
  for (const auto t : plan.tokens) max_tokens = std::max(max_tokens, t);
  std::string groups = "[";
  for (const std::int64_t c : o.sizes) {
    std::int64_t samples = 0;
    for (const std::int64_t s : plan.group_size) samples += s == c ? 1 : 0;
    json_object j;
    j.add("size", c).add("samples", samples);
    if (groups.size() > 1) groups += ',';
    groups.append(j.str());
  }
  groups += "]";
  json_object j;
  j.add("algorithm", "context-parallel")
      .add("items", items.num_items())
      .add("chunks", plan.chunks.num_items())
      .add("ranks", static_cast<std::int64_t>(ranks))
      .add("gpus_per_node", static_cast<std::int64_t>(gpus))
      .add("cp_sizes", cp_sizes_text(o.sizes))
      .add("cp_model", model)
      .add("cp_flops", flops)
      .raw("cp_token_cap", o.token_cap == cp_options{}.token_cap ? std::string("null")
                                                                 : std::to_string(o.token_cap))
      .add("min_shard_tokens", o.min_shard_tokens)
      .add("makespan", plan.makespan)
      .add("lower_bound", plan.lower_bound)
      .add("ratio", plan.ratio())
      .add("plan_seconds", seconds)
      .add("sharded", plan.sharded)
      .raw("groups", groups)
      .add("max_tokens", max_tokens)
      .add("moved_bytes", moved)
      .add("inter_node_bytes", inter)
      .add("items_file", items_path)
      .add("plan_file", out_path);
  if (micro)
    j.add("micro_batches", o.micro_batches)
        .raw("micro_batch_tokens", o.micro_batch_tokens == cp_options{}.micro_batch_tokens
                                       ? std::string("null")
                                       : std::to_string(o.micro_batch_tokens))
        .add("objective", plan.objective);
  write_file_atomically(out_path, format_cp_plan(items, plan, micro));
  out << j.str() << "\n";
  return exit_ok;
}

}  // namespace orchmllm::tool
