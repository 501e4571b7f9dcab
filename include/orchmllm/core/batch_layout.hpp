#pragma once
/// @file batch_layout.hpp
/// The global view of one training stage: which items every data-parallel rank holds. See
/// docs/design.md, "Core nouns".

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
/// Segments. An item may consist of S ≥ 1 *segments* that its encoder processes independently
/// (a video's temporal patch groups, an audio clip's 30 s windows; docs/algorithms.md):
/// its cost under a cost model is the sum of its segments' costs (`item_cost`), and a balancer
/// that may split items (balance/split.hpp) cuts it only at segment boundaries. Segments are
/// stored CSR-style: `segment_offsets` (n + 1 entries, `segment_offsets[g + 1] −
/// segment_offsets[g]` = S_g ≥ 1) into `segment_lengths`, whose entries for item g sum to
/// `length(g)`. Zero cost when unused: a layout given no segments, or segments that are all
/// single (S = 1 for every item), stores none (the two vectors stay empty, so such a layout is
/// `==` to the same layout built without segments and gives bit-identical plans), and
/// `segments(g)` is then the one-element view of `length(g)`.
///
/// Construction validates everything and throws `invalid_argument_error` naming the offending
/// value: offsets not starting at 0, decreasing or not ending at n, sizes that do not match,
/// negative lengths or bytes, negative parents other than `no_parent`, and totals (Σ lengths,
/// Σ bytes) that do not fit in 64 bits, so `total_length`/`total_bytes` never overflow; with
/// segments: segment offsets of the wrong size, not starting at 0 or not ending at the number
/// of segment lengths, an item with zero segments, a negative segment length, and an item whose
/// segment lengths do not sum to its length. Parent ids are not checked against the parent
/// layout (this layout does not know it). Construction is O(n + d + Σ S_g); accessors are O(1)
/// except `rank_of`, O(log d); accessors taking `r` or `g` do not check bounds (except
/// `rank_of`). Immutable after construction, so safe to share between threads.
class batch_layout {
 public:
  /// Parent index of an item that has none.
  static constexpr std::int64_t no_parent = -1;

  /// An empty layout with zero ranks.
  batch_layout() : offsets_{0} {}

  /// From flat arrays. `offsets` has d + 1 entries, starts at 0, is non-decreasing and ends at
  /// `lengths.size()`. `bytes` and `parents` are either empty or have one entry per item.
  /// `segment_offsets` and `segment_lengths` are either both empty (no segments) or the items'
  /// segments in CSR form (see the class comment); all-single segments are dropped.
  batch_layout(std::vector<std::int64_t> offsets, std::vector<std::int64_t> lengths,
               std::vector<std::int64_t> bytes = {}, std::vector<std::int64_t> parents = {},
               std::vector<std::int64_t> segment_offsets = {},
               std::vector<std::int64_t> segment_lengths = {})
      : offsets_(std::move(offsets)),
        lengths_(std::move(lengths)),
        bytes_(std::move(bytes)),
        parents_(std::move(parents)),
        segment_offsets_(std::move(segment_offsets)),
        segment_lengths_(std::move(segment_lengths)) {
    validate();
    if (segment_lengths_.size() == lengths_.size()) {  // every item has one segment: store none
      segment_offsets_.clear();
      segment_lengths_.clear();
    }
  }

  /// This layout with the given segments (CSR form, see the class comment): ranks, lengths,
  /// bytes and parents unchanged. O(n + d + Σ S_g). Throws `invalid_argument_error` as the
  /// constructor.
  [[nodiscard]] batch_layout with_segments(std::vector<std::int64_t> segment_offsets,
                                           std::vector<std::int64_t> segment_lengths) const {
    return batch_layout(offsets_, lengths_, bytes_, parents_, std::move(segment_offsets),
                        std::move(segment_lengths));
  }

  /// This layout with item g made of `counts[g]` equal segments of length(g) / counts[g] each
  /// (a video of T temporal groups of h·w patches: counts = T, length = T·h·w). O(n + d + Σ S_g).
  /// Throws `invalid_argument_error` when `counts` has not one entry per item, a count is below
  /// 1, or a count does not divide its item's length.
  [[nodiscard]] batch_layout with_equal_segments(std::span<const std::int64_t> counts) const;

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

  /// Whether some item has two or more segments (a layout whose items are all single stores
  /// no segments). O(1).
  [[nodiscard]] bool has_segments() const noexcept { return !segment_offsets_.empty(); }
  /// S_g, the number of segments of item `g` (1 for every item of a layout without segments).
  [[nodiscard]] std::int64_t num_segments(std::int64_t g) const noexcept {
    if (segment_offsets_.empty()) return 1;
    const auto i = static_cast<std::size_t>(g);
    return segment_offsets_[i + 1] - segment_offsets_[i];
  }
  /// The segment lengths of item `g`, in order; they sum to `length(g)`. Without segments the
  /// one-element view of `length(g)`. O(1), no copy.
  [[nodiscard]] std::span<const std::int64_t> segments(std::int64_t g) const noexcept {
    if (segment_offsets_.empty())
      return std::span<const std::int64_t>(lengths_).subspan(static_cast<std::size_t>(g), 1);
    const auto i = static_cast<std::size_t>(g);
    return std::span<const std::int64_t>(segment_lengths_)
        .subspan(static_cast<std::size_t>(segment_offsets_[i]),
                 static_cast<std::size_t>(segment_offsets_[i + 1] - segment_offsets_[i]));
  }
  /// Σ S_g over all items (n without segments). O(1).
  [[nodiscard]] std::int64_t total_segments() const noexcept {
    return segment_offsets_.empty() ? num_items()
                                    : static_cast<std::int64_t>(segment_lengths_.size());
  }
  /// CSR offsets of the segments (n + 1 entries; empty without segments).
  [[nodiscard]] std::span<const std::int64_t> segment_offsets() const noexcept {
    return segment_offsets_;
  }
  /// All segment lengths, item by item (empty without segments).
  [[nodiscard]] std::span<const std::int64_t> segment_lengths() const noexcept {
    return segment_lengths_;
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
  std::vector<std::int64_t> segment_offsets_;  // empty, or n + 1 CSR offsets into ...
  std::vector<std::int64_t> segment_lengths_;  // ... the segment lengths (Σ S_g > n entries)
};

/// An item's cost under a cost model: cost(length(g)) without segments, else the sum of its
/// segments' costs in segment order (each segment is an independent sequence of its encoder).
/// `Cost` is the model's computation type (`cost_type_t`); `on_segment(s, c)` is called with
/// every segment's cost (use it to check them) and may be omitted. O(S_g), deterministic
/// (fixed summation order); throws what the model throws.
template <class Cost, class C, class OnSegment>
Cost item_cost(const batch_layout& layout, std::int64_t g, const C& cost, OnSegment on_segment) {
  if (!layout.has_segments()) {
    const auto c = static_cast<Cost>(cost(layout.length(g)));
    on_segment(std::int64_t{0}, c);
    return c;
  }
  Cost sum{};
  std::int64_t s = 0;
  for (const auto l : layout.segments(g)) {
    const auto c = static_cast<Cost>(cost(l));
    on_segment(s++, c);
    sum += c;
  }
  return sum;
}
/// As above, without a per-segment callback.
template <class Cost, class C>
Cost item_cost(const batch_layout& layout, std::int64_t g, const C& cost) {
  return item_cost<Cost>(layout, g, cost, [](std::int64_t, const Cost&) {});
}

}  // namespace orchmllm

// The definitions of batch_layout's members that are declared only above, and their helper.
#include "orchmllm/detail/core/batch_layout.inl"  // IWYU pragma: export
