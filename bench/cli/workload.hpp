#pragma once
// orchmllm-bench workload: write the per-stage ITEMS.csv files of one of the four benchmark
// workloads (bench/support/workloads.hpp; docs/tool.md, `workload`).
//
//   orchmllm-bench workload --name vl-sft --ranks 512 --out-dir w/
//     -> w/vision.csv, w/audio.csv, w/llm.csv (rank,slot,length,bytes; rank, slot order)
//
// vision.csv: one item per image or video clip, length = ViT patches, bytes = patches · 2352,
// and, when the batch has videos, ITEMS.csv's optional segments column (a video's temporal
// groups: `plan` then costs a video as the sum of its groups, as `simulate` does);
// audio.csv: one item per 30 s window of a clip, length = 1500 Whisper positions, bytes = mel
// frames · 256; llm.csv: one item per sample, length = text + encoder
// output tokens, bytes = length · 8. A stage without items gets a header-only file. The three
// files are formatted first and then each written atomically (file_io.hpp), so a failing run
// leaves none of them behind unless the disk fails between two renames.

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "bench/cli/command.hpp"
#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"
#include "bench/cli/json.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/args.hpp"
#include "bench/support/workloads.hpp"

namespace orchmllm::tool {

/// Largest number of samples `workload` generates (ranks × samples per rank), a typo guard.
inline constexpr std::int64_t workload_max_samples = 20'000'000;

/// The `workload` subcommand.
const command& workload_command();

/// The three files of a workload as {file name, ITEMS.csv text}, in the order vision, audio, llm.
std::vector<std::pair<std::string, std::string>> format_workload_items(
    const bench::workload_batch& w);

/// Writes DIR/vision.csv, DIR/audio.csv and DIR/llm.csv (creating DIR if needed), all or none
/// (`write_files_atomically`: a full disk leaves no partial set). Throws io_error naming the
/// path when the directory cannot be created or a file cannot be written.
void write_workload_items(const bench::workload_batch& w, const std::filesystem::path& dir);

/// Runs `workload`. Returns the exit code (see command.hpp).
int run_workload(const parsed_args& args, std::ostream& out, std::ostream& err);

}  // namespace orchmllm::tool
