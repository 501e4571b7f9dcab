// orchmllm-bench compare: every applicable balancer on one input (compare.hpp).
#include "bench/cli/compare.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <orchmllm/orchmllm.hpp>
#include <ostream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/micro_batch_flags.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

const command& compare_command() {
  static const command cmd = [] {
    command c;
    c.name = "compare";
    c.summary = "Run every applicable balancer on ITEMS.csv; print a comparison table.";
    c.flags = problem_flags();
    for (auto& f : micro_batch_flags()) c.flags.push_back(std::move(f));
    c.flags.push_back({"json", "", "print one JSON object per algorithm and line instead", false});
    c.details =
        "columns: makespan, ratio to the lower bound, imbalance (max/mean load), items moved,\n"
        "planning seconds, note.\n"
        "rows: identity, lpt, lpt+refine, karmarkar_karp, karmarkar_karp+refine,\n"
        "karmarkar_karp_equal, karmarkar_karp_equal+refine, exact, padded_exact, automatic.\n"
        "The karmarkar_karp rows need the packed policy, padded_exact a padded one, exact at\n"
        "most 16 items; rows that do not apply say n/a and why. A row whose balancer cannot\n"
        "meet the constraints says failed and why; if automatic fails the input is infeasible:\n"
        "the message goes to stderr and the exit\n"
        "status is 2. seconds is the balance() call alone.\n"
        "JSON lines: algorithm, status (ok | n/a | failed), and for ok rows used, items, ranks,\n"
        "makespan, lower_bound, ratio, imbalance, imbalance_before, seconds, proven_optimal,\n"
        "items_moved; otherwise reason.\n"
        "\n"
        "With a micro-batch flag (see `help plan`) every row balances cells (rank, micro-batch)\n"
        "with its algorithm (orchmllm::balance_micro_batches): the columns become objective (the\n"
        "step's cost under --sync), ratio (objective / its lower bound), M, moved, seconds; the\n"
        "summary line adds the objective of the input as sampled; JSON lines add sync,\n"
        "micro_batches, objective, objective_before, objective_lower_bound, objective_ratio and\n"
        "objective_proven_optimal.\n";
    c.run = &run_compare;
    return c;
  }();
  return cmd;
}

namespace detail {
namespace {

/// One balancer configuration `compare` runs: a row name (the balancer's name, "+refine" when
/// refined) and the balancer.
struct compare_variant {
  std::string name;
  any_balancer balancer;
};

/// The rows, in order: every built-in but locality, lpt and the differencing methods also
/// refined.
std::vector<compare_variant> compare_variants() {
  return {{"identity", balancers::identity{}},
          {"lpt", balancers::lpt{}},
          {"lpt+refine", balancers::lpt{.refine = true}},
          {"karmarkar_karp", balancers::karmarkar_karp{}},
          {"karmarkar_karp+refine", balancers::karmarkar_karp{.refine = true}},
          {"karmarkar_karp_equal", balancers::karmarkar_karp_equal{}},
          {"karmarkar_karp_equal+refine", balancers::karmarkar_karp_equal{.refine = true}},
          {"exact", balancers::exact{}},
          {"padded_exact", balancers::padded_exact{}},
          {"automatic", balancers::automatic{}}};
}

/// Why a variant does not apply to the problem, or "" when it does.
std::string not_applicable(const compare_variant& v, const problem& p) {
  const auto& b = v.balancer;
  if ((b.get_if<balancers::karmarkar_karp>() || b.get_if<balancers::karmarkar_karp_equal>()) &&
      p.policy.is_padded())
    return "needs --policy packed";
  if (b.get_if<balancers::padded_exact>() && !p.policy.is_padded()) return "needs --policy padded";
  if (b.get_if<balancers::exact>() && p.layout.num_items() > compare_exact_max_items)
    return "n = " + std::to_string(p.layout.num_items()) + " > " +
           std::to_string(compare_exact_max_items) + " items";
  return "";
}

std::string format_fixed(double v, int digits) {
  if (!std::isfinite(v)) return "inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

template <class Cost>
std::string format_cost(Cost v) {
  if constexpr (std::is_integral_v<Cost>) {
    return std::to_string(v);
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.10g", static_cast<double>(v));
    return buf;
  }
}

/// One line of the table: cells in column order; `note` is free text at the end.
struct compare_row {
  std::vector<std::string> cells;
  std::string note;
  std::string json;
};

/// Left-aligns the first column and right-aligns the others; the note follows unpadded.
void print_table(std::ostream& out, const std::vector<compare_row>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.cells.size()), 0);
    for (std::size_t i = 0; i < r.cells.size(); ++i)
      width[i] = std::max(width[i], r.cells[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < r.cells.size() ? r.cells[i] : "";
      const std::string pad(width[i] - cell.size(), ' ');
      if (i > 0) line += "  ";
      line += i == 0 ? cell + pad : pad + cell;
    }
    if (!r.note.empty()) line += "  " + r.note;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

}  // namespace
}  // namespace detail

int run_compare(const parsed_args& args, std::ostream& out, std::ostream& err) {
  return guarded(compare_command(), err, [&] {
    const std::optional<micro_batching> micro = parse_micro_batch_flags(args);
    const problem p = load_problem(args);
    if (micro) check_micro_batch_items(p, *micro);
    const bool as_json = args.has("json");
    std::vector<detail::compare_row> rows;
    if (micro)
      rows.push_back({{"algorithm", "objective", "ratio", "M", "moved", "seconds"}, "note", ""});
    else
      rows.push_back(
          {{"algorithm", "makespan", "ratio", "imbalance", "moved", "seconds"}, "note", ""});
    std::exception_ptr auto_failure;
    std::string summary;

    std::visit(
        [&](const auto& cost) {
          using Cost = cost_type_t<std::decay_t<decltype(cost)>>;
          const auto identity = rearrangement::identity(p.layout);
          const auto base = compute_statistics(p.layout, identity, cost, p.policy, p.limits);
          summary = "items " + std::to_string(p.layout.num_items()) + ", ranks " +
                    std::to_string(p.ranks) + ", policy " + policy_name(p.policy) +
                    (p.policy.multiple() > 1 ? "/" + std::to_string(p.policy.multiple()) : "") +
                    ", cost " + p.cost_name + ", lower bound " +
                    detail::format_cost<Cost>(base.lower_bound) + ", imbalance before " +
                    detail::format_fixed(base.imbalance_before, 6);
          std::optional<Cost> objective_before;
          if (micro) {
            objective_before = micro_batch_objective_as_sampled(p.layout, cost, p.policy, *micro);
            summary += ", sync " + std::string(to_string(micro->sync)) + ", objective before " +
                       detail::format_cost<Cost>(*objective_before);
          }
          for (const auto& v : detail::compare_variants()) {
            detail::compare_row row;
            json_object j;
            j.add("algorithm", v.name);
            const std::string why = detail::not_applicable(v, p);
            if (!why.empty()) {
              row.cells = {v.name, "n/a"};
              row.note = why;
              j.add("status", "n/a").add("reason", why);
            } else {
              const bool automatic = v.balancer.get_if<balancers::automatic>() != nullptr;
              try {
                const auto start = std::chrono::steady_clock::now();
                std::optional<micro_batch_result<Cost>> cells;
                if (micro)
                  cells =
                      balance_micro_batches(p.layout, cost, p.policy, *micro, v.balancer, p.limits);
                const auto result = cells ? cells->balance
                                          : balance(p.layout, cost, p.policy, v.balancer, p.limits);
                const auto stop = std::chrono::steady_clock::now();
                const double seconds = std::chrono::duration<double>(stop - start).count();
                const auto s = compute_statistics(p.layout, result.plan, cost, p.policy, p.limits);
                const double objective_ratio = cells ? cells->objective_ratio() : 1.0;
                if (cells)
                  row.cells = {v.name,
                               detail::format_cost<Cost>(cells->objective),
                               detail::format_fixed(objective_ratio, 6),
                               std::to_string(cells->micro_batches),
                               std::to_string(s.items_moved),
                               detail::format_fixed(seconds, 6)};
                else
                  row.cells = {v.name,
                               detail::format_cost<Cost>(s.makespan),
                               detail::format_fixed(s.ratio, 6),
                               detail::format_fixed(s.imbalance_after, 6),
                               std::to_string(s.items_moved),
                               detail::format_fixed(seconds, 6)};
                if (automatic) row.note = "used " + std::string(result.used);
                if (v.balancer.get_if<balancers::karmarkar_karp>() &&
                    result.used == balancers::karmarkar_karp_equal::name)
                  row.note = "ran karmarkar_karp_equal (n*d above 2^21)";
                if (cells ? cells->objective_proven_optimal : result.proven_optimal)
                  row.note += (row.note.empty() ? "" : ", ") + std::string("proven optimal");
                using ::orchmllm::detail::statistic;
                const auto figures = ::orchmllm::detail::statistic_fields(s);
                j.add("status", "ok")
                    .add("used", std::string(result.used))
                    .add("items", s.items)
                    .add("ranks", static_cast<std::int64_t>(p.ranks));
                add_statistics(j, figures,
                               {statistic::makespan, statistic::lower_bound, statistic::ratio});
                // The table's column name for imbalance_after.
                j.add("imbalance", figures[statistic::imbalance_after].value);
                add_statistics(j, figures, {statistic::imbalance_before});
                j.add("seconds", seconds).add("proven_optimal", result.proven_optimal);
                add_statistics(j, figures, {statistic::items_moved});
                if (cells)
                  j.add("sync", std::string(to_string(micro->sync)))
                      .add("micro_batches", cells->micro_batches)
                      .add("objective", cells->objective)
                      .add("objective_before", *objective_before)
                      .add("objective_lower_bound", cells->objective_lower_bound)
                      .add("objective_ratio", objective_ratio)
                      .add("objective_proven_optimal", cells->objective_proven_optimal);
              } catch (const orchmllm::error& e) {
                if (automatic) auto_failure = std::current_exception();
                row.cells = {v.name, "failed"};
                row.note = "failed: " + tool::detail::one_line(e.message());
                j.add("status", "failed").add("reason", tool::detail::one_line(e.message()));
              }
            }
            row.json = j.str();
            rows.push_back(std::move(row));
          }
        },
        p.cost);

    // auto tries everything it knows, fallbacks included: when it fails the input itself is
    // infeasible, which is an error of the run rather than a row of the table.
    if (auto_failure) std::rethrow_exception(auto_failure);
    if (as_json) {
      for (std::size_t i = 1; i < rows.size(); ++i) out << rows[i].json << "\n";
    } else {
      out << summary << "\n";
      detail::print_table(out, rows);
    }
    return exit_ok;
  });
}

}  // namespace orchmllm::tool
