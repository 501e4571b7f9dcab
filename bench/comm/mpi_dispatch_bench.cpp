// orchmllm::dispatch over MPI vs a plain MPI_Alltoallv of the same byte counts, in one run.
//
//   mpirun -np 8 build/default/bench/comm_mpi_dispatch_bench [--sizes 65536,1048576,16777216]
//          [--repeat 10] [--ranks-per-node G] [--schedule direct|node-wise|auto]
//
// Not a Google Benchmark (it needs mpirun): built only with ORCHMLLM_ENABLE_MPI, run by hand;
// ctest bench.mpi.comm.mpi_dispatch only checks it runs (4 ranks, 64 KiB, 2 repeats).
//
// For every size S (bytes per rank) the ranks hold 2·P items of S / (2·P) bytes and item j of
// rank r goes to rank (r + j) mod P: a uniform all-to-all in which every rank sends S / P bytes
// to every rank, itself included. The measurement is the support library's
// (bench/support/dispatch_driver.hpp, `run_dispatch_rank`, the same code as
// `orchmllm-bench dispatch --backend mpi`): after a
// warm-up, each of --repeat runs times, after a barrier and as the slowest rank,
//   dispatch   orchmllm::dispatch, the whole call (metadata agreement: one all-gather and one
//              all-gatherv; route build; pack; all-to-all(s); unpack),
//   execute    orchmllm::execute of a route built once (its agreement: one small reduction;
//              pack, all-to-all(s), unpack),
//   route      orchmllm::dispatch along that route after one agree_on_routes (what a training
//              step runs per transfer: pack, all-to-all(s), unpack, no agreement),
//   combine    orchmllm::combine (the way back),
//   alltoallv  MPI_Alltoallv of the direct schedule's byte matrix on the same communicator,
// and checks every delivered byte. Reported: medians, and dispatch / alltoallv,
// execute / alltoallv and route / alltoallv (target <= 1.2 at >= 1 MiB per rank with the
// direct schedule). Rank 0
// prints the table; the exit status is 1 when any check failed, 2 for bad arguments.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "bench/support/args.hpp"
#include "bench/support/dispatch_driver.hpp"
#include "bench/support/mpi_alltoallv_baseline.hpp"
#include "orchmllm/backend/mpi/communicator.hpp"
#include "orchmllm/comm/dispatch.hpp"

namespace {

using orchmllm::rank_t;

struct options {
  std::vector<std::int64_t> sizes{std::int64_t{64} << 10, std::int64_t{1} << 20,
                                  std::int64_t{16} << 20};
  int repeat = 10;
  rank_t ranks_per_node = 0;
  orchmllm::schedule sched = orchmllm::schedule::direct;
};

using orchmllm::tool::flag_spec;

/// The flags, for the shared parser (bench/support/args.hpp) and the usage line.
const std::vector<flag_spec>& flags() {
  static const std::vector<flag_spec> specs = {
      {"sizes", "B1,B2,...", "bytes per rank, each in [0, 2^34]; default 65536,1048576,16777216",
       false},
      {"repeat", "K", "timed runs per size, 1 to 1000; default 10", false},
      {"ranks-per-node", "G", "fake nodes of G consecutive ranks; default 0 (real nodes)", false},
      {"schedule", "direct|node-wise|auto", "all-to-all schedule; default direct", false},
  };
  return specs;
}

std::string usage_text() { return orchmllm::tool::usage_text("comm_mpi_dispatch_bench", flags()); }

/// Parses the arguments; on a mistake returns the message (every rank parses the same argv).
std::string parse(int argc, char** argv, options& o) {
  const std::vector<std::string> words(argv + 1, argv + argc);
  if (orchmllm::tool::wants_help(words)) return "help";
  try {
    const auto p = orchmllm::tool::parse_flags(flags(), words);
    if (const auto sizes = p.get("sizes")) {
      o.sizes.clear();
      const std::string_view list = *sizes;
      std::size_t start = 0;
      while (true) {
        const auto comma = list.find(',', start);
        const auto part = list.substr(start, comma == list.npos ? list.npos : comma - start);
        o.sizes.push_back(
            orchmllm::tool::parsed_args::to_int("sizes", part, 0, std::int64_t{1} << 34));
        if (comma == list.npos) break;
        start = comma + 1;
      }
    }
    o.repeat = static_cast<int>(p.get_int("repeat", o.repeat, 1, 1000));
    o.ranks_per_node = static_cast<rank_t>(p.get_int("ranks-per-node", 0, 0, 1 << 24));
    if (const auto sched = p.get("schedule")) {
      try {
        o.sched = orchmllm::parse_schedule(*sched);
      } catch (const orchmllm::error& e) {
        return "--schedule: " + e.message();
      }
    }
  } catch (const orchmllm::tool::usage_error& e) {
    return e.what();
  }
  return "";
}

using orchmllm::bench::uniform_all_to_all;  // the uniform all-to-all of the file comment

std::string human_bytes(std::int64_t b) {
  char buf[32];
  if (b >= (1 << 20) && b % (1 << 20) == 0)
    std::snprintf(buf, sizeof buf, "%lld MiB", static_cast<long long>(b >> 20));
  else if (b >= (1 << 10) && b % (1 << 10) == 0)
    std::snprintf(buf, sizeof buf, "%lld KiB", static_cast<long long>(b >> 10));
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  orchmllm::mpi::environment env(&argc, &argv);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  options o;
  if (const std::string problem = parse(argc, argv, o); !problem.empty()) {
    if (world_rank == 0) {
      if (problem == "help") {
        std::printf("%s\n", usage_text().c_str());
      } else {
        std::fprintf(stderr, "comm_mpi_dispatch_bench: %s\n%s\n", problem.c_str(),
                     usage_text().c_str());
      }
    }
    return problem == "help" ? 0 : 2;
  }
  int status = 0;
  try {
    orchmllm::mpi::communicator::options copts;
    copts.ranks_per_node = o.ranks_per_node;
    orchmllm::mpi::communicator comm(MPI_COMM_WORLD, copts);
    const rank_t d = comm.size();
    if (world_rank == 0) {
      std::printf(
          "orchmllm::dispatch vs MPI_Alltoallv: %d ranks on %d nodes, schedule %s, "
          "median of %d runs (slowest rank per run)\n",
          d, comm.num_nodes(), orchmllm::to_string(o.sched).data(), o.repeat);
      std::printf("%-10s %-9s %11s %11s %11s %11s %11s %9s %9s %9s %s\n", "per rank", "used",
                  "dispatch ms", "execute ms", "route ms", "combine ms", "a2av ms", "disp/a2av",
                  "exec/a2av", "route/a2av", "verified");
    }
    for (const auto size : o.sizes) {
      const auto in = uniform_all_to_all(d, size);
      orchmllm::bench::dispatch_run_settings rs;
      rs.sched = o.sched;
      rs.repeat = o.repeat;
      rs.gpus_per_node = o.ranks_per_node;
      orchmllm::bench::mpi_alltoallv_baseline baseline(comm.native_handle());
      const auto s = orchmllm::bench::run_dispatch_rank(comm, in.layout, in.plan, rs, baseline);
      if (!s.verified) status = 1;
      if (world_rank == 0) {
        const double a2a = s.alltoallv_seconds.value_or(0.0);
        std::printf("%-10s %-9s %11.3f %11.3f %11.3f %11.3f %11.3f %9.3f %9.3f %9.3f %s\n",
                    human_bytes(size).c_str(), orchmllm::to_string(s.used).data(),
                    1e3 * s.dispatch_seconds, 1e3 * s.execute_seconds, 1e3 * s.route_seconds,
                    1e3 * s.combine_seconds, 1e3 * a2a, a2a > 0 ? s.dispatch_seconds / a2a : 0.0,
                    a2a > 0 ? s.execute_seconds / a2a : 0.0, a2a > 0 ? s.route_seconds / a2a : 0.0,
                    s.verified ? "yes" : "NO");
        for (const auto& [r, what] : s.failures)
          std::fprintf(stderr, "comm_mpi_dispatch_bench: rank %d: %s\n", r, what.c_str());
        std::fflush(stdout);
      }
    }
  } catch (const orchmllm::error& e) {
    // Library errors are raised alike on every rank (collective agreement).
    if (world_rank == 0) std::fprintf(stderr, "comm_mpi_dispatch_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_mpi_dispatch_bench: rank %d: %s\n", world_rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return status;
}
