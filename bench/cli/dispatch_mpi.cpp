// orchmllm-bench dispatch --backend mpi: the launcher (dispatch_mpi.hpp). Compiled only into
// orchmllm-bench built with MPI (it links orchmllm::mpi).
#include "bench/cli/dispatch_mpi.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <orchmllm/backend/mpi/communicator.hpp>
#include <orchmllm/core/error.hpp>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/dispatch_inputs.hpp"
#include "bench/cli/dispatch_report.hpp"
#include "bench/support/dispatch_driver.hpp"
#include "bench/support/mpi_alltoallv_baseline.hpp"

namespace orchmllm::tool {

namespace detail {
namespace {
/// A stream that discards everything (stdout/stderr of MPI ranks other than 0).
class null_stream : public std::ostream {
 public:
  null_stream() : std::ostream(&buf_) {}

 private:
  struct discard : std::streambuf {
    int overflow(int c) override { return traits_type::not_eof(c); }
    std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
  } buf_;
};

/// The settings as the command line spells them (what every rank must agree on).
std::string settings_text(const dispatch_settings& s) {
  std::string t = "--items " + s.items_path + " --plan " + s.plan_path;
  if (s.ranks) t += " --ranks " + std::to_string(*s.ranks);
  if (s.gpus_per_node > 0) t += " --gpus-per-node " + std::to_string(s.gpus_per_node);
  t += " --schedule " + std::string(to_string(s.sched)) + " --repeat " + std::to_string(s.repeat);
  if (s.timeout.count() > 0) t += " --timeout " + std::to_string(s.timeout.count()) + "ms";
  return t;
}

/// Collective over `world`, before anything else: every rank must have been started with the
/// same flags, or ranks would take different paths through the collectives that follow and wait
/// for each other forever. Raises the same invalid_argument_error on every rank (naming the
/// first rank that differs and rank 0's flags) when they do not agree.
void agree_on_settings(MPI_Comm world, const dispatch_settings& s) {
  const std::string text = settings_text(s);
  ::orchmllm::detail::fnv f;
  f.mix(text);
  const std::uint64_t h = f.h;
  int size = 0;
  ::orchmllm::detail::mpi_backend::check(MPI_Comm_size(world, &size), "MPI_Comm_size");
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
  ::orchmllm::detail::mpi_backend::check(
      MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, world), "MPI_Allgather");
  for (int r = 1; r < size; ++r)
    ORCHMLLM_REQUIRE(all[static_cast<std::size_t>(r)] == all[0], invalid_argument_error, "rank ", r,
                     " was started with other dispatch flags than rank 0 (", text,
                     " on rank 0): every rank must run the same command line");
}

/// Whether every rank reports a failure within `wait`: each rank that failed calls this on
/// `errors` (a duplicate of the world used for nothing else), the healthy ones never do. One
/// MPI_Ibarrier, polled: it completes only when every rank failed alike (the library's
/// agreements raise their errors on every rank, and every rank parses the same shared files);
/// a rank that failed alone is still waiting when `wait` is over.
bool every_rank_failed(MPI_Comm errors, std::chrono::milliseconds wait) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(errors, &req) != MPI_SUCCESS) return false;
  bool done = false;
  const int rc = ::orchmllm::detail::mpi_backend::poll_until(
      req, std::chrono::steady_clock::now() + wait, done);
  return rc == MPI_SUCCESS && done;
}

/// How long a failed rank waits for the others to report the same failure: half of --timeout
/// (so that a rank failing alone speaks, and aborts, before its peers' deadlines end their
/// waits), else 30 s.
std::chrono::milliseconds failure_wait(const dispatch_settings& s) {
  return s.timeout.count() > 0 ? std::max(s.timeout / 2, std::chrono::milliseconds(1))
                               : std::chrono::milliseconds(30000);
}
}  // namespace
}  // namespace detail

namespace {

/// The MPI backend: MPI_Init here, the ranks agree on their flags, rank 0 shares the files,
/// every rank runs the driver, rank 0 reports. An error is reported once, by rank 0, only when
/// it is proven collective: every rank failed (an MPI_Ibarrier on a communicator reserved for
/// failures completes within `failure_wait`). A rank that failed alone prints its own error,
/// names itself, and aborts the job (MPI_Abort with the error's exit code), so no rank is left
/// waiting in a collective for it.
int run_dispatch_mpi(const dispatch_settings& s, std::ostream& out, std::ostream& err) {
  mpi::environment env;
  int world_rank = 0;
  ::orchmllm::detail::mpi_backend::check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank),
                                         "MPI_Comm_rank");
  // Never freed: MPI_Comm_free is collective, and a failing rank may be alone; MPI_Finalize
  // releases it.
  MPI_Comm errors = MPI_COMM_NULL;
  ::orchmllm::detail::mpi_backend::check(MPI_Comm_dup(MPI_COMM_WORLD, &errors), "MPI_Comm_dup");
  detail::null_stream quiet;
  std::ostream& my_out = world_rank == 0 ? out : quiet;
  std::ostream& my_err = world_rank == 0 ? err : quiet;
  std::exception_ptr failure;
  try {
    detail::agree_on_settings(MPI_COMM_WORLD, s);
    mpi::communicator::options o;
    o.ranks_per_node = s.gpus_per_node;
    if (s.timeout.count() > 0) o.timeout = s.timeout;  // else ORCHMLLM_TIMEOUT_MS or 5 min
    mpi::communicator comm(MPI_COMM_WORLD, o);
    const std::string items_text = share_file(comm, s.items_path);
    const std::string plan_text = share_file(comm, s.plan_path);
    const dispatch_inputs in =
        parse_dispatch_inputs(items_text, plan_text, s.items_path, s.plan_path, s.ranks);
    ORCHMLLM_REQUIRE(in.ranks == comm.size(), invalid_argument_error, "the MPI world has ",
                     comm.size(), " ranks but the files describe ", in.ranks,
                     s.ranks ? " (--ranks)" : " (highest rank + 1; or pass --ranks)",
                     ": run it under mpirun -np ", in.ranks);
    bench::dispatch_run_settings rs;
    rs.sched = s.sched;
    rs.repeat = s.repeat;
    rs.gpus_per_node = s.gpus_per_node;
    bench::mpi_alltoallv_baseline baseline(comm.native_handle());
    const dispatch_summary summary =
        bench::run_dispatch_rank(comm, in.layout, in.plan, rs, baseline);
    report_failures(summary, my_err);
    my_out << dispatch_json(summary, "mpi", s.items_path, s.plan_path) << "\n";
    my_out.flush();
    return summary.verified ? exit_ok : exit_internal;
  } catch (...) {
    failure = std::current_exception();
  }
  const auto rethrow = [&]() -> int { std::rethrow_exception(failure); };
  if (detail::every_rank_failed(errors, detail::failure_wait(s)))
    return guarded(dispatch_command(), my_err, rethrow);
  err << program_name << " dispatch: rank " << world_rank << " failed alone (no other rank "
      << "failed within " << detail::failure_wait(s).count() << " ms); aborting the job\n";
  const int code = guarded(dispatch_command(), err, rethrow);
  err.flush();
  MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

// Registered before main runs (this unit is part of the executable, so it is always linked).
[[maybe_unused]] const bool registered = (dispatch_mpi_runner() = &run_dispatch_mpi, true);

}  // namespace

}  // namespace orchmllm::tool
