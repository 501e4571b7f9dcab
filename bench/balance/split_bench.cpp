// Google Benchmark suite for orchmllm::balance_split (include/orchmllm/balance/split.hpp) and
// the cost of segments in orchmllm::balance.
//
// Input: d ranks × k items per rank (seed 7): 95 % images of one segment of 256..4096 patches,
// 5 % videos of T ∈ [8, 128] temporal groups of 1,024 patches (T equal segments);
// cost(l) = l + 0.002·l² per segment (attention within a segment). Grid d/k ∈ 2560/4, 2560/64.
//
// Families:
//   BM_plain         balance (automatic) on the layout without segments (videos as one sequence)
//   BM_single        the same layout given all-single segments (stored as none): the S = 1 path,
//                    which must cost what BM_plain costs and give the same plan (checked)
//   BM_whole         balance on the segmented layout: segment-sum costs, no splitting
//   BM_split         balance_split on the segmented layout (default split_options)
// (DoNotOptimize takes the result objects, not a double: Google Benchmark 1.7's non-const
// DoNotOptimize may move a double through a general-purpose register under GCC and garble it.)
// Counters: ratio = makespan / the splitting-aware lower bound L (the best any cut reaches is
// ≥ 1); pieces = pieces balanced; cut = items cut into two or more.
// Run: build/default/bench/balance_split_bench --benchmark_min_time=0.2

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/split.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/padding.hpp"

namespace {

using orchmllm::batch_layout;

struct input {
  batch_layout plain;  // no segments
  batch_layout video;  // videos as T equal segments
  double split_bound = 0;
};

const orchmllm::quadratic_cost& cost() {
  static const orchmllm::quadratic_cost c{0.0, 1.0, 0.002};
  return c;
}

const input& make_input(orchmllm::rank_t d, int k) {
  static std::vector<std::pair<std::pair<orchmllm::rank_t, int>, input>> cache;
  for (const auto& [key, in] : cache)
    if (key == std::pair{d, k}) return in;
  std::mt19937_64 rng(7);
  std::vector<std::vector<std::int64_t>> ranks(static_cast<std::size_t>(d));
  std::vector<std::int64_t> counts;
  for (auto& r : ranks)
    for (int i = 0; i < k; ++i) {
      if (rng() % 20 == 0) {
        const auto t = static_cast<std::int64_t>(8 + rng() % 121);
        r.push_back(1024 * t);
        counts.push_back(t);
      } else {
        r.push_back(static_cast<std::int64_t>(256 + rng() % 3841));
        counts.push_back(1);
      }
    }
  input in;
  in.plain = batch_layout::from_ranks(ranks);
  in.video = in.plain.with_equal_segments(counts);
  in.split_bound = orchmllm::split_lower_bound(in.video, d, cost());
  cache.emplace_back(std::pair{d, k}, std::move(in));
  return cache.back().second;
}

void BM_plain(benchmark::State& state) {
  const auto& in =
      make_input(static_cast<orchmllm::rank_t>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) benchmark::DoNotOptimize(orchmllm::balance(in.plain, cost()));
}

void BM_single(benchmark::State& state) {
  const auto& in =
      make_input(static_cast<orchmllm::rank_t>(state.range(0)), static_cast<int>(state.range(1)));
  const std::vector<std::int64_t> ones(static_cast<std::size_t>(in.plain.num_items()), 1);
  const auto single = in.plain.with_equal_segments(ones);
  if (!(orchmllm::balance(single, cost()).plan == orchmllm::balance(in.plain, cost()).plan))
    state.SkipWithError("S = 1 plan differs from the plan without segments");
  for (auto _ : state) benchmark::DoNotOptimize(orchmllm::balance(single, cost()));
}

void BM_whole(benchmark::State& state) {
  const auto& in =
      make_input(static_cast<orchmllm::rank_t>(state.range(0)), static_cast<int>(state.range(1)));
  double makespan = 0;
  for (auto _ : state) {
    const auto r = orchmllm::balance(in.video, cost());
    benchmark::DoNotOptimize(r);
    makespan = r.makespan;
  }
  state.counters["ratio"] = makespan / in.split_bound;
}

void BM_split(benchmark::State& state) {
  const auto& in =
      make_input(static_cast<orchmllm::rank_t>(state.range(0)), static_cast<int>(state.range(1)));
  double makespan = 0;
  std::int64_t pieces = 0, cut = 0;
  for (auto _ : state) {
    const auto r = orchmllm::balance_split(in.video, cost());
    benchmark::DoNotOptimize(r);
    makespan = r.balance.makespan;
    pieces = r.pieces.num_pieces();
    cut = 0;
    for (std::int64_t g = 0; g < in.video.num_items(); ++g) cut += r.pieces.num_pieces_of(g) > 1;
  }
  state.counters["ratio"] = makespan / in.split_bound;
  state.counters["pieces"] = static_cast<double>(pieces);
  state.counters["cut"] = static_cast<double>(cut);
}

void grid(benchmark::internal::Benchmark* b) {
  b->Args({2560, 4})->Args({2560, 64})->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_plain)->Apply(grid);
BENCHMARK(BM_single)->Apply(grid);
BENCHMARK(BM_whole)->Apply(grid);
BENCHMARK(BM_split)->Apply(grid);
