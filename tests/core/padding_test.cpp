// Tests for include/orchmllm/core/padding.hpp: the padding policies (bucketed and the trainer's
// own rules included) and the rank_load state (add, remove, load_if_added, token and byte
// footprints) against hand values and an independent model.

#include "orchmllm/core/padding.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "support/padding_rules.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::invalid_argument_error;
using orchmllm::linear_cost;
using orchmllm::padding_policy;
using orchmllm::quadratic_cost;
using orchmllm::rank_load;
using orchmllm::test::expect_invalid;

// Usable at compile time.
static_assert(orchmllm::packed.padded_length(5) == 5);
static_assert(!orchmllm::packed.is_padded());
static_assert(orchmllm::padded.is_padded());
static_assert(orchmllm::padded.multiple() == 1);
static_assert(orchmllm::padded_to_multiple(4).padded_length(5) == 8);
static_assert(orchmllm::padded_to_multiple(4).padded_length(8) == 8);
static_assert(orchmllm::padded_to_multiple(4).padded_length(0) == 0);
static_assert(orchmllm::padding_policy::padded(16).multiple() == 16);
static_assert([] {
  rank_load<std::int64_t> acc(orchmllm::padded);
  acc.add(3, 3, 30);
  acc.add(5, 5, 10);
  return acc.load(linear_cost{}) == 10 && acc.tokens() == 10 && acc.bytes() == 60;
}());

// A policy is one small value (every rank_load holds one; balancers keep a rank_load per rank),
// and the add-only state is a trivially copyable value (the exact search copies it per node).
static_assert(sizeof(padding_policy) <= 16);
static_assert(std::is_trivially_copyable_v<padding_policy>);
static_assert(std::is_trivially_copyable_v<rank_load<double, orchmllm::rank_load_mode::add_only>>);
// 88: the padded rows (segments) joined the item count.
static_assert(sizeof(rank_load<double, orchmllm::rank_load_mode::add_only>) <= 88);

// The model-caching add refuses a temporary model (its address could later be another model's).
template <class R, class M>
concept adds_with_model = requires(R r, M&& m) {
  r.add(1, 1.0, 1, std::forward<M>(m));
};
static_assert(adds_with_model<rank_load<double>, const quadratic_cost&>);
static_assert(!adds_with_model<rank_load<double>, quadratic_cost>);

struct item {
  std::int64_t length;
  std::int64_t bytes;
};

using orchmllm::test::at_least;  // support/padding_rules.hpp
using orchmllm::test::next_pow2;

// Rules that break the contract.
struct shrinks {
  [[nodiscard]] std::int64_t padded_length(std::int64_t l) const { return l / 2; }
  bool operator==(const shrinks&) const = default;
};

static_assert(orchmllm::padding_rule<next_pow2>);
static_assert(orchmllm::padding_rule<at_least>);
static_assert(!orchmllm::padding_rule<int>);
static_assert(!orchmllm::padding_rule<padding_policy::kind>);
static_assert(std::is_convertible_v<next_pow2, padding_policy>);
static_assert(!std::is_convertible_v<std::int64_t, padding_policy>);
static_assert(std::is_trivially_copyable_v<padding_policy>);

}  // namespace

TEST_CASE("padding: policy values") {
  const auto p = orchmllm::packed;
  CHECK(p.policy_kind() == padding_policy::kind::packed);
  CHECK_FALSE(p.is_padded());
  CHECK(p.multiple() == 1);
  CHECK(p == padding_policy::packed());

  const auto q = orchmllm::padded;
  CHECK(q.policy_kind() == padding_policy::kind::padded);
  CHECK(q.is_padded());
  CHECK(q.multiple() == 1);
  CHECK(q == padding_policy::padded());
  CHECK(q == padding_policy::padded(1));
  CHECK(q == orchmllm::padded_to_multiple(1));
  CHECK(q != p);

  const auto m = orchmllm::padded_to_multiple(8);
  CHECK(m.is_padded());
  CHECK(m.multiple() == 8);
  CHECK(m != q);
  CHECK(m == padding_policy::padded(8));
  CHECK(m != orchmllm::padded_to_multiple(16));
}

TEST_CASE("padding: bucketed policies") {
  const auto b = orchmllm::bucketed({512, 1024, 4096});
  CHECK(b.policy_kind() == padding_policy::kind::bucketed);
  CHECK(b.is_padded());
  CHECK(b.multiple() == 1);
  CHECK(b.buckets().size() == 3);
  CHECK(b == padding_policy::bucketed(std::vector<std::int64_t>{512, 1024, 4096}));
  CHECK(b != orchmllm::bucketed({512, 1024}));
  CHECK(b != orchmllm::padded);
  CHECK(orchmllm::packed.buckets().empty());
  // Equal lists are stored once: equal policies share their storage.
  CHECK(b.buckets().data() == orchmllm::bucketed({512, 1024, 4096}).buckets().data());
  CHECK(b.padded_length(0) == 512);
  CHECK(b.padded_length(1) == 512);
  CHECK(b.padded_length(512) == 512);
  CHECK(b.padded_length(513) == 1024);
  CHECK(b.padded_length(4096) == 4096);
  expect_invalid([&] { (void)b.padded_length(4097); }, {"length 4097", "largest bucket 4096"});

  expect_invalid([] { (void)orchmllm::bucketed(std::vector<std::int64_t>{}); },
                 {"at least one bucket"});
  expect_invalid([] { (void)orchmllm::bucketed({0, 4}); }, {"bucket length 0", ">= 1"});
  expect_invalid([] { (void)orchmllm::bucketed({8, 4}); }, {"strictly increasing", "8", "4"});
  expect_invalid([] { (void)orchmllm::bucketed({8, 8}); }, {"strictly increasing"});

  // A rank's load is count × cost(bucket of its longest item); footprints likewise.
  rank_load<std::int64_t> acc(b);
  acc.add(300, 300, 7);
  acc.add(600, 600, 3);
  CHECK(acc.load(linear_cost{}) == 2 * 1024);
  CHECK(acc.tokens() == 2 * 1024);
  CHECK(acc.bytes() == 2 * 7);
}

TEST_CASE("padding: padded_length") {
  for (std::int64_t l : std::vector<std::int64_t>{0, 1, 7, 8, 9, 1000, std::int64_t{1} << 40}) {
    CHECK(orchmllm::packed.padded_length(l) == l);
    CHECK(orchmllm::padded.padded_length(l) == l);
  }
  const auto m8 = orchmllm::padded_to_multiple(8);
  CHECK(m8.padded_length(0) == 0);
  CHECK(m8.padded_length(1) == 8);
  CHECK(m8.padded_length(7) == 8);
  CHECK(m8.padded_length(8) == 8);
  CHECK(m8.padded_length(9) == 16);
  CHECK(m8.padded_length(1000) == 1000);
  CHECK(m8.padded_length(1001) == 1008);
  const auto m3 = orchmllm::padded_to_multiple(3);
  for (std::int64_t l = 0; l < 100; ++l) {
    const auto p = m3.padded_length(l);
    CHECK(p % 3 == 0);
    CHECK(p >= l);
    CHECK(p < l + 3);
  }
}

TEST_CASE("padding: multiple < 1 throws") {
  for (std::int64_t k : {0, -1, -64}) {
    expect_invalid([&] { (void)orchmllm::padded_to_multiple(k); },
                   {"padding multiple is " + std::to_string(k), ">= 1"});
    CHECK_THROWS_AS((void)padding_policy::padded(k), invalid_argument_error);
  }
}

TEST_CASE("padding: rank_load hand values") {
  // items (length, bytes): (5, 50), (3, 10), (7, 20)
  const std::vector<item> items{{5, 50}, {3, 10}, {7, 20}};
  const linear_cost lin;
  const quadratic_cost quad{1.0, 2.0, 0.5};

  SUBCASE("packed") {
    rank_load<std::int64_t> a(orchmllm::packed);
    for (auto it : items) a.add(it.length, lin(it.length), it.bytes);
    CHECK(a.count() == 3);
    CHECK(a.max_length() == 7);
    CHECK(a.load(lin) == 15);
    CHECK(a.tokens() == 15);
    CHECK(a.bytes() == 80);

    rank_load<double> b(orchmllm::packed);
    for (auto it : items) b.add(it.length, quad(it.length), it.bytes);
    // (1 + 10 + 12.5) + (1 + 6 + 4.5) + (1 + 14 + 24.5)
    CHECK(b.load(quad) == 23.5 + 11.5 + 39.5);
    CHECK(b.tokens() == 15);
    CHECK(b.bytes() == 80);
  }
  SUBCASE("padded") {
    rank_load<std::int64_t> a(orchmllm::padded);
    for (auto it : items) a.add(it.length, lin(it.length), it.bytes);
    CHECK(a.load(lin) == 21);  // 3 × 7
    CHECK(a.tokens() == 21);   // 3 × 7
    CHECK(a.bytes() == 150);   // 3 × max bytes 50 (bytes are not padded to the multiple)

    rank_load<double> b(orchmllm::padded);
    for (auto it : items) b.add(it.length, quad(it.length), it.bytes);
    CHECK(b.load(quad) == 3 * 39.5);
  }
  SUBCASE("padded to a multiple of 4") {
    const auto policy = orchmllm::padded_to_multiple(4);
    rank_load<std::int64_t> a(policy);
    for (auto it : items) a.add(it.length, lin(it.length), it.bytes);
    CHECK(a.load(lin) == 24);  // 3 × 8
    CHECK(a.tokens() == 24);
    CHECK(a.bytes() == 150);
    CHECK(a.max_length() == 7);  // the raw maximum

    rank_load<double> b(policy);
    for (auto it : items) b.add(it.length, quad(it.length), it.bytes);
    CHECK(b.load(quad) == 3 * quad(8));  // 3 × (1 + 16 + 32)
    CHECK(b.load(quad) == 147.0);
  }
  SUBCASE("the largest length and the largest byte size may come from different items") {
    rank_load<std::int64_t> a(orchmllm::padded);
    a.add(10, 10, 1);
    a.add(2, 2, 99);
    CHECK(a.tokens() == 20);
    CHECK(a.bytes() == 198);
  }
}

TEST_CASE("padding: empty ranks and zero-length items") {
  const quadratic_cost quad{2.0, 1.0, 1.0};
  for (const auto policy : {orchmllm::packed, orchmllm::padded, orchmllm::padded_to_multiple(8)}) {
    rank_load<double> empty(policy);
    CHECK(empty.count() == 0);
    CHECK(empty.load(quad) == 0.0);  // no items, no constant cost
    CHECK(empty.tokens() == 0);
    CHECK(empty.bytes() == 0);

    rank_load<double> zeros(policy);
    for (int i = 0; i < 3; ++i) zeros.add(0, quad(0), 0);
    CHECK(zeros.count() == 3);
    CHECK(zeros.load(quad) == 6.0);  // 3 × constant, packed and padded alike
    CHECK(zeros.tokens() == 0);
    CHECK(zeros.bytes() == 0);
    CHECK(zeros.max_length() == 0);
  }
}

TEST_CASE("padding: rank_load matches an independent computation on random items") {
  std::mt19937_64 rng(99);
  const quadratic_cost quad{0.5, 1.0, 0.01};
  const linear_cost lin{3};
  for (int iter = 0; iter < 1000; ++iter) {
    const std::int64_t k = static_cast<std::int64_t>(rng() % 12);
    const std::int64_t multiple = 1 + static_cast<std::int64_t>(rng() % 9);
    std::vector<item> items;
    for (std::int64_t i = 0; i < k; ++i)
      items.push_back(
          {static_cast<std::int64_t>(rng() % 200), static_cast<std::int64_t>(rng() % 5000)});

    std::int64_t sum_len = 0, sum_bytes = 0, max_len = 0, max_bytes = 0;
    double sum_quad = 0;
    std::int64_t sum_lin = 0;
    for (auto it : items) {
      sum_len += it.length;
      sum_bytes += it.bytes;
      max_len = std::max(max_len, it.length);
      max_bytes = std::max(max_bytes, it.bytes);
      sum_quad += quad(it.length);
      sum_lin += lin(it.length);
    }
    const std::int64_t padded_len = (max_len + multiple - 1) / multiple * multiple;

    rank_load<std::int64_t> pl(orchmllm::packed);
    rank_load<double> pq(orchmllm::packed);
    rank_load<std::int64_t> dl(orchmllm::padded_to_multiple(multiple));
    rank_load<double> dq(orchmllm::padded_to_multiple(multiple));
    for (auto it : items) {
      pl.add(it.length, lin(it.length), it.bytes);
      pq.add(it.length, quad(it.length), it.bytes);
      dl.add(it.length, lin(it.length), it.bytes);
      dq.add(it.length, quad(it.length), it.bytes);
    }
    CHECK(pl.load(lin) == sum_lin);
    CHECK(pq.load(quad) == sum_quad);  // same order of additions: bit-identical
    CHECK(pl.tokens() == sum_len);
    CHECK(pl.bytes() == sum_bytes);
    CHECK(dl.load(lin) == k * lin(padded_len));
    CHECK(dq.load(quad) == static_cast<double>(k) * quad(padded_len));
    CHECK(dl.tokens() == k * padded_len);
    CHECK(dl.bytes() == k * max_bytes);
    CHECK(dl.count() == k);
    CHECK(dl.max_length() == max_len);
    // padding never lowers the load or the footprint
    CHECK(dq.load(quad) >= pq.load(quad) - 1e-9);
    CHECK(dl.tokens() >= pl.tokens());
    CHECK(dl.bytes() >= pl.bytes());
  }
}

TEST_CASE("padded_length and the padded footprints never overflow") {
  constexpr std::int64_t max = INT64_MAX;
  CHECK(padding_policy::padded(8).padded_length(max - 7) == max - 7);  // 2^63 - 8 is a multiple
  expect_invalid([] { (void)padding_policy::padded(8).padded_length(max - 6); },
                 {"length 9223372036854775801 padded to a multiple of 8 exceeds 2^63 - 1"});
  CHECK(padding_policy::padded(max).padded_length(1) == max);
  expect_invalid([] { (void)padding_policy::padded(max - 1).padded_length(max - 1 + 1); },
                 {"exceeds 2^63 - 1"});
  CHECK(padding_policy::padded(max).padded_length(0) == 0);
  CHECK(padding_policy::padded(max).padded_length(max) == max);
  rank_load<std::int64_t> acc(padding_policy::padded(1));
  acc.add(std::int64_t{1} << 62, 1, std::int64_t{1} << 62);
  CHECK(acc.tokens() == std::int64_t{1} << 62);
  acc.add(1, 1, 1);
  expect_invalid([&] { (void)acc.tokens(); },
                 {"2 items padded to 4611686018427387904 tokens each exceed 2^63 - 1 tokens"});
  expect_invalid([&] { (void)acc.bytes(); }, {"exceed 2^63 - 1 bytes"});
}

TEST_CASE("padding: a trainer's padding rule") {
  const padding_policy p = next_pow2{};
  CHECK(p.policy_kind() == padding_policy::kind::custom);
  CHECK(p.is_padded());
  CHECK(p.multiple() == 1);
  CHECK(p.buckets().empty());
  CHECK(p.rule_name() == "next_pow2");
  CHECK(orchmllm::padded.rule_name().empty());
  CHECK(p.padded_length(0) == 0);
  CHECK(p.padded_length(1) == 1);
  CHECK(p.padded_length(3) == 4);
  CHECK(p.padded_length(1024) == 1024);
  CHECK(p.padded_length(1025) == 2048);

  // Equal rules are one policy; different values, types or kinds are not.
  CHECK(p == padding_policy(next_pow2{}));
  const padding_policy a8 = at_least{8};
  CHECK(a8.rule_name() == "custom");
  CHECK(a8 == padding_policy(at_least{8}));
  CHECK(a8 != padding_policy(at_least{9}));
  CHECK(a8 != p);
  CHECK(a8 != orchmllm::padded);
  CHECK(a8.padded_length(3) == 8);
  CHECK(a8.padded_length(30) == 30);

  // A rule that pads below the length is refused where it is used.
  const padding_policy bad = shrinks{};
  CHECK(bad.padded_length(0) == 0);
  expect_invalid([&] { (void)bad.padded_length(10); },
                 {"padding rule 'custom'", "pads length 10 to 5", "below the length"});

  // The state combines by the rule: count × cost(pad(longest)).
  rank_load<std::int64_t> acc(p);
  acc.add(5, 5, 40);
  acc.add(3, 3, 70);
  CHECK(acc.load(linear_cost{}) == 2 * 8);
  CHECK(acc.tokens() == 2 * 8);
  CHECK(acc.bytes() == 2 * 70);
  CHECK(acc.load_if_added(9, 9, linear_cost{}) == 3 * 16);
}

TEST_CASE("padding: rank_load add, remove and load_if_added agree with a rebuilt state") {
  std::mt19937_64 rng(0x10ad);
  const quadratic_cost quad{0.5, 1.0, 0.01};
  const linear_cost lin{3};
  for (int iter = 0; iter < 300; ++iter) {
    CAPTURE(iter);
    const padding_policy policies[] = {orchmllm::packed,
                                       orchmllm::padded,
                                       orchmllm::padded_to_multiple(1 + iter % 7),
                                       orchmllm::bucketed({16, 64, 256}),
                                       next_pow2{},
                                       at_least{iter % 50}};
    for (const padding_policy policy : policies) {
      CAPTURE(static_cast<int>(policy.policy_kind()));
      std::vector<item> held;
      rank_load<std::int64_t> il(policy);
      rank_load<double> dq(policy);
      for (int step = 0; step < 24; ++step) {
        if (!held.empty() && rng() % 3 == 0) {
          // remove a random held item
          const auto i = static_cast<std::size_t>(rng() % held.size());
          const item it = held[i];
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
          il.remove(it.length, lin(it.length), it.bytes);
          dq.remove(it.length, quad(it.length), it.bytes);
        } else {
          const item it{static_cast<std::int64_t>(rng() % 200),
                        static_cast<std::int64_t>(rng() % 5000)};
          // load_if_added is the load after add
          const auto expect_l = il.load_if_added(it.length, lin(it.length), lin);
          held.push_back(it);
          il.add(it.length, lin(it.length), it.bytes);
          dq.add(it.length, quad(it.length), it.bytes);
          CHECK(il.load(lin) == expect_l);
        }
        rank_load<std::int64_t> fresh_l(policy);
        rank_load<double> fresh_q(policy);
        for (const auto& it : held) {
          fresh_l.add(it.length, lin(it.length), it.bytes);
          fresh_q.add(it.length, quad(it.length), it.bytes);
        }
        CHECK(il.count() == fresh_l.count());
        CHECK(il.max_length() == fresh_l.max_length());
        CHECK(il.load(lin) == fresh_l.load(lin));
        CHECK(il.tokens() == fresh_l.tokens());
        CHECK(il.bytes() == fresh_l.bytes());
        if (policy.is_padded()) {
          CHECK(dq.load(quad) == fresh_q.load(quad));  // a product: exact
        } else {
          CHECK(dq.load(quad) == doctest::Approx(fresh_q.load(quad)).epsilon(1e-12));
        }
      }
    }
  }
}

TEST_CASE("padding: rank_load remove refuses what the rank does not hold") {
  rank_load<std::int64_t> empty(orchmllm::packed);
  expect_invalid([&] { empty.remove(3, 3, 1); }, {"from an empty rank"});
  rank_load<std::int64_t> acc(orchmllm::padded);
  acc.add(5, 5, 10);
  expect_invalid([&] { acc.remove(4, 4, 10); }, {"holds no item of length 4", "10 bytes"});
  acc.remove(5, 5, 10);
  CHECK(acc.count() == 0);
  CHECK(acc.load(linear_cost{}) == 0);
  CHECK(acc.tokens() == 0);
}

TEST_CASE("padding: rank_load's cached unit and cap queries agree with a fresh evaluation") {
  // `cached` is kept through the model-taking add/remove, `plain` through the others: every
  // load (a sum or a product of the same values) must be the same bits, for the model the cache
  // was filled with and for another one; the cap queries must match the footprints.
  std::mt19937_64 rng(0xcac4e);
  const quadratic_cost quad{0.5, 1.0, 0.01};
  const quadratic_cost other{2.0, 0.5, 0.3};
  using orchmllm::capacity;
  for (int iter = 0; iter < 200; ++iter) {
    CAPTURE(iter);
    const padding_policy policies[] = {orchmllm::packed,
                                       orchmllm::padded,
                                       orchmllm::padded_to_multiple(1 + iter % 5),
                                       orchmllm::bucketed({16, 64, 256}),
                                       next_pow2{},
                                       at_least{iter % 40}};
    for (const padding_policy policy : policies) {
      CAPTURE(static_cast<int>(policy.policy_kind()));
      std::vector<item> held;
      rank_load<double> cached(policy);
      rank_load<double> plain(policy);
      for (int step = 0; step < 20; ++step) {
        if (!held.empty() && rng() % 3 == 0) {
          const auto i = static_cast<std::size_t>(rng() % held.size());
          const item it = held[i];
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
          cached.remove(it.length, quad(it.length), it.bytes, quad);
          plain.remove(it.length, quad(it.length), it.bytes);
        } else {
          const item it{static_cast<std::int64_t>(rng() % 200),
                        static_cast<std::int64_t>(rng() % 5000)};
          held.push_back(it);
          cached.add(it.length, quad(it.length), it.bytes, quad);
          plain.add(it.length, quad(it.length), it.bytes);
        }
        CHECK(cached.load(quad) == plain.load(quad));
        CHECK(cached.load(other) == plain.load(other));
        std::int64_t longest = 0;
        for (const auto& it : held) longest = std::max(longest, it.length);
        const double unit =
            policy.is_padded() && !held.empty() ? quad(policy.padded_length(longest)) : 0.0;
        CHECK(cached.unit(quad) == unit);
        CHECK(cached.unit(other) == plain.unit(other));
        const item probe{static_cast<std::int64_t>(rng() % 200),
                         static_cast<std::int64_t>(rng() % 5000)};
        CHECK(cached.load_if_added(probe.length, quad(probe.length), quad) ==
              plain.load_if_added(probe.length, quad(probe.length), quad));
        CHECK(cached.load_if_added(probe.length, other(probe.length), other) ==
              plain.load_if_added(probe.length, other(probe.length), other));
        rank_load<double> after = plain;
        after.add(probe.length, quad(probe.length), probe.bytes);
        for (const auto what : {capacity::measure::tokens, capacity::measure::bytes}) {
          const bool tokens = what == capacity::measure::tokens;
          const std::int64_t now = tokens ? plain.tokens() : plain.bytes();
          const std::int64_t next = tokens ? after.tokens() : after.bytes();
          for (const std::int64_t limit :
               {std::int64_t{0}, now, next, next - 1, static_cast<std::int64_t>(rng() % 20000)}) {
            if (limit < 0) continue;  // not a cap (constraints refuse it)
            CAPTURE(limit);
            const capacity cap{what, limit};
            CHECK(cached.fits(cap) == (now <= limit));
            CHECK(plain.fits(cap) == (now <= limit));
            CHECK(cached.fits_if_added(cap, probe.length, probe.bytes) == (next <= limit));
          }
        }
      }
    }
  }
}

TEST_CASE("padding: rank_load's cap queries never overflow") {
  using orchmllm::capacity;
  const std::int64_t big = std::int64_t{1} << 62;
  const capacity all_tokens{capacity::measure::tokens, INT64_MAX};
  const capacity all_bytes{capacity::measure::bytes, INT64_MAX};
  rank_load<double> one(orchmllm::padded);
  one.add(big, 1.0, big);
  CHECK(one.fits(all_tokens));
  CHECK(one.fits(all_bytes));
  CHECK_FALSE(one.fits_if_added(all_tokens, 1, 1));  // 2 × 2^62 tokens
  CHECK_FALSE(one.fits_if_added(all_bytes, 1, 1));   // 2 × 2^62 bytes
  // 5 items padded to 2^61 tokens and bytes: 5 · 2^61 > 2^63 − 1, while the sums stay small.
  rank_load<double> five(orchmllm::padded);
  five.add(big / 2, 1.0, big / 2);
  for (int i = 0; i < 4; ++i) five.add(1, 1.0, 1);
  CHECK_THROWS_AS((void)five.tokens(), invalid_argument_error);
  CHECK_THROWS_AS((void)five.bytes(), invalid_argument_error);
  CHECK_FALSE(five.fits(all_tokens));
  CHECK_FALSE(five.fits(all_bytes));
  five = rank_load<double>(orchmllm::padded);
  five.add(big / 2, 1.0, big / 2);
  for (int i = 0; i < 2; ++i) five.add(1, 1.0, 1);  // 3 · 2^61 fits
  CHECK(five.fits(all_tokens));
  CHECK_FALSE(five.fits_if_added(all_tokens, 1, 1));  // 4 · 2^61 = 2^63: one past the largest
  CHECK(five.tokens() == 3 * (big / 2));
  rank_load<double> packed(orchmllm::packed);
  packed.add(INT64_MAX - 5, 1.0, INT64_MAX - 5);
  CHECK(packed.fits(all_tokens));
  CHECK(packed.fits_if_added(all_tokens, 5, 5));
  CHECK_FALSE(packed.fits_if_added(all_tokens, 6, 6));
  CHECK_FALSE(packed.fits_if_added(all_bytes, 6, 6));
}

TEST_CASE("rank_load: items with segments are padded rows (item_shape)") {
  // A video of 3 segments of 4 (length 12) and an image of 6: 4 rows of the longest row, 6.
  const auto l =
      orchmllm::batch_layout({0, 2}, {12, 6}).with_equal_segments(std::vector<std::int64_t>{3, 1});
  const auto video = orchmllm::item_shape_of(l, 0);
  CHECK(video == orchmllm::item_shape{12, 12, 3, 4});
  CHECK(orchmllm::item_shape_of(l, 1) == orchmllm::item_shape{6, 6, 1, 6});
  const auto sq = [](std::int64_t x) { return x * x; };
  rank_load<std::int64_t> r(orchmllm::padded);
  r.add(video, 48, sq);
  CHECK(r.count() == 1);
  CHECK(r.rows() == 3);
  CHECK(r.max_length() == 4);
  CHECK(r.load(sq) == 3 * 16);
  CHECK(r.tokens() == 12);
  CHECK(r.load_if_added(orchmllm::item_shape_of(l, 1), 36, sq) == 4 * 36);
  const orchmllm::capacity cap{orchmllm::capacity::measure::tokens, 23};
  CHECK_FALSE(r.fits_if_added(cap, orchmllm::item_shape_of(l, 1)));  // 4 rows × 6 = 24
  CHECK(r.fits_if_added(orchmllm::capacity{orchmllm::capacity::measure::tokens, 24},
                        orchmllm::item_shape_of(l, 1)));
  r.add(orchmllm::item_shape_of(l, 1), 36, sq);
  CHECK(r.count() == 2);
  CHECK(r.rows() == 4);
  CHECK(r.load(sq) == 4 * 36);
  CHECK(r.tokens() == 24);
  CHECK(r.bytes() == 2 * 12);  // items × the widest item's bytes
  // Packed: the sum of the item costs; tokens the lengths.
  rank_load<std::int64_t> p(orchmllm::packed);
  p.add(video, 48);
  p.add(orchmllm::item_shape_of(l, 1), 36);
  CHECK(p.load(sq) == 84);
  CHECK(p.tokens() == 18);
  // Removal restores the rows and the longest row; a shape never added is named.
  r.remove(orchmllm::item_shape_of(l, 1), 36, sq);
  CHECK(r.rows() == 3);
  CHECK(r.load(sq) == 48);
  CHECK_THROWS_AS(r.remove(orchmllm::item_shape{6, 6, 2, 3}, 0), orchmllm::invalid_argument_error);
  // One row of its length is the old add: the same state.
  rank_load<std::int64_t> a(orchmllm::padded), b(orchmllm::padded);
  a.add(7, 49, 7);
  b.add(orchmllm::item_shape{7, 7, 1, 7}, 49);
  CHECK(a.load(sq) == b.load(sq));
  CHECK(a.rows() == b.rows());
  CHECK(a.tokens() == b.tokens());
}
