// orchmllm-bench: the ITEMS.csv format (items_csv.hpp).
#include "bench/cli/items_csv.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <orchmllm/core/batch_layout.hpp>
#include <orchmllm/core/error.hpp>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "bench/cli/file_io.hpp"
#include "bench/support/quote.hpp"

namespace orchmllm::tool {

namespace detail {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    const auto comma = line.find(',', start);
    out.push_back(trim(line.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

void read_header(line_reader& lines, std::string_view& line, std::int64_t& number,
                 const std::string& file, std::string_view header) {
  while (lines.next(line, number))
    if (!trim(line).empty()) return;
  ::orchmllm::detail::raise<parse_error>(file + ": empty file (expected " + std::string(header) +
                                         ")");
}

std::int64_t parse_count(std::string_view text, std::string_view column, std::string_view file,
                         std::int64_t line) {
  std::int64_t v = 0;
  const auto* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  auto where = [&] { return std::string(file) + ":" + std::to_string(line) + ": "; };
  if (ec == std::errc::result_out_of_range)
    ::orchmllm::detail::raise<parse_error>(where() + std::string(column) + " " + quote_text(text) +
                                           " is outside the 64-bit range");
  if (text.empty() || ec != std::errc{} || p != end)
    ::orchmllm::detail::raise<parse_error>(where() + std::string(column) + " " + quote_text(text) +
                                           " is not an integer");
  if (v < 0)
    ::orchmllm::detail::raise<parse_error>(where() + "negative " + std::string(column) + " " +
                                           std::to_string(v) + " (must be >= 0)");
  return v;
}

}  // namespace detail

batch_layout parse_items(std::string_view text, std::int64_t ranks, std::string_view file,
                         std::vector<std::int64_t>* item_lines) {
  using ::orchmllm::detail::raise;
  const std::string f(file);
  ORCHMLLM_REQUIRE(ranks >= 1 && ranks <= INT32_MAX, invalid_argument_error, "rank count ", ranks,
                   " outside [1, ", INT32_MAX, "]");
  detail::line_reader lines(text);
  std::string_view line;
  std::int64_t number = 0;

  detail::read_header(lines, line, number, f,
                      "the header 'rank,slot,length' or 'rank,slot,length,bytes'");
  static constexpr std::string_view expected[] = {"rank", "slot", "length", "bytes"};
  const auto header = detail::split_fields(line);
  const std::string at = f + ":" + std::to_string(number) + ": ";
  const std::string hint =
      " (expected 'rank,slot,length' or 'rank,slot,length,bytes', optionally then 'segments')";
  bool with_bytes = false;
  bool with_segments = false;
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (i >= 3 && header[i] == "segments" && !with_segments) {
      with_segments = true;  // the last optional column
      continue;
    }
    if (i >= 4 || with_segments)
      raise<parse_error>(at + "unexpected extra column " + quote_text(header[i]) +
                         " in the header" + hint);
    if (header[i] != expected[i])
      raise<parse_error>(at + "header column " + std::to_string(i + 1) + " is " +
                         quote_text(header[i]) + ", expected '" + std::string(expected[i]) + "'" +
                         (i == 3 ? " or 'segments'" : "") + hint);
    if (i == 3) with_bytes = true;
  }
  if (header.size() < 3)
    raise<parse_error>(at + "header lacks column '" + std::string(expected[header.size()]) + "'" +
                       hint);
  const std::size_t columns = header.size();
  std::string column_names = "rank,slot,length";
  if (with_bytes) column_names += ",bytes";
  if (with_segments) column_names += ",segments";

  struct row {
    std::int64_t rank, slot, length, bytes, segments, line;
  };
  std::vector<row> rows;
  while (lines.next(line, number)) {
    if (detail::trim(line).empty()) continue;
    const auto fields = detail::split_fields(line);
    const std::string here = f + ":" + std::to_string(number) + ": ";
    if (fields.size() != columns)
      raise<parse_error>(here + std::to_string(fields.size()) + " fields, expected " +
                         std::to_string(columns) + " (" + column_names + "): '" +
                         std::string(detail::trim(line)) + "'");
    row r{};
    r.line = number;
    r.rank = detail::parse_count(fields[0], "rank", f, number);
    r.slot = detail::parse_count(fields[1], "slot", f, number);
    r.length = detail::parse_count(fields[2], "length", f, number);
    r.bytes = with_bytes ? detail::parse_count(fields[3], "bytes", f, number) : 0;
    r.segments = 1;
    if (with_segments) {
      r.segments = detail::parse_count(fields[columns - 1], "segments", f, number);
      if (r.segments < 1)
        raise<parse_error>(here + "segments " + std::to_string(r.segments) +
                           " (an item has at least 1 segment)");
      if (r.length % r.segments != 0)
        raise<parse_error>(here + "length " + std::to_string(r.length) + " cannot be cut into " +
                           std::to_string(r.segments) +
                           " equal segments (segments must divide the length)");
    }
    if (r.rank >= ranks)
      raise<parse_error>(here + "rank " + std::to_string(r.rank) + " is not below the rank count " +
                         std::to_string(ranks) + " (--ranks)");
    rows.push_back(r);
  }

  std::sort(rows.begin(), rows.end(), [](const row& a, const row& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.slot != b.slot) return a.slot < b.slot;
    return a.line < b.line;
  });
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(ranks) + 1, 0);
  std::vector<std::int64_t> lengths;
  std::vector<std::int64_t> bytes;
  std::vector<std::int64_t> segments;
  lengths.reserve(rows.size());
  if (with_segments) segments.reserve(rows.size());
  if (item_lines) {
    item_lines->clear();
    item_lines->reserve(rows.size());
  }
  if (with_bytes) bytes.reserve(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    const bool first_of_rank = i == 0 || rows[i - 1].rank != r.rank;
    const std::int64_t want = first_of_rank ? 0 : rows[i - 1].slot + 1;
    const std::string here = f + ":" + std::to_string(r.line) + ": ";
    if (!first_of_rank && r.slot == rows[i - 1].slot)
      raise<parse_error>(here + "duplicate item (rank " + std::to_string(r.rank) + ", slot " +
                         std::to_string(r.slot) + "), first given on line " +
                         std::to_string(rows[i - 1].line));
    if (r.slot != want)
      raise<parse_error>(here + "rank " + std::to_string(r.rank) + " has slot " +
                         std::to_string(r.slot) + " but no slot " + std::to_string(want) +
                         " (slots must be dense from 0 on each rank)");
    ++offsets[static_cast<std::size_t>(r.rank) + 1];
    lengths.push_back(r.length);
    if (with_bytes) bytes.push_back(r.bytes);
    if (with_segments) segments.push_back(r.segments);
    if (item_lines) item_lines->push_back(r.line);
  }
  for (std::size_t r = 1; r < offsets.size(); ++r) offsets[r] += offsets[r - 1];
  batch_layout layout(std::move(offsets), std::move(lengths), std::move(bytes));
  // All-single segments are stored as none: the layout is then the one without the column.
  if (with_segments) layout = layout.with_equal_segments(segments);
  return layout;
}

batch_layout read_items_file(const std::filesystem::path& path, std::int64_t ranks,
                             std::vector<std::int64_t>* item_lines) {
  return parse_items(read_file(path), ranks, path.string(), item_lines);
}

std::string format_items(const batch_layout& layout) {
  std::string out = layout.has_bytes() ? "rank,slot,length,bytes" : "rank,slot,length";
  out += layout.has_segments() ? ",segments\n" : "\n";
  out.reserve(out.size() + static_cast<std::size_t>(layout.num_items()) * 16);
  for (rank_t r = 0; r < layout.num_ranks(); ++r) {
    for (auto g = layout.offset(r); g < layout.offset(r + 1); ++g) {
      out += std::to_string(r);
      out += ',';
      out += std::to_string(g - layout.offset(r));
      out += ',';
      out += std::to_string(layout.length(g));
      if (layout.has_bytes()) {
        out += ',';
        out += std::to_string(layout.bytes(g));
      }
      if (layout.has_segments()) {
        out += ',';
        out += std::to_string(layout.num_segments(g));
      }
      out += '\n';
    }
  }
  return out;
}

}  // namespace orchmllm::tool
