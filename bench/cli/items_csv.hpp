#pragma once
// orchmllm-bench: the ITEMS.csv format (what every data-parallel rank sampled).
//
//   rank,slot,length[,bytes][,segments]
//   0,0,812
//   0,1,95
//   2,0,4096        <- rank 1 holds no items: fine
//
// One row per item; all values are non-negative 64-bit integers; rank < D (the --ranks value);
// on each rank the slots are dense from 0. Rows may come in any order: they are sorted by
// (rank, slot). The header must be exactly `rank,slot,length`, optionally followed by `bytes`
// and then `segments` (either or both, in that order; spaces around fields and a UTF-8 byte
// order mark are tolerated, and so are blank lines and CRLF line ends). Without a bytes column
// an item's payload size is its length. `segments` is the item's number S ≥ 1 of equal
// segments (a video's temporal groups: `batch_layout::with_equal_segments`), which must divide
// its length; without the column every item has one, and a file whose segments are all 1 reads
// exactly as one without the column.
//
// Every violation throws orchmllm::parse_error with a one-line message "FILE:LINE: ..." naming
// the value at fault. The earliest bad line (in file order) is reported for per-row errors;
// duplicate and missing slots are found after sorting and name the line of the offending row.

#include <cstdint>
#include <filesystem>
#include <orchmllm/core/batch_layout.hpp>
#include <orchmllm/core/error.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/cli/file_io.hpp"

namespace orchmllm::tool {

namespace detail {

std::string_view trim(std::string_view s);

/// Splits one CSV line at commas (no quoting: every field of these files is a bare integer).
std::vector<std::string_view> split_fields(std::string_view line);

/// Iterates over the lines of a text with 1-based line numbers.
class line_reader {
 public:
  explicit line_reader(std::string_view text) : text_(text) {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") text_.remove_prefix(3);  // UTF-8 BOM
  }
  /// The next line (without its end-of-line) and its number; false at the end.
  bool next(std::string_view& line, std::int64_t& number) {
    if (pos_ >= text_.size()) return false;
    const auto nl = text_.find('\n', pos_);
    const auto end = nl == std::string_view::npos ? text_.size() : nl;
    line = text_.substr(pos_, end - pos_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos_ = end + 1;
    number = ++line_;
    return true;
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
  std::int64_t line_ = 0;
};

/// Moves `lines` to the header, the first non-blank line (into `line` and `number`); a file
/// without one raises parse_error "FILE: empty file (expected <header>)".
void read_header(line_reader& lines, std::string_view& line, std::int64_t& number,
                 const std::string& file, std::string_view header);

/// A non-negative 64-bit integer field, or parse_error "FILE:LINE: <column> '<text>' ...".
std::int64_t parse_count(std::string_view text, std::string_view column, std::string_view file,
                         std::int64_t line);

}  // namespace detail

/// Parses the text of an ITEMS.csv for `ranks` ranks into a validated layout. `file` names the
/// source in messages. When `item_lines` is given it receives the file line of every item, by
/// global id (for later messages about single items). O(n log n) (rows are sorted),
/// deterministic. Throws orchmllm::parse_error ("FILE:LINE: ...") on any violation of the
/// format described above.
batch_layout parse_items(std::string_view text, std::int64_t ranks, std::string_view file,
                         std::vector<std::int64_t>* item_lines = nullptr);

/// Reads and parses an ITEMS.csv file (see `parse_items`). Throws io_error when the file cannot
/// be read and orchmllm::parse_error when its content is malformed.
batch_layout read_items_file(const std::filesystem::path& path, std::int64_t ranks,
                             std::vector<std::int64_t>* item_lines = nullptr);

/// Formats a layout as ITEMS.csv text, rows in (rank, slot) order; the bytes column is written
/// when the layout has explicit byte sizes, the segments column (segment counts) when it has
/// segments. `parse_items(format_items(l), d, ...) == l` when every item's segments are equal
/// (a layout of unequal segments reads back with equal ones of the same count).
std::string format_items(const batch_layout& layout);

}  // namespace orchmllm::tool
