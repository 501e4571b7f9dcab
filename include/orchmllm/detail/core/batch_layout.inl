#pragma once
// The out-of-class definitions of core/batch_layout.hpp, included by it at its end: the equal
// segment arrays of with_equal_segments, from_ranks and the layout's checks. In a unit that uses
// the compiled library (orchmllm/config.hpp) the members are declarations only: the library
// defines them once.

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace orchmllm {

namespace detail {

/// The segment arrays of `batch_layout::with_equal_segments`: item g cut into counts[g] equal
/// segments of lengths[g] / counts[g] (segment offsets, n + 1 entries; segment lengths). Checks
/// and throws as with_equal_segments, item by item. O(n + Σ counts), sized once.
inline std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> equal_segments(
    std::span<const std::int64_t> lengths, std::span<const std::int64_t> counts) {
  ORCHMLLM_REQUIRE(counts.size() == lengths.size(), invalid_argument_error, counts.size(),
                   " segment counts given for ", lengths.size(), " items");
  std::vector<std::int64_t> seg_offsets(counts.size() + 1, 0);
  for (std::size_t g = 0; g < counts.size(); ++g) {
    const std::int64_t s = counts[g];
    ORCHMLLM_REQUIRE(s >= 1, invalid_argument_error, "item ", g, " has ", s,
                     " segments, must have at least 1");
    ORCHMLLM_REQUIRE(lengths[g] % s == 0, invalid_argument_error, "item ", g, " of length ",
                     lengths[g], " cannot be cut into ", s, " equal segments");
    ORCHMLLM_REQUIRE(s <= INT64_MAX - seg_offsets[g], invalid_argument_error,
                     "segment counts overflow at item ", g);
    seg_offsets[g + 1] = seg_offsets[g] + s;
  }
  std::vector<std::int64_t> seg_lengths(static_cast<std::size_t>(seg_offsets.back()));
  for (std::size_t g = 0; g < counts.size(); ++g)
    std::fill(seg_lengths.begin() + seg_offsets[g], seg_lengths.begin() + seg_offsets[g + 1],
              lengths[g] / counts[g]);
  return {std::move(seg_offsets), std::move(seg_lengths)};
}

}  // namespace detail

// Out of the class so that a unit using the compiled library (orchmllm/config.hpp) does not
// compile them: they are defined there once.
#if !ORCHMLLM_USE_COMPILED
ORCHMLLM_FUNC batch_layout
batch_layout::from_ranks(const std::vector<std::vector<std::int64_t>>& lengths,
                         const std::vector<std::vector<std::int64_t>>& bytes) {
  ORCHMLLM_REQUIRE(bytes.empty() || bytes.size() == lengths.size(), invalid_argument_error,
                   "bytes given for ", bytes.size(), " ranks but lengths for ", lengths.size());
  std::vector<std::int64_t> offsets{0};
  offsets.reserve(lengths.size() + 1);
  std::vector<std::int64_t> flat_lengths;
  std::vector<std::int64_t> flat_bytes;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    if (!bytes.empty()) {
      ORCHMLLM_REQUIRE(bytes[r].size() == lengths[r].size(), invalid_argument_error, "rank ", r,
                       " has ", lengths[r].size(), " lengths but ", bytes[r].size(), " byte sizes");
      flat_bytes.insert(flat_bytes.end(), bytes[r].begin(), bytes[r].end());
    }
    flat_lengths.insert(flat_lengths.end(), lengths[r].begin(), lengths[r].end());
    offsets.push_back(static_cast<std::int64_t>(flat_lengths.size()));
  }
  return batch_layout(std::move(offsets), std::move(flat_lengths), std::move(flat_bytes));
}

ORCHMLLM_FUNC batch_layout
batch_layout::with_equal_segments(std::span<const std::int64_t> counts) const {
  auto [seg_offsets, seg_lengths] = detail::equal_segments(lengths_, counts);
  return with_segments(std::move(seg_offsets), std::move(seg_lengths));
}

ORCHMLLM_FUNC void batch_layout::validate() const {
  ORCHMLLM_REQUIRE(!offsets_.empty(), invalid_argument_error,
                   "offsets must have d + 1 entries, got none");
  ORCHMLLM_REQUIRE(offsets_.size() - 1 <= static_cast<std::size_t>(INT32_MAX),
                   invalid_argument_error, "rank count ", offsets_.size() - 1,
                   " exceeds the limit ", INT32_MAX);
  ORCHMLLM_REQUIRE(offsets_.front() == 0, invalid_argument_error, "offsets[0] is ",
                   offsets_.front(), ", must be 0");
  for (std::size_t r = 1; r < offsets_.size(); ++r) {
    ORCHMLLM_REQUIRE(offsets_[r] >= offsets_[r - 1], invalid_argument_error, "offsets[", r,
                     "] = ", offsets_[r], " is below offsets[", r - 1, "] = ", offsets_[r - 1]);
  }
  ORCHMLLM_REQUIRE(offsets_.back() == static_cast<std::int64_t>(lengths_.size()),
                   invalid_argument_error, "offsets end at ", offsets_.back(), " but ",
                   lengths_.size(), " lengths were given");
  ORCHMLLM_REQUIRE(bytes_.empty() || bytes_.size() == lengths_.size(), invalid_argument_error,
                   bytes_.size(), " byte sizes given for ", lengths_.size(), " items");
  ORCHMLLM_REQUIRE(parents_.empty() || parents_.size() == lengths_.size(), invalid_argument_error,
                   parents_.size(), " parent ids given for ", lengths_.size(), " items");
  constexpr std::int64_t max_total = INT64_MAX;
  std::int64_t total = 0;
  for (std::size_t g = 0; g < lengths_.size(); ++g) {
    ORCHMLLM_REQUIRE(lengths_[g] >= 0, invalid_argument_error, "item ", g, " has negative length ",
                     lengths_[g]);
    ORCHMLLM_REQUIRE(lengths_[g] <= max_total - total, invalid_argument_error,
                     "total length overflows at item ", g, " (length ", lengths_[g],
                     ", sum so far ", total, ", limit ", max_total, ")");
    total += lengths_[g];
  }
  total = 0;
  for (std::size_t g = 0; g < bytes_.size(); ++g) {
    ORCHMLLM_REQUIRE(bytes_[g] >= 0, invalid_argument_error, "item ", g, " has negative byte size ",
                     bytes_[g]);
    ORCHMLLM_REQUIRE(bytes_[g] <= max_total - total, invalid_argument_error,
                     "total bytes overflow at item ", g, " (bytes ", bytes_[g], ", sum so far ",
                     total, ", limit ", max_total, ")");
    total += bytes_[g];
  }
  for (std::size_t g = 0; g < parents_.size(); ++g) {
    ORCHMLLM_REQUIRE(parents_[g] >= no_parent, invalid_argument_error, "item ", g,
                     " has parent id ", parents_[g], " (must be >= 0 or no_parent)");
  }
  if (segment_offsets_.empty()) {
    ORCHMLLM_REQUIRE(segment_lengths_.empty(), invalid_argument_error, segment_lengths_.size(),
                     " segment lengths given without segment offsets");
    return;
  }
  ORCHMLLM_REQUIRE(segment_offsets_.size() == lengths_.size() + 1, invalid_argument_error,
                   "segment offsets have ", segment_offsets_.size(), " entries, expected ",
                   lengths_.size() + 1, " (one per item, plus one)");
  ORCHMLLM_REQUIRE(segment_offsets_.front() == 0, invalid_argument_error, "segment_offsets[0] is ",
                   segment_offsets_.front(), ", must be 0");
  ORCHMLLM_REQUIRE(segment_offsets_.back() == static_cast<std::int64_t>(segment_lengths_.size()),
                   invalid_argument_error, "segment offsets end at ", segment_offsets_.back(),
                   " but ", segment_lengths_.size(), " segment lengths were given");
  for (std::size_t g = 0; g < lengths_.size(); ++g) {
    const std::int64_t first = segment_offsets_[g];
    const std::int64_t last = segment_offsets_[g + 1];
    ORCHMLLM_REQUIRE(last > first, invalid_argument_error, "item ", g, " has ", last - first,
                     " segments (segment offsets ", first, ", ", last, "), must have at least 1");
    // Each segment is >= 0 and the item's length fits in 64 bits, so the running sum stays
    // at or below length(g) until it is compared, or exceeds it by one segment: no overflow.
    std::int64_t sum = 0;
    for (std::int64_t s = first; s < last; ++s) {
      const std::int64_t l = segment_lengths_[static_cast<std::size_t>(s)];
      ORCHMLLM_REQUIRE(l >= 0, invalid_argument_error, "segment ", s - first, " of item ", g,
                       " has negative length ", l);
      ORCHMLLM_REQUIRE(l <= lengths_[g] - sum, invalid_argument_error, "segments of item ", g,
                       " exceed its length ", lengths_[g]);
      sum += l;
    }
    ORCHMLLM_REQUIRE(sum == lengths_[g], invalid_argument_error, "segments of item ", g, " sum to ",
                     sum, ", but its length is ", lengths_[g]);
  }
}
#endif

}  // namespace orchmllm
