// Google Benchmark suite for orchmllm::balance (include/orchmllm/balance/balancer.hpp).
// (Above 600 lines on purpose: one suite, one grid, every balancer family side by side.)
//
// Input: d ranks × k items per rank, lengths LN(mu 7, sigma 1) clipped to [16, 32768]
// (bench/support/workload.hpp, seed 1), cost(l) = l + 1e-4·l² (quadratic_cost{0, 1, 1e-4}).
// Grid: d ∈ {8, 64, 512, 2560, 10240} × k ∈ {1, 4, 16, 64}; names are BM_<family>/<d>/<k>.
//
// Families (all end to end through orchmllm::balance unless said otherwise):
//   BM_none        identity plan (baseline: the imbalance as sampled)
//   BM_lpt         balancers::lpt
//   BM_lpt_refine  balancers::lpt{.refine = true}
//   BM_kk          balancers::karmarkar_karp
//   BM_auto        balancers::automatic
//   BM_padded      balancers::padded_exact, padded policy (count × cost of the longest)
// Constrained and padded families (d/k ∈ 64/16, 512/16, 2560/16): the per-rank-state paths of
// the greedy balancers, which the families above do not reach:
//   BM_lpt_padded    balancers::lpt, padded policy (the heap of padded keys)
//   BM_lpt_capped    balancers::lpt, packed, cap 1.25 × the mean rank's tokens, at most 2k
//                    items per rank (set-aside ranks, the cap test per item)
//   BM_auto_capped   balancers::automatic, packed, cap 1.05 × the mean rank's tokens, at
//                    most k + 2 items (tight: constrained first fit often packs the result)
//   BM_locality      balancers::locality, packed (sheds and places from the sampled ranks)
//   BM_locality_padded  the same, padded policy
//   BM_exact_padded  balancers::exact, padded policy, d/k ∈ 8/4, 16/2 (branch and bound)
//   BM_sort_heap   NOT the library: copy the costs, sort descending, one binary-heap pass that
//                  gives each cost to the least-loaded rank — the bare cost of LPT without the
//                  façade (no cost evaluation, ids, plan, statistics). The time targets
//                  are relative to this.
//   BM_sort_heap_ids  the same but sorting (cost, id) pairs and writing one destination per
//                  item: the least an LPT that returns an assignment must do.
//   BM_sort_only, BM_heap_only (target sizes only): the two halves of BM_sort_heap.
// Small rows cycle through up to 16 inputs (seeds 1..16, see distinct_inputs) so that the
// branch predictor cannot learn one input; counters are those of seed 1.
// Counters: ratio = makespan / lower bound; imbalance = makespan / mean load after the plan;
// imbalance_before = the same for the input; proven = 1 if the result is known optimal. The
// label is the algorithm whose plan was returned.
//
// Façade break-down at the target sizes (2560/64, 10240/64, 2560/4; seed 1 only): BM_facade_costs
// (cost evaluation), BM_facade_order (canonical order), BM_facade_lower_bound (the bound on that
// order), BM_makespan_lower_bound (the public function, which sorts again), BM_facade_check
// (satisfies + assignment_makespan, run once per candidate), BM_facade_plan (building the
// rearrangement), BM_detail_lpt / BM_detail_kk (the algorithm alone on a prepared input).
//
// Target checks (one row each; the three are timed interleaved in the same loop, in thread CPU
// time, so machine noise hits all of them alike):
//   BM_target_time/2560/64: counters lpt_x = t(lpt)/t(sort+heap), auto_x = t(auto)/t(sort+heap),
//     auto_ratio = auto's makespan / lower bound. Targets: lpt_x ≤ 1.5, auto_ratio ≤ 1.0001
//     with auto_x ≤ 3.
//   BM_target_quality/<d>/4: over 16 seeds, the worst auto/lpt and auto/kk makespan ratios
//     (target: ≤ 1 everywhere) and how many seeds violate it.
//
// Every row runs for Google Benchmark's default minimum time (0.5 s; the 655,360-item rows
// get a few iterations); `--benchmark_min_time=0.05` gives a quick pass.
// Full run (Release): build/default/bench/balance_balancer_bench
//   --benchmark_out=results.json --benchmark_out_format=json
// Target rows only: --benchmark_filter='BM_target|/2560/64$'

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/support/workload.hpp"
#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/statistics.hpp"

namespace {

using namespace orchmllm;
using cost_t = double;

const quadratic_cost k_cost{0.0, 1.0, 1e-4};
constexpr std::int64_t k_ranks[] = {8, 64, 512, 2560, 10240};
constexpr std::int64_t k_per_rank[] = {1, 4, 16, 64};

/// The lognormal input for (d, k, seed), generated once and cached (generation is not timed).
const batch_layout& input(std::int64_t d, std::int64_t k, std::uint64_t seed = 1) {
  static std::map<std::tuple<std::int64_t, std::int64_t, std::uint64_t>, batch_layout> cache;
  auto key = std::make_tuple(d, k, seed);
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, bench::lognormal_layout(d, k, bench::lognormal_spec{}, seed)).first;
  return it->second;
}

/// How many distinct inputs (seeds 1..S) a row cycles through. Replaying one small input lets
/// the branch predictor learn the whole sort and heap path: measured here, a 1,024-item sort ran
/// 7× faster on one repeated input than on 16 rotating ones (5.8 vs 39.7 µs), 4,096 items 4×.
/// A trainer plans a fresh batch every step, so small rows rotate through up to 16 inputs;
/// rows of more than 262,144 / 16 items use fewer, and rows of ≥ 131,072 items just seed 1
/// (too big to learn; the effect was 9 % at 8,192 items already).
std::int64_t distinct_inputs(std::int64_t n) {
  return std::clamp<std::int64_t>(262'144 / std::max<std::int64_t>(n, 1), 1, 16);
}

/// The inputs of a row (see distinct_inputs).
std::vector<const batch_layout*> inputs_of(benchmark::State& state) {
  const auto d = state.range(0), k = state.range(1);
  std::vector<const batch_layout*> v;
  for (std::int64_t s = 1; s <= distinct_inputs(d * k); ++s)
    v.push_back(&input(d, k, static_cast<std::uint64_t>(s)));
  return v;
}

void set_quality_counters(benchmark::State& state, const batch_layout& layout,
                          const balance_result<cost_t>& r, padding_policy policy) {
  const auto s = compute_statistics(layout, r.plan, k_cost, policy);
  state.counters["ratio"] = s.ratio;
  state.counters["imbalance"] = s.imbalance_after;
  state.counters["imbalance_before"] = s.imbalance_before;
  state.counters["proven"] = r.proven_optimal ? 1 : 0;
  state.SetLabel(std::string(r.used));
}

/// Times `balance` with `b` cycling through the row's inputs; the quality counters are those of
/// seed 1.
void run_balance(benchmark::State& state, const any_balancer& b, padding_policy policy) {
  const auto layouts = inputs_of(state);
  std::size_t i = 0;
  for (auto _ : state) {
    auto r = balance(*layouts[i], k_cost, policy, b);
    benchmark::DoNotOptimize(r.plan);
    benchmark::ClobberMemory();
    if (++i == layouts.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations() * layouts.front()->num_items());
  set_quality_counters(state, *layouts.front(), balance(*layouts.front(), k_cost, policy, b),
                       policy);
}

void BM_none(benchmark::State& s) { run_balance(s, balancers::identity{}, packed); }
void BM_lpt(benchmark::State& s) { run_balance(s, balancers::lpt{}, packed); }
void BM_lpt_refine(benchmark::State& s) { run_balance(s, balancers::lpt{.refine = true}, packed); }
void BM_kk(benchmark::State& s) { run_balance(s, balancers::karmarkar_karp{}, packed); }
void BM_auto(benchmark::State& s) { run_balance(s, balancers::automatic{}, packed); }
void BM_padded(benchmark::State& s) { run_balance(s, balancers::padded_exact{}, padded); }

/// A per-rank token cap at `slack` × the mean rank's tokens (never below the longest item).
capacity token_cap(const batch_layout& layout, double slack, std::int64_t ranks) {
  std::int64_t total = 0, longest = 0;
  for (std::int64_t g = 0; g < layout.num_items(); ++g) {
    total += layout.length(g);
    longest = std::max(longest, layout.length(g));
  }
  const auto limit =
      static_cast<std::int64_t>(slack * static_cast<double>(total) / static_cast<double>(ranks));
  return capacity{capacity::measure::tokens, std::max(limit, longest)};
}

/// As run_balance, with the constraints made for each input by `limits(layout, d, k)`.
template <class Limits>
void run_with(benchmark::State& state, const any_balancer& b, padding_policy policy,
              Limits limits) {
  const auto layouts = inputs_of(state);
  const auto d = state.range(0), k = state.range(1);
  std::vector<constraints> made;
  for (const auto* l : layouts) made.push_back(limits(*l, d, k));
  std::size_t i = 0;
  for (auto _ : state) {
    auto r = balance(*layouts[i], k_cost, policy, b, made[i]);
    benchmark::DoNotOptimize(r.plan);
    benchmark::ClobberMemory();
    if (++i == layouts.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations() * layouts.front()->num_items());
  set_quality_counters(state, *layouts.front(),
                       balance(*layouts.front(), k_cost, policy, b, made.front()), policy);
}

void BM_lpt_padded(benchmark::State& s) { run_balance(s, balancers::lpt{}, padded); }
void BM_lpt_capped(benchmark::State& s) {
  run_with(s, balancers::lpt{}, packed, [](const batch_layout& l, std::int64_t d, std::int64_t k) {
    return constraints{.cap = token_cap(l, 1.25, d), .max_items = 2 * k};
  });
}
void BM_auto_capped(benchmark::State& s) {
  run_with(s, balancers::automatic{}, packed,
           [](const batch_layout& l, std::int64_t d, std::int64_t k) {
             return constraints{.cap = token_cap(l, 1.05, d), .max_items = k + 2};
           });
}
void BM_locality(benchmark::State& s) { run_balance(s, balancers::locality{}, packed); }
void BM_locality_padded(benchmark::State& s) { run_balance(s, balancers::locality{}, padded); }
void BM_exact_padded(benchmark::State& s) { run_balance(s, balancers::exact{}, padded); }

// ---------------------------------------------------------------------------------------------
// Baselines: the bare sort + heap pass.
// ---------------------------------------------------------------------------------------------

using heap_entry = std::pair<cost_t, rank_t>;  // (load, rank): ties by rank, like the library

/// Restores the min-heap property below position i (the top's load just grew).
inline void sift_down(std::vector<heap_entry>& h, std::size_t i) {
  const std::size_t n = h.size();
  const heap_entry v = h[i];
  for (;;) {
    std::size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && h[c + 1] < h[c]) ++c;
    if (!(h[c] < v)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = v;
}

/// All-zero loads in rank order form a valid min-heap already.
inline std::vector<heap_entry> zero_heap(rank_t d) {
  std::vector<heap_entry> h(static_cast<std::size_t>(d));
  for (rank_t r = 0; r < d; ++r) h[static_cast<std::size_t>(r)] = {0.0, r};
  return h;
}

/// Copy, sort descending, one heap pass. Returns the makespan.
cost_t sort_heap(std::span<const cost_t> costs, rank_t d) {
  std::vector<cost_t> c(costs.begin(), costs.end());
  std::sort(c.begin(), c.end(), std::greater<>());
  auto h = zero_heap(d);
  for (const cost_t x : c) {
    h[0].first += x;
    sift_down(h, 0);
  }
  cost_t m = 0;
  for (const auto& e : h) m = std::max(m, e.first);
  return m;
}

/// Same, with ids: sorts (cost desc, id asc) pairs and writes each item's destination.
cost_t sort_heap_ids(std::span<const cost_t> costs, rank_t d, std::vector<rank_t>& dst) {
  std::vector<std::pair<cost_t, std::int64_t>> c(costs.size());
  for (std::size_t g = 0; g < costs.size(); ++g) c[g] = {costs[g], static_cast<std::int64_t>(g)};
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  dst.assign(costs.size(), 0);
  auto h = zero_heap(d);
  for (const auto& [x, g] : c) {
    dst[static_cast<std::size_t>(g)] = h[0].second;
    h[0].first += x;
    sift_down(h, 0);
  }
  cost_t m = 0;
  for (const auto& e : h) m = std::max(m, e.first);
  return m;
}

std::vector<cost_t> costs_of(const batch_layout& layout) {
  std::vector<cost_t> c(static_cast<std::size_t>(layout.num_items()));
  for (std::int64_t g = 0; g < layout.num_items(); ++g)
    c[static_cast<std::size_t>(g)] = k_cost(layout.length(g));
  return c;
}

void set_baseline_counters(benchmark::State& state, const batch_layout& layout, cost_t makespan) {
  const auto d = layout.num_ranks();
  const auto lb = makespan_lower_bound(layout, d, k_cost, packed);
  double total = 0;
  for (std::int64_t g = 0; g < layout.num_items(); ++g) total += k_cost(layout.length(g));
  state.counters["ratio"] = lb > 0 ? makespan / lb : 1.0;
  state.counters["imbalance"] = total > 0 ? makespan / (total / d) : 1.0;
}

/// The costs of each of the row's inputs.
std::vector<std::vector<cost_t>> costs_of_inputs(const std::vector<const batch_layout*>& layouts) {
  std::vector<std::vector<cost_t>> c;
  for (const auto* l : layouts) c.push_back(costs_of(*l));
  return c;
}

void BM_sort_heap(benchmark::State& state) {
  const auto layouts = inputs_of(state);
  const auto costs = costs_of_inputs(layouts);
  const rank_t d = layouts.front()->num_ranks();
  std::size_t i = 0;
  for (auto _ : state) {
    auto m = sort_heap(costs[i], d);
    benchmark::DoNotOptimize(m);
    if (++i == costs.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations() * layouts.front()->num_items());
  set_baseline_counters(state, *layouts.front(), sort_heap(costs.front(), d));
}

/// The two halves of BM_sort_heap alone: copy + std::sort, and the heap pass on sorted costs.
void BM_sort_only(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  const auto costs = costs_of(layout);
  for (auto _ : state) {
    std::vector<cost_t> c(costs.begin(), costs.end());
    std::sort(c.begin(), c.end(), std::greater<>());
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

void BM_heap_only(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  auto sorted = costs_of(layout);
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  for (auto _ : state) {
    auto h = zero_heap(layout.num_ranks());
    for (const cost_t x : sorted) {
      h[0].first += x;
      sift_down(h, 0);
    }
    benchmark::DoNotOptimize(h.data());
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

void BM_sort_heap_ids(benchmark::State& state) {
  const auto layouts = inputs_of(state);
  const auto costs = costs_of_inputs(layouts);
  const rank_t d = layouts.front()->num_ranks();
  std::vector<rank_t> dst;
  std::size_t i = 0;
  for (auto _ : state) {
    auto m = sort_heap_ids(costs[i], d, dst);
    benchmark::DoNotOptimize(m);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    if (++i == costs.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations() * layouts.front()->num_items());
  set_baseline_counters(state, *layouts.front(), sort_heap_ids(costs.front(), d, dst));
}

// ---------------------------------------------------------------------------------------------
// Façade break-down: each piece of orchmllm::balance alone.
// ---------------------------------------------------------------------------------------------

/// A prepared balance_input (what the façade builds before calling an algorithm).
struct prepared {
  const batch_layout& layout;
  std::vector<cost_t> costs;
  std::vector<std::int64_t> order;
  constraints limits{};
  explicit prepared(const batch_layout& l)
      : layout(l),
        costs(costs_of(l)),
        order(detail::canonical_order<cost_t>(l, std::span<const cost_t>(costs), packed)) {}
  [[nodiscard]] detail::balance_input<cost_t> view() const {
    return {layout, layout.num_ranks(), costs, order, packed, limits};
  }
};

void BM_facade_costs(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  for (auto _ : state) {
    auto c = costs_of(layout);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

void BM_facade_order(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  const auto costs = costs_of(layout);
  for (auto _ : state) {
    auto o = detail::canonical_order<cost_t>(layout, std::span<const cost_t>(costs), packed);
    benchmark::DoNotOptimize(o.data());
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

/// The bound as the façade computes it: on the canonical order it already has (O(n)).
void BM_facade_lower_bound(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  const prepared p(layout);
  for (auto _ : state) {
    auto lb = detail::lower_bound_in_order<quadratic_cost>(
        layout, std::span<const std::int64_t>(p.order), std::span<const cost_t>(p.costs),
        layout.num_ranks(), k_cost, packed, p.limits);
    benchmark::DoNotOptimize(lb);
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

/// The public makespan_lower_bound (sorts the costs itself): what a caller pays for the bound
/// alone, e.g. for statistics.
void BM_makespan_lower_bound(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  for (auto _ : state) {
    auto lb = makespan_lower_bound(layout, layout.num_ranks(), k_cost, packed);
    benchmark::DoNotOptimize(lb);
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

void BM_facade_check(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  const prepared p(layout);
  const auto in = p.view();
  const auto a = *detail::lpt(in, k_cost);
  for (auto _ : state) {
    const bool ok = detail::satisfies(in, std::span<const rank_t>(a));
    const auto m = detail::assignment_makespan(in, k_cost, std::span<const rank_t>(a));
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

void BM_facade_plan(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  const prepared p(layout);
  const auto a = *detail::lpt(p.view(), k_cost);
  for (auto _ : state) {
    auto plan = rearrangement::from_destinations(layout.offsets(), a, layout.num_ranks());
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

void BM_detail_lpt(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  const prepared p(layout);
  const auto in = p.view();
  for (auto _ : state) {
    auto a = detail::lpt(in, k_cost);
    benchmark::DoNotOptimize(a);
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

void BM_detail_kk(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  const prepared p(layout);
  const auto in = p.view();
  for (auto _ : state) {
    auto a = detail::karmarkar_karp(in);
    benchmark::DoNotOptimize(a);
  }
  state.SetItemsProcessed(state.iterations() * layout.num_items());
}

// ---------------------------------------------------------------------------------------------
// Target checks.
// ---------------------------------------------------------------------------------------------

/// CPU time of the calling thread in seconds (the benchmarks are single-threaded): unlike wall
/// time it does not count the time other processes hold the core, which matters on a shared
/// machine. Falls back to a steady clock where POSIX thread clocks are missing.
double thread_seconds() {
#if defined(CLOCK_THREAD_CPUTIME_ID)
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
#else
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
#endif
}

/// Times sort+heap, lpt and auto interleaved (each once per iteration) on the same input, in
/// thread CPU time, and reports the time ratios. The benchmark's own time is the sum of the
/// three.
void BM_target_time(benchmark::State& state) {
  const auto& layout = input(state.range(0), state.range(1));
  const auto costs = costs_of(layout);
  double t_base = 0, t_lpt = 0, t_auto = 0;
  balance_result<cost_t> r_auto;
  for (auto _ : state) {
    const double t0 = thread_seconds();
    auto m = sort_heap(costs, layout.num_ranks());
    benchmark::DoNotOptimize(m);
    const double t1 = thread_seconds();
    auto r = balance(layout, k_cost, packed, balancers::lpt{});
    benchmark::DoNotOptimize(r.plan);
    const double t2 = thread_seconds();
    r_auto = balance(layout, k_cost, packed, balancers::automatic{});
    benchmark::DoNotOptimize(r_auto.plan);
    const double t3 = thread_seconds();
    t_base += t1 - t0;
    t_lpt += t2 - t1;
    t_auto += t3 - t2;
  }
  const auto it = static_cast<double>(state.iterations());
  state.counters["sort_heap_ms"] = 1e3 * t_base / it;
  state.counters["lpt_ms"] = 1e3 * t_lpt / it;
  state.counters["auto_ms"] = 1e3 * t_auto / it;
  state.counters["lpt_x"] = t_lpt / t_base;
  state.counters["auto_x"] = t_auto / t_base;
  state.counters["auto_ratio"] = static_cast<double>(r_auto.makespan) / r_auto.lower_bound;
  state.SetLabel(std::string("auto used ") + std::string(r_auto.used));
}

/// Quality only (the loop times auto on seed 1): over 16 seeds, is auto ever worse than lpt or
/// kk? Counters: worst auto/lpt and auto/kk makespan ratios (≤ 1 is the target), violations.
void BM_target_quality(benchmark::State& state) {
  const auto d = state.range(0), k = state.range(1);
  {
    const auto& layout = input(d, k);
    for (auto _ : state) {
      auto r = balance(layout, k_cost, packed, balancers::automatic{});
      benchmark::DoNotOptimize(r.plan);
    }
    state.SetItemsProcessed(state.iterations() * layout.num_items());
  }
  double worst_lpt = 0, worst_kk = 0, worst_ratio = 0;
  int violations = 0;
  for (std::uint64_t seed = 1; seed <= 16; ++seed) {
    const auto layout = bench::lognormal_layout(d, k, bench::lognormal_spec{}, seed);
    const auto ra = balance(layout, k_cost, packed, balancers::automatic{});
    const auto rl = balance(layout, k_cost, packed, balancers::lpt{});
    const auto rk = balance(layout, k_cost, packed, balancers::karmarkar_karp{});
    worst_lpt = std::max(worst_lpt, ra.makespan / rl.makespan);
    worst_kk = std::max(worst_kk, ra.makespan / rk.makespan);
    worst_ratio = std::max(worst_ratio, ra.makespan / ra.lower_bound);
    if (ra.makespan > rl.makespan || ra.makespan > rk.makespan) ++violations;
  }
  state.counters["worst_auto_over_lpt"] = worst_lpt;
  state.counters["worst_auto_over_kk"] = worst_kk;
  state.counters["worst_auto_ratio"] = worst_ratio;
  state.counters["violations"] = violations;
}

// ---------------------------------------------------------------------------------------------
// Registration.
// ---------------------------------------------------------------------------------------------

template <class F>
void register_grid(const char* name, F f) {
  for (auto d : k_ranks) {
    for (auto k : k_per_rank) {
      benchmark::RegisterBenchmark(name, f)->Args({d, k})->Unit(benchmark::kMillisecond);
    }
  }
}

template <class F>
void register_targets(const char* name, F f) {
  for (auto [d, k] : {std::pair<std::int64_t, std::int64_t>{2560, 4}, {2560, 64}, {10240, 64}})
    benchmark::RegisterBenchmark(name, f)->Args({d, k})->Unit(benchmark::kMillisecond);
}

[[maybe_unused]] const bool registered = [] {
  register_grid("BM_sort_heap", BM_sort_heap);
  register_grid("BM_sort_heap_ids", BM_sort_heap_ids);
  register_grid("BM_none", BM_none);
  register_grid("BM_lpt", BM_lpt);
  register_grid("BM_lpt_refine", BM_lpt_refine);
  register_grid("BM_kk", BM_kk);
  register_grid("BM_auto", BM_auto);
  register_grid("BM_padded", BM_padded);
  for (auto [name, f] : {std::pair{"BM_lpt_padded", &BM_lpt_padded},
                         {"BM_lpt_capped", &BM_lpt_capped},
                         {"BM_auto_capped", &BM_auto_capped},
                         {"BM_locality", &BM_locality},
                         {"BM_locality_padded", &BM_locality_padded}})
    for (auto [d, k] : {std::pair<std::int64_t, std::int64_t>{64, 16}, {512, 16}, {2560, 16}})
      benchmark::RegisterBenchmark(name, f)->Args({d, k})->Unit(benchmark::kMillisecond);
  for (auto [d, k] : {std::pair<std::int64_t, std::int64_t>{8, 4}, {16, 2}})
    benchmark::RegisterBenchmark("BM_exact_padded", BM_exact_padded)
        ->Args({d, k})
        ->Unit(benchmark::kMillisecond);
  register_targets("BM_sort_only", BM_sort_only);
  register_targets("BM_heap_only", BM_heap_only);
  register_targets("BM_facade_costs", BM_facade_costs);
  register_targets("BM_facade_order", BM_facade_order);
  register_targets("BM_facade_lower_bound", BM_facade_lower_bound);
  register_targets("BM_makespan_lower_bound", BM_makespan_lower_bound);
  register_targets("BM_facade_check", BM_facade_check);
  register_targets("BM_facade_plan", BM_facade_plan);
  register_targets("BM_detail_lpt", BM_detail_lpt);
  register_targets("BM_detail_kk", BM_detail_kk);
  benchmark::RegisterBenchmark("BM_target_time", BM_target_time)
      ->Args({2560, 64})
      ->Unit(benchmark::kMillisecond);
  for (auto d : k_ranks)
    benchmark::RegisterBenchmark("BM_target_quality", BM_target_quality)
        ->Args({d, 4})
        ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace
