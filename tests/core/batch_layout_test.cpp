// Tests for include/orchmllm/core/batch_layout.hpp: both constructors, accessors, rank_of,
// empty ranks and zero ranks, and every validation error (with the offending value named).

#include "orchmllm/core/batch_layout.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::batch_layout;
using orchmllm::invalid_argument_error;
using orchmllm::rank_t;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;

}  // namespace

TEST_CASE("batch_layout: hand example with empty ranks") {
  // rank 0: {3, 1}; rank 1: {}; rank 2: {5}; rank 3: {}; rank 4: {0, 2, 0}
  const auto a = batch_layout::from_ranks({{3, 1}, {}, {5}, {}, {0, 2, 0}});
  const batch_layout b({0, 2, 2, 3, 3, 6}, {3, 1, 5, 0, 2, 0});
  CHECK(a == b);
  CHECK(a.num_ranks() == 5);
  CHECK(a.num_items() == 6);
  CHECK(a.offset(0) == 0);
  CHECK(a.offset(1) == 2);
  CHECK(a.offset(2) == 2);
  CHECK(a.offset(3) == 3);
  CHECK(a.offset(5) == 6);
  CHECK(a.rank_size(0) == 2);
  CHECK(a.rank_size(1) == 0);
  CHECK(a.rank_size(3) == 0);
  CHECK(a.rank_size(4) == 3);
  CHECK(a.length(2) == 5);
  CHECK(a.length(3) == 0);
  // bytes default to the length
  CHECK_FALSE(a.has_bytes());
  CHECK(a.explicit_bytes().empty());
  for (std::int64_t g = 0; g < a.num_items(); ++g) CHECK(a.bytes(g) == a.length(g));
  CHECK(vec(a.item_bytes().begin(), a.item_bytes().end()) == vec{3, 1, 5, 0, 2, 0});
  CHECK(a.total_length() == 11);
  CHECK(a.total_bytes() == 11);
  // no parents
  CHECK_FALSE(a.has_parents());
  CHECK(a.parents().empty());
  CHECK(a.parent(0) == batch_layout::no_parent);
  CHECK(batch_layout::no_parent == -1);
  // rank_of skips empty ranks
  const std::vector<rank_t> expected_rank{0, 0, 2, 4, 4, 4};
  for (std::int64_t g = 0; g < 6; ++g)
    CHECK(a.rank_of(g) == expected_rank[static_cast<std::size_t>(g)]);
  // rank_lengths
  CHECK(vec(a.rank_lengths(0).begin(), a.rank_lengths(0).end()) == vec{3, 1});
  CHECK(a.rank_lengths(1).empty());
  CHECK(vec(a.rank_lengths(4).begin(), a.rank_lengths(4).end()) == vec{0, 2, 0});
  CHECK(vec(a.offsets().begin(), a.offsets().end()) == vec{0, 2, 2, 3, 3, 6});
  CHECK(vec(a.lengths().begin(), a.lengths().end()) == vec{3, 1, 5, 0, 2, 0});
}

TEST_CASE("batch_layout: explicit bytes and parents") {
  const auto a = batch_layout::from_ranks({{3, 1}, {5}}, {{30, 10}, {7}});
  const batch_layout b({0, 2, 3}, {3, 1, 5}, {30, 10, 7});
  CHECK(a == b);
  CHECK(a.has_bytes());
  CHECK(a.bytes(0) == 30);
  CHECK(a.bytes(1) == 10);
  CHECK(a.bytes(2) == 7);
  CHECK(a.total_bytes() == 47);
  CHECK(a.total_length() == 9);
  CHECK(vec(a.explicit_bytes().begin(), a.explicit_bytes().end()) == vec{30, 10, 7});
  CHECK(vec(a.item_bytes().begin(), a.item_bytes().end()) == vec{30, 10, 7});
  // bytes equal to the lengths are still "explicit": the layouts differ.
  CHECK(batch_layout({0, 1}, {4}, {4}) != batch_layout({0, 1}, {4}));

  const batch_layout p({0, 2, 3}, {3, 1, 5}, {}, {0, batch_layout::no_parent, 7});
  CHECK(p.has_parents());
  CHECK_FALSE(p.has_bytes());
  CHECK(p.parent(0) == 0);
  CHECK(p.parent(1) == batch_layout::no_parent);
  CHECK(p.parent(2) == 7);
  CHECK(p.bytes(2) == 5);
  CHECK(p != batch_layout({0, 2, 3}, {3, 1, 5}));
}

TEST_CASE("batch_layout: zero ranks, empty ranks, zero-length items") {
  const batch_layout def;
  CHECK(def.num_ranks() == 0);
  CHECK(def.num_items() == 0);
  CHECK(def.total_length() == 0);
  CHECK(def.total_bytes() == 0);
  CHECK(vec(def.offsets().begin(), def.offsets().end()) == vec{0});
  CHECK(def == batch_layout::from_ranks({}));
  CHECK(def == batch_layout({0}, {}));
  CHECK_THROWS_AS((void)def.rank_of(0), invalid_argument_error);

  const auto empty3 = batch_layout::from_ranks({{}, {}, {}});
  CHECK(empty3.num_ranks() == 3);
  CHECK(empty3.num_items() == 0);
  CHECK(empty3 == batch_layout({0, 0, 0, 0}, {}));
  for (rank_t r = 0; r < 3; ++r) CHECK(empty3.rank_size(r) == 0);
  CHECK(empty3 != def);

  const auto zeros = batch_layout::from_ranks({{0, 0}, {0}});
  CHECK(zeros.num_items() == 3);
  CHECK(zeros.total_length() == 0);
  CHECK(zeros.rank_of(2) == 1);
}

TEST_CASE("batch_layout: 64-bit lengths and bytes") {
  const std::int64_t big = std::int64_t{1} << 40;
  const auto a = batch_layout::from_ranks({{big, big}, {big}}, {{3 * big, 1}, {big}});
  CHECK(a.total_length() == 3 * big);
  CHECK(a.total_bytes() == 4 * big + 1);
  // totals right at the limit are fine
  const batch_layout at_limit({0, 2}, {INT64_MAX - 5, 5});
  CHECK(at_limit.total_length() == INT64_MAX);
}

TEST_CASE("batch_layout: from_ranks and the flat constructor agree on random layouts") {
  std::mt19937_64 rng(20240611);
  for (int iter = 0; iter < 500; ++iter) {
    const auto d = uniform(rng, 0, 12);
    const bool with_bytes = (iter % 2) == 1;
    std::vector<vec> per_rank(static_cast<std::size_t>(d));
    std::vector<vec> per_rank_bytes(with_bytes ? static_cast<std::size_t>(d) : 0);
    vec offsets{0};
    vec flat;
    vec flat_bytes;
    for (std::int64_t r = 0; r < d; ++r) {
      const auto k = uniform(rng, 0, 5);  // empty ranks are common
      for (std::int64_t s = 0; s < k; ++s) {
        const auto l = uniform(rng, 0, 1000);
        per_rank[static_cast<std::size_t>(r)].push_back(l);
        flat.push_back(l);
        if (with_bytes) {
          const auto b = uniform(rng, 0, 1 << 20);
          per_rank_bytes[static_cast<std::size_t>(r)].push_back(b);
          flat_bytes.push_back(b);
        }
      }
      offsets.push_back(static_cast<std::int64_t>(flat.size()));
    }
    const auto a = batch_layout::from_ranks(per_rank, per_rank_bytes);
    const batch_layout b(offsets, flat, flat_bytes);
    REQUIRE(a == b);
    CHECK(a.num_ranks() == d);
    CHECK(a.num_items() == static_cast<std::int64_t>(flat.size()));
    CHECK(a.has_bytes() == (with_bytes && !flat.empty()));
    std::int64_t total = 0;
    std::int64_t total_bytes = 0;
    for (rank_t r = 0; r < a.num_ranks(); ++r) {
      const auto& want = per_rank[static_cast<std::size_t>(r)];
      CHECK(a.rank_size(r) == static_cast<std::int64_t>(want.size()));
      CHECK(vec(a.rank_lengths(r).begin(), a.rank_lengths(r).end()) == want);
      for (std::int64_t s = 0; s < a.rank_size(r); ++s) {
        const auto g = a.offset(r) + s;
        CHECK(a.rank_of(g) == r);
        CHECK(a.length(g) == want[static_cast<std::size_t>(s)]);
        const auto b_want =
            with_bytes ? per_rank_bytes[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]
                       : want[static_cast<std::size_t>(s)];
        CHECK(a.bytes(g) == b_want);
        total += want[static_cast<std::size_t>(s)];
        total_bytes += b_want;
      }
    }
    CHECK(a.total_length() == total);
    CHECK(a.total_bytes() == total_bytes);
    CHECK_THROWS_AS((void)a.rank_of(a.num_items()), invalid_argument_error);
    CHECK_THROWS_AS((void)a.rank_of(-1), invalid_argument_error);
  }
}

TEST_CASE("batch_layout: validation errors name the offending value") {
  SUBCASE("offsets empty") {
    expect_invalid([] { (void)batch_layout(vec{}, vec{}); }, {"offsets", "none"});
  }
  SUBCASE("offsets not starting at 0") {
    expect_invalid([] { (void)batch_layout({1, 2}, {5, 6}); }, {"offsets[0] is 1", "must be 0"});
    expect_invalid([] { (void)batch_layout({-1, 1}, {5, 6}); }, {"offsets[0] is -1"});
  }
  SUBCASE("decreasing offsets") {
    expect_invalid(
        [] {
          (void)batch_layout({0, 3, 2, 4}, {1, 1, 1, 1});
        },
        {"offsets[2] = 2", "offsets[1] = 3"});
  }
  SUBCASE("offsets ending elsewhere than n") {
    expect_invalid([] { (void)batch_layout({0, 2}, {1, 1, 1}); }, {"end at 2", "3 lengths"});
    expect_invalid([] { (void)batch_layout({0, 4}, {1, 1, 1}); }, {"end at 4", "3 lengths"});
    expect_invalid([] { (void)batch_layout({0}, {1}); }, {"end at 0", "1 lengths"});
  }
  SUBCASE("negative length") {
    expect_invalid(
        [] {
          (void)batch_layout({0, 3}, {4, -5, 6});
        },
        {"item 1", "negative length -5"});
    expect_invalid(
        [] {
          (void)batch_layout::from_ranks({{1}, {2, -9}});
        },
        {"item 2", "negative length -9"});
  }
  SUBCASE("negative bytes") {
    expect_invalid(
        [] {
          (void)batch_layout({0, 2}, {4, 5}, {3, -7});
        },
        {"item 1", "negative byte size -7"});
  }
  SUBCASE("byte and parent counts differ from the item count") {
    expect_invalid(
        [] {
          (void)batch_layout({0, 3}, {1, 2, 3}, {1, 2});
        },
        {"2 byte sizes", "3 items"});
    expect_invalid(
        [] {
          (void)batch_layout({0, 3}, {1, 2, 3}, {}, {0, 1, 2, 3});
        },
        {"4 parent ids", "3 items"});
  }
  SUBCASE("bad parent") {
    expect_invalid(
        [] {
          (void)batch_layout({0, 2}, {1, 2}, {}, {0, -2});
        },
        {"item 1", "parent id -2"});
  }
  SUBCASE("from_ranks shape mismatches") {
    expect_invalid(
        [] {
          (void)batch_layout::from_ranks({{1}, {2}}, {{1}});
        },
        {"bytes given for 1 ranks", "lengths for 2"});
    expect_invalid(
        [] {
          (void)batch_layout::from_ranks({{1}, {2, 3}}, {{1}, {2}});
        },
        {"rank 1 has 2 lengths but 1 byte sizes"});
  }
  SUBCASE("totals that overflow 64 bits") {
    expect_invalid(
        [] {
          (void)batch_layout({0, 2}, {INT64_MAX, 1});
        },
        {"total length", "item 1", std::to_string(INT64_MAX)});
    expect_invalid(
        [] {
          (void)batch_layout({0, 3}, {1, 1, 1}, {INT64_MAX / 2, INT64_MAX / 2, 2});
        },
        {"total bytes", "item 2"});
  }
  SUBCASE("rank_of out of range") {
    const auto a = batch_layout::from_ranks({{1, 2}, {3}});
    expect_invalid([&] { (void)a.rank_of(3); }, {"item id 3", "[0, 3)"});
    expect_invalid([&] { (void)a.rank_of(-1); }, {"item id -1"});
  }
  SUBCASE("errors are invalid_argument_error, catchable as orchmllm::error") {
    CHECK_THROWS_AS((void)batch_layout({0, 1}, {-1}), orchmllm::error);
  }
}

TEST_CASE("batch_layout: segments in CSR form") {
  // rank 0: {6 = 2+4, 3}; rank 1: {8 = 2+2+2+2}
  const batch_layout plain({0, 2, 3}, {6, 3, 8});
  const auto a = plain.with_segments({0, 2, 3, 7}, {2, 4, 3, 2, 2, 2, 2});
  CHECK(a.has_segments());
  CHECK(a.total_segments() == 7);
  CHECK(a.num_segments(0) == 2);
  CHECK(a.num_segments(1) == 1);
  CHECK(a.num_segments(2) == 4);
  CHECK(vec(a.segments(0).begin(), a.segments(0).end()) == vec{2, 4});
  CHECK(vec(a.segments(2).begin(), a.segments(2).end()) == vec{2, 2, 2, 2});
  CHECK(a.lengths().size() == 3);
  CHECK(a != plain);
  // Equal segments: the same as listing them.
  const std::vector<std::int64_t> counts{2, 1, 4};
  const auto b = batch_layout({0, 2, 3}, {6, 3, 8}).with_equal_segments(counts);
  CHECK(vec(b.segments(0).begin(), b.segments(0).end()) == vec{3, 3});
  CHECK(b == batch_layout({0, 2, 3}, {6, 3, 8}, {}, {}, {0, 2, 3, 7}, {3, 3, 3, 2, 2, 2, 2}));
  // Cost: the sum over the segments.
  const auto sq = [](std::int64_t l) { return l * l; };
  CHECK(orchmllm::item_cost<std::int64_t>(a, 0, sq) == 4 + 16);
  CHECK(orchmllm::item_cost<std::int64_t>(a, 1, sq) == 9);
  CHECK(orchmllm::item_cost<std::int64_t>(plain, 0, sq) == 36);
}

TEST_CASE("batch_layout: all-single segments are stored as none (bit-identical layouts)") {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 50; ++trial) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto n = uniform(rng, 0, 20);
    vec lengths(static_cast<std::size_t>(n));
    for (auto& l : lengths) l = uniform(rng, 0, 100);
    const batch_layout plain(orchmllm::test::random_offsets(rng, d, n), lengths);
    vec seg_offsets(static_cast<std::size_t>(n) + 1);
    for (std::size_t g = 0; g <= static_cast<std::size_t>(n); ++g)
      seg_offsets[g] = static_cast<std::int64_t>(g);
    const auto single = plain.with_segments(seg_offsets, lengths);
    CHECK(single == plain);
    CHECK_FALSE(single.has_segments());
    CHECK(single.segment_offsets().empty());
    CHECK(single.segment_lengths().empty());
    const vec ones(static_cast<std::size_t>(n), 1);
    CHECK(plain.with_equal_segments(ones) == plain);
    CHECK(single.total_segments() == n);
    for (std::int64_t g = 0; g < n; ++g) {
      CHECK(single.num_segments(g) == 1);
      REQUIRE(single.segments(g).size() == 1);
      CHECK(single.segments(g)[0] == single.length(g));
    }
  }
}

TEST_CASE("batch_layout: segment validation errors name the offending value") {
  const batch_layout plain({0, 2}, {6, 3});
  SUBCASE("zero segments") {
    expect_invalid(
        [&] {
          (void)plain.with_segments({0, 0, 2}, {3, 3});
        },
        {"item 0 has 0 segments", "at least 1"});
    const vec counts{0, 1};
    expect_invalid([&] { (void)plain.with_equal_segments(counts); }, {"item 0 has 0 segments"});
  }
  SUBCASE("lengths not summing to the item's length") {
    expect_invalid(
        [&] {
          (void)plain.with_segments({0, 2, 3}, {2, 3, 3});
        },
        {"segments of item 0 sum to 5", "length is 6"});
    expect_invalid(
        [&] {
          (void)plain.with_segments({0, 2, 3}, {2, 9, 3});
        },
        {"segments of item 0 exceed its length 6"});
  }
  SUBCASE("negative segment length") {
    expect_invalid(
        [&] {
          (void)plain.with_segments({0, 2, 3}, {4, -2, 3});
        },
        {"segment 1 of item 0", "negative length -2"});
  }
  SUBCASE("offsets of the wrong shape") {
    expect_invalid(
        [&] {
          (void)plain.with_segments({0, 2}, {3, 3});
        },
        {"segment offsets have 2 entries", "expected 3"});
    expect_invalid(
        [&] {
          (void)plain.with_segments({1, 2, 3}, {3, 3, 3});
        },
        {"segment_offsets[0] is 1"});
    expect_invalid(
        [&] {
          (void)plain.with_segments({0, 2, 4}, {3, 3, 3});
        },
        {"segment offsets end at 4", "3 segment lengths"});
    expect_invalid(
        [&] {
          (void)plain.with_segments({}, {3, 3, 3});
        },
        {"3 segment lengths given without segment offsets"});
  }
  SUBCASE("equal segments that do not divide the length") {
    const vec counts{4, 1};
    expect_invalid([&] { (void)plain.with_equal_segments(counts); },
                   {"item 0 of length 6", "4 equal segments"});
    const vec short_counts{1};
    expect_invalid([&] { (void)plain.with_equal_segments(short_counts); },
                   {"1 segment counts given for 2 items"});
  }
}
