// Google Benchmark suite for orchmllm::balance_context_parallel
// (include/orchmllm/balance/context_parallel.hpp).
//
// Input: the long-context workload (bench/support/long_context.hpp: 1K–256K tokens, ByteScale's
// published mix), d ranks × 8 samples, seed 1, 8-GPU nodes; the LLaMA-7B-like LLM at 989e12 ×
// 0.5 FLOP/s (bench/support/models.hpp). Grid d ∈ 256, 1024, 10240.
//
// Families:
//   BM_none        sizes {1}: every sample whole (LPT over the samples' times)
//   BM_static/C    sizes {C}, C ∈ 2, 4, 8: every sample over a group of C ranks
//   BM_per_sample  sizes {1, 2, 4, 8}: the size chosen per sample
// Counters: step_s = the plan's makespan in seconds (the simulated compute), ratio = makespan /
// the lower bound of its sizes, sharded = samples over two or more ranks.
// Run: build/default/bench/balance_context_parallel_bench --benchmark_min_time=0.2

#include <benchmark/benchmark.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "bench/support/long_context.hpp"
#include "orchmllm/balance/context_parallel.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/topology/topology.hpp"

namespace {

const orchmllm::batch_layout& layout(std::int64_t d) {
  static std::vector<std::pair<std::int64_t, orchmllm::batch_layout>> cache;
  for (const auto& [key, l] : cache)
    if (key == d) return l;
  cache.emplace_back(d, orchmllm::bench::long_context_layout(d, 8, 1));
  return cache.back().second;
}

void run(benchmark::State& state, std::vector<std::int64_t> sizes) {
  const std::int64_t d = state.range(0);
  const auto& items = layout(d);
  const orchmllm::topology topo = orchmllm::topology::uniform(static_cast<orchmllm::rank_t>(d), 8);
  const orchmllm::cp_cost cost = orchmllm::bench::long_context_cost({});
  orchmllm::cp_options options;
  options.sizes = std::move(sizes);
  orchmllm::cp_result r;
  for (auto _ : state) {
    r = orchmllm::balance_context_parallel(items, cost, topo, options);
    benchmark::DoNotOptimize(r);
  }
  state.counters["step_s"] = r.makespan;
  state.counters["ratio"] = r.ratio();
  state.counters["sharded"] = static_cast<double>(r.sharded);
}

void BM_none(benchmark::State& state) { run(state, {1}); }
void BM_static(benchmark::State& state) { run(state, {state.range(1)}); }
void BM_per_sample(benchmark::State& state) { run(state, {1, 2, 4, 8}); }

BENCHMARK(BM_none)->Arg(256)->Arg(1024)->Arg(10240)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_static)->ArgsProduct({{256, 1024, 10240}, {2, 4, 8}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_per_sample)->Arg(256)->Arg(1024)->Arg(10240)->Unit(benchmark::kMillisecond);

}  // namespace
