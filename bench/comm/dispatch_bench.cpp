// Benchmarks of orchmllm::dispatch on the in-process `local` backend (comm/dispatch.hpp).
//
//  * BM_local_dispatch/ranks:<P>/bytes_per_rank:<S>: P ranks (threads; 8, and 2 = one per core
//    of a small CI machine, to separate the copies from thread oversubscription), a uniform
//    all-to-all (every rank sends 1/P of its bytes to every rank, itself included). Each of
//    `repeats` runs times, after a barrier and as its slowest rank, one `orchmllm::dispatch`
//    (the whole call: metadata agreement, route build, pack, all-to-all, unpack), one
//    `orchmllm::execute` of a route
//    built beforehand (the data movement alone, with its agreement), one `orchmllm::dispatch`
//    along that route after one `agree_on_routes` (its all-to-all only: a training step's
//    transfer) and one plain `std::memcpy` of the same number of bytes on every rank (the copy
//    floor of a shared-memory transport). The iteration time is the dispatch time;
//    bytes_per_second counts every rank's payload. Counters from the same run:
//    memcpy_bytes_per_second, execute_bytes_per_second and the ratios dispatch_over_memcpy,
//    execute_over_memcpy, route_over_memcpy (medians).
//  * BM_local_memcpy/ranks:<P>/bytes_per_rank:<S>: the memcpy floor alone, for reference.
//  * BM_schedule/<direct|node-wise>/<bytes per rank>: 16 ranks faked as 4 nodes x 4, the same
//    uniform all-to-all, one schedule. Iteration time = measured dispatch; counters
//    predicted_seconds (the library's time model with its default H100/H200 link figures, which
//    describe GPUs and NICs, not this machine's threads), predicted_direct_seconds,
//    predicted_node_wise_seconds, sent_intra_node_bytes, sent_inter_node_bytes, execute_seconds.
//
// Every run's output is checked (bench/support/payload.hpp's content checks); a wrong byte
// aborts the benchmark with an error. Times are measured inside one `local::run` per benchmark
// (thread start-up is not timed) and replayed into Google Benchmark with UseManualTime, one
// iteration per run. Results: docs/results.md.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/support/collectives.hpp"
#include "bench/support/dispatch_driver.hpp"
#include "bench/support/payload.hpp"
#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "orchmllm/comm/local.hpp"

namespace {

using orchmllm::rank_t;

using orchmllm::bench::uniform_all_to_all;

/// Medians and per-run dispatch times of one measurement.
struct measurement {
  std::vector<double> dispatch;  // per run, slowest rank
  double execute = 0, routed = 0, memcpy_ = 0;
  orchmllm::dispatch_report report;
  orchmllm::traffic_stats sent;  // Σ over ranks
  double predicted_direct = 0, predicted_node_wise = 0;
  std::string error;  // non-empty: a check failed
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Runs the measurement described in the file comment on d threads.
measurement measure(const orchmllm::bench::dispatch_inputs& c, rank_t d, rank_t ranks_per_node,
                    orchmllm::schedule sched, int repeats, bool with_memcpy) {
  namespace bench = orchmllm::bench;
  measurement m;
  orchmllm::local::run(
      d,
      [&](orchmllm::local::communicator& comm) {
        const rank_t me = comm.rank();
        const auto mine = bench::make_source_payload(c.layout, me);
        orchmllm::dispatch_options opts;
        opts.sched = sched;
        const auto my_bytes = mine.rows;  // row_bytes = 1
        const auto route = orchmllm::build_route(comm, c.plan, my_bytes, opts);
        orchmllm::host_mover mover, route_scratch;
        std::vector<std::byte> executed(static_cast<std::size_t>(route.output_bytes()));
        std::vector<std::byte> routed(executed.size());
        orchmllm::agree_on_routes(comm, std::span<const orchmllm::route>(&route, 1), route_scratch);
        std::vector<std::byte> copy(mine.data.size());
        std::vector<double> td, te, tr, tm;
        std::optional<std::string> failure;
        orchmllm::dispatch_report report;
        for (int k = -1; k < repeats; ++k) {  // k = -1: warm-up
          comm.barrier();
          auto t0 = std::chrono::steady_clock::now();
          const auto moved = orchmllm::dispatch(comm, c.plan, mine, opts, &report);
          const double d_s = seconds_since(t0);
          if (!failure) failure = bench::check_delivered(moved, c.layout, c.plan, me, "dispatch");

          comm.barrier();
          t0 = std::chrono::steady_clock::now();
          orchmllm::execute(comm, route, mine.data.data(), executed.data(), mover);
          const double e_s = seconds_since(t0);
          if (!failure && executed != moved.data) failure = "execute: bytes differ from dispatch's";

          comm.barrier();
          t0 = std::chrono::steady_clock::now();
          orchmllm::dispatch(comm, route, std::span<const std::byte>(mine.data),
                             std::span<std::byte>(routed), route_scratch);
          const double r_s = seconds_since(t0);
          if (!failure && routed != moved.data) failure = "route: bytes differ from dispatch's";

          double m_s = 0;
          if (with_memcpy) {
            comm.barrier();
            t0 = std::chrono::steady_clock::now();
            std::memcpy(copy.data(), mine.data.data(), mine.data.size());
            benchmark::ClobberMemory();
            m_s = seconds_since(t0);
          }
          if (k >= 0) {
            td.push_back(d_s);
            te.push_back(e_s);
            tr.push_back(r_s);
            tm.push_back(m_s);
          }
        }
        const auto problems = bench::gather_problems(comm, failure);
        const auto all_d = bench::max_over_ranks(comm, td);
        const auto all_e = bench::max_over_ranks(comm, te);
        const auto all_r = bench::max_over_ranks(comm, tr);
        const auto all_m = bench::max_over_ranks(comm, tm);
        const std::int64_t sent[2] = {report.sent.intra_node_bytes, report.sent.inter_node_bytes};
        const auto sent_all = orchmllm::all_gather(comm, std::span<const std::int64_t>(sent));
        if (me != 0) return;
        if (!problems.empty())
          m.error =
              "rank " + std::to_string(problems.front().first) + ": " + problems.front().second;
        m.dispatch = all_d;
        m.execute = bench::median(all_e);
        m.routed = bench::median(all_r);
        m.memcpy_ = bench::median(all_m);
        m.report = report;
        for (std::size_t q = 0; q < static_cast<std::size_t>(d); ++q) {
          m.sent.intra_node_bytes += sent_all[2 * q];
          m.sent.inter_node_bytes += sent_all[2 * q + 1];
        }
      },
      orchmllm::local::run_options{ranks_per_node, {}});
  // Predicted times of both schedules on the same node map (computed once, outside the threads).
  std::vector<std::int64_t> item_bytes(c.layout.lengths().begin(), c.layout.lengths().end());
  const auto topo = orchmllm::topology::uniform(d, ranks_per_node);
  const auto both =
      orchmllm::route::build(c.plan, item_bytes, topo, 0, orchmllm::schedule::automatic);
  m.predicted_direct = both.predicted_seconds(orchmllm::schedule::direct);
  // NaN when automatic skipped node-wise (its lower bound reached direct's time): build it.
  m.predicted_node_wise =
      std::isnan(both.predicted_seconds(orchmllm::schedule::node_wise))
          ? orchmllm::route::build(c.plan, item_bytes, topo, 0, orchmllm::schedule::node_wise)
                .predicted_seconds()
          : both.predicted_seconds(orchmllm::schedule::node_wise);
  return m;
}

/// Replays measured per-run times into the benchmark loop (one iteration per run).
void replay(benchmark::State& state, const std::vector<double>& times) {
  std::size_t i = 0;
  for (auto _ : state) state.SetIterationTime(times[i++ % times.size()]);
}

int repeats_for(std::int64_t bytes_per_rank) { return bytes_per_rank >= (8 << 20) ? 5 : 20; }

void BM_local_dispatch(benchmark::State& state) {
  const auto local_ranks = static_cast<rank_t>(state.range(0));
  const std::int64_t per_rank = state.range(1);
  const auto c = uniform_all_to_all(local_ranks, per_rank);
  const int repeats = repeats_for(per_rank);
  const auto m = measure(c, local_ranks, 0, orchmllm::schedule::direct, repeats, true);
  if (!m.error.empty()) {
    state.SkipWithError(m.error.c_str());
    return;
  }
  replay(state, m.dispatch);
  const double total = static_cast<double>(per_rank) * local_ranks;
  const double dispatch = orchmllm::bench::median(m.dispatch);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(total));
  state.counters["memcpy_bytes_per_second"] = total / m.memcpy_;
  state.counters["execute_bytes_per_second"] = total / m.execute;
  state.counters["dispatch_over_memcpy"] = dispatch / m.memcpy_;
  state.counters["execute_over_memcpy"] = m.execute / m.memcpy_;
  state.counters["route_over_memcpy"] = m.routed / m.memcpy_;
}
void BM_local_memcpy(benchmark::State& state) {
  const auto local_ranks = static_cast<rank_t>(state.range(0));
  const std::int64_t per_rank = state.range(1);
  std::vector<double> times;
  orchmllm::local::run(local_ranks, [&](orchmllm::local::communicator& comm) {
    std::vector<std::byte> src(static_cast<std::size_t>(per_rank), std::byte{1}),
        dst(static_cast<std::size_t>(per_rank));
    std::vector<double> t;
    for (int k = -1; k < repeats_for(per_rank); ++k) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      std::memcpy(dst.data(), src.data(), src.size());
      benchmark::ClobberMemory();
      if (k >= 0) t.push_back(seconds_since(t0));
    }
    const auto all = orchmllm::bench::max_over_ranks(comm, t);
    if (comm.rank() == 0) times = all;
  });
  replay(state, times);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * per_rank * local_ranks);
}

void BM_schedule(benchmark::State& state) {
  const auto sched =
      state.range(0) == 0 ? orchmllm::schedule::direct : orchmllm::schedule::node_wise;
  const std::int64_t per_rank = state.range(1);
  constexpr rank_t d = 16;
  const auto c = uniform_all_to_all(d, per_rank);
  const auto m = measure(c, d, 4, sched, repeats_for(per_rank), false);
  if (!m.error.empty()) {
    state.SkipWithError(m.error.c_str());
    return;
  }
  replay(state, m.dispatch);
  state.SetLabel(std::string(orchmllm::to_string(sched)));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * per_rank * d);
  state.counters["predicted_seconds"] = m.report.predicted_seconds;
  state.counters["predicted_direct_seconds"] = m.predicted_direct;
  state.counters["predicted_node_wise_seconds"] = m.predicted_node_wise;
  state.counters["execute_seconds"] = m.execute;
  state.counters["sent_intra_node_bytes"] = static_cast<double>(m.sent.intra_node_bytes);
  state.counters["sent_inter_node_bytes"] = static_cast<double>(m.sent.inter_node_bytes);
}

// Registered by hand so that the iteration count of each size equals its number of measured
// runs (see replay).
[[maybe_unused]] const int registered = [] {
  for (const std::int64_t ranks : {8, 2}) {
    for (const std::int64_t size : {std::int64_t{1} << 20, std::int64_t{16} << 20}) {
      benchmark::RegisterBenchmark("BM_local_dispatch", BM_local_dispatch)
          ->Args({ranks, size})
          ->ArgNames({"ranks", "bytes_per_rank"})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(repeats_for(size));
      benchmark::RegisterBenchmark("BM_local_memcpy", BM_local_memcpy)
          ->Args({ranks, size})
          ->ArgNames({"ranks", "bytes_per_rank"})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(repeats_for(size));
    }
  }
  for (const std::int64_t sched : {0, 1})
    for (const std::int64_t size : {std::int64_t{64} << 10, std::int64_t{4} << 20})
      benchmark::RegisterBenchmark("BM_schedule", BM_schedule)
          ->Args({sched, size})
          ->ArgNames({"node_wise", "bytes_per_rank"})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(repeats_for(size));
  return 0;
}();

}  // namespace
