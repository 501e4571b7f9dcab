#pragma once
/// @file pieces.hpp
/// Pieces of segmented items: `piece_layout`, a cut of every item of a layout into contiguous
/// runs of its segments, with the pieces as an ordinary `batch_layout` of their own, so that
/// balancers, mappers, plans and routes apply to pieces unchanged. The splitting balancer
/// (balance/split.hpp) and the orchestrator's split encoder stages (`encoder_stage::split`)
/// build on it. See docs/algorithms.md, "Splitting segmented items".

#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// A cut of every item of a layout into pieces.
///
/// An item of S segments (core/batch_layout.hpp) may be cut into contiguous runs of segments,
/// its *pieces*, which can then be encoded on different ranks with exactly the same result
/// (the encoder attends within a segment only). A `piece_layout` holds such a cut of a whole
/// layout: for every piece its item (the parent), its segment range [first, last) in that item
/// and the offset of its first row in the item's sequence, and the derived `layout()` whose
/// items are the pieces. That derived layout is an ordinary `batch_layout`:
///   - same ranks; the pieces of item g sit on g's rank, in segment order, and pieces follow
///     their items' global-id order, so piece ids are (item id, first segment) ascending and
///     the pieces of item g are the contiguous ids [first_piece(g), first_piece(g + 1));
///   - length = the sum of the piece's segment lengths; segments = the item's segments in
///     [first, last);
///   - bytes (when the items have explicit bytes) apportioned by length: the piece whose rows
///     are [a, b) of the item's length l gets ⌊B·b/l⌋ − ⌊B·a/l⌋ of its B bytes (by segment
///     count when l = 0), so the pieces' bytes sum to B exactly and equal segments of rows of
///     equal width get their exact bytes;
///   - parent = the item's parent (the sample whose sequence the piece's outputs belong to),
///     so a piece's output rows go to position `row_offset(p)` of its item's rows in the
///     parent sample (what the orchestrator's composed route does, `encoder_stage::split`).
/// Since the pieces of an item are its rows in order, on its rank, a rank's payload laid out
/// item by item is the same bytes laid out piece by piece (exactly when an item's bytes are
/// its length × a row width, where the apportioned bytes are whole rows): a route over
/// `layout()` moves the pieces' input rows from the items' buffers as they are. With per-piece
/// output sizes from `piece_sums` (per-segment LLM tokens), the pieces can stand for the
/// stage's sub-items in the orchestrator's routes (`encoder_stage::split`,
/// orchestrator/stages.hpp; `encoder_routes::pieces`): consecutive ids of one
/// parent in segment order, so their outputs land in order in the parent's sequence.
/// A cut where every item is one piece (`whole`) has `layout() == items`.
///
/// O(n + d + Σ S_g) time and memory to build; accessors O(1). Immutable, deterministic, safe
/// to share between threads.
class piece_layout {
 public:
  /// The empty cut of the empty layout.
  piece_layout() = default;

  /// Cuts `items`: the pieces of item g are [piece_offsets[g], piece_offsets[g + 1]) (n + 1
  /// CSR offsets), and piece p starts at segment `first_segments[p]` of its item and ends where
  /// the next piece of that item starts (or at its last segment). O(n + d + Σ S_g).
  /// Throws `invalid_argument_error` naming the value: piece offsets of the wrong size, not
  /// starting at 0 or not ending at the number of pieces, an item with no piece, a first piece
  /// not starting at segment 0, first segments not strictly increasing within an item or not
  /// below the item's segment count.
  piece_layout(batch_layout items, std::vector<std::int64_t> piece_offsets,
               std::vector<std::int64_t> first_segments)
      : items_(std::move(items)),
        piece_offsets_(std::move(piece_offsets)),
        first_(std::move(first_segments)) {
    validate();
    build();
  }

  /// Every item one piece: `layout() == items`. O(n + d + Σ S_g) (copies, no validation).
  static piece_layout whole(batch_layout items) {
    const auto n = static_cast<std::size_t>(items.num_items());
    piece_layout p;
    p.piece_offsets_.resize(n + 1);
    p.item_of_.resize(n);
    for (std::size_t g = 0; g < n; ++g)
      p.piece_offsets_[g] = p.item_of_[g] = static_cast<std::int64_t>(g);
    p.piece_offsets_[n] = static_cast<std::int64_t>(n);
    p.first_.assign(n, 0);
    p.row_offset_.assign(n, 0);
    p.pieces_ = items;
    p.items_ = std::move(items);
    return p;
  }

  /// The layout that was cut.
  [[nodiscard]] const batch_layout& items() const noexcept { return items_; }
  /// The pieces as a layout of their own (see the class comment).
  [[nodiscard]] const batch_layout& layout() const noexcept { return pieces_; }
  /// Number of pieces.
  [[nodiscard]] std::int64_t num_pieces() const noexcept {
    return static_cast<std::int64_t>(first_.size());
  }
  /// Whether every item is one piece.
  [[nodiscard]] bool is_whole() const noexcept { return num_pieces() == items_.num_items(); }
  /// The item (global id in `items()`) that piece p is cut from.
  [[nodiscard]] std::int64_t item_of(std::int64_t p) const noexcept {
    return item_of_[static_cast<std::size_t>(p)];
  }
  /// First segment of piece p in its item.
  [[nodiscard]] std::int64_t first_segment(std::int64_t p) const noexcept {
    return first_[static_cast<std::size_t>(p)];
  }
  /// One past the last segment of piece p in its item.
  [[nodiscard]] std::int64_t last_segment(std::int64_t p) const noexcept {
    const std::int64_t g = item_of(p);
    return p + 1 < piece_offsets_[static_cast<std::size_t>(g) + 1] ? first_segment(p + 1)
                                                                   : items_.num_segments(g);
  }
  /// Rows of its item before piece p: the sum of the item's segment lengths before
  /// `first_segment(p)` (where its outputs go in the item's sequence).
  [[nodiscard]] std::int64_t row_offset(std::int64_t p) const noexcept {
    return row_offset_[static_cast<std::size_t>(p)];
  }
  /// First piece of item g (g in [0, n]; first_piece(n) == num_pieces()).
  [[nodiscard]] std::int64_t first_piece(std::int64_t g) const noexcept {
    return piece_offsets_[static_cast<std::size_t>(g)];
  }
  /// Number of pieces of item g.
  [[nodiscard]] std::int64_t num_pieces_of(std::int64_t g) const noexcept {
    return first_piece(g + 1) - first_piece(g);
  }
  /// CSR offsets of the pieces per item (n + 1 entries).
  [[nodiscard]] std::span<const std::int64_t> piece_offsets() const noexcept {
    return piece_offsets_;
  }
  /// First segment of every piece.
  [[nodiscard]] std::span<const std::int64_t> first_segments() const noexcept { return first_; }

  /// Per-piece sums of a per-segment figure: `per_segment` holds one value per segment of
  /// `items()`, item by item in segment order (`items().total_segments()` values; one per item
  /// without segments), and the result one per piece, the sum over its segments. What turns the
  /// LLM tokens (output rows) or input rows of every segment into those of every piece, the
  /// per-item sizes a route over `layout()` is built from. O(Σ S_g), deterministic. Throws
  /// `invalid_argument_error` for the wrong number of values, a negative value or a sum above
  /// 2^63 − 1.
  [[nodiscard]] std::vector<std::int64_t> piece_sums(
      std::span<const std::int64_t> per_segment) const;

  friend bool operator==(const piece_layout& a, const piece_layout& b) {
    return a.items_ == b.items_ && a.piece_offsets_ == b.piece_offsets_ && a.first_ == b.first_;
  }

 private:
  // Throws as the constructor says.
  void validate() const;
  // Derives item_of_, row_offset_ and pieces_ from the validated cut.
  void build();

  batch_layout items_;
  std::vector<std::int64_t> piece_offsets_{0};
  std::vector<std::int64_t> first_;
  std::vector<std::int64_t> item_of_;
  std::vector<std::int64_t> row_offset_;
  batch_layout pieces_;
};

}  // namespace orchmllm

// The definitions of piece_layout's members that are declared only above.
#include "orchmllm/detail/core/pieces.inl"  // IWYU pragma: export
