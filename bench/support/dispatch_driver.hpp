#pragma once
// The per-rank dispatch measurement shared by `orchmllm-bench dispatch` (bench/cli/) and the
// MPI dispatch benchmark (bench/comm/mpi_dispatch_bench.cpp), and the benchmarks' uniform
// all-to-all input. On every rank of a communicator, `run_dispatch_rank`:
//   1. builds its source payload (its items in slot order; payload.hpp);
//   2. once untimed (warm-up), then K times, each timed step preceded by a barrier:
//      `orchmllm::dispatch` (the whole call: metadata agreement, route build, all-to-alls),
//      `orchmllm::execute` of a route built once beforehand (the data movement alone),
//      `orchmllm::combine` of what dispatch delivered, and, when the baseline applies (MPI:
//      mpi_alltoallv_baseline.hpp), a plain all-to-all(v) of the direct schedule's byte matrix;
//   3. checks after every step that it holds exactly its planned items, in dst_slot order, with
//      the right sizes and content, and after combine exactly its original payload.
// A step's time is the slowest rank's; the reported time is the median over the K runs. The
// ranks' verdicts are shared (all-gather), so every rank returns the same summary.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <orchmllm/comm/collectives.hpp>
#include <orchmllm/comm/communicator.hpp>
#include <orchmllm/comm/dispatch.hpp>
#include <orchmllm/comm/metadata.hpp>
#include <orchmllm/comm/mover.hpp>
#include <orchmllm/comm/payload.hpp>
#include <orchmllm/comm/route.hpp>
#include <orchmllm/core/batch_layout.hpp>
#include <orchmllm/core/error.hpp>
#include <orchmllm/core/rearrangement.hpp>
#include <orchmllm/topology/topology.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench/support/collectives.hpp"
#include "bench/support/payload.hpp"

namespace orchmllm::bench {

/// What a dispatch measurement moves: the source layout and the plan, over `ranks` ranks.
struct dispatch_inputs {
  batch_layout layout;
  rearrangement plan;
  rank_t ranks = 0;
};

/// The benchmarks' uniform all-to-all: d ranks with 2·d items of bytes_per_rank / (2·d) bytes
/// each (the remainder spread so every rank holds exactly bytes_per_rank); item j of rank r goes
/// to rank (r + j) mod d, so every rank sends the same share to every rank, itself included,
/// and each peer's items are interleaved with the others' (every hop needs a real gather).
inline dispatch_inputs uniform_all_to_all(rank_t d, std::int64_t bytes_per_rank) {
  const std::int64_t k = 2 * static_cast<std::int64_t>(d);
  std::vector<std::int64_t> offsets{0}, lengths;
  std::vector<rank_t> dst;
  for (rank_t r = 0; r < d; ++r) {
    for (std::int64_t j = 0; j < k; ++j) {
      lengths.push_back(bytes_per_rank / k + (j < bytes_per_rank % k ? 1 : 0));
      dst.push_back(static_cast<rank_t>((r + j) % d));
    }
    offsets.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  dispatch_inputs in;
  in.ranks = d;
  in.layout = batch_layout(offsets, std::move(lengths));
  in.plan = rearrangement::from_destinations(offsets, dst, d);
  return in;
}

/// A baseline that is never run (the local backend).
struct no_alltoallv_baseline {
  /// Collective; false: the baseline does not apply.
  template <communicator Comm>
  bool prepare(Comm&, std::span<const std::int64_t>, std::span<const std::int64_t>) {
    return false;
  }
  /// Seconds of one run (never called when prepare returned false).
  double run(const std::byte*, std::byte*) { return 0; }
};

/// What one dispatch run found; identical on every rank.
struct dispatch_summary {
  bool verified = false;
  std::vector<std::pair<rank_t, std::string>> failures;  ///< ranks that found wrong data
  rank_t ranks = 0;
  rank_t nodes = 0;
  rank_t gpus_per_node = 0;  ///< the --gpus-per-node value, else the size of node 0
  schedule requested = schedule::automatic;
  schedule used = schedule::direct;
  int repeat = 0;
  std::int64_t items = 0;
  std::int64_t total_bytes = 0;
  std::int64_t max_rank_bytes = 0;  ///< largest source payload of one rank
  traffic_stats planned{};          ///< Σ plan_traffic over the source ranks
  traffic_stats sent{};             ///< Σ over ranks of what the used schedule sent
  double predicted_seconds = 0;
  double predicted_direct_seconds = 0;
  double predicted_node_wise_seconds = 0;
  double dispatch_seconds = 0;
  double execute_seconds = 0;
  double route_seconds = 0;  ///< dispatch along the prebuilt route, agreed once
  double combine_seconds = 0;
  std::optional<double> alltoallv_seconds;
};

/// Settings of `run_dispatch_rank`.
struct dispatch_run_settings {
  schedule sched = schedule::automatic;
  int repeat = 5;
  rank_t gpus_per_node = 0;  ///< reported as given; 0: report the size of node 0
  link_params links{};
};

/// Collective, on every rank of `comm` (whose size must equal the plan's rank count; callers
/// check, identically on every rank): the measurement and checks described in the file comment.
/// Returns the same summary on every rank. Throws invalid_argument_error on every rank when a
/// rank cannot allocate its buffers; what dispatch/combine/the communicator throw.
template <communicator Comm, class Baseline>
dispatch_summary run_dispatch_rank(Comm& comm, const batch_layout& layout,
                                   const rearrangement& plan, const dispatch_run_settings& s,
                                   Baseline& baseline) {
  using clock = std::chrono::steady_clock;
  const rank_t me = comm.rank();
  const rank_t d = comm.size();

  // Buffers first, agreed: one rank that cannot allocate must not leave the others waiting.
  ragged_payload mine;
  std::optional<std::string> problem;
  try {
    mine = make_source_payload(layout, me);
  } catch (const std::bad_alloc&) {
    std::int64_t b = 0;
    for (auto g = layout.offset(me); g < layout.offset(me + 1); ++g) b += layout.bytes(g);
    problem = ::orchmllm::detail::concat("cannot allocate its ", b, " bytes of payload");
  }
  if (const auto p = gather_problems(comm, problem); !p.empty())
    ::orchmllm::detail::raise<invalid_argument_error>(
        ::orchmllm::detail::concat("rank ", p.front().first, " ", p.front().second));

  dispatch_summary sum;
  sum.ranks = d;
  sum.requested = s.sched;
  sum.repeat = s.repeat;
  sum.items = layout.num_items();
  sum.total_bytes = layout.total_bytes();
  for (rank_t r = 0; r < d; ++r) {
    std::int64_t b = 0;
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g) b += layout.bytes(g);
    sum.max_rank_bytes = std::max(sum.max_rank_bytes, b);
  }

  // The node map the routes use (the communicator's), for the byte accounting and the model.
  const topology topo = orchmllm::gather_topology(comm, s.links);
  sum.nodes = topo.num_nodes();
  sum.gpus_per_node = s.gpus_per_node > 0 ? s.gpus_per_node : topo.node_size(0);
  const std::span<const std::int64_t> item_bytes = layout.item_bytes();
  for (const auto& t : plan_traffic(plan, item_bytes, topo)) sum.planned += t;
  {
    const route both = route::build(plan, item_bytes, topo, me, schedule::automatic);
    sum.predicted_direct_seconds = both.predicted_seconds(schedule::direct);
    // NaN when automatic skipped node-wise (its lower bound reached direct's time): build it.
    sum.predicted_node_wise_seconds =
        std::isnan(both.predicted_seconds(schedule::node_wise))
            ? route::build(plan, item_bytes, topo, me, schedule::node_wise).predicted_seconds()
            : both.predicted_seconds(schedule::node_wise);
  }

  host_mover dispatch_scratch;  // reused by dispatch/combine, as a trainer would
  const dispatch_options opts{s.sched, s.links, &dispatch_scratch};
  const auto my_bytes = item_bytes.subspan(static_cast<std::size_t>(layout.offset(me)),
                                           static_cast<std::size_t>(layout.rank_size(me)));
  const route r = build_route(comm, plan, my_bytes, opts);
  host_mover mover;
  std::vector<std::byte> executed(static_cast<std::size_t>(r.output_bytes()));
  // The training-step path: one agreement (which also reserves the scratch), then each
  // dispatch along the route is its hops' all-to-alls.
  host_mover route_scratch;
  std::vector<std::byte> routed(static_cast<std::size_t>(r.output_bytes()));
  agree_on_routes(comm, std::span<const route>(&r, 1), route_scratch);
  const auto [send_counts, recv_counts] = direct_byte_counts(layout, plan, me);
  const bool with_baseline = baseline.prepare(comm, send_counts, recv_counts);
  std::vector<std::byte> baseline_recv;
  if (with_baseline) {
    std::int64_t total = 0;
    for (const auto c : recv_counts) total += c;
    baseline_recv.resize(static_cast<std::size_t>(total));
  }

  std::optional<std::string> failure;
  auto note = [&failure](std::optional<std::string> f) {
    if (!failure && f) failure = std::move(f);
  };
  auto seconds_since = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<double> t_dispatch, t_execute, t_route, t_combine, t_baseline;
  dispatch_report report;
  ragged_payload moved, back;            // reused across steps, as a trainer would
  for (int k = -1; k < s.repeat; ++k) {  // k = -1: untimed warm-up (first-touch, caches)
    comm.barrier();
    auto t0 = clock::now();
    dispatch(comm, plan, mine, moved, opts, &report);
    const double td = seconds_since(t0);
    note(check_delivered(moved, layout, plan, me, "dispatch"));

    comm.barrier();
    t0 = clock::now();
    execute(comm, r, mine.data.data(), executed.data(), mover);
    const double te = seconds_since(t0);
    if (!std::equal(executed.begin(), executed.end(), moved.data.begin(), moved.data.end()))
      note(std::string("execute: the bytes differ from what dispatch delivered"));

    comm.barrier();
    t0 = clock::now();
    combine(comm, plan, moved, back, opts);
    const double tc = seconds_since(t0);
    note(check_same_payload(back, mine, "combine"));

    // The route and the baseline side by side, in alternating order (what runs first after
    // other work is measurably slower on a shared machine).
    double tr = 0, tb = 0;
    for (int turn = 0; turn < 2; ++turn) {
      comm.barrier();
      if ((turn == 0) == (k % 2 == 0)) {
        t0 = clock::now();
        dispatch(comm, r, std::span<const std::byte>(mine.data), std::span<std::byte>(routed),
                 route_scratch);
        tr = seconds_since(t0);
      } else if (with_baseline) {
        tb = baseline.run(mine.data.data(), baseline_recv.data());
      }
    }
    if (!std::equal(routed.begin(), routed.end(), moved.data.begin(), moved.data.end()))
      note(std::string("route: the bytes differ from what dispatch delivered"));
    if (k >= 0) {
      t_dispatch.push_back(td);
      t_execute.push_back(te);
      t_route.push_back(tr);
      t_combine.push_back(tc);
      t_baseline.push_back(tb);
    }
  }

  sum.used = report.used;
  sum.predicted_seconds = report.predicted_seconds;
  sum.failures = gather_problems(comm, failure);
  sum.verified = sum.failures.empty();
  sum.dispatch_seconds = median(max_over_ranks(comm, t_dispatch));
  sum.execute_seconds = median(max_over_ranks(comm, t_execute));
  sum.route_seconds = median(max_over_ranks(comm, t_route));
  sum.combine_seconds = median(max_over_ranks(comm, t_combine));
  if (with_baseline) sum.alltoallv_seconds = median(max_over_ranks(comm, t_baseline));

  const std::int64_t sent[5] = {report.sent.local_bytes, report.sent.intra_node_bytes,
                                report.sent.inter_node_bytes, report.sent.intra_node_messages,
                                report.sent.inter_node_messages};
  const auto all = orchmllm::all_gather(comm, std::span<const std::int64_t>(sent));
  for (std::size_t q = 0; q < static_cast<std::size_t>(d); ++q)
    sum.sent +=
        traffic_stats{all[q * 5], all[q * 5 + 1], all[q * 5 + 2], all[q * 5 + 3], all[q * 5 + 4]};
  return sum;
}

}  // namespace orchmllm::bench
