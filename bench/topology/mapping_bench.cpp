// Google Benchmark suite for orchmllm::map_bins (include/orchmllm/topology/mapping.hpp).
//
// Input: d ranks × 64 items per rank, lengths LN(mu 7, sigma 1) clipped to [16, 32768]
// (bench/common/workload.hpp, seed 1); bytes = 4096 per token (lognormal bytes); topology of
// consecutive nodes of 8 GPUs. Two kinds of binned plan:
//   lpt:   the balancer's plan (algorithm::lpt, cost l + 1e-4·l²): bins mix items from all
//          over the cluster, the usual case after balancing;
//   local: each item stays on its rank with probability 1/2, otherwise goes to a uniformly
//          random rank (seed 1): a plan with much locality for the mapping to find.
// Grid: d ∈ {64, 512, 2560}. Rows: BM_transport/<kind>/<d>, BM_identity/<kind>/<d> (the cost
// of gathering bytes and building the plan, without the solver).
// Counters: inter_node = inter-node bytes of the result, identity_inter = those of identity,
// lower_bound = Σ_b (W_b − max_m w[b][m]), moved = bytes that leave their rank, total = all
// item bytes. Target (issue 4): transport at d = 2560 in under 50 ms on one core.
// Run: build/default/bench/topology_mapping_bench

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/workload.hpp"
#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"

namespace {

using namespace orchmllm;

constexpr std::int64_t k_items_per_rank = 64;
constexpr rank_t k_gpus_per_node = 8;
constexpr std::int64_t k_bytes_per_token = 4096;

struct input {
  rearrangement binned;
  std::vector<std::int64_t> bytes;
  topology topo;
};

input make_input(rank_t d, bool local) {
  const auto layout = bench::lognormal_layout(d, k_items_per_rank);
  std::vector<std::int64_t> bytes(static_cast<std::size_t>(layout.num_items()));
  for (std::int64_t g = 0; g < layout.num_items(); ++g)
    bytes[static_cast<std::size_t>(g)] = layout.length(g) * k_bytes_per_token;
  rearrangement binned;
  if (local) {
    std::mt19937_64 rng(1);
    std::vector<rank_t> dst(bytes.size());
    const auto off = layout.offsets();
    for (std::size_t r = 0; r + 1 < off.size(); ++r)
      for (auto g = off[r]; g < off[r + 1]; ++g)
        dst[static_cast<std::size_t>(g)] =
            (rng() & 1U) != 0U ? static_cast<rank_t>(r)
                               : static_cast<rank_t>(rng() % static_cast<std::uint64_t>(d));
    binned = rearrangement::from_destinations(off, dst, d);
  } else {
    balance_options opt;
    opt.method = algorithm::lpt;
    binned = balance(layout, quadratic_cost{0.0, 1.0, 1e-4}, packed, opt).plan;
  }
  return {std::move(binned), std::move(bytes), topology::uniform(d, k_gpus_per_node)};
}

void run(benchmark::State& state, mapping_method method, bool local) {
  const auto d = static_cast<rank_t>(state.range(0));
  const auto in = make_input(d, local);
  mapping_result res;
  for (auto _ : state) {
    res = map_bins(in.binned, in.bytes, in.topo, method);
    benchmark::DoNotOptimize(res.rank_of_bin.data());
  }
  const auto id = map_bins(in.binned, in.bytes, in.topo, mapping_method::identity);
  std::int64_t total = 0;
  for (auto b : in.bytes) total += b;
  state.counters["inter_node"] = static_cast<double>(res.inter_node_bytes);
  state.counters["identity_inter"] = static_cast<double>(id.inter_node_bytes);
  state.counters["lower_bound"] = static_cast<double>(res.inter_node_bytes_lower_bound);
  state.counters["moved"] = static_cast<double>(res.moved_bytes);
  state.counters["total"] = static_cast<double>(total);
}

void BM_transport_lpt(benchmark::State& s) { run(s, mapping_method::transport, false); }
void BM_transport_local(benchmark::State& s) { run(s, mapping_method::transport, true); }
void BM_identity_lpt(benchmark::State& s) { run(s, mapping_method::identity, false); }
void BM_identity_local(benchmark::State& s) { run(s, mapping_method::identity, true); }

#define ORCHMLLM_MAPPING_ARGS \
  ->Arg(64)->Arg(512)->Arg(2560)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()
BENCHMARK(BM_transport_lpt) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_transport_local) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_identity_lpt) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_identity_local) ORCHMLLM_MAPPING_ARGS;

}  // namespace
