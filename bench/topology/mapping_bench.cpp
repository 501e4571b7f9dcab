// Google Benchmark suite for orchmllm::map_bins (include/orchmllm/topology/mapping.hpp).
//
// Input: d ranks × 64 items per rank, lengths LN(mu 7, sigma 1) clipped to [16, 32768]
// (bench/support/workload.hpp, seed 1); bytes = 4096 per token (lognormal bytes); topology of
// consecutive nodes of 8 GPUs. Two kinds of binned plan:
//   lpt:   the balancer's plan (balancers::lpt, cost l + 1e-4·l²): bins mix items from all
//          over the cluster, the usual case after balancing;
//   local: each item stays on its rank with probability 1/2, otherwise goes to a uniformly
//          random rank (seed 1): a plan with much locality for the mapping to find.
// Grid: d ∈ {64, 512, 2560}, plus d = 10240 (1,280 nodes) for transport_lpt, transport_local,
// identity_lpt, vision_identity and vision_transport (the exact solver at scale; the vision
// rows have ~8 items per bin, vision_transport − vision_identity ≈ the solver's time). Rows:
// BM_transport/<kind>/<d>, BM_identity/<kind>/<d> (the cost of gathering bytes and building the
// plan, without the solver). Counters: inter_node = inter-node bytes of the result, identity_inter
// = those of identity, lower_bound = Σ_b (W_b − max_m w[b][m]), moved = bytes that leave their
// rank, total = all item bytes. Target: transport at d = 2560 in under 50 ms on one core.
//
// Second family, the results table of docs/results.md: BM_vision/<row>/<d>, the vision stage of
// bench/support/workload.hpp's `make_multimodal_batch` (COCO-like images through Qwen2-VL's
// dynamic resolution, bench/support/workloads.hpp; 8 samples per rank, seed 1; bytes = ViT
// patches × 1176 B of bf16 pixels; cost = ViT-600M-like transformer FLOPs, packed), 8 GPUs per
// node. Rows:
//   identity / transport / bottleneck:  balance(automatic) + map_bins(mapper);
//   bottleneck_glpk (GLPK builds only): balance(automatic) + glpk::map_bins_bottleneck (10 s
//                    limit);
//   locality:  balance(locality, tolerance 0.001, node map) + map_bins(transport);
//   auction:   balance(automatic) + map_bins(auction) (transport to within 1 % of U).
// Also at d = 10,240 and 40,960 (identity / transport / auction side by side).
// Time = the whole planner (balance + mapping), CPU time of one core. Counters: inter_node,
// inter_lb (no mapping of auto's bins does better), worst_node (max over nodes of egress /
// ingress bytes), worst_lb, moved, total, predicted_ms (route::build(..., automatic)
// .predicted_seconds() with the default links: NVLink 450 GB/s, 48 GB/s NIC per GPU),
// makespan_vs_auto (makespan / auto's makespan), map_ms (the mapping alone, one run).
// Run: build/default/bench/topology_mapping_bench

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "bench/support/models.hpp"
#include "bench/support/workload.hpp"
#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"

#if defined(ORCHMLLM_HAS_GLPK)
#include "orchmllm/backend/glpk/mapping.hpp"
#endif

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
    binned = balance(layout, quadratic_cost{0.0, 1.0, 1e-4}, packed, balancers::lpt{}).plan;
  }
  return {std::move(binned), std::move(bytes), topology::uniform(d, k_gpus_per_node)};
}

void run(benchmark::State& state, const any_mapper& method, bool local) {
  const auto d = static_cast<rank_t>(state.range(0));
  const auto in = make_input(d, local);
  mapping_result res;
  for (auto _ : state) {
    res = map_bins(in.binned, in.bytes, in.topo, method);
    benchmark::DoNotOptimize(res.rank_of_bin.data());
  }
  const auto id = map_bins(in.binned, in.bytes, in.topo, mappers::identity{});
  std::int64_t total = 0;
  for (auto b : in.bytes) total += b;
  state.counters["inter_node"] = static_cast<double>(res.inter_node_bytes);
  state.counters["identity_inter"] = static_cast<double>(id.inter_node_bytes);
  state.counters["lower_bound"] = static_cast<double>(res.inter_node_bytes_lower_bound);
  state.counters["moved"] = static_cast<double>(res.moved_bytes);
  state.counters["total"] = static_cast<double>(total);
  state.counters["worst_node"] = static_cast<double>(res.worst_node_bytes());
  state.counters["worst_node_lb"] = static_cast<double>(res.worst_node_bytes_lower_bound);
  state.counters["identity_worst_node"] = static_cast<double>(id.worst_node_bytes());
}

void BM_transport_lpt(benchmark::State& s) { run(s, mappers::transport{}, false); }
void BM_transport_local(benchmark::State& s) { run(s, mappers::transport{}, true); }
void BM_bottleneck_lpt(benchmark::State& s) { run(s, mappers::bottleneck{}, false); }
void BM_bottleneck_local(benchmark::State& s) { run(s, mappers::bottleneck{}, true); }
void BM_identity_lpt(benchmark::State& s) { run(s, mappers::identity{}, false); }
void BM_identity_local(benchmark::State& s) { run(s, mappers::identity{}, true); }

// ---- the results table: vision stage of a realistic multimodal batch ----

enum class row { identity, transport, bottleneck, bottleneck_glpk, locality, auction };

struct vision_input {
  batch_layout layout;
  std::vector<std::int64_t> bytes;
  topology topo;
  transformer_flops_cost cost;
};

transformer_flops_cost vit_cost() { return transformer_flops_cost(bench::vit_600m()); }

vision_input make_vision(rank_t d) {
  bench::multimodal_spec spec;
  spec.ranks = d;
  auto batch = bench::make_multimodal_batch(spec);
  const auto item_bytes = batch.vision.item_bytes();
  std::vector<std::int64_t> bytes(item_bytes.begin(), item_bytes.end());
  return {std::move(batch.vision), std::move(bytes), topology::uniform(d, k_gpus_per_node),
          vit_cost()};
}

any_balancer row_balancer(const vision_input& in, row r) {
  if (r != row::locality) return balancers::automatic{};
  return balancers::locality{
      .node_of_rank = std::vector<rank_t>(in.topo.node_map().begin(), in.topo.node_map().end())};
}

mapping_result map_row(const vision_input& in, const rearrangement& binned, row r) {
#if defined(ORCHMLLM_HAS_GLPK)
  if (r == row::bottleneck_glpk)
    return glpk::map_bins_bottleneck(binned, in.bytes, in.topo).mapping;
#endif
  const any_mapper m = r == row::identity     ? any_mapper(mappers::identity{})
                       : r == row::bottleneck ? any_mapper(mappers::bottleneck{})
                       : r == row::auction    ? any_mapper(mappers::auction{})
                                              : any_mapper(mappers::transport{});
  return map_bins(binned, in.bytes, in.topo, m);
}

void run_vision(benchmark::State& state, row r) {
  const auto d = static_cast<rank_t>(state.range(0));
  const auto in = make_vision(d);
  const auto opt = row_balancer(in, r);
  for (auto _ : state) {
    const auto balanced = balance(in.layout, in.cost, packed, opt);
    auto mapped = map_row(in, balanced.plan, r);
    benchmark::DoNotOptimize(mapped.rank_of_bin.data());
  }
  const auto automatic = balance(in.layout, in.cost, packed);
  const auto balanced = balance(in.layout, in.cost, packed, opt);
  const auto t0 = std::chrono::steady_clock::now();
  const auto m = map_row(in, balanced.plan, r);
  const auto t1 = std::chrono::steady_clock::now();
  std::int64_t total = 0;
  for (auto b : in.bytes) total += b;
  state.counters["inter_node"] = static_cast<double>(m.inter_node_bytes);
  state.counters["inter_lb"] = static_cast<double>(m.inter_node_bytes_lower_bound);
  state.counters["worst_node"] = static_cast<double>(m.worst_node_bytes());
  state.counters["worst_lb"] = static_cast<double>(m.worst_node_bytes_lower_bound);
  state.counters["moved"] = static_cast<double>(m.moved_bytes);
  state.counters["total"] = static_cast<double>(total);
  state.counters["predicted_ms"] =
      1e3 * route::build(m.plan, in.bytes, in.topo, 0, schedule::automatic).predicted_seconds();
  state.counters["makespan_vs_auto"] =
      static_cast<double>(balanced.makespan) / static_cast<double>(automatic.makespan);
  state.counters["map_ms"] = 1e3 * std::chrono::duration<double>(t1 - t0).count();
}

void BM_vision_identity(benchmark::State& s) { run_vision(s, row::identity); }
void BM_vision_transport(benchmark::State& s) { run_vision(s, row::transport); }
void BM_vision_bottleneck(benchmark::State& s) { run_vision(s, row::bottleneck); }
void BM_vision_locality(benchmark::State& s) { run_vision(s, row::locality); }
void BM_vision_auction(benchmark::State& s) { run_vision(s, row::auction); }
#if defined(ORCHMLLM_HAS_GLPK)
void BM_vision_bottleneck_glpk(benchmark::State& s) { run_vision(s, row::bottleneck_glpk); }
#endif

#define ORCHMLLM_MAPPING_ARGS \
  ->Arg(64)->Arg(512)->Arg(2560)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()
BENCHMARK(BM_transport_lpt) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_transport_local) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_bottleneck_lpt) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_bottleneck_local) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_identity_lpt) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_identity_local) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_vision_identity) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_vision_transport) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_vision_bottleneck) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_vision_locality) ORCHMLLM_MAPPING_ARGS;
BENCHMARK(BM_vision_auction) ORCHMLLM_MAPPING_ARGS;
#if defined(ORCHMLLM_HAS_GLPK)
BENCHMARK(BM_vision_bottleneck_glpk) ORCHMLLM_MAPPING_ARGS;
#endif
// d = 10,240 (1,280 nodes): the exact transport solver at scale, few items per bin (vision).
#define ORCHMLLM_MAPPING_LARGE_ARGS \
  ->Arg(10240)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()
BENCHMARK(BM_transport_lpt) ORCHMLLM_MAPPING_LARGE_ARGS;
BENCHMARK(BM_transport_local) ORCHMLLM_MAPPING_LARGE_ARGS;
BENCHMARK(BM_identity_lpt) ORCHMLLM_MAPPING_LARGE_ARGS;
BENCHMARK(BM_vision_identity) ORCHMLLM_MAPPING_LARGE_ARGS;
BENCHMARK(BM_vision_transport) ORCHMLLM_MAPPING_LARGE_ARGS;
BENCHMARK(BM_vision_auction) ORCHMLLM_MAPPING_LARGE_ARGS;
// d = 40,960 (5,120 nodes): where the exact flow no longer hides behind a step, side by side.
#define ORCHMLLM_MAPPING_HUGE_ARGS \
  ->Arg(40960)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->Iterations(1)
BENCHMARK(BM_vision_identity) ORCHMLLM_MAPPING_HUGE_ARGS;
BENCHMARK(BM_vision_transport) ORCHMLLM_MAPPING_HUGE_ARGS;
BENCHMARK(BM_vision_auction) ORCHMLLM_MAPPING_HUGE_ARGS;

}  // namespace
