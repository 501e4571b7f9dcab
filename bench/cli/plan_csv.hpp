#pragma once
// orchmllm-bench: the PLAN.csv format (where every item goes).
//
//   rank,slot,dst_rank,dst_slot
//   0,0,3,0
//   0,1,0,2
//
// One row per input item, in (rank, slot) order, i.e. the source global-id order of the
// ITEMS.csv the plan was made from. dst_slot follows the library's canonical slot order: on
// each destination rank, items are ordered by (source rank, source slot), which is the order
// an all-to-all(v) delivers them in. A plan with micro-batches has a last column,
// dst_micro_batch, and its destination slots are grouped by micro-batch (micro-batch 0 first,
// then by source rank and slot within one), so a micro-batch is one range of a rank's slots.

#include <cstdint>
#include <filesystem>
#include <orchmllm/core/batch_layout.hpp>
#include <orchmllm/core/error.hpp>
#include <orchmllm/core/rearrangement.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"

namespace orchmllm::tool {

/// PLAN.csv text of `plan` (source layout = the plan's source offsets), with the column
/// dst_micro_batch when `dst_micro_batch` (one per item, source global-id order) is not empty.
/// O(n).
std::string format_plan(const rearrangement& plan,
                        std::span<const std::int64_t> dst_micro_batch = {});

/// Parses PLAN.csv text back into a plan over the source layout with `src_offsets`, onto
/// `dst_ranks` ranks. Every (rank, slot) of the source must appear exactly once and the
/// destinations must form a bijection with dense slots; a dst_micro_batch column is read and
/// checked as a count, not returned. O(n). Throws orchmllm::parse_error
/// ("FILE:LINE: ...") for malformed rows and invalid_argument_error for an inconsistent plan.
rearrangement parse_plan(std::string_view text, std::span<const std::int64_t> src_offsets,
                         rank_t dst_ranks, std::string_view file);

/// Reads a PLAN.csv file (see `parse_plan`).
rearrangement read_plan_file(const std::filesystem::path& path,
                             std::span<const std::int64_t> src_offsets, rank_t dst_ranks);

}  // namespace orchmllm::tool
