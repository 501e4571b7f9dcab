#pragma once
// orchmllm-bench plan --cp-sizes: samples sharded over context-parallel groups of a size chosen
// per sample (orchmllm::balance_context_parallel) under an LLM's time model; PLAN.csv gets one
// row per token chunk (rank,slot,dst_rank,dst_slot,token_begin,token_end). See docs/tool.md,
// "Context parallelism".

#include <orchmllm/balance/context_parallel.hpp>
#include <ostream>
#include <string>

#include "bench/support/args.hpp"

namespace orchmllm::tool {

/// The PLAN.csv text of a context-parallel plan: header rank,slot,dst_rank,dst_slot,token_begin,
/// token_end, then one row per chunk in chunk-id order (samples in (rank, slot) order, a
/// sample's chunks in token order); a whole sample is one row of its whole range, a sharded
/// one 2c rows, the head and tail of a position on consecutive dst_slots; with
/// `micro_batches`, a last column dst_micro_batch (the sample's). O(chunks).
std::string format_cp_plan(const batch_layout& items, const cp_result& plan,
                           bool micro_batches = false);

/// Runs `plan` with --cp-sizes (the flags that only shape a balance, --algorithm, --cost,
/// --policy, caps, mapping, --sync and the micro-batch count's rules, are usage errors;
/// --micro-batches M and --micro-batch-tokens T apply): prints the JSON line, writes PLAN.csv
/// atomically. Returns the exit code (see command.hpp).
int run_plan_cp(const parsed_args& args, const cp_options& options, std::ostream& out);

}  // namespace orchmllm::tool
