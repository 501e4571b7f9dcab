// Google Benchmark suite for orchmllm::balance_micro_batches
// (include/orchmllm/balance/micro_batches.hpp): planning cost and quality of the cells against
// plain balance on the same items.
//
// Input: the LLM items of the `vl-sft` workload (bench/support/workloads.hpp, seed 1) at
// d = 2,560 ranks × 64 samples; cost(l) = l + l²/24,800 (attention); packed. The cap per
// micro-batch is max(the longest item, 1.2 × the mean tokens of a cell), for M = 4, 8, 16.
//
// Families:
//   BM_plain   balance (automatic) on the items: the time the cells are compared with
//   BM_cells   balance_micro_batches with M micro-batches under sync `micro-batch` (1) or `step`
//              (0)
// Counters: ratio = objective / objective_lower_bound (≥ 1); before = the input's own
// micro-batching (each rank's items in slot order, cut greedily under the cap) / objective;
// vs_plain = the time of one plan / the time of plain balance, both timed in this run.
// (DoNotOptimize takes the result objects, not a double: Google Benchmark 1.7's non-const
// DoNotOptimize may move a double through a general-purpose register under GCC and garble it.)
// Run: build/default/bench/balance_micro_batches_bench --benchmark_min_time=0.2

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "bench/support/workloads.hpp"
#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/micro_batches.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/padding.hpp"

namespace {

constexpr orchmllm::rank_t ranks = 2560;
constexpr std::int64_t samples_per_rank = 64;

const orchmllm::quadratic_cost& cost() {
  static const orchmllm::quadratic_cost c{0.0, 1.0, 1.0 / 24'800};
  return c;
}

const orchmllm::batch_layout& items() {
  static const orchmllm::batch_layout layout = [] {
    orchmllm::bench::workload_options o;
    o.name = orchmllm::bench::workload_name::vl_sft;
    o.ranks = ranks;
    o.samples_per_rank = samples_per_rank;
    o.seed = 1;
    return orchmllm::bench::make_stage_layouts(orchmllm::bench::make_workload(o)).llm;
  }();
  return layout;
}

// Seconds of one plain balance of the items (the best of three).
double plain_seconds() {
  static const double seconds = [] {
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(orchmllm::balance(items(), cost()));
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  }();
  return seconds;
}

void BM_plain(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(orchmllm::balance(items(), cost()));
}

void BM_cells(benchmark::State& state) {
  const auto& layout = items();
  std::int64_t longest = 0, total = 0;
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    longest = std::max(longest, layout.length(g));
    total += layout.length(g);
  }
  orchmllm::micro_batching micro;
  micro.count = state.range(0);
  micro.sync = state.range(1) != 0 ? orchmllm::sync_model::micro_batch : orchmllm::sync_model::step;
  micro.limits.tokens = std::max<std::int64_t>(
      longest, static_cast<std::int64_t>(1.2 * static_cast<double>(total) /
                                         static_cast<double>(ranks * micro.count)));
  const double plain = plain_seconds();
  orchmllm::micro_batch_result<double> res;
  double seconds = 0;
  std::int64_t runs = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    res = orchmllm::balance_micro_batches(layout, cost(), orchmllm::packed, micro);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++runs;
    benchmark::DoNotOptimize(res);
  }
  const double before =
      orchmllm::micro_batch_objective_as_sampled(layout, cost(), orchmllm::packed, micro);
  state.counters["ratio"] = res.objective / res.objective_lower_bound;
  state.counters["before"] = before / res.objective;
  state.counters["vs_plain"] = seconds / static_cast<double>(runs) / plain;
}

void grid(benchmark::internal::Benchmark* b) {
  for (const std::int64_t m : {4, 8, 16})
    for (const std::int64_t sync : {1, 0}) b->Args({m, sync});
  b->ArgNames({"M", "sync"})->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_plain)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cells)->Apply(grid);
