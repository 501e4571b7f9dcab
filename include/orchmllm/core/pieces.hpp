#pragma once
/// @file pieces.hpp
/// Pieces of segmented items: a layout cut at segment boundaries, as a layout of its own.
///
/// An item of S segments (core/batch_layout.hpp) may be cut into contiguous runs of segments,
/// its *pieces*, which can then be encoded on different ranks with exactly the same result
/// (the encoder attends within a segment only). A `piece_layout` holds such a cut of a whole
/// layout: for every piece its item (the parent), its segment range [first, last) in that item
/// and the offset of its first row in the item's sequence, and the derived `layout()` whose
/// items are the pieces. That derived layout is an ordinary `batch_layout`, so the balancers,
/// mappers, plans and routes apply to pieces unchanged:
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
/// Construction validates the cut and throws `invalid_argument_error` naming the value:
/// piece offsets of the wrong size, not starting at 0 or not ending at the number of pieces, an
/// item with no piece, a first piece not starting at segment 0, first segments not strictly
/// increasing within an item or not below the item's segment count. O(n + d + Σ S_g) time and
/// memory; accessors O(1). Immutable, deterministic, safe to share between threads.

#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm {

namespace detail {
#if defined(__SIZEOF_INT128__)
/// 128-bit integer for products of two 64-bit counts (`__extension__`: no -Wpedantic warning).
__extension__ typedef __int128 int128_t;
#endif

/// ⌊b · num / den⌋ for 0 ≤ num ≤ den, den > 0, b ≥ 0, without overflow.
inline std::int64_t scaled_share(std::int64_t b, std::int64_t num, std::int64_t den) noexcept {
#if defined(__SIZEOF_INT128__)
  return static_cast<std::int64_t>(static_cast<int128_t>(b) * num / den);
#else
  // (q·den + r)·num / den = q·num + r·num/den, r < den; r·num may still overflow for huge
  // values, so the remainder term goes through long double (exact below 2^64).
  const std::int64_t q = b / den, r = b % den;
  return q * num + static_cast<std::int64_t>(static_cast<long double>(r) * num / den);
#endif
}
}  // namespace detail

/// A cut of every item of a layout into pieces (see the file comment).
class piece_layout {
 public:
  /// The empty cut of the empty layout.
  piece_layout() = default;

  /// Cuts `items`: the pieces of item g are [piece_offsets[g], piece_offsets[g + 1]) (n + 1
  /// CSR offsets), and piece p starts at segment `first_segments[p]` of its item and ends where
  /// the next piece of that item starts (or at its last segment). Throws as the file comment
  /// says.
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
  /// The pieces as a layout of their own (see the file comment).
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
      std::span<const std::int64_t> per_segment) const {
    ORCHMLLM_REQUIRE(static_cast<std::int64_t>(per_segment.size()) == items_.total_segments(),
                     invalid_argument_error, per_segment.size(), " per-segment values given for ",
                     items_.total_segments(), " segments");
    std::vector<std::int64_t> out(first_.size());
    std::size_t base = 0;  // the item's first segment in per_segment
    for (std::int64_t g = 0; g < items_.num_items(); ++g) {
      for (std::int64_t p = first_piece(g); p < first_piece(g + 1); ++p) {
        std::int64_t sum = 0;
        for (std::int64_t s = first_segment(p); s < last_segment(p); ++s) {
          const std::int64_t v = per_segment[base + static_cast<std::size_t>(s)];
          ORCHMLLM_REQUIRE(v >= 0, invalid_argument_error, "segment ", s, " of item ", g,
                           " has the negative value ", v);
          ORCHMLLM_REQUIRE(sum <= std::numeric_limits<std::int64_t>::max() - v,
                           invalid_argument_error, "the sum over piece ", p,
                           " overflows at segment ", s, " of item ", g);
          sum += v;
        }
        out[static_cast<std::size_t>(p)] = sum;
      }
      base += static_cast<std::size_t>(items_.num_segments(g));
    }
    return out;
  }

  friend bool operator==(const piece_layout& a, const piece_layout& b) {
    return a.items_ == b.items_ && a.piece_offsets_ == b.piece_offsets_ && a.first_ == b.first_;
  }

 private:
  void validate() const {
    const auto n = static_cast<std::size_t>(items_.num_items());
    ORCHMLLM_REQUIRE(piece_offsets_.size() == n + 1, invalid_argument_error, "piece offsets have ",
                     piece_offsets_.size(), " entries, expected ", n + 1,
                     " (one per item, plus one)");
    ORCHMLLM_REQUIRE(piece_offsets_.front() == 0, invalid_argument_error, "piece_offsets[0] is ",
                     piece_offsets_.front(), ", must be 0");
    ORCHMLLM_REQUIRE(piece_offsets_.back() == static_cast<std::int64_t>(first_.size()),
                     invalid_argument_error, "piece offsets end at ", piece_offsets_.back(),
                     " but ", first_.size(), " pieces were given");
    for (std::size_t g = 0; g < n; ++g) {
      const std::int64_t a = piece_offsets_[g], b = piece_offsets_[g + 1];
      ORCHMLLM_REQUIRE(b > a, invalid_argument_error, "item ", g, " has ", b - a,
                       " pieces, must have at least 1");
      const std::int64_t s = items_.num_segments(static_cast<std::int64_t>(g));
      ORCHMLLM_REQUIRE(first_[static_cast<std::size_t>(a)] == 0, invalid_argument_error,
                       "the first piece of item ", g, " starts at segment ",
                       first_[static_cast<std::size_t>(a)], ", must start at 0");
      for (std::int64_t p = a + 1; p < b; ++p) {
        const std::int64_t f = first_[static_cast<std::size_t>(p)];
        const std::int64_t prev = first_[static_cast<std::size_t>(p - 1)];
        ORCHMLLM_REQUIRE(f > prev && f < s, invalid_argument_error, "piece ", p - a, " of item ", g,
                         " starts at segment ", f, ", must be in (", prev, ", ", s,
                         ") (pieces are non-empty runs of the item's ", s, " segments)");
      }
    }
  }

  void build() {
    const std::int64_t n = items_.num_items();
    const auto m = static_cast<std::size_t>(num_pieces());
    item_of_.resize(m);
    row_offset_.resize(m);
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(items_.num_ranks()) + 1);
    for (rank_t r = 0; r <= items_.num_ranks(); ++r)
      offsets[static_cast<std::size_t>(r)] =
          piece_offsets_[static_cast<std::size_t>(items_.offset(r))];
    std::vector<std::int64_t> lengths(m), bytes, parents, seg_offsets, seg_lengths;
    if (items_.has_bytes()) bytes.resize(m);
    if (items_.has_parents()) parents.resize(m);
    if (items_.has_segments()) {
      seg_offsets.assign(m + 1, 0);
      seg_lengths.reserve(static_cast<std::size_t>(items_.total_segments()));
    }
    for (std::int64_t g = 0; g < n; ++g) {
      const auto segs = items_.segments(g);
      const std::int64_t len = items_.length(g);
      const auto s_count = static_cast<std::int64_t>(segs.size());
      std::int64_t row = 0;
      for (std::int64_t p = first_piece(g); p < first_piece(g + 1); ++p) {
        const auto i = static_cast<std::size_t>(p);
        item_of_[i] = g;
        const std::int64_t a = first_[i];
        const std::int64_t b = p + 1 < first_piece(g + 1) ? first_[i + 1] : s_count;
        std::int64_t piece_len = 0;
        for (std::int64_t s = a; s < b; ++s) piece_len += segs[static_cast<std::size_t>(s)];
        row_offset_[i] = row;
        lengths[i] = piece_len;
        if (!bytes.empty()) {
          const std::int64_t total = items_.bytes(g);
          bytes[i] = len > 0 ? detail::scaled_share(total, row + piece_len, len) -
                                   detail::scaled_share(total, row, len)
                             : detail::scaled_share(total, b, s_count) -
                                   detail::scaled_share(total, a, s_count);
        }
        if (!parents.empty()) parents[i] = items_.parent(g);
        if (!seg_offsets.empty()) {
          seg_lengths.insert(seg_lengths.end(), segs.begin() + a, segs.begin() + b);
          seg_offsets[i + 1] = static_cast<std::int64_t>(seg_lengths.size());
        }
        row += piece_len;
      }
    }
    pieces_ = batch_layout(std::move(offsets), std::move(lengths), std::move(bytes),
                           std::move(parents), std::move(seg_offsets), std::move(seg_lengths));
  }

  batch_layout items_;
  std::vector<std::int64_t> piece_offsets_{0};
  std::vector<std::int64_t> first_;
  std::vector<std::int64_t> item_of_;
  std::vector<std::int64_t> row_offset_;
  batch_layout pieces_;
};

}  // namespace orchmllm
