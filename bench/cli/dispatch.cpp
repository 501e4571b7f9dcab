// orchmllm-bench dispatch: move, verify and time a plan's bytes (dispatch.hpp).
#include "bench/cli/dispatch.hpp"

#include <orchmllm/comm/local.hpp>
#include <orchmllm/core/error.hpp>
#include <ostream>
#include <string>
#include <utility>

#include "bench/cli/command.hpp"
#include "bench/cli/dispatch_inputs.hpp"
#include "bench/cli/dispatch_mpi.hpp"
#include "bench/cli/dispatch_report.hpp"
#include "bench/cli/dispatch_settings.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/support/args.hpp"
#include "bench/support/dispatch_driver.hpp"

namespace orchmllm::tool {

dispatch_runner& dispatch_mpi_runner() {
  static dispatch_runner runner = nullptr;
  return runner;
}

// ---------------------------------------------------------------------------------------------
// Backends
// ---------------------------------------------------------------------------------------------

int run_dispatch_local(const dispatch_settings& s, std::ostream& out, std::ostream& err) {
  const std::string items_text = read_file(s.items_path);
  const std::string plan_text = read_file(s.plan_path);
  const dispatch_inputs in =
      parse_dispatch_inputs(items_text, plan_text, s.items_path, s.plan_path, s.ranks);
  ORCHMLLM_REQUIRE(in.ranks <= dispatch_max_local_ranks, invalid_argument_error,
                   "the files describe ", in.ranks,
                   " ranks; the local backend runs one thread "
                   "per rank and stops at ",
                   dispatch_max_local_ranks);
  bench::dispatch_run_settings rs;
  rs.sched = s.sched;
  rs.repeat = s.repeat;
  rs.gpus_per_node = s.gpus_per_node > 0 ? s.gpus_per_node : in.ranks;
  dispatch_summary summary;
  local::run(
      in.ranks,
      [&](local::communicator& comm) {
        bench::no_alltoallv_baseline none;
        auto result = bench::run_dispatch_rank(comm, in.layout, in.plan, rs, none);
        if (comm.rank() == 0) summary = std::move(result);  // read after run() joins
      },
      local::run_options{s.gpus_per_node, s.timeout});
  report_failures(summary, err);
  out << dispatch_json(summary, "local", s.items_path, s.plan_path) << "\n";
  return summary.verified ? exit_ok : exit_internal;
}

int run_dispatch(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(dispatch_command(), err, [&] {
    const dispatch_settings s = parse_dispatch_settings(args);
    if (s.backend == dispatch_backend::local) return run_dispatch_local(s, out, err);
    if (const dispatch_runner run_mpi = dispatch_mpi_runner()) return run_mpi(s, out, err);
    ::orchmllm::detail::raise<invalid_argument_error>(
        "--backend mpi: this orchmllm-bench was built without MPI support (configure with "
        "-DORCHMLLM_ENABLE_MPI=ON and an MPI installation)");
  });
}

}  // namespace orchmllm::tool
