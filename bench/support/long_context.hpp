#pragma once
/// @file long_context.hpp
/// The long-context workload and its simulated step under context parallelism (not part of the
/// library): `simulate --workload long-context` and bench/balance/context_parallel_bench.cpp.
///
/// Lengths follow the published anchors of ByteScale's production long-context data ("Byted",
/// arXiv 2502.21231 §3.1 and §8.2): nearly 80 % of samples have at most 4K tokens, 1 % have
/// 128K or more, and 0.05 % reach 2M; read with the token shares it gives (44.3 % of tokens in
/// samples ≥ 128K, 37 % in samples > 256K), about 0.35 % of samples lie in [128K, 256K) and
/// 0.65 % above. Capped at 256K (the range, 1K–256K): 80 % log-uniform in [1K, 4K],
/// 19 % log-uniform in (4K, 128K), 0.35 % log-uniform in [128K, 256K), 0.65 % exactly 256K.
/// The log-uniform shapes inside the buckets and the split of the top 1 % are ours (the paper
/// shows the buckets only as a figure).
///
/// The simulated step: the LLM (bench/support/models.hpp) under `orchmllm::cp_cost` (its FLOPs
/// at peak × achievable, K and V in bf16, layers × 3 ring rounds), planned by
/// `balance_context_parallel` with the scenario's allowed sizes; compute = the busiest rank
/// (with M micro-batches that each synchronise every rank, as under FSDP: Σ_m max_r), the token
/// chunks moved by one all-to-all (route time model, 8 bytes per token), planning measured and
/// overlapped with the previous step.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "bench/support/models.hpp"
#include "bench/support/workload.hpp"
#include "orchmllm/balance/context_parallel.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm::bench {

/// Longest sample of the long-context workload (256K tokens).
inline constexpr std::int64_t long_context_max_tokens = 262144;
/// Bytes a token moves with (token id + label, int32 each).
inline constexpr std::int64_t long_context_row_bytes = 8;

/// One sample length of the long-context mix (see the file comment).
inline std::int64_t draw_long_context_length(random_source& rng) {
  const auto log_uniform = [&](double lo, double hi) {
    return static_cast<std::int64_t>(
        std::floor(std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * rng.uniform01())));
  };
  const double u = rng.uniform01();
  if (u < 0.80) return log_uniform(1024, 4097);
  if (u < 0.99) return log_uniform(4097, 131072);
  if (u < 0.9935) return log_uniform(131072, 262144);
  return long_context_max_tokens;
}

/// The long-context batch: d ranks × k samples, rank r drawing from stream r of `seed`; bytes
/// 8 per token. O(d·k), deterministic on every platform (workload.hpp).
inline batch_layout long_context_layout(std::int64_t ranks, std::int64_t samples_per_rank,
                                        std::uint64_t seed) {
  std::vector<std::vector<std::int64_t>> lengths(static_cast<std::size_t>(ranks)), bytes;
  bytes.resize(lengths.size());
  for (std::int64_t r = 0; r < ranks; ++r) {
    random_source rng(seed, static_cast<std::uint64_t>(r));
    for (std::int64_t i = 0; i < samples_per_rank; ++i) {
      const std::int64_t l = draw_long_context_length(rng);
      lengths[static_cast<std::size_t>(r)].push_back(l);
      bytes[static_cast<std::size_t>(r)].push_back(l * long_context_row_bytes);
    }
  }
  return batch_layout::from_ranks(lengths, bytes);
}

/// The CP scenarios: none (every sample whole, balanced), static (every sample over one fixed
/// size, as a fixed context-parallel size does), per-sample (the size chosen per sample).
enum class cp_scenario : std::uint8_t { none, fixed, per_sample };

/// "cp-none", "cp-static", "cp".
constexpr std::string_view to_string(cp_scenario s) noexcept {
  return s == cp_scenario::none ? "cp-none" : s == cp_scenario::fixed ? "cp-static" : "cp";
}

/// What a long-context simulation takes.
struct cp_sim_options {
  std::int64_t ranks = 8;
  rank_t gpus_per_node = 8;
  std::int64_t samples_per_rank = 8;
  std::uint64_t seed = 1;
  transformer_config model = llm_7b();
  double peak_flops = 989e12;
  double achievable = 0.5;
  link_params links{};
  cp_scenario which = cp_scenario::per_sample;
  std::vector<std::int64_t> sizes{1, 2, 4, 8};  ///< per-sample: the allowed sizes
  std::int64_t static_size = 8;                 ///< static: the one size
  std::int64_t token_cap = std::numeric_limits<std::int64_t>::max();
  std::int64_t min_shard_tokens = 0;
  /// M micro-batches per rank, each synchronising every rank (FSDP): the step computes
  /// Σ_m max_r instead of the busiest rank; 1: one synchronisation per step.
  std::int64_t micro_batches = 1;
  std::int64_t micro_batch_tokens = std::numeric_limits<std::int64_t>::max();
};

/// What a long-context simulation gives.
struct cp_sim_result {
  std::vector<std::int64_t> sizes;  ///< the allowed sizes of the scenario
  double step_seconds = 0;          ///< compute + comm + unoverlapped planning
  double compute_seconds = 0;       ///< the busiest rank, or Σ_m max_r with micro-batches
  double lower_bound_seconds = 0;   ///< no plan with these sizes computes faster
  double comm_seconds = 0;          ///< the chunks' all-to-all (route time model)
  double plan_seconds = 0;          ///< MEASURED: balance_context_parallel + the route
  double unoverlapped_plan_seconds = 0;
  std::int64_t samples = 0, sharded = 0, chunks = 0, max_tokens = 0, longest = 0;
  std::vector<std::int64_t> samples_by_size;  ///< per allowed size, the samples it took
  std::int64_t inter_node_bytes = 0;
};

/// The CP time model of `o`'s LLM on its GPUs.
inline cp_cost long_context_cost(const cp_sim_options& o) {
  return cp_cost::from_transformer(o.model, o.peak_flops * o.achievable, 2.0);
}

/// Simulates one step of the long-context workload under `o.which`. Throws what
/// `balance_context_parallel` throws (infeasible caps, sizes without a group).
inline cp_sim_result simulate_long_context(const cp_sim_options& o) {
  const batch_layout layout = long_context_layout(o.ranks, o.samples_per_rank, o.seed);
  const topology topo = [&] {
    topology t = topology::uniform(static_cast<rank_t>(o.ranks), o.gpus_per_node);
    t.links = o.links;
    return t;
  }();
  cp_options options;
  options.sizes = o.which == cp_scenario::none    ? std::vector<std::int64_t>{1}
                  : o.which == cp_scenario::fixed ? std::vector<std::int64_t>{o.static_size}
                                                  : o.sizes;
  options.token_cap = o.token_cap;
  options.min_shard_tokens = o.min_shard_tokens;
  options.micro_batches = o.micro_batches;
  options.micro_batch_tokens = o.micro_batch_tokens;
  const cp_cost cost = long_context_cost(o);
  const auto start = std::chrono::steady_clock::now();
  const cp_result plan = balance_context_parallel(layout, cost, topo, options);
  const route rt = route::build(plan.plan, plan.chunks.item_bytes(), topo, 0);
  cp_sim_result r;
  r.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.sizes = options.sizes;
  r.compute_seconds = plan.objective;  // the makespan with one micro-batch
  r.lower_bound_seconds = plan.lower_bound;
  r.comm_seconds = rt.predicted_seconds();
  r.unoverlapped_plan_seconds = std::max(0.0, r.plan_seconds - r.compute_seconds - r.comm_seconds);
  r.step_seconds = r.compute_seconds + r.comm_seconds + r.unoverlapped_plan_seconds;
  r.samples = layout.num_items();
  r.sharded = plan.sharded;
  r.chunks = plan.chunks.num_items();
  for (const auto t : plan.tokens) r.max_tokens = std::max(r.max_tokens, t);
  for (std::int64_t g = 0; g < layout.num_items(); ++g)
    r.longest = std::max(r.longest, layout.length(g));
  r.samples_by_size.assign(options.sizes.size(), 0);
  for (const std::int64_t c : plan.group_size)
    for (std::size_t i = 0; i < options.sizes.size(); ++i)
      if (options.sizes[i] == c) ++r.samples_by_size[i];
  for (const auto& t : plan_traffic(plan.plan, plan.chunks.item_bytes(), topo))
    r.inter_node_bytes += t.inter_node_bytes;
  return r;
}

}  // namespace orchmllm::bench
