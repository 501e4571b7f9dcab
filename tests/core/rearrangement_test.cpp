// Tests for include/orchmllm/core/rearrangement.hpp: construction (canonical slot order,
// explicit placements), identity, inverse, composition laws on thousands of random plans
// (including plans between different rank counts), apply to vectors, views, move-only items
// and ragged rows, count matrices, validate, and every error.

#include "orchmllm/core/rearrangement.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <ranges>
#include <string>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/core/fnv.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::batch_layout;
using orchmllm::compose;
using orchmllm::invalid_argument_error;
using orchmllm::placement;
using orchmllm::ragged_rows;
using orchmllm::rank_t;
using orchmllm::rearrangement;
using orchmllm::test::expect_invalid;
using orchmllm::test::owner;
using orchmllm::test::random_offsets;
using orchmllm::test::uniform;
using vec = std::vector<std::int64_t>;
using ranks = std::vector<rank_t>;

// Random destination ranks (d_dst > 0 unless n == 0); skewed so some ranks stay empty: only the
// first 1..d_dst ranks receive.
ranks skewed_destinations(std::mt19937_64& rng, std::int64_t n, rank_t d_dst) {
  const rank_t used = d_dst == 0 ? 0 : static_cast<rank_t>(uniform(rng, 1, d_dst));
  return orchmllm::test::random_destinations(rng, n, used);
}

// A random plan from `src` offsets onto d_dst ranks, with shuffled (non-canonical) slots when
// `shuffle`.
rearrangement random_plan(std::mt19937_64& rng, const vec& src, rank_t d_dst, bool shuffle) {
  const auto dst = skewed_destinations(rng, src.back(), d_dst);
  return orchmllm::test::plan_with_destinations(rng, src, dst, d_dst, shuffle);
}

vec to_vec(std::span<const std::int64_t> s) { return vec(s.begin(), s.end()); }

// Everything a plan must satisfy, checked from its public accessors only.
void check_consistent(const rearrangement& p) {
  const auto n = p.num_items();
  REQUIRE(static_cast<std::int64_t>(p.dst_ranks().size()) == n);
  REQUIRE(static_cast<std::int64_t>(p.dst_slots().size()) == n);
  REQUIRE(static_cast<std::int64_t>(p.sources().size()) == n);
  REQUIRE(p.src_offsets().back() == n);
  REQUIRE(p.dst_offsets().back() == n);
  std::vector<char> hit(static_cast<std::size_t>(n), 0);
  for (std::int64_t g = 0; g < n; ++g) {
    const auto pl = p.destination_of(g);
    CHECK(pl.rank == p.dst_ranks()[static_cast<std::size_t>(g)]);
    CHECK(pl.slot == p.dst_slots()[static_cast<std::size_t>(g)]);
    REQUIRE(pl.rank >= 0);
    REQUIRE(pl.rank < p.num_dst_ranks());
    const auto h = p.dst_offsets()[static_cast<std::size_t>(pl.rank)] + pl.slot;
    REQUIRE(h < p.dst_offsets()[static_cast<std::size_t>(pl.rank) + 1]);
    CHECK(p.destination_id(g) == h);
    CHECK(p.source_of(h) == g);
    CHECK(hit[static_cast<std::size_t>(h)] == 0);
    hit[static_cast<std::size_t>(h)] = 1;
  }
  CHECK_NOTHROW(p.validate());
}

}  // namespace

TEST_CASE("rearrangement: hand example, canonical slot order") {
  // source: rank 0 holds {0, 1, 2}, rank 1 holds {}, rank 2 holds {3, 4}
  const vec src{0, 3, 3, 5};
  //              g:  0  1  2  3  4
  const ranks dst{1, 0, 1, 1, 0};
  const auto p = rearrangement::from_destinations(src, dst, 3);
  CHECK(p.num_items() == 5);
  CHECK(p.num_src_ranks() == 3);
  CHECK(p.num_dst_ranks() == 3);
  CHECK(to_vec(p.src_offsets()) == src);
  CHECK(to_vec(p.dst_offsets()) == vec{0, 2, 5, 5});  // rank 0: {1, 4}; rank 1: {0, 2, 3}
  CHECK(p.destination_of(0) == placement{1, 0});
  CHECK(p.destination_of(1) == placement{0, 0});
  CHECK(p.destination_of(2) == placement{1, 1});
  CHECK(p.destination_of(3) == placement{1, 2});
  CHECK(p.destination_of(4) == placement{0, 1});
  CHECK(to_vec(p.sources()) == vec{1, 4, 0, 2, 3});
  CHECK(to_vec(p.dst_slots()) == vec{0, 0, 1, 2, 1});
  CHECK(p.destination_id(3) == 4);
  check_consistent(p);

  CHECK(p.count_matrix() == vec{1, 2, 0,  //
                                0, 0, 0,  //
                                1, 1, 0});
  CHECK(p.send_counts(0) == vec{1, 2, 0});
  CHECK(p.send_counts(1) == vec{0, 0, 0});
  CHECK(p.recv_counts(0) == vec{1, 0, 1});
  CHECK(p.recv_counts(1) == vec{2, 0, 1});
  CHECK(p.recv_counts(2) == vec{0, 0, 0});

  const std::vector<std::string> names{"a", "b", "c", "d", "e"};
  CHECK(orchmllm::apply(p, names) == std::vector<std::string>{"b", "e", "a", "c", "d"});
  CHECK(orchmllm::apply(p.inverse(), orchmllm::apply(p, names)) == names);
}

TEST_CASE("rearrangement: from_destinations slots follow increasing source id per rank") {
  std::mt19937_64 rng(1);
  for (int iter = 0; iter < 500; ++iter) {
    const auto d_src = static_cast<rank_t>(uniform(rng, 1, 7));
    const auto d_dst = static_cast<rank_t>(uniform(rng, 1, 7));
    const auto n = uniform(rng, 0, 40);
    const auto src = random_offsets(rng, d_src, n);
    const auto dst = skewed_destinations(rng, n, d_dst);
    const auto p = rearrangement::from_destinations(src, dst, d_dst);
    check_consistent(p);
    // sizes per destination rank
    vec sizes(static_cast<std::size_t>(d_dst), 0);
    for (auto r : dst) ++sizes[static_cast<std::size_t>(r)];
    for (rank_t r = 0; r < d_dst; ++r)
      CHECK(p.dst_offsets()[static_cast<std::size_t>(r) + 1] -
                p.dst_offsets()[static_cast<std::size_t>(r)] ==
            sizes[static_cast<std::size_t>(r)]);
    // canonical order: within each destination rank, sources strictly increase
    for (rank_t r = 0; r < d_dst; ++r) {
      for (auto h = p.dst_offsets()[static_cast<std::size_t>(r)] + 1;
           h < p.dst_offsets()[static_cast<std::size_t>(r) + 1]; ++h)
        CHECK(p.source_of(h - 1) < p.source_of(h));
    }
    for (std::int64_t g = 0; g < n; ++g)
      CHECK(p.dst_ranks()[static_cast<std::size_t>(g)] == dst[static_cast<std::size_t>(g)]);
    // from_placements with the same (canonical) placements gives the same plan
    std::vector<placement> pl;
    for (std::int64_t g = 0; g < n; ++g) pl.push_back(p.destination_of(g));
    CHECK(rearrangement::from_placements(src, pl, d_dst) == p);
  }
}

TEST_CASE("rearrangement: from_placements keeps the given slots") {
  std::mt19937_64 rng(2);
  for (int iter = 0; iter < 500; ++iter) {
    const auto d_src = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto d_dst = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto src = random_offsets(rng, d_src, uniform(rng, 0, 30));
    const auto p = random_plan(rng, src, d_dst, true);
    check_consistent(p);
    std::vector<placement> pl;
    for (std::int64_t g = 0; g < p.num_items(); ++g) pl.push_back(p.destination_of(g));
    const auto q = rearrangement::from_placements(src, pl, d_dst);
    CHECK(q == p);
    for (std::int64_t g = 0; g < p.num_items(); ++g)
      CHECK(q.destination_of(g) == pl[static_cast<std::size_t>(g)]);
  }
}

TEST_CASE("rearrangement: is_identity is equality with the identity plan") {
  std::mt19937_64 rng(31);
  int identities = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const auto d_src = static_cast<rank_t>(uniform(rng, 1, 4));
    const auto d_dst = uniform(rng, 0, 3) == 0 ? static_cast<rank_t>(uniform(rng, 1, 4)) : d_src;
    const auto src = random_offsets(rng, d_src, uniform(rng, 0, 5));
    // Random ranks, and random slots on them (from_placements): the same ranks as the identity
    // in another slot order are not the identity.
    const auto p = random_plan(rng, src, d_dst, uniform(rng, 0, 1) == 1);
    const bool want = d_src == d_dst && p == rearrangement::identity(src);
    CHECK(p.is_identity() == want);
    identities += want ? 1 : 0;
  }
  CHECK(identities > 50);  // the random plans hit the identity often enough to test both ways
  CHECK(rearrangement{}.is_identity());
}

TEST_CASE("rearrangement: construction errors") {
  const vec src{0, 2, 3};
  // Building a plan from `src` must fail with an invalid_argument_error naming every needle.
  const auto bad_destinations = [&](const ranks& dst, rank_t d_dst,
                                    const std::vector<std::string>& needles) {
    expect_invalid([&] { (void)rearrangement::from_destinations(src, dst, d_dst); }, needles);
  };
  const auto bad_placements = [&](const std::vector<placement>& pl,
                                  const std::vector<std::string>& needles) {
    expect_invalid([&] { (void)rearrangement::from_placements(src, pl, 2); }, needles);
  };
  SUBCASE("destination rank out of range") {
    bad_destinations({0, 5, 1}, 3, {"item 1", "rank 5", "[0, 3)"});
    bad_destinations({0, 1, -1}, 3, {"item 2", "rank -1"});
    bad_destinations({0, 0, 0}, 0, {"item 0", "[0, 0)"});
  }
  SUBCASE("sizes disagree") {
    bad_destinations({0, 1}, 2, {"3 items", "2 destinations"});
    bad_destinations({0, 1, 1, 0}, 2, {"3 items", "4 destinations"});
  }
  SUBCASE("negative destination rank count") {
    expect_invalid([] { (void)rearrangement::from_destinations(vec{0}, ranks{}, -1); },
                   {"destination rank count -1"});
  }
  SUBCASE("bad source offsets") {
    expect_invalid([] { (void)rearrangement::from_destinations(vec{}, ranks{}, 1); },
                   {"source offsets must start at 0"});
    expect_invalid(
        [] {
          (void)rearrangement::from_destinations(vec{1, 2}, ranks{0}, 1);
        },
        {"source offsets must start at 0"});
    expect_invalid(
        [] {
          (void)rearrangement::from_destinations(vec{0, 3, 2}, ranks{0, 0}, 1);
        },
        {"offsets[2] = 2", "offsets[1] = 3"});
    expect_invalid([] { (void)rearrangement::identity(vec{0, 3, 2}); }, {"offsets[2] = 2"});
  }
  SUBCASE("from_placements: slot out of range") {
    // two items go to rank 1, so slots 0 and 1 exist there
    bad_placements({{1, 0}, {1, 2}, {0, 0}}, {"item 1", "slot 2", "rank 1", "receives 2 items"});
    bad_placements({{1, -1}, {1, 0}, {0, 0}}, {"item 0", "slot -1"});
  }
  SUBCASE("from_placements: duplicate slot") {
    bad_placements({{1, 1}, {0, 0}, {1, 1}},
                   {"item 2", "slot 1", "rank 1", "already taken by item 0"});
  }
  SUBCASE("from_placements: rank out of range, size mismatch") {
    bad_placements({{0, 0}, {2, 0}, {0, 1}}, {"item 1", "rank 2"});
    bad_placements({{0, 0}}, {"3 items", "1 destinations"});
  }
}

TEST_CASE("rearrangement: identity") {
  std::mt19937_64 rng(3);
  for (int iter = 0; iter < 200; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 0, 6));
    const auto n = d == 0 ? 0 : uniform(rng, 0, 25);
    const auto src = random_offsets(rng, d, n);
    const auto id = rearrangement::identity(src);
    check_consistent(id);
    CHECK(id.num_src_ranks() == d);
    CHECK(id.num_dst_ranks() == d);
    CHECK(to_vec(id.dst_offsets()) == src);
    for (std::int64_t g = 0; g < n; ++g) {
      const auto r = owner(src, g);
      CHECK(id.destination_of(g) == placement{r, g - src[static_cast<std::size_t>(r)]});
      CHECK(id.destination_id(g) == g);
      CHECK(id.source_of(g) == g);
    }
    CHECK(id.is_identity());
    CHECK(id.inverse() == id);
    CHECK(compose(id, id) == id);
    // identity of a layout
    std::vector<vec> lengths(static_cast<std::size_t>(d));
    for (rank_t r = 0; r < d; ++r)
      lengths[static_cast<std::size_t>(r)].assign(
          static_cast<std::size_t>(src[static_cast<std::size_t>(r) + 1] -
                                   src[static_cast<std::size_t>(r)]),
          1);
    CHECK(rearrangement::identity(batch_layout::from_ranks(lengths)) == id);
    // nothing moves
    for (rank_t r = 0; r < d; ++r) {
      auto row = id.send_counts(r);
      for (rank_t c = 0; c < d; ++c)
        CHECK(
            row[static_cast<std::size_t>(c)] ==
            (c == r ? src[static_cast<std::size_t>(r) + 1] - src[static_cast<std::size_t>(r)] : 0));
    }
    vec values(static_cast<std::size_t>(n));
    std::iota(values.begin(), values.end(), 100);
    CHECK(orchmllm::apply(id, values) == values);
  }
}

TEST_CASE("rearrangement: zero ranks, zero items, the default plan") {
  const rearrangement def;
  CHECK(def.num_items() == 0);
  CHECK(def.num_src_ranks() == 0);
  CHECK(def.num_dst_ranks() == 0);
  CHECK_NOTHROW(def.validate());
  CHECK(def.inverse() == def);
  CHECK(compose(def, def) == def);
  CHECK(def.count_matrix().empty());
  CHECK(def == rearrangement::from_destinations(vec{0}, ranks{}, 0));
  CHECK(def == rearrangement::identity(vec{0}));
  CHECK(def == rearrangement::identity(batch_layout{}));
  CHECK(orchmllm::apply(def, std::vector<int>{}).empty());
  CHECK_THROWS_AS((void)def.send_counts(0), invalid_argument_error);
  CHECK_THROWS_AS((void)def.recv_counts(0), invalid_argument_error);

  // no items on several ranks, onto a different number of ranks
  const auto p = rearrangement::from_destinations(vec{0, 0, 0, 0}, ranks{}, 2);
  CHECK(p.num_items() == 0);
  CHECK(p.num_src_ranks() == 3);
  CHECK(p.num_dst_ranks() == 2);
  CHECK(to_vec(p.dst_offsets()) == vec{0, 0, 0});
  CHECK_NOTHROW(p.validate());
  CHECK(p.count_matrix() == vec(6, 0));
  CHECK(p.inverse().num_src_ranks() == 2);
  CHECK(compose(p.inverse(), p) == rearrangement::identity(vec{0, 0, 0, 0}));
  ragged_rows<int> empty_rows{{0}, {}, 3};
  const auto moved = orchmllm::apply(p, empty_rows);
  CHECK(moved.row_offsets == vec{0});
  CHECK(moved.rows.empty());
}

TEST_CASE("rearrangement: inverse") {
  std::mt19937_64 rng(4);
  for (int iter = 0; iter < 1000; ++iter) {
    const auto d_src = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto d_dst = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto src = random_offsets(rng, d_src, uniform(rng, 0, 30));
    const auto p = random_plan(rng, src, d_dst, iter % 2 == 1);
    const auto q = p.inverse();
    check_consistent(q);
    CHECK(q.num_src_ranks() == d_dst);
    CHECK(q.num_dst_ranks() == d_src);
    CHECK(to_vec(q.src_offsets()) == to_vec(p.dst_offsets()));
    CHECK(to_vec(q.dst_offsets()) == src);
    for (std::int64_t g = 0; g < p.num_items(); ++g) {
      const auto r = owner(src, g);
      CHECK(q.destination_of(p.destination_id(g)) ==
            placement{r, g - src[static_cast<std::size_t>(r)]});
    }
    CHECK(q.inverse() == p);
    // the count matrix transposes
    const auto m = p.count_matrix();
    const auto mt = q.count_matrix();
    for (rank_t a = 0; a < d_src; ++a)
      for (rank_t b = 0; b < d_dst; ++b)
        CHECK(m[static_cast<std::size_t>(a * d_dst + b)] ==
              mt[static_cast<std::size_t>(b * d_src + a)]);
  }
}

TEST_CASE("rearrangement: composition laws on random plans (d_src != d_dst included)") {
  std::mt19937_64 rng(5);
  int checked = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const auto d1 = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto d2 = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto d3 = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto d4 = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto n = uniform(rng, 0, 24);
    const auto src = random_offsets(rng, d1, n);
    const bool shuffle = iter % 3 != 0;
    const auto a = random_plan(rng, src, d2, shuffle);
    const auto b = random_plan(rng, to_vec(a.dst_offsets()), d3, shuffle);
    const auto c = random_plan(rng, to_vec(b.dst_offsets()), d4, !shuffle);

    const auto ba = compose(b, a);
    check_consistent(ba);
    // semantics: first a, then b
    for (std::int64_t g = 0; g < n; ++g) {
      CHECK(ba.destination_id(g) == b.destination_id(a.destination_id(g)));
      CHECK(ba.destination_of(g) == b.destination_of(a.destination_id(g)));
    }
    CHECK(to_vec(ba.src_offsets()) == src);
    CHECK(to_vec(ba.dst_offsets()) == to_vec(b.dst_offsets()));

    // p⁻¹ ∘ p = id (source layout), p ∘ p⁻¹ = id (destination layout)
    CHECK(compose(a.inverse(), a) == rearrangement::identity(src));
    CHECK(compose(a, a.inverse()) == rearrangement::identity(a.dst_offsets()));
    // (b ∘ a)⁻¹ = a⁻¹ ∘ b⁻¹
    CHECK(ba.inverse() == compose(a.inverse(), b.inverse()));
    // associativity
    CHECK(compose(c, ba) == compose(compose(c, b), a));
    // identity is neutral on both sides
    CHECK(compose(a, rearrangement::identity(src)) == a);
    CHECK(compose(rearrangement::identity(a.dst_offsets()), a) == a);
    // composing canonical plans keeps them canonical only through from_destinations; the
    // composed plan's slots are exactly b's slots
    for (std::int64_t g = 0; g < n; ++g)
      CHECK(ba.dst_slots()[static_cast<std::size_t>(g)] ==
            b.dst_slots()[static_cast<std::size_t>(a.destination_id(g))]);
    ++checked;
  }
  CHECK(checked == 3000);
}

TEST_CASE("rearrangement: compose size mismatch") {
  const auto a = rearrangement::from_destinations(vec{0, 2, 3}, ranks{0, 1, 1}, 2);  // dst {1, 2}
  const auto b_wrong_sizes = rearrangement::identity(vec{0, 2, 3});                  // src {2, 1}
  const auto b_wrong_ranks = rearrangement::identity(vec{0, 1, 3, 3});
  const auto b_wrong_items = rearrangement::identity(vec{0, 1, 2});
  expect_invalid([&] { (void)compose(b_wrong_sizes, a); },
                 {"cannot compose", "3 items to 2 ranks", "3 items on 2 ranks"});
  expect_invalid([&] { (void)compose(b_wrong_ranks, a); },
                 {"cannot compose", "3 items on 3 ranks"});
  expect_invalid([&] { (void)compose(b_wrong_items, a); },
                 {"cannot compose", "2 items on 2 ranks"});
  CHECK_NOTHROW((void)compose(rearrangement::identity(vec{0, 1, 3}), a));
}

TEST_CASE("rearrangement: apply to vectors") {
  std::mt19937_64 rng(6);
  for (int iter = 0; iter < 500; ++iter) {
    const auto d_src = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto d_dst = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto src = random_offsets(rng, d_src, uniform(rng, 0, 40));
    const auto p = random_plan(rng, src, d_dst, iter % 2 == 0);
    const auto n = p.num_items();
    std::vector<std::string> in;
    for (std::int64_t g = 0; g < n; ++g) in.push_back("item" + std::to_string(g));
    const auto out = orchmllm::apply(p, in);
    REQUIRE(static_cast<std::int64_t>(out.size()) == n);
    for (std::int64_t g = 0; g < n; ++g)
      CHECK(out[static_cast<std::size_t>(p.destination_id(g))] == in[static_cast<std::size_t>(g)]);
    CHECK(orchmllm::apply(p.inverse(), out) == in);
    // span overload
    vec ids(static_cast<std::size_t>(n));
    std::iota(ids.begin(), ids.end(), 0);
    const auto moved = orchmllm::apply(p, std::span<const std::int64_t>(ids));
    CHECK(moved == to_vec(p.sources()));
    // An rvalue of a move-only type is moved from: every pointer arrives once, in order.
    std::vector<std::unique_ptr<std::int64_t>> owned;
    for (std::int64_t g = 0; g < n; ++g) owned.push_back(std::make_unique<std::int64_t>(g));
    const auto taken = orchmllm::apply(p, std::move(owned));
    REQUIRE(static_cast<std::int64_t>(taken.size()) == n);
    for (std::int64_t h = 0; h < n; ++h) {
      REQUIRE(taken[static_cast<std::size_t>(h)] != nullptr);
      CHECK(*taken[static_cast<std::size_t>(h)] == p.source_of(h));
    }
    // A lazy view works too (copied).
    CHECK(orchmllm::apply(p, std::views::iota(std::int64_t{0}, n)) == to_vec(p.sources()));
  }
  const auto p = rearrangement::from_destinations(vec{0, 2}, ranks{0, 0}, 1);
  expect_invalid(
      [&] {
        (void)orchmllm::apply(p, std::vector<int>{1, 2, 3});
      },
      {"3 values", "plan of 2 items"});
}

TEST_CASE("rearrangement: apply to ragged rows, zero-row items included") {
  std::mt19937_64 rng(7);
  // Element (g, row, col) of item g's payload.
  auto value = [](std::int64_t g, std::int64_t row, std::int64_t col) {
    return g * 1000000 + row * 100 + col;
  };
  for (int iter = 0; iter < 500; ++iter) {
    const auto d_src = static_cast<rank_t>(uniform(rng, 1, 5));
    const auto d_dst = static_cast<rank_t>(uniform(rng, 1, 5));
    const auto src = random_offsets(rng, d_src, uniform(rng, 0, 25));
    const auto p = random_plan(rng, src, d_dst, iter % 2 == 0);
    const auto n = p.num_items();
    const std::int64_t width = uniform(rng, 0, 4);
    ragged_rows<std::int64_t> in;
    in.row_width = width;
    in.row_offsets.push_back(0);
    vec rows_of(static_cast<std::size_t>(n));
    for (std::int64_t g = 0; g < n; ++g) {
      const auto k = uniform(rng, 0, 3) == 0 ? 0 : uniform(rng, 1, 5);  // many zero-row items
      rows_of[static_cast<std::size_t>(g)] = k;
      for (std::int64_t row = 0; row < k; ++row)
        for (std::int64_t col = 0; col < width; ++col) in.rows.push_back(value(g, row, col));
      in.row_offsets.push_back(in.row_offsets.back() + k);
    }
    const auto out = orchmllm::apply(p, in);
    CHECK(out.row_width == width);
    REQUIRE(static_cast<std::int64_t>(out.row_offsets.size()) == n + 1);
    CHECK(out.row_offsets.front() == 0);
    CHECK(out.row_offsets.back() == in.row_offsets.back());
    CHECK(out.rows.size() == in.rows.size());
    for (std::int64_t h = 0; h < n; ++h) {
      const auto g = p.source_of(h);
      const auto b = out.row_offsets[static_cast<std::size_t>(h)];
      const auto e = out.row_offsets[static_cast<std::size_t>(h) + 1];
      REQUIRE(e - b == rows_of[static_cast<std::size_t>(g)]);
      for (std::int64_t row = 0; row < e - b; ++row)
        for (std::int64_t col = 0; col < width; ++col)
          CHECK(out.rows[static_cast<std::size_t>((b + row) * width + col)] == value(g, row, col));
    }
    const auto back = orchmllm::apply(p.inverse(), out);
    CHECK(back.row_offsets == in.row_offsets);
    CHECK(back.rows == in.rows);
    CHECK(back.row_width == in.row_width);
  }
}

TEST_CASE("rearrangement: apply to ragged rows, errors") {
  const auto p = rearrangement::from_destinations(vec{0, 2}, ranks{0, 0}, 1);
  expect_invalid(
      [&] {
        (void)orchmllm::apply(p, ragged_rows<int>{{0, 1}, {7}, 1});
      },
      {"2 row offsets", "plan of 2 items"});
  expect_invalid(
      [&] {
        (void)orchmllm::apply(p, ragged_rows<int>{{1, 1, 2}, {7}, 1});
      },
      {"starting at 0"});
  expect_invalid(
      [&] {
        (void)orchmllm::apply(p, ragged_rows<int>{{0, 2, 1}, {7}, 1});
      },
      {"row offsets decrease at item 1"});
  expect_invalid(
      [&] {
        (void)orchmllm::apply(p, ragged_rows<int>{{0, 1, 2}, {7, 8, 9}, 1});
      },
      {"3 elements", "2 rows of width 1"});
  expect_invalid(
      [&] {
        (void)orchmllm::apply(p, ragged_rows<int>{{0, 1, 2}, {7, 8}, 2});
      },
      {"2 elements", "2 rows of width 2"});
  expect_invalid(
      [&] {
        (void)orchmllm::apply(p, ragged_rows<int>{{0, 1, 2}, {}, -1});
      },
      {"row width -1"});
}

TEST_CASE("rearrangement: count matrix, send and receive counts") {
  std::mt19937_64 rng(8);
  for (int iter = 0; iter < 500; ++iter) {
    const auto d_src = static_cast<rank_t>(uniform(rng, 1, 8));
    const auto d_dst = static_cast<rank_t>(uniform(rng, 1, 8));
    const auto src = random_offsets(rng, d_src, uniform(rng, 0, 50));
    const auto p = random_plan(rng, src, d_dst, iter % 2 == 0);
    const auto m = p.count_matrix();
    REQUIRE(m.size() == static_cast<std::size_t>(d_src) * static_cast<std::size_t>(d_dst));
    // independent count
    vec expect(m.size(), 0);
    for (std::int64_t g = 0; g < p.num_items(); ++g)
      ++expect[static_cast<std::size_t>(owner(src, g)) * static_cast<std::size_t>(d_dst) +
               static_cast<std::size_t>(p.destination_of(g).rank)];
    CHECK(m == expect);
    std::int64_t total = 0;
    for (rank_t r = 0; r < d_src; ++r) {
      const auto row = p.send_counts(r);
      REQUIRE(row.size() == static_cast<std::size_t>(d_dst));
      std::int64_t sum = 0;
      for (rank_t c = 0; c < d_dst; ++c) {
        CHECK(row[static_cast<std::size_t>(c)] == m[static_cast<std::size_t>(r * d_dst + c)]);
        sum += row[static_cast<std::size_t>(c)];
      }
      CHECK(sum == src[static_cast<std::size_t>(r) + 1] - src[static_cast<std::size_t>(r)]);
      total += sum;
    }
    CHECK(total == p.num_items());
    for (rank_t c = 0; c < d_dst; ++c) {
      const auto col = p.recv_counts(c);
      REQUIRE(col.size() == static_cast<std::size_t>(d_src));
      std::int64_t sum = 0;
      for (rank_t r = 0; r < d_src; ++r) {
        CHECK(col[static_cast<std::size_t>(r)] == m[static_cast<std::size_t>(r * d_dst + c)]);
        sum += col[static_cast<std::size_t>(r)];
      }
      CHECK(sum == p.dst_offsets()[static_cast<std::size_t>(c) + 1] -
                       p.dst_offsets()[static_cast<std::size_t>(c)]);
    }
  }
  const auto p = rearrangement::from_destinations(vec{0, 1, 2}, ranks{2, 0}, 3);
  expect_invalid([&] { (void)p.send_counts(2); }, {"source rank 2", "[0, 2)"});
  expect_invalid([&] { (void)p.send_counts(-1); }, {"source rank -1"});
  expect_invalid([&] { (void)p.recv_counts(3); }, {"destination rank 3", "[0, 3)"});
}

TEST_CASE("rearrangement: validate accepts every plan the factories and the algebra build") {
  std::mt19937_64 rng(9);
  for (int iter = 0; iter < 300; ++iter) {
    const auto d1 = static_cast<rank_t>(uniform(rng, 0, 5));
    const auto d2 = static_cast<rank_t>(uniform(rng, 1, 5));
    const auto n = d1 == 0 ? 0 : uniform(rng, 0, 20);
    const auto src = random_offsets(rng, d1, n);
    const auto p = random_plan(rng, src, d2, iter % 2 == 0);
    CHECK_NOTHROW(p.validate());
    CHECK_NOTHROW(p.inverse().validate());
    CHECK_NOTHROW(compose(p.inverse(), p).validate());
    CHECK_NOTHROW(rearrangement::identity(src).validate());
    const rearrangement copy = p;
    CHECK(copy == p);
    CHECK_NOTHROW(copy.validate());
  }
  // A plan differing only in its slots is a different plan.
  const vec src{0, 2};
  const auto canon = rearrangement::from_destinations(src, ranks{0, 0}, 1);
  const auto swapped =
      rearrangement::from_placements(src, std::vector<placement>{{0, 1}, {0, 0}}, 1);
  CHECK(canon != swapped);
  CHECK(compose(swapped, swapped) == canon);  // a swap twice is the identity
  CHECK(swapped.inverse() == swapped);
}

TEST_CASE("rearrangement: plans between different rank counts") {
  // 2 ranks → 5 ranks (scatter) and back (gather)
  const vec src{0, 4, 6};
  const auto scatter = rearrangement::from_destinations(src, ranks{4, 0, 2, 0, 1, 4}, 5);
  CHECK(scatter.num_src_ranks() == 2);
  CHECK(scatter.num_dst_ranks() == 5);
  CHECK(to_vec(scatter.dst_offsets()) == vec{0, 2, 3, 4, 4, 6});
  CHECK(scatter.count_matrix() == vec{2, 0, 1, 0, 1,  //
                                      0, 1, 0, 0, 1});
  const auto gather =
      rearrangement::from_destinations(scatter.dst_offsets(), ranks{0, 0, 0, 1, 1, 1}, 2);
  const auto round_trip = compose(gather, scatter);
  CHECK(round_trip.num_src_ranks() == 2);
  CHECK(round_trip.num_dst_ranks() == 2);
  check_consistent(round_trip);
  CHECK(compose(scatter.inverse(), scatter) == rearrangement::identity(src));
  // everything onto one rank
  const auto all_to_one = rearrangement::from_destinations(src, ranks(6, 0), 1);
  CHECK(to_vec(all_to_one.dst_offsets()) == vec{0, 6});
  CHECK(to_vec(all_to_one.sources()) == vec{0, 1, 2, 3, 4, 5});
  CHECK(all_to_one.recv_counts(0) == vec{4, 2});
}

namespace {

// FNV-1a written out from the documented definition (offset basis 14695981039346656037, prime
// 1099511628211, every value as 8 little-endian bytes): |src_offsets|, src_offsets,
// |dst_offsets|, dst_offsets, then per source item its destination rank (as uint32) and slot.
std::uint64_t reference_fingerprint(const vec& src, const vec& dst, const ranks& rank_of,
                                    const vec& slot_of) {
  // The definition: FNV-1a over each offset array's size and word digest, then the word
  // digest of (rank, slot) per item, fed one word at a time.
  std::uint64_t h = 14695981039346656037ULL;
  auto bytes_of = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<std::uint8_t>(v >> (8 * i));
      h *= 1099511628211ULL;
    }
  };
  auto digest_of = [](const vec& v) {
    orchmllm::detail::word_digest w;
    for (const auto x : v) w.add(static_cast<std::uint64_t>(x));
    return w.finish();
  };
  bytes_of(src.size());
  bytes_of(digest_of(src));
  bytes_of(dst.size());
  bytes_of(digest_of(dst));
  orchmllm::detail::word_digest items;
  for (std::size_t g = 0; g < rank_of.size(); ++g) {
    items.add(static_cast<std::uint32_t>(rank_of[g]));
    items.add(static_cast<std::uint64_t>(slot_of[g]));
  }
  bytes_of(items.finish());
  return h;
}

}  // namespace

TEST_CASE("rearrangement: fingerprint follows its definition and separates plans") {
  using orchmllm::fingerprint;
  // The empty plan and a hand example, against the written-out definition.
  const rearrangement empty;
  CHECK(fingerprint(empty) == reference_fingerprint(vec{0}, vec{0}, ranks{}, vec{}));
  const vec src{0, 3, 3, 5};
  const auto p = rearrangement::from_destinations(src, ranks{1, 0, 1, 1, 0}, 3);
  CHECK(fingerprint(p) ==
        reference_fingerprint(src, vec{0, 2, 5, 5}, ranks{1, 0, 1, 1, 0}, vec{0, 0, 1, 2, 1}));

  // Equal plans, however built, have equal fingerprints.
  const auto same = rearrangement::from_placements(
      src, std::vector<placement>{{1, 0}, {0, 0}, {1, 1}, {1, 2}, {0, 1}}, 3);
  REQUIRE(same == p);
  CHECK(fingerprint(same) == fingerprint(p));
  const rearrangement copy = p;
  CHECK(fingerprint(copy) == fingerprint(p));
  CHECK(fingerprint(p.inverse().inverse()) == fingerprint(p));

  // Any single change changes it: one item's rank, a slot swap, the source offsets (same
  // destinations, items split differently), an extra empty rank on either side.
  CHECK(fingerprint(rearrangement::from_destinations(src, ranks{1, 0, 1, 2, 0}, 3)) !=
        fingerprint(p));
  CHECK(fingerprint(rearrangement::from_placements(
            src, std::vector<placement>{{1, 1}, {0, 0}, {1, 0}, {1, 2}, {0, 1}}, 3)) !=
        fingerprint(p));
  CHECK(fingerprint(rearrangement::from_destinations(vec{0, 2, 3, 5}, ranks{1, 0, 1, 1, 0}, 3)) !=
        fingerprint(p));
  CHECK(fingerprint(rearrangement::from_destinations(vec{0, 3, 3, 5, 5}, ranks{1, 0, 1, 1, 0},
                                                     3)) != fingerprint(p));
  CHECK(fingerprint(rearrangement::from_destinations(src, ranks{1, 0, 1, 1, 0}, 4)) !=
        fingerprint(p));
  CHECK(fingerprint(p.inverse()) != fingerprint(p));
  CHECK(fingerprint(rearrangement::identity(vec{0, 0})) !=
        fingerprint(rearrangement::identity(vec{0})));
}

TEST_CASE("rearrangement: fingerprint changes under every single mutation of random plans") {
  using orchmllm::fingerprint;
  std::mt19937_64 rng(99);
  std::int64_t compared = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const auto d = static_cast<rank_t>(uniform(rng, 1, 8));
    const auto n = uniform(rng, 1, 40);
    const auto src = random_offsets(rng, d, n);
    const auto p = random_plan(rng, src, d, iter % 2 == 1);
    const auto fp = fingerprint(p);
    INFO("iteration ", iter);
    REQUIRE(fp == fingerprint(rearrangement(p)));
    std::vector<placement> pl(static_cast<std::size_t>(n));
    for (std::int64_t g = 0; g < n; ++g) pl[static_cast<std::size_t>(g)] = p.destination_of(g);
    REQUIRE(rearrangement::from_placements(src, pl, d) == p);
    CHECK(fingerprint(rearrangement::from_placements(src, pl, d)) == fp);
    // Swap the destinations of every pair of items that land in different places.
    for (std::int64_t a = 0; a < n; ++a)
      for (std::int64_t b = a + 1; b < n; ++b) {
        auto q = pl;
        std::swap(q[static_cast<std::size_t>(a)], q[static_cast<std::size_t>(b)]);
        CHECK(fingerprint(rearrangement::from_placements(src, q, d)) != fp);
        ++compared;
      }
    // Move one item to the end of another rank.
    if (d > 1) {
      const auto g = uniform(rng, 0, n - 1);
      const auto from = p.dst_ranks()[static_cast<std::size_t>(g)];
      const auto to = static_cast<rank_t>((from + 1) % d);
      auto ranks_moved = ranks(p.dst_ranks().begin(), p.dst_ranks().end());
      ranks_moved[static_cast<std::size_t>(g)] = to;
      CHECK(fingerprint(rearrangement::from_destinations(src, ranks_moved, d)) !=
            fingerprint(rearrangement::from_destinations(
                src, ranks(p.dst_ranks().begin(), p.dst_ranks().end()), d)));
    }
  }
  CHECK(compared > 10000);
}

TEST_CASE("apply(ragged_rows): a row count × width past 2^63 is rejected, not wrapped") {
  const batch_layout layout({0, 1}, {1});
  const auto plan = rearrangement::identity(layout);
  ragged_rows<int> in;
  in.row_width = 4;
  in.row_offsets = {0, std::int64_t{1} << 62};  // 2^62 rows × 4 wraps to 0 elements unchecked
  expect_invalid([&] { (void)apply(plan, in); },
                 {"0 elements but offsets give 4611686018427387904 rows of width 4"});
  in.row_offsets = {0, 2};
  in.rows = {1, 2, 3, 4, 5, 6, 7, 8};
  CHECK(apply(plan, in).rows == in.rows);
  in.row_width = 0;
  in.rows.clear();
  CHECK(apply(plan, in).row_offsets == std::vector<std::int64_t>{0, 2});
}
