#pragma once
// orchmllm-bench dispatch, its input files: the rank count they describe
// (`infer_rank_count`), their parsing into what the measurement moves (`parse_dispatch_inputs`)
// and, under MPI, rank 0's copy of a file shared with every rank (`share_file`).

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <orchmllm/comm/collectives.hpp>
#include <orchmllm/comm/communicator.hpp>
#include <orchmllm/core/error.hpp>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "bench/cli/file_io.hpp"
#include "bench/cli/items_csv.hpp"
#include "bench/cli/plan_csv.hpp"
#include "bench/cli/problem.hpp"
#include "bench/support/collectives.hpp"
#include "bench/support/dispatch_driver.hpp"

namespace orchmllm::tool {

/// What `dispatch` moves: the source layout and the plan, over `ranks` ranks (the support
/// library's, shared with the benchmarks).
using bench::dispatch_inputs;

/// The smallest rank count that fits both files: 1 + the highest `rank` in ITEMS.csv and the
/// highest `rank` or `dst_rank` in PLAN.csv (at least 1). Only a scan: fields that are not
/// integers are skipped here and reported by the real parsers. O(size of the texts). Throws
/// parse_error naming the file and line when a rank is not below `limit`.
rank_t infer_rank_count(std::string_view items_text, std::string_view plan_text,
                        std::string_view items_file, std::string_view plan_file,
                        std::int64_t limit = max_ranks);

/// Parses the two files' texts: the rank count is `ranks` or, when absent, inferred
/// (`infer_rank_count`). Throws parse_error ("FILE:LINE: ...") for malformed files and for a
/// plan that does not fit the items; invalid_argument_error for an inconsistent plan.
dispatch_inputs parse_dispatch_inputs(std::string_view items_text, std::string_view plan_text,
                                      std::string_view items_file, std::string_view plan_file,
                                      std::optional<rank_t> ranks);

/// Collective: rank 0 reads `path` and every rank receives its text. When rank 0 cannot read
/// it, every rank throws the same io_error. O(file size) bytes moved.
template <communicator Comm>
std::string share_file(Comm& comm, const std::string& path) {
  std::string text;
  std::optional<std::string> failure;
  if (comm.rank() == 0) {
    try {
      text = read_file(path);
    } catch (const io_error& e) {
      failure = e.what();
    }
  }
  // The failure travels as rank 0's problem; everybody throws it.
  const auto problems = bench::gather_problems(comm, failure);
  if (!problems.empty()) throw io_error(problems.front().second);
  // Only rank 0 contributes: every rank learns its size, then receives its text.
  const auto sizes = orchmllm::all_gather(comm, static_cast<std::int64_t>(text.size()));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(comm.size()), 0);
  counts[0] = sizes[0];
  const auto all = orchmllm::all_gatherv(
      comm, comm.rank() == 0 ? std::span<const char>(text) : std::span<const char>(), counts);
  return std::string(all.values.begin(), all.values.end());
}

}  // namespace orchmllm::tool
