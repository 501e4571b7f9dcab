// Google Benchmark suite for orchmllm::balance_micro_batches
// (include/orchmllm/balance/micro_batches.hpp): planning cost and quality of the cells against
// plain balance on the same items.
//
// Input: the LLM items of each realistic workload (bench/support/workloads.hpp, seed 1: W = 0
// vl-sft, 1 omni-pretrain, 2 video-heavy, 3 audio-asr) at d = 2,560 ranks × 64 samples;
// cost(l) = l + l²/24,800 (attention); packed. The cap per micro-batch is max(the longest item,
// 1.2 × the mean tokens of a cell), for M = 4, 8, 16.
//
// Families:
//   BM_plain   balance (automatic) on the items of workload W: the time the cells are compared
//              with
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
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>

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

constexpr orchmllm::bench::workload_name workloads[] = {
    orchmllm::bench::workload_name::vl_sft, orchmllm::bench::workload_name::omni_pretrain,
    orchmllm::bench::workload_name::video_heavy, orchmllm::bench::workload_name::audio_asr};
constexpr std::size_t num_workloads = std::size(workloads);

const orchmllm::batch_layout& items(std::int64_t w) {
  static const auto layouts = [] {
    std::array<orchmllm::batch_layout, num_workloads> out;
    for (std::size_t i = 0; i < num_workloads; ++i) {
      orchmllm::bench::workload_options o;
      o.name = workloads[i];
      o.ranks = ranks;
      o.samples_per_rank = samples_per_rank;
      o.seed = 1;
      out[i] = orchmllm::bench::make_stage_layouts(orchmllm::bench::make_workload(o)).llm;
    }
    return out;
  }();
  return layouts[static_cast<std::size_t>(w)];
}

// Seconds of one plain balance of workload w's items (the best of three).
double plain_seconds(std::int64_t w) {
  static std::array<double, num_workloads> seconds{};
  auto& s = seconds[static_cast<std::size_t>(w)];
  if (s == 0) {
    s = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(orchmllm::balance(items(w), cost()));
      s = std::min(s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return s;
}

void BM_plain(benchmark::State& state) {
  const auto& layout = items(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(orchmllm::balance(layout, cost()));
}

void BM_cells(benchmark::State& state) {
  const std::int64_t w = state.range(0);
  const auto& layout = items(w);
  std::int64_t longest = 0, total = 0;
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    longest = std::max(longest, layout.length(g));
    total += layout.length(g);
  }
  orchmllm::micro_batching micro;
  micro.count = state.range(1);
  micro.sync = state.range(2) != 0 ? orchmllm::sync_model::micro_batch : orchmllm::sync_model::step;
  micro.limits.tokens = std::max<std::int64_t>(
      longest, static_cast<std::int64_t>(1.2 * static_cast<double>(total) /
                                         static_cast<double>(ranks * micro.count)));
  const double plain = plain_seconds(w);
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
  for (std::int64_t w = 0; w < static_cast<std::int64_t>(num_workloads); ++w)
    for (const std::int64_t m : {4, 8, 16})
      for (const std::int64_t sync : {1, 0}) b->Args({w, m, sync});
  b->ArgNames({"W", "M", "sync"})->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_plain)->DenseRange(0, num_workloads - 1)->ArgName("W")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cells)->Apply(grid);
