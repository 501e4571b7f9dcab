// orchmllm-bench plan: balance, map, write PLAN.csv, print the figures (plan.hpp).
#include "bench/cli/plan.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <orchmllm/orchmllm.hpp>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/cp_flags.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/micro_batch_flags.hpp"
#include "bench/cli/plan_cp.hpp"
#include "bench/cli/plan_csv.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

const command& plan_command() {
  static const command cmd = [] {
    command c;
    c.name = "plan";
    c.summary = "Balance ITEMS.csv over D ranks; write PLAN.csv, print the figures as JSON.";
    c.flags = problem_flags();
    c.flags.insert(c.flags.begin() + 5,
                   {"algorithm",
                    "identity|lpt|karmarkar_karp|karmarkar_karp_equal|exact|padded_exact|"
                    "automatic|locality",
                    "balancer; default automatic (best plan found, reported as \"algorithm\"); "
                    "karmarkar_karp is the complete Karmarkar-Karp differencing (the equal-count "
                    "one above n*d = 2^21), karmarkar_karp_equal the equal-count one; "
                    "locality starts from where the items are and moves only what the balance "
                    "needs, preferring the same node (--gpus-per-node)",
                    false});
    c.flags.push_back({"gpus-per-node", "G",
                       "nodes are consecutive blocks of G ranks (the last may be smaller); "
                       "default: every rank on one node",
                       false});
    c.flags.push_back({"mapping", "identity|transport|bottleneck|auction",
                       "bins -> ranks: identity (bin k on rank k), transport (fewest "
                       "inter-node bytes), bottleneck (smallest worst node: max of bytes "
                       "leaving / entering one node) or auction (transport to within 1% of "
                       "the keepable bytes, for large clusters); all but identity need "
                       "--gpus-per-node; default transport with --gpus-per-node, else identity",
                       false});
    c.flags.push_back({"mapping-time-limit", "SECONDS",
                       "bottleneck with GLPK: integer program time limit; default 10 (the "
                       "best plan found is kept); ignored by the header-only local search",
                       false});
    c.flags.push_back({"locality-tolerance", "X",
                       "locality: makespan may exceed automatic's by this fraction (the knob that "
                       "trades balance for bytes); default 0.001",
                       false});
    c.flags.push_back({"gap-tolerance", "X",
                       "automatic (and locality's base): stop once the makespan is within this "
                       "fraction of the lower bound; default 0 (only at the bound)",
                       false});
    for (auto& f : micro_batch_flags()) c.flags.push_back(std::move(f));
    for (auto& f : cp_flags()) c.flags.push_back(std::move(f));
    c.flags.push_back({"cp-model", "7b|72b",
                       "with --cp-sizes: the LLM whose time model costs a sample and its shards "
                       "(bench/support/models.hpp); default 7b",
                       false});
    c.flags.push_back({"cp-flops", "FLOPS",
                       "with --cp-sizes: sustained FLOP/s per GPU; default 4.945e14 (H100 bf16 "
                       "dense at 50 %)",
                       false});
    c.flags.push_back({"out", "PLAN.csv",
                       "output: rank,slot,dst_rank,dst_slot per input item (and "
                       "dst_micro_batch with micro-batches)",
                       true});
    c.details =
        "The balancer's bins are mapped to ranks by orchmllm::map_bins (--mapping) and PLAN.csv\n"
        "holds the mapped plan; the byte size of an item is its bytes column (else its length).\n"
        "PLAN.csv has one row per input item in (rank, slot) order; on every destination rank the\n"
        "items are ordered by (source rank, source slot). It is written to a temporary file and\n"
        "renamed, so a failed run leaves no output file.\n"
        "\n"
        "stdout: one JSON object on one line: algorithm (the one whose plan was kept), requested,\n"
        "items, ranks, policy, pad_multiple, cost, cap_tokens, cap_bytes, min_items, max_items,\n"
        "makespan, makespan_before, lower_bound, ratio (makespan / lower_bound),\n"
        "imbalance_before, imbalance_after (max / mean load), mean_load, plan_seconds (the\n"
        "balance() call only, no file I/O), proven_optimal, items_moved, bytes_moved, max_tokens,\n"
        "max_bytes, max_items_per_rank, min_items_per_rank, items_file, plan_file,\n"
        "gpus_per_node (0: one node), mapping, moved_bytes, inter_node_bytes,\n"
        "inter_node_bytes_lower_bound (no mapping moves fewer bytes across nodes),\n"
        "max_node_egress_bytes, max_node_ingress_bytes (largest bytes leaving / entering one\n"
        "node), predicted_comm_seconds (modelled all-to-all time, default link figures, auto\n"
        "schedule), mapping_solver (none, flow, local-search or glpk), mapping_seconds (the\n"
        "mapping alone), mapping_proven_optimal (the mapping is optimal for its objective:\n"
        "transport always; bottleneck when it meets worst_node_bytes_lower_bound or GLPK proved\n"
        "it; any method whose inter-node bytes meet their lower bound),\n"
        "worst_node_bytes_lower_bound (no mapping has a smaller max(egress, ingress) node).\n"
        "Figures of the plan (items_moved, bytes_moved, ...) are those of PLAN.csv.\n"
        "\n"
        "With a micro-batch flag (--micro-batches, --micro-batch-tokens, --micro-batch-multiple,\n"
        "--min-micro-batches, --sync) the items go to cells (rank, micro-batch) under the\n"
        "per-micro-batch token limit (orchmllm::balance_micro_batches, the algorithm balancing "
        "the\n"
        "ranks and each micro-batch); PLAN.csv gains the last column dst_micro_batch, a rank's\n"
        "slots grouped by micro-batch; plan_seconds covers the whole call; the JSON gains sync,\n"
        "micro_batches (M, the same on every rank), micro_batch_tokens, objective (the step's\n"
        "cost under --sync: step max_r sum_m load(r, m), micro-batch sum_m max_r load(r, m)),\n"
        "objective_before (the input as sampled, each rank's items in slot order cut greedily\n"
        "under the same limit), objective_lower_bound (no plan with M micro-batches does\n"
        "better), objective_ratio and objective_proven_optimal.\n"
        "\n"
        "With --cp-sizes C1,C2,... the samples may be sharded over context-parallel groups of\n"
        "those sizes, chosen per sample (orchmllm::balance_context_parallel): ITEMS.csv lengths\n"
        "are sequence tokens, costed by the LLM of --cp-model at --cp-flops (causal attention,\n"
        "the ring exchange of K and V over the default link figures); groups are aligned blocks\n"
        "of ranks inside one node (--gpus-per-node). PLAN.csv is then rank,slot,dst_rank,\n"
        "dst_slot,token_begin,token_end with one row per token chunk: a whole sample one row of\n"
        "its whole range, a sample over C ranks 2C rows (position i holds chunks i and 2C-1-i,\n"
        "on consecutive dst_slots). The JSON: algorithm (context-parallel), items, chunks,\n"
        "ranks, gpus_per_node, cp_sizes, cp_model, cp_flops, cp_token_cap, min_shard_tokens,\n"
        "makespan and lower_bound (seconds), ratio, plan_seconds, sharded, groups [{size,\n"
        "samples}], max_tokens (the fullest rank), moved_bytes, inter_node_bytes (the bytes\n"
        "column apportioned by tokens, else 1 per token), items_file, plan_file. Without\n"
        "--cp-sizes the plan is the balance above, unchanged. With --cp-sizes, --micro-batches M\n"
        "and --micro-batch-tokens T put every sample (all its shards) in one of M micro-batches\n"
        "(Sigma_m max_r kept small); PLAN.csv gains dst_micro_batch, the JSON micro_batches,\n"
        "micro_batch_tokens and objective (Sigma_m max_r of the cells' seconds).\n"
        "\n"
        "exit status: 0 ok; 2 bad usage (including --mapping transport or bottleneck without\n"
        "--gpus-per-node),\n"
        "unreadable or malformed ITEMS.csv (the message names the line and value), infeasible\n"
        "constraints, or a bin above the mapping's overflow guard.\n";
    c.run = &run_plan;
    return c;
  }();
  return cmd;
}

std::string json_optional(std::optional<std::int64_t> v) {
  return v ? std::to_string(*v) : std::string("null");
}

std::pair<rank_t, any_mapper> parse_mapping_flags(const parsed_args& args) {
  const auto g = static_cast<rank_t>(args.get_int("gpus-per-node", 0, 1, max_ranks));
  any_mapper m = g > 0 ? any_mapper(mappers::transport{}) : any_mapper(mappers::identity{});
  if (const auto name = args.get("mapping")) {
    try {
      m = parse_mapper(*name);
    } catch (const invalid_argument_error& e) {
      throw usage_error("--mapping: " + e.message());
    }
    if (!m.get_if<mappers::identity>() && g == 0)
      throw usage_error("--mapping " + std::string(m.name()) +
                        " needs --gpus-per-node (the node size)");
  }
  return {g, m};
}

bottleneck_solver& glpk_bottleneck_solver() {
  static bottleneck_solver solver = nullptr;
  return solver;
}

mapped_plan map_for_tool(const rearrangement& binned, std::span<const std::int64_t> bytes,
                         const topology& topo, const any_mapper& m, double time_limit) {
  mapped_plan out;
  const auto start = std::chrono::steady_clock::now();
  const bool bottleneck = m.get_if<mappers::bottleneck>() != nullptr;
  out.solver = m.get_if<mappers::identity>()    ? "none"
               : m.get_if<mappers::transport>() ? "flow"
               : m.get_if<mappers::auction>()   ? "auction"
                                                : "local-search";
  if (bottleneck && glpk_bottleneck_solver()) {
    glpk_bottleneck_solver()(binned, bytes, topo, time_limit, out);
    out.solver = "glpk";
  } else {
    out.result = map_bins(binned, bytes, topo, m);
  }
  // transport is exact on its objective; one node (or no inter-node bytes) is trivially optimal.
  out.proven_optimal =
      out.proven_optimal || m.get_if<mappers::transport>() ||
      out.result.inter_node_bytes == out.result.inter_node_bytes_lower_bound ||
      (bottleneck && out.result.worst_node_bytes() == out.result.worst_node_bytes_lower_bound);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

namespace {

/// The micro-batch figures of a plan's JSON (see the command's details).
template <class C, class Cost>
void add_micro_batch_figures(json_object& j, const micro_batching& micro,
                             const micro_batch_result<Cost>& cells, const problem& p,
                             const C& cost) {
  const Cost before = micro_batch_objective_as_sampled(p.layout, cost, p.policy, micro);
  const bool capped = micro.limits.tokens != micro_batch_limits{}.tokens;
  j.add("sync", std::string(to_string(micro.sync)))
      .add("micro_batches", cells.micro_batches)
      .raw("micro_batch_tokens",
           json_optional(capped ? std::optional(micro.limits.tokens) : std::nullopt))
      .add("objective", cells.objective)
      .add("objective_before", before)
      .add("objective_lower_bound", cells.objective_lower_bound)
      .add("objective_ratio", cells.objective_ratio())
      .add("objective_proven_optimal", cells.objective_proven_optimal);
}

}  // namespace

int run_plan(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(plan_command(), err, [&] {
    if (const auto cp = parse_cp_flags(args)) return run_plan_cp(args, *cp, out);
    for (const char* f : {"cp-model", "cp-flops"})
      if (args.has(f)) throw usage_error("--" + std::string(f) + " needs --cp-sizes");
    any_balancer balancer = parse_algorithm_flag(args);
    // Plain variables, not a structured binding: the visitor lambda below captures them.
    const auto mapping_flags = parse_mapping_flags(args);
    const rank_t gpus_per_node = mapping_flags.first;
    const any_mapper& mapping = mapping_flags.second;
    const std::string out_path = args.require("out");
    const double time_limit = args.get_double("mapping-time-limit", 10.0);
    if (!(time_limit > 0)) throw usage_error("--mapping-time-limit must be positive");
    const double tolerance = args.get_double("locality-tolerance", 0.001);
    if (!(tolerance >= 0)) throw usage_error("--locality-tolerance must be >= 0");
    const double gap = args.get_double("gap-tolerance", 0.0);
    if (!(gap >= 0) || !std::isfinite(gap)) throw usage_error("--gap-tolerance must be >= 0");
    const std::optional<micro_batching> micro = parse_micro_batch_flags(args);
    const problem p = load_problem(args);
    if (micro) check_micro_batch_items(p, *micro);
    const topology topo = topology::uniform(p.ranks, gpus_per_node);
    const std::span<const std::int64_t> item_bytes = p.layout.item_bytes();
    ::orchmllm::detail::set_gap_tolerance(balancer, gap);
    if (auto* loc = balancer.get_if<balancers::locality>()) {
      loc->tolerance = tolerance;
      loc->node_of_rank.assign(topo.node_map().begin(), topo.node_map().end());
    }

    std::string line;
    std::string plan_text;
    std::visit(
        [&](const auto& cost) {
          using Cost = cost_type_t<std::remove_cvref_t<decltype(cost)>>;
          const auto start = std::chrono::steady_clock::now();
          std::optional<micro_batch_result<Cost>> cells;
          if (micro)
            cells = balance_micro_batches(p.layout, cost, p.policy, *micro, balancer, p.limits);
          const auto result =
              cells ? cells->balance : balance(p.layout, cost, p.policy, balancer, p.limits);
          const auto stop = std::chrono::steady_clock::now();
          const double seconds = std::chrono::duration<double>(stop - start).count();
          // Mapping permutes whole bins, so the balance figures are unchanged; the movement
          // figures (items_moved, bytes_moved) are those of the mapped plan, the one written.
          // Every item keeps its slot, so a rank's micro-batches stay ranges.
          const auto how = map_for_tool(result.plan, item_bytes, topo, mapping, time_limit);
          std::vector<std::int64_t> micro_batch_of;
          if (cells)
            micro_batch_of =
                item_micro_batches(result.plan, cells->cell_offsets, cells->micro_batches);
          const auto& mapped = how.result;
          const auto s = compute_statistics(p.layout, mapped.plan, cost, p.policy, p.limits);
          // The time model's figure is the group's, identical on every rank; rank 0 asks.
          const double comm_seconds =
              route::build(mapped.plan, item_bytes, topo, 0, schedule::automatic)
                  .predicted_seconds();
          plan_text = format_plan(mapped.plan, micro_batch_of);

          json_object j;
          j.add("algorithm", std::string(result.used))
              .add("requested", std::string(balancer.name()))
              .add("items", s.items)
              .add("ranks", static_cast<std::int64_t>(p.ranks))
              .add("policy", policy_name(p.policy))
              .add("pad_multiple", p.policy.multiple())
              .add("cost", p.cost_name);
          const bool tokens_cap = p.limits.cap && p.limits.cap->what == capacity::measure::tokens;
          const bool bytes_cap = p.limits.cap && p.limits.cap->what == capacity::measure::bytes;
          j.raw("cap_tokens",
                json_optional(tokens_cap ? std::optional(p.limits.cap->limit) : std::nullopt))
              .raw("cap_bytes",
                   json_optional(bytes_cap ? std::optional(p.limits.cap->limit) : std::nullopt))
              .add("min_items", p.limits.min_items)
              .raw("max_items",
                   json_optional(p.limits.max_items == std::numeric_limits<std::int64_t>::max()
                                     ? std::nullopt
                                     : std::optional(p.limits.max_items)));
          using ::orchmllm::detail::statistic;
          const auto figures = ::orchmllm::detail::statistic_fields(s);
          add_statistics(j, figures,
                         {statistic::makespan, statistic::makespan_before, statistic::lower_bound,
                          statistic::ratio, statistic::imbalance_before, statistic::imbalance_after,
                          statistic::mean_load});
          j.add("plan_seconds", seconds).add("proven_optimal", result.proven_optimal);
          add_statistics(
              j, figures,
              {statistic::items_moved, statistic::bytes_moved, statistic::max_tokens,
               statistic::max_bytes, statistic::max_items_per_rank, statistic::min_items_per_rank});
          j.add("items_file", p.items_path)
              .add("plan_file", out_path)
              .add("gpus_per_node", static_cast<std::int64_t>(gpus_per_node))
              .add("mapping", std::string(mapping.name()))
              .add("moved_bytes", mapped.moved_bytes)
              .add("inter_node_bytes", mapped.inter_node_bytes)
              .add("inter_node_bytes_lower_bound", mapped.inter_node_bytes_lower_bound)
              .add("max_node_egress_bytes", mapped.max_node_egress_bytes)
              .add("max_node_ingress_bytes", mapped.max_node_ingress_bytes)
              .add("worst_node_bytes_lower_bound", mapped.worst_node_bytes_lower_bound)
              .add("predicted_comm_seconds", comm_seconds)
              .add("mapping_solver", how.solver)
              .add("mapping_seconds", how.seconds)
              .add("mapping_proven_optimal", how.proven_optimal);
          if (cells) add_micro_batch_figures(j, *micro, *cells, p, cost);
          line = j.str();
        },
        p.cost);

    write_file_atomically(out_path, plan_text);
    if (balancer.get_if<balancers::karmarkar_karp>() &&
        !kk_complete_fits(p.layout.num_items(), p.ranks))
      err << program_name << " plan: warning: karmarkar_karp ran the equal-count "
          << "karmarkar_karp_equal: n*d = " << p.layout.num_items() << "*" << p.ranks
          << " exceeds the complete method's " << kk_complete_max_entries
          << " (2^21) entries (\"algorithm\" in the JSON says so)\n";
    out << line << "\n";
    return exit_ok;
  });
}

}  // namespace orchmllm::tool
