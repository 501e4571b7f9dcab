#pragma once
// orchmllm-bench: the balancing problem as given on the command line, shared by the
// subcommands that balance (plan, compare, and later ones): the items file, the rank count,
// the padding policy, the cost model and the per-rank constraints.
//
//   --items ITEMS.csv --ranks D
//   --policy packed|padded|bucketed:B1,B2,... [--pad-multiple K]
//   --cost linear|quadratic:A,B[,C]      cost(l) = A·l + B·l² + C
//   --cap C | --cap-bytes B               per-rank cap in tokens or payload bytes
//   --min-items M  --max-items M          items per destination rank

#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <orchmllm/core/text_forms.hpp>
#include <orchmllm/orchmllm.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bench/cli/items_csv.hpp"
#include "bench/cli/json.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// Largest --ranks the tool accepts (the layout stores d + 1 offsets; a typo such as
/// `--ranks 4000000000` should be an error, not an attempt to allocate gigabytes).
inline constexpr std::int64_t max_ranks = std::int64_t{1} << 24;

/// The cost models the tool offers. Balancing code visits it with a generic lambda, so every
/// subcommand is written once for both (integral and floating-point) cost types.
using any_cost = text_cost_model;

/// Everything a balancing subcommand needs besides the algorithm.
struct problem {
  std::string items_path;
  batch_layout layout;
  rank_t ranks = 0;
  padding_policy policy = packed;
  any_cost cost = linear_cost{};
  std::string cost_name = "linear";  ///< canonical spelling, e.g. "quadratic:1,0.001"
  constraints limits{};
  std::vector<std::int64_t> item_lines;  ///< ITEMS.csv line of every item, by global id
};

/// The flags of `problem`, in usage order (subcommands append their own).
std::vector<flag_spec> problem_flags();

/// Name of a policy for output: "packed", "padded" or "bucketed:B1,B2,..." (as --policy reads;
/// `orchmllm::to_text`).
std::string policy_name(padding_policy p);

/// Parses --cost with the library's text form (core/text_forms.hpp) and returns the model and
/// its canonical spelling. Throws usage_error naming the flag and the value.
std::pair<any_cost, std::string> parse_cost(std::string_view text);

/// Parses --policy and --pad-multiple with the library's text form (core/text_forms.hpp).
/// Throws usage_error.
padding_policy parse_policy(const parsed_args& args);

/// "FILE:LINE: item (rank r, slot s)": where item g of the problem came from, for messages.
std::string item_where(const problem& p, std::int64_t g);

/// Names the first item longer than the largest bucket of a bucketed policy, with its ITEMS.csv
/// line. Throws invalid_argument_error "FILE:LINE: ...".
void check_bucket_lengths(const problem& p);

/// Parses --cap / --cap-bytes / --min-items / --max-items. Throws usage_error.
constraints parse_constraints(const parsed_args& args);

/// Parses --algorithm (a balancer name, `orchmllm::balancer_names()`; default automatic).
/// Throws usage_error naming the value.
any_balancer parse_algorithm_flag(const parsed_args& args);

/// Names the first item that alone exceeds the per-rank cap, with its ITEMS.csv line, before
/// the balancer would report it by global id. Throws infeasible_error "FILE:LINE: ...".
void check_single_item_caps(const problem& p);

/// Reads every problem flag and the items file. Throws usage_error for bad flags, io_error for
/// an unreadable file, parse_error for a malformed one, invalid_argument_error for an item
/// longer than the largest bucket, infeasible_error for an item above the cap (other
/// infeasibility is found by the balancer).
problem load_problem(const parsed_args& args);

}  // namespace orchmllm::tool
