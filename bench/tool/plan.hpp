#pragma once
// orchmllm-bench plan: balance one ITEMS.csv, write PLAN.csv, print the figures as JSON.

#include <chrono>
#include <cstdint>
#include <limits>
#include <orchmllm/orchmllm.hpp>
#include <ostream>
#include <string>
#include <variant>

#include "tool/args.hpp"
#include "tool/command.hpp"
#include "tool/file_io.hpp"
#include "tool/json.hpp"
#include "tool/plan_csv.hpp"
#include "tool/problem.hpp"

namespace orchmllm::tool {

int run_plan(const parsed_args& args, std::ostream& out, std::ostream& err);

/// The `plan` subcommand.
inline const command& plan_command() {
  static const command cmd = [] {
    command c;
    c.name = "plan";
    c.summary = "Balance ITEMS.csv over D ranks; write PLAN.csv, print the figures as JSON.";
    c.flags = problem_flags();
    c.flags.insert(c.flags.begin() + 5,
                   {"algorithm", "none|lpt|kk|exact|padded|auto",
                    "balancer; default auto (best plan found, reported as \"algorithm\")", false});
    c.flags.push_back(
        {"out", "PLAN.csv", "output: rank,slot,dst_rank,dst_slot per input item", true});
    c.details =
        "PLAN.csv has one row per input item in (rank, slot) order; on every destination rank the\n"
        "items are ordered by (source rank, source slot). It is written to a temporary file and\n"
        "renamed, so a failed run leaves no output file.\n"
        "\n"
        "stdout: one JSON object on one line: algorithm (the one whose plan was kept), requested,\n"
        "items, ranks, policy, pad_multiple, cost, cap_tokens, cap_bytes, min_items, max_items,\n"
        "makespan, makespan_before, lower_bound, ratio (makespan / lower_bound),\n"
        "imbalance_before, imbalance_after (max / mean load), mean_load, plan_seconds (the\n"
        "balance() call only, no file I/O), proven_optimal, items_moved, bytes_moved, max_tokens,\n"
        "max_bytes, max_items_per_rank, min_items_per_rank, items_file, plan_file.\n"
        "\n"
        "exit status: 0 ok; 2 bad usage, unreadable or malformed ITEMS.csv (the message names\n"
        "the line and value), or infeasible constraints.\n";
    c.run = &run_plan;
    return c;
  }();
  return cmd;
}

/// JSON `null` or the integer.
inline std::string json_optional(std::optional<std::int64_t> v) {
  return v ? std::to_string(*v) : std::string("null");
}

/// Runs `plan`: reads the problem, calls orchmllm::balance (timed alone), writes PLAN.csv
/// atomically, prints the JSON line. Returns the exit code (see command.hpp).
inline int run_plan(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(plan_command(), err, [&] {
    const algorithm requested = parse_algorithm_flag(args);
    const std::string out_path = args.require("out");
    const problem p = load_problem(args);
    balance_options options;
    options.method = requested;
    options.limits = p.limits;

    std::string line;
    std::string plan_text;
    std::visit(
        [&](const auto& cost) {
          const auto start = std::chrono::steady_clock::now();
          const auto result = balance(p.layout, cost, p.policy, options);
          const auto stop = std::chrono::steady_clock::now();
          const double seconds = std::chrono::duration<double>(stop - start).count();
          const auto s = compute_statistics(p.layout, result.plan, cost, p.policy, p.limits);
          plan_text = format_plan(result.plan);

          json_object j;
          j.add("algorithm", to_string(result.used))
              .add("requested", to_string(requested))
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
                                     : std::optional(p.limits.max_items)))
              .add("makespan", s.makespan)
              .add("makespan_before", s.makespan_before)
              .add("lower_bound", s.lower_bound)
              .add("ratio", s.ratio)
              .add("imbalance_before", s.imbalance_before)
              .add("imbalance_after", s.imbalance_after)
              .add("mean_load", s.mean_after)
              .add("plan_seconds", seconds)
              .add("proven_optimal", result.proven_optimal)
              .add("items_moved", s.items_moved)
              .add("bytes_moved", s.bytes_moved)
              .add("max_tokens", s.max_tokens)
              .add("max_bytes", s.max_bytes)
              .add("max_items_per_rank", s.max_items_per_rank)
              .add("min_items_per_rank", s.min_items_per_rank)
              .add("items_file", p.items_path)
              .add("plan_file", out_path);
          line = j.str();
        },
        p.cost);

    write_file_atomically(out_path, plan_text);
    out << line << "\n";
    return exit_ok;
  });
}

}  // namespace orchmllm::tool
