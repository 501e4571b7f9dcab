// orchmllm-bench: the PLAN.csv format (plan_csv.hpp).
#include "bench/cli/plan_csv.hpp"

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
#include "bench/support/quote.hpp"

namespace orchmllm::tool {

std::string format_plan(const rearrangement& plan, std::span<const std::int64_t> dst_micro_batch) {
  const bool micro = !dst_micro_batch.empty();
  std::string out =
      micro ? "rank,slot,dst_rank,dst_slot,dst_micro_batch\n" : "rank,slot,dst_rank,dst_slot\n";
  out.reserve(out.size() + static_cast<std::size_t>(plan.num_items()) * (micro ? 24 : 20));
  const auto off = plan.src_offsets();
  for (std::size_t r = 0; r + 1 < off.size(); ++r) {
    for (auto g = off[r]; g < off[r + 1]; ++g) {
      const auto dst = plan.destination_of(g);
      out += std::to_string(r);
      out += ',';
      out += std::to_string(g - off[r]);
      out += ',';
      out += std::to_string(dst.rank);
      out += ',';
      out += std::to_string(dst.slot);
      if (micro) {
        out += ',';
        out += std::to_string(dst_micro_batch[static_cast<std::size_t>(g)]);
      }
      out += '\n';
    }
  }
  return out;
}

rearrangement parse_plan(std::string_view text, std::span<const std::int64_t> src_offsets,
                         rank_t dst_ranks, std::string_view file) {
  using ::orchmllm::detail::raise;
  const std::string f(file);
  detail::line_reader lines(text);
  std::string_view line;
  std::int64_t number = 0;
  detail::read_header(lines, line, number, f, "the header 'rank,slot,dst_rank,dst_slot'");
  const auto header = detail::split_fields(line);
  const bool micro = header == std::vector<std::string_view>{"rank", "slot", "dst_rank", "dst_slot",
                                                             "dst_micro_batch"};
  if (!micro && header != std::vector<std::string_view>{"rank", "slot", "dst_rank", "dst_slot"})
    raise<parse_error>(f + ":" + std::to_string(number) + ": header is " +
                       quote_text(detail::trim(line)) +
                       ", expected 'rank,slot,dst_rank,dst_slot' (and optionally "
                       "',dst_micro_batch')");
  const std::size_t columns = micro ? 5 : 4;
  const auto n = src_offsets.empty() ? 0 : src_offsets.back();
  const auto d_src = static_cast<std::int64_t>(src_offsets.size()) - 1;
  std::vector<placement> dest(static_cast<std::size_t>(n), placement{-1, -1});
  while (lines.next(line, number)) {
    if (detail::trim(line).empty()) continue;
    const auto fields = detail::split_fields(line);
    const std::string here = f + ":" + std::to_string(number) + ": ";
    if (fields.size() != columns)
      raise<parse_error>(here + std::to_string(fields.size()) + " fields, expected " +
                         std::to_string(columns));
    if (micro) (void)detail::parse_count(fields[4], "dst_micro_batch", f, number);
    const auto rank = detail::parse_count(fields[0], "rank", f, number);
    const auto slot = detail::parse_count(fields[1], "slot", f, number);
    const auto dst_rank = detail::parse_count(fields[2], "dst_rank", f, number);
    const auto dst_slot = detail::parse_count(fields[3], "dst_slot", f, number);
    if (rank >= d_src || slot >= src_offsets[static_cast<std::size_t>(rank) + 1] -
                                     src_offsets[static_cast<std::size_t>(rank)])
      raise<parse_error>(here + "no source item (rank " + std::to_string(rank) + ", slot " +
                         std::to_string(slot) + ")");
    if (dst_rank >= dst_ranks)
      raise<parse_error>(here + "dst_rank " + std::to_string(dst_rank) +
                         " is not below the rank count " + std::to_string(dst_ranks));
    auto& p = dest[static_cast<std::size_t>(src_offsets[static_cast<std::size_t>(rank)] + slot)];
    if (p.rank >= 0)
      raise<parse_error>(here + "item (rank " + std::to_string(rank) + ", slot " +
                         std::to_string(slot) + ") appears twice");
    p = placement{static_cast<rank_t>(dst_rank), dst_slot};
  }
  for (std::int64_t g = 0; g < n; ++g)
    if (dest[static_cast<std::size_t>(g)].rank < 0)
      raise<parse_error>(f + ": no row for source item " + std::to_string(g));
  return rearrangement::from_placements(src_offsets, dest, dst_ranks);
}

rearrangement read_plan_file(const std::filesystem::path& path,
                             std::span<const std::int64_t> src_offsets, rank_t dst_ranks) {
  return parse_plan(read_file(path), src_offsets, dst_ranks, path.string());
}

}  // namespace orchmllm::tool
