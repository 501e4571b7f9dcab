#pragma once
// orchmllm-bench: the micro-batch flags shared by `plan` and `compare` (--micro-batches,
// --micro-batch-tokens, --micro-batch-multiple, --min-micro-batches, --sync) and the
// destination micro-batch of every item of a micro-batch plan. See docs/algorithms.md,
// "Micro-batches".

#include <cstdint>
#include <optional>
#include <orchmllm/balance/micro_batches.hpp>
#include <orchmllm/core/rearrangement.hpp>
#include <vector>

#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// The micro-batch flags, in usage order.
std::vector<flag_spec> micro_batch_flags();

/// The micro-batching the flags ask for, or nullopt when none of them is given (the run then
/// balances ranks only, as without micro-batches). `--micro-batches` is `auto` (the smallest
/// count that fits, the default) or a count ≥ 1. Throws usage_error for a bad value.
std::optional<micro_batching> parse_micro_batch_flags(const parsed_args& args);

/// Raises `invalid_argument_error` naming the ITEMS.csv line of the first item whose physical
/// tokens alone (packed: its length; padded: its rows at their padded length) exceed the
/// micro-batch token limit. O(n).
void check_micro_batch_items(const problem& p, const micro_batching& micro);

}  // namespace orchmllm::tool
