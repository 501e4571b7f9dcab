#pragma once
/// @file payload.hpp
/// Ragged payloads: per item a row count, one row width in bytes, rows contiguous per rank.
///
/// What one rank holds of a stage's tensor: pixels (rows = patches, width = patch bytes), audio
/// frames, token ids, embeddings or their gradients. Item i owns rows
/// [row_offset(i), row_offset(i) + rows[i]) of `data`, i.e. bytes
/// [row_offset(i)·row_bytes, (row_offset(i) + rows[i])·row_bytes). Items are in local slot order.
/// See docs/communication.md, "Metadata and payloads".

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// Host-memory ragged payload (owning), moved by `dispatch`/`combine` (comm/dispatch.hpp).
/// Device payloads stay in the caller's buffers and move with `build_route` + `execute`.
struct ragged_payload {
  std::vector<std::int64_t> rows{};  ///< row count of every local item
  std::int64_t row_bytes = 1;        ///< bytes per row, the same for every item and rank
  std::vector<std::byte> data{};     ///< Σ rows · row_bytes bytes

  /// Number of items.
  [[nodiscard]] std::int64_t num_items() const noexcept {
    return static_cast<std::int64_t>(rows.size());
  }
  /// Total rows. O(n). Throws `invalid_argument_error` for a negative row count or a total
  /// above 2^63 − 1.
  [[nodiscard]] std::int64_t total_rows() const {
    std::int64_t t = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      ORCHMLLM_REQUIRE(rows[i] >= 0 && rows[i] <= std::numeric_limits<std::int64_t>::max() - t,
                       invalid_argument_error, "item ", i, " has ", rows[i],
                       " rows: negative or the total passes 2^63 - 1");
      t += rows[i];
    }
    return t;
  }
  /// Byte offset of every item plus the end (n + 1 entries). O(n). Throws
  /// `invalid_argument_error` when row_bytes or a row count is negative or Σ rows · row_bytes
  /// passes 2^63 − 1 (naming the item).
  [[nodiscard]] std::vector<std::int64_t> byte_offsets() const {
    ORCHMLLM_REQUIRE(row_bytes >= 0, invalid_argument_error, "row width ", row_bytes,
                     " bytes is negative");
    std::vector<std::int64_t> off(rows.size() + 1, 0);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      ORCHMLLM_REQUIRE(rows[i] >= 0, invalid_argument_error, "item ", i, " has ", rows[i], " rows");
      ORCHMLLM_REQUIRE(
          row_bytes == 0 ||
              rows[i] <= (std::numeric_limits<std::int64_t>::max() - off[i]) / row_bytes,
          invalid_argument_error, "payload size overflows 64 bits at item ", i, " (", rows[i],
          " rows × ", row_bytes, " bytes after ", off[i], " bytes)");
      off[i + 1] = off[i] + rows[i] * row_bytes;
    }
    return off;
  }
  /// Bytes of item i. O(1), no bounds check; the caller has validated the payload (so the
  /// product fits).
  [[nodiscard]] std::int64_t item_bytes(std::size_t i) const noexcept {
    return rows[i] * row_bytes;
  }

  /// Throws `invalid_argument_error` when row_bytes or a row count is negative, when
  /// Σ rows · row_bytes overflows 64 bits, or when `data` does not hold exactly that many
  /// bytes. O(n).
  void validate() const {
    const std::int64_t total = byte_offsets().back();
    ORCHMLLM_REQUIRE(static_cast<std::int64_t>(data.size()) == total, invalid_argument_error,
                     "payload holds ", data.size(), " bytes but its ", rows.size(), " items need ",
                     total, " (rows × ", row_bytes, " bytes)");
  }
};

}  // namespace orchmllm
