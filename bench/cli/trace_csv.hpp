#pragma once
// orchmllm-bench: the length-trace format (one row per sample of a data set), read by
// `workload --trace` and `simulate --trace` and written by `workload --trace-out`
// (docs/tool.md, "Traces").
//
//   sample,image_tokens,text_tokens
//   0,1296;576,87
//   1,,412          <- a text-only sample
//
// image_tokens: the vision-encoder patch counts of the sample's images, ';'-separated, empty for
// none; each a positive multiple of 4 (Qwen2-VL merges 2 × 2 patches into one LLM token, so an
// image adds patches / 4 tokens to the sample's LLM sequence). text_tokens: the sample's own
// text tokens. sample: a non-negative integer id; rows are used in file order. A sample needs at
// least one token. Spaces around fields, a UTF-8 byte order mark, blank lines and CRLF line
// ends are tolerated. Every violation throws orchmllm::parse_error "FILE:LINE: ...".

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "bench/support/workloads.hpp"

namespace orchmllm::tool {

/// Parses the text of a trace; `file` names it in messages. O(size); throws parse_error.
std::vector<bench::trace_sample> parse_trace(std::string_view text, std::string_view file);

/// Reads and parses a trace file. Throws io_error when it cannot be read, parse_error when it is
/// malformed or has no samples.
std::vector<bench::trace_sample> read_trace_file(const std::filesystem::path& path);

/// A batch as a trace: its samples rank by rank, slot by slot, numbered from 0. O(items).
/// Throws invalid_argument_error for a sample with an audio sub-item or a video (a vision
/// sub-item of several segments): the format has images only.
std::string format_trace(const bench::workload_batch& w);

}  // namespace orchmllm::tool
