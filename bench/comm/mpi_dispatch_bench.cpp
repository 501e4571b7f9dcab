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

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "orchmllm/backend/mpi/communicator.hpp"
#include "orchmllm/comm/dispatch.hpp"
#include "bench/support/dispatch_driver.hpp"
#include "bench/support/mpi_alltoallv_baseline.hpp"

namespace {

using orchmllm::rank_t;

struct options {
  std::vector<std::int64_t> sizes{std::int64_t{64} << 10, std::int64_t{1} << 20,
                                  std::int64_t{16} << 20};
  int repeat = 10;
  rank_t ranks_per_node = 0;
  orchmllm::schedule sched = orchmllm::schedule::direct;
};

constexpr const char* usage_text =
    "usage: comm_mpi_dispatch_bench [--sizes B1,B2,...] [--repeat K] [--ranks-per-node G] "
    "[--schedule direct|node-wise|auto]";

/// Parses the arguments; on a mistake returns the message (every rank parses the same argv).
std::string parse(int argc, char** argv, options& o) {
  auto integer = [](std::string_view text, std::int64_t lo, std::int64_t hi, std::int64_t& v) {
    std::string s(text);
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || errno != 0 || *end != '\0' || x < lo || x > hi) return false;
    v = x;
    return true;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") return "help";
    if (i + 1 >= argc) return "missing value after " + std::string(flag);
    const std::string_view value = argv[++i];
    std::int64_t v = 0;
    if (flag == "--sizes") {
      o.sizes.clear();
      std::size_t start = 0;
      while (start <= value.size()) {
        const auto comma = value.find(',', start);
        const auto part = value.substr(start, comma == std::string_view::npos ? value.npos
                                                                              : comma - start);
        if (!integer(part, 0, std::int64_t{1} << 34, v))
          return "--sizes: '" + std::string(part) + "' is not a byte count in [0, 2^34]";
        o.sizes.push_back(v);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    } else if (flag == "--repeat") {
      if (!integer(value, 1, 1000, v)) return "--repeat needs an integer in [1, 1000]";
      o.repeat = static_cast<int>(v);
    } else if (flag == "--ranks-per-node") {
      if (!integer(value, 0, 1 << 24, v)) return "--ranks-per-node needs an integer >= 0";
      o.ranks_per_node = static_cast<rank_t>(v);
    } else if (flag == "--schedule") {
      try {
        o.sched = orchmllm::parse_schedule(value);
      } catch (const orchmllm::error& e) {
        return "--schedule: " + e.message();
      }
    } else {
      return "unknown option " + std::string(flag);
    }
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
        std::printf("%s\n", usage_text);
      } else {
        std::fprintf(stderr, "comm_mpi_dispatch_bench: %s\n%s\n", problem.c_str(), usage_text);
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
      std::printf("orchmllm::dispatch vs MPI_Alltoallv: %d ranks on %d nodes, schedule %s, "
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
                    a2a > 0 ? s.execute_seconds / a2a : 0.0,
                    a2a > 0 ? s.route_seconds / a2a : 0.0, s.verified ? "yes" : "NO");
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
