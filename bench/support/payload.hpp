#pragma once
// The payload the dispatch measurements move, and its checks (pure functions; tests:
// tests/tool/dispatch_test.cpp). Every item carries `bytes` bytes whose content is a function
// of (source rank, source slot, byte index) (`content_byte`); rows are bytes (row_bytes = 1).
// After a transfer, `check_delivered` proves a rank holds exactly its planned items, in
// dst_slot order, with the right sizes and content; `check_same_payload` that a round trip
// gave back the original. Used by `orchmllm-bench dispatch` (bench/cli/) and the dispatch
// benchmarks (bench/comm/) through the driver (dispatch_driver.hpp).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <orchmllm/comm/payload.hpp>
#include <orchmllm/core/batch_layout.hpp>
#include <orchmllm/core/error.hpp>
#include <orchmllm/core/rearrangement.hpp>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/support/workload.hpp"

namespace orchmllm::bench {

/// Seed of item (source rank, slot): every item's bytes differ from every other item's.
inline std::uint64_t content_key(rank_t src, std::int64_t slot) noexcept {
  return splitmix64(splitmix64(static_cast<std::uint64_t>(src)) ^
                    (static_cast<std::uint64_t>(slot) * 0x9e3779b97f4a7c15ULL));
}

/// Byte `i` of item (src, slot): byte i % 8 of splitmix64(key + i / 8) (little-endian order,
/// defined by shifts, so the same on every platform). O(1).
inline std::byte content_byte(rank_t src, std::int64_t slot, std::int64_t i) noexcept {
  const std::uint64_t w = splitmix64(content_key(src, slot) + static_cast<std::uint64_t>(i >> 3));
  return static_cast<std::byte>((w >> (8 * (i & 7))) & 0xffu);
}

/// Writes item (src, slot)'s content into `out` (its bytes 0 .. out.size()-1). O(bytes).
inline void fill_content(rank_t src, std::int64_t slot, std::span<std::byte> out) noexcept {
  const std::uint64_t key = content_key(src, slot);
  const std::size_t n = out.size();
  for (std::size_t word = 0; word * 8 < n; ++word) {
    const std::uint64_t w = splitmix64(key + word);
    const std::size_t end = std::min<std::size_t>(8, n - word * 8);
    for (std::size_t b = 0; b < end; ++b)
      out[word * 8 + b] = static_cast<std::byte>((w >> (8 * b)) & 0xffu);
  }
}

/// Index of the first byte of `data` that is not item (src, slot)'s content, or -1. O(bytes).
inline std::int64_t first_wrong_byte(rank_t src, std::int64_t slot,
                                     std::span<const std::byte> data) noexcept {
  const std::uint64_t key = content_key(src, slot);
  const std::size_t n = data.size();
  for (std::size_t word = 0; word * 8 < n; ++word) {
    const std::uint64_t w = splitmix64(key + word);
    const std::size_t end = std::min<std::size_t>(8, n - word * 8);
    for (std::size_t b = 0; b < end; ++b)
      if (data[word * 8 + b] != static_cast<std::byte>((w >> (8 * b)) & 0xffu))
        return static_cast<std::int64_t>(word * 8 + b);
  }
  return -1;
}

/// Rank `rank`'s source payload: its items in slot order, row_bytes = 1, rows = item bytes,
/// content from `fill_content`. O(bytes of the rank). Throws std::bad_alloc.
inline ragged_payload make_source_payload(const batch_layout& layout, rank_t rank) {
  ragged_payload p;
  p.row_bytes = 1;
  std::int64_t total = 0;
  for (auto g = layout.offset(rank); g < layout.offset(rank + 1); ++g) {
    p.rows.push_back(layout.bytes(g));
    total += layout.bytes(g);
  }
  p.data.resize(static_cast<std::size_t>(total));
  std::int64_t at = 0;
  for (auto g = layout.offset(rank); g < layout.offset(rank + 1); ++g) {
    const auto b = layout.bytes(g);
    fill_content(rank, g - layout.offset(rank),
                 std::span<std::byte>(p.data).subspan(static_cast<std::size_t>(at),
                                                      static_cast<std::size_t>(b)));
    at += b;
  }
  return p;
}

/// Checks that `got` is exactly what `plan` delivers to rank `rank`: one item per destination
/// slot in slot order, each with the row count (= bytes) and content of its source item.
/// Returns nullopt when it is, else a one-line description of the first difference, prefixed
/// with `step`. O(bytes of the rank + its items · log d).
inline std::optional<std::string> check_delivered(const ragged_payload& got,
                                                  const batch_layout& layout,
                                                  const rearrangement& plan, rank_t rank,
                                                  std::string_view step) {
  using ::orchmllm::detail::concat;
  const auto doff = plan.dst_offsets();
  const auto first = doff[static_cast<std::size_t>(rank)];
  const auto count = doff[static_cast<std::size_t>(rank) + 1] - first;
  if (got.row_bytes != 1) return concat(step, ": row width ", got.row_bytes, " bytes, expected 1");
  if (got.num_items() != count)
    return concat(step, ": received ", got.num_items(), " items, the plan sends ", count);
  std::int64_t at = 0;
  for (std::int64_t s = 0; s < count; ++s) {
    const auto g = plan.source_of(first + s);
    const rank_t src = layout.rank_of(g);
    const auto src_slot = g - layout.offset(src);
    const auto want = layout.bytes(g);
    const auto have = got.rows[static_cast<std::size_t>(s)];
    if (have != want)
      return concat(step, ": slot ", s, " (item rank ", src, " slot ", src_slot, ") has ", have,
                    " bytes, expected ", want);
    if (at + have > static_cast<std::int64_t>(got.data.size()))
      return concat(step, ": payload holds ", got.data.size(), " bytes, fewer than its rows");
    const auto bad =
        first_wrong_byte(src, src_slot,
                         std::span<const std::byte>(got.data).subspan(
                             static_cast<std::size_t>(at), static_cast<std::size_t>(have)));
    if (bad >= 0)
      return concat(step, ": slot ", s, " (item rank ", src, " slot ", src_slot, "): byte ", bad,
                    " of ", have, " is wrong");
    at += have;
  }
  if (at != static_cast<std::int64_t>(got.data.size()))
    return concat(step, ": payload holds ", got.data.size(), " bytes, its items ", at);
  return std::nullopt;
}

/// Checks that `got` equals `original` (rows, width and bytes). O(bytes).
inline std::optional<std::string> check_same_payload(const ragged_payload& got,
                                                     const ragged_payload& original,
                                                     std::string_view step) {
  using ::orchmllm::detail::concat;
  if (got.row_bytes != original.row_bytes || got.rows != original.rows)
    return concat(step, ": item sizes differ from the original (", got.num_items(), " items vs ",
                  original.num_items(), ")");
  if (got.data.size() != original.data.size())
    return concat(step, ": ", got.data.size(), " bytes instead of ", original.data.size());
  const auto mismatch = std::mismatch(got.data.begin(), got.data.end(), original.data.begin());
  if (mismatch.first != got.data.end())
    return concat(step, ": byte ", mismatch.first - got.data.begin(), " of ", got.data.size(),
                  " differs from the original");
  return std::nullopt;
}

/// Rank `rank`'s row and column of the direct schedule's byte matrix: bytes it sends to and
/// receives from every rank, its own block included (what one MPI_Alltoallv moving the same
/// items would pass). O(items of the rank · log d + d).
inline std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> direct_byte_counts(
    const batch_layout& layout, const rearrangement& plan, rank_t rank) {
  const auto d = static_cast<std::size_t>(plan.num_dst_ranks());
  std::vector<std::int64_t> send(d, 0), recv(d, 0);
  for (auto g = layout.offset(rank); g < layout.offset(rank + 1); ++g)
    send[static_cast<std::size_t>(plan.dst_ranks()[static_cast<std::size_t>(g)])] +=
        layout.bytes(g);
  const auto doff = plan.dst_offsets();
  for (auto h = doff[static_cast<std::size_t>(rank)]; h < doff[static_cast<std::size_t>(rank) + 1];
       ++h) {
    const auto g = plan.source_of(h);
    recv[static_cast<std::size_t>(layout.rank_of(g))] += layout.bytes(g);
  }
  return {std::move(send), std::move(recv)};
}

}  // namespace orchmllm::bench
