// orchmllm-bench dispatch, its command line (dispatch_settings.hpp).
#include "bench/cli/dispatch_settings.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <orchmllm/comm/route.hpp>
#include <orchmllm/core/error.hpp>
#include <string>

#include "bench/cli/command.hpp"
#include "bench/cli/dispatch.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

const command& dispatch_command() {
  static const command cmd = [] {
    command c;
    c.name = "dispatch";
    c.summary =
        "Move ITEMS.csv's payload along PLAN.csv (local threads or MPI), verify every byte, "
        "time it; print JSON.";
    c.flags = {
        {"backend", "local|mpi",
         "transport: local (one thread per rank, one process) or mpi (run under mpirun -np D)",
         true},
        {"items", "ITEMS.csv",
         "the items (header rank,slot,length[,bytes][,segments]); bytes = payload size", true},
        {"plan", "PLAN.csv", "where every item goes (as written by 'plan')", true},
        {"ranks", "D",
         "rank count of the files; default: highest rank in either file + 1 (mpi: must equal "
         "the world size)",
         false},
        {"gpus-per-node", "G",
         "nodes are consecutive blocks of G ranks; default: one node (local), the real nodes "
         "(mpi)",
         false},
        {"schedule", "direct|node-wise|auto", "all-to-all schedule; default auto", false},
        {"repeat", "K", "timed runs (the median is reported); default 5", false},
        {"timeout", "SECONDS",
         "deadline of every wait of the exchange, in (0, 86400]: past it a rank that waits for "
         "a peer fails (local: communication_error, exit 2; mpi: the job aborts naming the "
         "operation and the rank); default: none (local), the backend's default deadline: "
         "ORCHMLLM_TIMEOUT_MS milliseconds, else 5 minutes (mpi)",
         false},
    };
    c.details =
        "Every item carries `bytes` bytes (the bytes column, else its length) whose content\n"
        "derives from (source rank, slot, byte index). After an untimed warm-up, each of K runs\n"
        "times (barrier first, slowest rank) orchmllm::dispatch, orchmllm::execute of a route\n"
        "built once, orchmllm::combine, then orchmllm::dispatch along that route after one\n"
        "agree_on_routes (its hops' all-to-alls only: what a training step runs) and with mpi a\n"
        "plain MPI_Alltoallv of the same byte matrix, these two in alternating order. Every\n"
        "rank checks after each step that it holds exactly its planned items in dst_slot\n"
        "order, intact, and after combine its original payload. Times are medians.\n"
        "\n"
        "stdout (rank 0): one JSON object on one line: verified, backend, ranks, nodes,\n"
        "gpus_per_node, schedule (the one used), requested_schedule, repeat, items, total_bytes,\n"
        "max_rank_bytes, local_bytes, moved_bytes, intra_node_bytes, inter_node_bytes (by plan\n"
        "placement), sent_intra_node_bytes, sent_inter_node_bytes (what the schedule actually\n"
        "sends, forwarding included), predicted_seconds, predicted_direct_seconds,\n"
        "predicted_node_wise_seconds, dispatch_seconds, execute_seconds, route_seconds,\n"
        "combine_seconds, alltoallv_seconds (mpi; null for local), dispatch_vs_alltoallv,\n"
        "execute_vs_alltoallv, route_vs_alltoallv, items_file, plan_file. "
        "stderr names every rank that found a wrong byte.\n"
        "\n"
        "exit status: 0 verified; 1 some rank received wrong data; 2 bad usage, unreadable or\n"
        "malformed files, files that disagree, an MPI world of another size than the files.\n";
    c.run = &run_dispatch;
    return c;
  }();
  return cmd;
}

dispatch_settings parse_dispatch_settings(const parsed_args& args) {
  dispatch_settings s;
  const std::string backend = args.require("backend");
  if (backend == "local") {
    s.backend = dispatch_backend::local;
  } else if (backend == "mpi") {
    s.backend = dispatch_backend::mpi;
  } else {
    throw usage_error("--backend is '" + backend + "', expected 'local' or 'mpi'");
  }
  s.items_path = args.require("items");
  s.plan_path = args.require("plan");
  const std::int64_t rank_limit =
      s.backend == dispatch_backend::local ? dispatch_max_local_ranks : max_ranks;
  if (args.has("ranks")) s.ranks = static_cast<rank_t>(args.require_int("ranks", 1, rank_limit));
  s.gpus_per_node = static_cast<rank_t>(args.get_int("gpus-per-node", 0, 1, max_ranks));
  if (auto name = args.get("schedule")) {
    try {
      s.sched = parse_schedule(*name);
    } catch (const invalid_argument_error&) {
      throw usage_error("--schedule is '" + *name + "', expected direct, node-wise or auto");
    }
  }
  s.repeat = static_cast<int>(args.get_int("repeat", 5, 1, dispatch_max_repeat));
  if (args.has("timeout")) {
    const double seconds = args.get_double("timeout", 0);
    if (!(seconds > 0 && seconds <= 86400))
      throw usage_error("--timeout is " + std::to_string(seconds) +
                        " seconds, must be in (0, 86400]");
    s.timeout = std::chrono::milliseconds(std::max<long long>(1, std::llround(seconds * 1000)));
  }
  return s;
}

}  // namespace orchmllm::tool
