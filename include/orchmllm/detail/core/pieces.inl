#pragma once
// The out-of-class members of `piece_layout`, included by core/pieces.hpp at its end: the
// per-piece sums, the cut's checks and the derivation of the pieces' layout.

#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

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

inline std::vector<std::int64_t> piece_layout::piece_sums(
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
                         invalid_argument_error, "the sum over piece ", p, " overflows at segment ",
                         s, " of item ", g);
        sum += v;
      }
      out[static_cast<std::size_t>(p)] = sum;
    }
    base += static_cast<std::size_t>(items_.num_segments(g));
  }
  return out;
}

inline void piece_layout::validate() const {
  const auto n = static_cast<std::size_t>(items_.num_items());
  ORCHMLLM_REQUIRE(piece_offsets_.size() == n + 1, invalid_argument_error, "piece offsets have ",
                   piece_offsets_.size(), " entries, expected ", n + 1,
                   " (one per item, plus one)");
  ORCHMLLM_REQUIRE(piece_offsets_.front() == 0, invalid_argument_error, "piece_offsets[0] is ",
                   piece_offsets_.front(), ", must be 0");
  ORCHMLLM_REQUIRE(piece_offsets_.back() == static_cast<std::int64_t>(first_.size()),
                   invalid_argument_error, "piece offsets end at ", piece_offsets_.back(), " but ",
                   first_.size(), " pieces were given");
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

inline void piece_layout::build() {
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

}  // namespace orchmllm
