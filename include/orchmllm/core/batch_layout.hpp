#pragma once
/// @file batch_layout.hpp
/// The global view of one training stage: which items every data-parallel rank holds.

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// Rank index. 32 bits: data-parallel groups stay far below 2^31 ranks.
using rank_t = std::int32_t;

/// The batch of one stage as seen after the metadata all-gather: for each of `d` ranks the items
/// it holds, in CSR form.
///
/// Item `slot` of rank `r` has the global id `g = offset(r) + slot`; global ids run over rank 0's
/// items, then rank 1's, and so on. Each item has a length (tokens, frames, patches: whatever the
/// stage's cost model reads), a payload size in bytes (defaults to the length when not given) and,
/// for sub-items such as images of a sample, optionally the global id of its parent in another
/// layout (`no_parent` otherwise).
///
/// All counts are 64-bit. A rank may hold no items; an item may have length 0.
///
/// Construction validates everything and throws `invalid_argument_error` naming the offending
/// value: offsets not starting at 0, decreasing or not ending at n, sizes that do not match,
/// negative lengths or bytes, negative parents other than `no_parent`, and totals (Σ lengths,
/// Σ bytes) that do not fit in 64 bits, so `total_length`/`total_bytes` never overflow. Parent
/// ids are not checked against the parent layout (this layout does not know it). Construction
/// is O(n + d); accessors are O(1) except `rank_of`, O(log d); accessors taking `r` or `g` do not
/// check bounds (except `rank_of`). Immutable after construction, so safe to share between
/// threads.
class batch_layout {
 public:
  /// Parent index of an item that has none.
  static constexpr std::int64_t no_parent = -1;

  /// An empty layout with zero ranks.
  batch_layout() : offsets_{0} {}

  /// From flat arrays. `offsets` has d + 1 entries, starts at 0, is non-decreasing and ends at
  /// `lengths.size()`. `bytes` and `parents` are either empty or have one entry per item.
  batch_layout(std::vector<std::int64_t> offsets, std::vector<std::int64_t> lengths,
               std::vector<std::int64_t> bytes = {}, std::vector<std::int64_t> parents = {})
      : offsets_(std::move(offsets)),
        lengths_(std::move(lengths)),
        bytes_(std::move(bytes)),
        parents_(std::move(parents)) {
    validate();
  }

  /// From per-rank vectors of lengths (and optionally bytes, same shape). O(n + d).
  static batch_layout from_ranks(const std::vector<std::vector<std::int64_t>>& lengths,
                                 const std::vector<std::vector<std::int64_t>>& bytes = {});

  /// Number of ranks d.
  [[nodiscard]] rank_t num_ranks() const noexcept {
    return static_cast<rank_t>(offsets_.size() - 1);
  }
  /// Number of items n over all ranks.
  [[nodiscard]] std::int64_t num_items() const noexcept {
    return static_cast<std::int64_t>(lengths_.size());
  }
  /// Global id of slot 0 of rank `r` (r in [0, d]; offset(d) == n).
  [[nodiscard]] std::int64_t offset(rank_t r) const noexcept {
    return offsets_[static_cast<std::size_t>(r)];
  }
  /// Items held by rank `r`.
  [[nodiscard]] std::int64_t rank_size(rank_t r) const noexcept {
    return offset(r + 1) - offset(r);
  }
  /// Length of item `g`.
  [[nodiscard]] std::int64_t length(std::int64_t g) const noexcept {
    return lengths_[static_cast<std::size_t>(g)];
  }
  /// Payload bytes of item `g` (its length when no byte sizes were given).
  [[nodiscard]] std::int64_t bytes(std::int64_t g) const noexcept {
    return bytes_.empty() ? length(g) : bytes_[static_cast<std::size_t>(g)];
  }
  /// Whether explicit byte sizes were given.
  [[nodiscard]] bool has_bytes() const noexcept { return !bytes_.empty(); }
  /// Parent global id of item `g`, or `no_parent`.
  [[nodiscard]] std::int64_t parent(std::int64_t g) const noexcept {
    return parents_.empty() ? no_parent : parents_[static_cast<std::size_t>(g)];
  }
  /// Whether parent indices were given.
  [[nodiscard]] bool has_parents() const noexcept { return !parents_.empty(); }
  /// The rank holding item `g`. O(log d). Throws `invalid_argument_error` if g is out of range.
  [[nodiscard]] rank_t rank_of(std::int64_t g) const {
    ORCHMLLM_REQUIRE(g >= 0 && g < num_items(), invalid_argument_error, "item id ", g,
                     " outside [0, ", num_items(), ")");
    auto it = std::upper_bound(offsets_.begin(), offsets_.end(), g);
    return static_cast<rank_t>(it - offsets_.begin() - 1);
  }

  /// CSR offsets (d + 1 entries).
  [[nodiscard]] std::span<const std::int64_t> offsets() const noexcept { return offsets_; }
  /// Lengths of all items in global-id order.
  [[nodiscard]] std::span<const std::int64_t> lengths() const noexcept { return lengths_; }
  /// Explicit byte sizes (empty when not given).
  [[nodiscard]] std::span<const std::int64_t> explicit_bytes() const noexcept { return bytes_; }
  /// Payload bytes of all items in global-id order: `bytes(g)` for every g (the explicit byte
  /// sizes, or the lengths when none were given). O(1), no copy.
  [[nodiscard]] std::span<const std::int64_t> item_bytes() const noexcept {
    return bytes_.empty() ? std::span<const std::int64_t>(lengths_) : bytes_;
  }
  /// Parent ids (empty when not given).
  [[nodiscard]] std::span<const std::int64_t> parents() const noexcept { return parents_; }
  /// Lengths of rank r's items.
  [[nodiscard]] std::span<const std::int64_t> rank_lengths(rank_t r) const noexcept {
    return std::span<const std::int64_t>(lengths_).subspan(static_cast<std::size_t>(offset(r)),
                                                           static_cast<std::size_t>(rank_size(r)));
  }

  /// Sum of all lengths. O(n).
  [[nodiscard]] std::int64_t total_length() const noexcept {
    std::int64_t s = 0;
    for (auto l : lengths_) s += l;
    return s;
  }
  /// Sum of all payload bytes. O(n).
  [[nodiscard]] std::int64_t total_bytes() const noexcept {
    if (bytes_.empty()) return total_length();
    std::int64_t s = 0;
    for (auto b : bytes_) s += b;
    return s;
  }

  friend bool operator==(const batch_layout&, const batch_layout&) = default;

 private:
  void validate() const;

  std::vector<std::int64_t> offsets_;
  std::vector<std::int64_t> lengths_;
  std::vector<std::int64_t> bytes_;
  std::vector<std::int64_t> parents_;
};

// Out of the class so that a unit using the compiled library (orchmllm/config.hpp) does not
// compile them: they are defined there once.
#if !ORCHMLLM_USE_COMPILED
ORCHMLLM_FUNC batch_layout batch_layout::from_ranks(
    const std::vector<std::vector<std::int64_t>>& lengths,
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
                       " has ", lengths[r].size(), " lengths but ", bytes[r].size(),
                       " byte sizes");
      flat_bytes.insert(flat_bytes.end(), bytes[r].begin(), bytes[r].end());
    }
    flat_lengths.insert(flat_lengths.end(), lengths[r].begin(), lengths[r].end());
    offsets.push_back(static_cast<std::int64_t>(flat_lengths.size()));
  }
  return batch_layout(std::move(offsets), std::move(flat_lengths), std::move(flat_bytes));
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
    ORCHMLLM_REQUIRE(lengths_[g] >= 0, invalid_argument_error, "item ", g,
                     " has negative length ", lengths_[g]);
    ORCHMLLM_REQUIRE(lengths_[g] <= max_total - total, invalid_argument_error,
                     "total length overflows at item ", g, " (length ", lengths_[g],
                     ", sum so far ", total, ", limit ", max_total, ")");
    total += lengths_[g];
  }
  total = 0;
  for (std::size_t g = 0; g < bytes_.size(); ++g) {
    ORCHMLLM_REQUIRE(bytes_[g] >= 0, invalid_argument_error, "item ", g,
                     " has negative byte size ", bytes_[g]);
    ORCHMLLM_REQUIRE(bytes_[g] <= max_total - total, invalid_argument_error,
                     "total bytes overflow at item ", g, " (bytes ", bytes_[g], ", sum so far ",
                     total, ", limit ", max_total, ")");
    total += bytes_[g];
  }
  for (std::size_t g = 0; g < parents_.size(); ++g) {
    ORCHMLLM_REQUIRE(parents_[g] >= no_parent, invalid_argument_error, "item ", g,
                     " has parent id ", parents_[g], " (must be >= 0 or no_parent)");
  }
}
#endif

}  // namespace orchmllm
