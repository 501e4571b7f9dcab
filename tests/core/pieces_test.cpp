// Tests for include/orchmllm/core/pieces.hpp: the derived layout of a cut (ranks, lengths,
// segments, apportioned bytes, parents, row offsets), `whole`, and every validation error.

#include "orchmllm/core/pieces.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::batch_layout;
using orchmllm::piece_layout;
using orchmllm::rank_t;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;

vec as_vec(std::span<const std::int64_t> s) { return vec(s.begin(), s.end()); }

}  // namespace

TEST_CASE("piece_layout: hand example") {
  // rank 0: item 0 = segments {2, 4, 1} (7 rows, 70 bytes, parent 5), item 1 = {3} (parent 5);
  // rank 1: item 2 = {2, 2, 2, 2} (8 rows, 10 bytes, parent 6).
  const batch_layout items({0, 2, 3}, {7, 3, 8}, {70, 30, 10}, {5, 5, 6}, {0, 3, 4, 8},
                           {2, 4, 1, 3, 2, 2, 2, 2});
  // item 0 -> [0, 1) [1, 3); item 1 whole; item 2 -> [0, 1) [1, 3) [3, 4).
  const piece_layout p(items, {0, 2, 3, 6}, {0, 1, 0, 0, 1, 3});
  CHECK(p.num_pieces() == 6);
  CHECK_FALSE(p.is_whole());
  const auto& l = p.layout();
  CHECK(as_vec(l.offsets()) == vec{0, 3, 6});
  CHECK(as_vec(l.lengths()) == vec{2, 5, 3, 2, 4, 2});
  CHECK(as_vec(l.parents()) == vec{5, 5, 5, 6, 6, 6});
  // 70 bytes over 7 rows: 20 + 50; 10 bytes over 8 rows: ⌊10·2/8⌋ = 2, ⌊10·6/8⌋ − 2 = 5, 3.
  CHECK(as_vec(l.explicit_bytes()) == vec{20, 50, 30, 2, 5, 3});
  CHECK(as_vec(l.segment_offsets()) == vec{0, 1, 3, 4, 5, 7, 8});
  CHECK(as_vec(l.segment_lengths()) == vec{2, 4, 1, 3, 2, 2, 2, 2});
  CHECK(p.item_of(0) == 0);
  CHECK(p.item_of(2) == 1);
  CHECK(p.item_of(5) == 2);
  CHECK(p.first_segment(4) == 1);
  CHECK(p.last_segment(4) == 3);
  CHECK(p.last_segment(5) == 4);
  CHECK(p.last_segment(1) == 3);
  CHECK(p.row_offset(1) == 2);
  CHECK(p.row_offset(4) == 2);
  CHECK(p.row_offset(5) == 6);
  CHECK(p.first_piece(2) == 3);
  CHECK(p.num_pieces_of(2) == 3);
  // Per-segment LLM tokens (e.g. h·w / 4 per temporal group) -> per-piece output rows.
  const vec tokens{1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(p.piece_sums(tokens) == vec{1, 5, 4, 5, 13, 8});
  CHECK(p.piece_sums(items.segment_lengths()) == as_vec(l.lengths()));
  expect_invalid(
      [&] {
        (void)p.piece_sums(vec{1, 2});
      },
      {"2 per-segment values given for 8 segments"});
  const vec huge{0, INT64_MAX, 1, 0, 0, 0, 0, 0};
  expect_invalid([&] { (void)p.piece_sums(huge); }, {"sum over piece 1 overflows"});
  const vec negative{0, 0, 0, 0, 0, -3, 0, 0};
  expect_invalid([&] { (void)p.piece_sums(negative); },
                 {"segment 1 of item 2 has the negative value -3"});
}

TEST_CASE("piece_layout: whole is the layout itself") {
  const batch_layout items({0, 1, 3}, {4, 6, 0}, {}, {}, {0, 2, 3, 4}, {1, 3, 6, 0});
  const auto w = piece_layout::whole(items);
  CHECK(w.is_whole());
  CHECK(w.layout() == items);
  const batch_layout plain({0, 0, 2}, {5, 9}, {1, 2}, {0, 0});
  CHECK(piece_layout::whole(plain).layout() == plain);
  CHECK(piece_layout::whole(batch_layout{}).num_pieces() == 0);
}

TEST_CASE("piece_layout: random cuts reassemble their items exactly, in order") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 5));
    const auto n = uniform(rng, 0, 12);
    const auto items = orchmllm::test::random_segmented_layout(rng, d, n, 6, 9, true);
    vec piece_off{0}, first;
    for (std::int64_t g = 0; g < n; ++g) {
      first.push_back(0);
      for (std::int64_t k = 1; k < items.num_segments(g); ++k)
        if (uniform(rng, 0, 2) == 0) first.push_back(k);
      piece_off.push_back(static_cast<std::int64_t>(first.size()));
    }
    const piece_layout p(items, piece_off, first);
    const auto& l = p.layout();
    REQUIRE(l.num_ranks() == d);
    for (std::int64_t g = 0; g < n; ++g) {
      vec rebuilt;
      std::int64_t rows = 0, b = 0;
      for (auto q = p.first_piece(g); q < p.first_piece(g + 1); ++q) {
        CHECK(p.item_of(q) == g);
        CHECK(l.rank_of(q) == items.rank_of(g));  // pieces sit on their item's rank
        CHECK(p.row_offset(q) == rows);
        CHECK(static_cast<std::int64_t>(rebuilt.size()) == p.first_segment(q));
        const auto s = l.segments(q);
        CHECK(static_cast<std::int64_t>(s.size()) == p.last_segment(q) - p.first_segment(q));
        rebuilt.insert(rebuilt.end(), s.begin(), s.end());
        rows += l.length(q);
        b += l.bytes(q);
      }
      CHECK(rebuilt == as_vec(items.segments(g)));
      CHECK(rows == items.length(g));
      CHECK(b == items.bytes(g));
    }
  }
}

TEST_CASE("piece_layout: validation errors name the offending value") {
  const batch_layout items({0, 2}, {6, 3}, {}, {}, {0, 3, 4}, {2, 2, 2, 3});
  expect_invalid(
      [&] {
        (void)piece_layout(items, {0, 2}, {0, 1});
      },
      {"piece offsets have 2 entries", "expected 3"});
  expect_invalid(
      [&] {
        (void)piece_layout(items, {1, 2, 3}, {0, 1, 0});
      },
      {"piece_offsets[0] is 1"});
  expect_invalid(
      [&] {
        (void)piece_layout(items, {0, 2, 4}, {0, 1, 0});
      },
      {"piece offsets end at 4", "3 pieces"});
  expect_invalid([&] { (void)piece_layout(items, {0, 0, 1}, {0}); }, {"item 0 has 0 pieces"});
  expect_invalid(
      [&] {
        (void)piece_layout(items, {0, 2, 3}, {1, 2, 0});
      },
      {"first piece of item 0 starts at segment 1"});
  expect_invalid(
      [&] {
        (void)piece_layout(items, {0, 2, 3}, {0, 3, 0});
      },
      {"piece 1 of item 0 starts at segment 3", "(0, 3)"});
  expect_invalid(
      [&] {
        (void)piece_layout(items, {0, 3, 4}, {0, 2, 1, 0});
      },
      {"piece 2 of item 0 starts at segment 1"});
  expect_invalid(
      [&] {
        (void)piece_layout(items, {0, 1, 3}, {0, 0, 1});
      },
      {"piece 1 of item 1 starts at segment 1", "(0, 1)"});
}
