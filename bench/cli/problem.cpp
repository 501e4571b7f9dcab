// orchmllm-bench: the balancing problem as given on the command line (problem.hpp).
#include "bench/cli/problem.hpp"

#include <cstdint>
#include <limits>
#include <orchmllm/core/text_forms.hpp>
#include <orchmllm/orchmllm.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/cli/items_csv.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

std::vector<flag_spec> problem_flags() {
  return {
      {"items", "ITEMS.csv", "input: one row per item, header rank,slot,length[,bytes][,segments]",
       true},
      {"ranks", "D", "number of data-parallel ranks (every rank in ITEMS.csv is below D)", true},
      {"policy", "packed|padded|bucketed:B1,B2,...",
       "packed: a rank costs the sum of its items' costs; padded: count x cost(longest); "
       "bucketed: count x cost(smallest bucket length >= longest), lengths strictly "
       "increasing; default packed",
       false},
      {"pad-multiple", "K", "padded policy: round the longest length up to a multiple of K", false},
      {"cost", "linear|quadratic:A,B[,C]", "cost(l) = l, or A*l + B*l^2 + C; default linear",
       false},
      {"cap", "C", "per-rank cap in tokens (padded: count x padded longest length)", false},
      {"cap-bytes", "B", "per-rank cap in payload bytes (the bytes column, else the length)",
       false},
      {"min-items", "M", "at least M items on every rank (1 = no empty rank)", false},
      {"max-items", "M", "at most M items on every rank", false},
  };
}

std::string policy_name(padding_policy p) { return to_text(p); }

std::pair<any_cost, std::string> parse_cost(std::string_view text) {
  try {
    const auto cost = parse_cost_model(text);
    return {cost, to_text(cost)};
  } catch (const invalid_argument_error& e) {
    throw usage_error("--" + e.message());  // the library's messages start with "cost"
  }
}

padding_policy parse_policy(const parsed_args& args) {
  const std::string name = args.get("policy").value_or("packed");
  if (args.has("pad-multiple") &&
      (name == "packed" || std::string_view(name).substr(0, 9) == "bucketed:"))
    throw usage_error("--pad-multiple needs --policy padded");
  const std::int64_t multiple = name == "padded" ? args.get_int("pad-multiple", 1, 1) : 1;
  try {
    return parse_padding_policy(name, multiple);
  } catch (const invalid_argument_error& e) {
    throw usage_error("--" + e.message());  // the library's messages start with "policy"
  }
}

std::string item_where(const problem& p, std::int64_t g) {
  const rank_t r = p.layout.rank_of(g);
  return p.items_path + ":" + std::to_string(p.item_lines[static_cast<std::size_t>(g)]) +
         ": item (rank " + std::to_string(r) + ", slot " + std::to_string(g - p.layout.offset(r)) +
         ")";
}

void check_bucket_lengths(const problem& p) {
  if (p.policy.policy_kind() != padding_policy::kind::bucketed) return;
  const std::int64_t largest = p.policy.buckets().back();
  for (std::int64_t g = 0; g < p.layout.num_items(); ++g) {
    if (p.layout.length(g) <= largest) continue;
    ::orchmllm::detail::raise<invalid_argument_error>(
        item_where(p, g) + " has length " + std::to_string(p.layout.length(g)) +
        ", above the largest bucket " + std::to_string(largest) + " (--policy " +
        policy_name(p.policy) + ")");
  }
}

constraints parse_constraints(const parsed_args& args) {
  constraints c;
  if (args.has("cap") && args.has("cap-bytes"))
    throw usage_error("--cap and --cap-bytes are exclusive (one per-rank cap)");
  if (args.has("cap")) c.cap = capacity{capacity::measure::tokens, args.require_int("cap", 0)};
  if (args.has("cap-bytes"))
    c.cap = capacity{capacity::measure::bytes, args.require_int("cap-bytes", 0)};
  c.min_items = args.get_int("min-items", 0, 0);
  c.max_items = args.get_int("max-items", std::numeric_limits<std::int64_t>::max(), 0);
  if (c.max_items < c.min_items)
    throw usage_error("--max-items " + std::to_string(c.max_items) + " is below --min-items " +
                      std::to_string(c.min_items));
  return c;
}

any_balancer parse_algorithm_flag(const parsed_args& args) {
  const std::string name = args.get("algorithm").value_or("automatic");
  try {
    return parse_balancer(name);
  } catch (const invalid_argument_error& e) {
    throw usage_error("--algorithm: " + e.message());
  }
}

void check_single_item_caps(const problem& p) {
  if (!p.limits.cap) return;
  const auto& cap = *p.limits.cap;
  const bool tokens = cap.what == capacity::measure::tokens;
  for (std::int64_t g = 0; g < p.layout.num_items(); ++g) {
    const auto need = tokens ? p.policy.padded_length(p.layout.length(g)) : p.layout.bytes(g);
    if (need > cap.limit) {
      ::orchmllm::detail::raise<infeasible_error>(
          item_where(p, g) + " alone needs " + std::to_string(need) +
          (tokens ? " tokens" : " bytes") + ", above the per-rank cap of " +
          std::to_string(cap.limit) + (tokens ? " (--cap)" : " (--cap-bytes)"));
    }
  }
}

problem load_problem(const parsed_args& args) {
  problem p;
  p.ranks = static_cast<rank_t>(args.require_int("ranks", 1, max_ranks));
  p.policy = parse_policy(args);
  auto [cost, name] = parse_cost(args.get("cost").value_or("linear"));
  p.cost = cost;
  p.cost_name = name;
  p.limits = parse_constraints(args);
  p.items_path = args.require("items");
  p.layout = read_items_file(p.items_path, p.ranks, &p.item_lines);
  check_bucket_lengths(p);
  check_single_item_caps(p);
  return p;
}

}  // namespace orchmllm::tool
