// Tests for include/orchmllm/core/constraints.hpp: defaults, any(), and check(): invalid values
// (invalid_argument_error) versus infeasible counts (infeasible_error), with the values named.

#include "orchmllm/core/constraints.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::capacity;
using orchmllm::constraints;
using orchmllm::infeasible_error;
using orchmllm::invalid_argument_error;
using orchmllm::test::expect_error;

constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

constraints make(std::int64_t min_items, std::int64_t max_items) {
  constraints c;
  c.min_items = min_items;
  c.max_items = max_items;
  return c;
}

}  // namespace

TEST_CASE("constraints: defaults and any()") {
  const constraints none;
  CHECK_FALSE(none.any());
  CHECK_FALSE(none.cap.has_value());
  CHECK(none.min_items == 0);
  CHECK(none.max_items == int64_max);
  CHECK(none == constraints{});

  const capacity cap;
  CHECK(cap.what == capacity::measure::tokens);
  CHECK(cap.limit == int64_max);

  constraints c;
  c.cap = capacity{capacity::measure::bytes, 1 << 20};
  CHECK(c.any());
  CHECK(c != none);
  CHECK(c.cap->what == capacity::measure::bytes);
  // A cap is a constraint even when it is huge.
  c.cap = capacity{};
  CHECK(c.any());

  CHECK(make(1, int64_max).any());
  CHECK(make(0, 5).any());
  CHECK_FALSE(make(0, int64_max).any());
  CHECK(make(1, 4) == make(1, 4));
  CHECK(make(1, 4) != make(1, 5));
}

TEST_CASE("constraints: check() accepts feasible counts, including boundaries") {
  CHECK_NOTHROW(constraints{}.check(0, 0));
  CHECK_NOTHROW(constraints{}.check(0, 7));
  CHECK_NOTHROW(constraints{}.check(1000, 3));
  CHECK_NOTHROW(make(2, 2).check(8, 4));  // exactly d · min = d · max
  CHECK_NOTHROW(make(2, 3).check(8, 4));
  CHECK_NOTHROW(make(2, 3).check(12, 4));
  CHECK_NOTHROW(make(5, 9).check(0, 0));  // no ranks, no items: nothing to place
  constraints capped;
  capped.cap = capacity{capacity::measure::tokens, 0};  // a zero cap is a valid value
  CHECK_NOTHROW(capped.check(3, 2));
}

TEST_CASE("constraints: check() rejects invalid values") {
  expect_error<invalid_argument_error>([] { make(-1, 5).check(4, 2); }, {"min_items is -1"});
  expect_error<invalid_argument_error>([] { make(3, 2).check(4, 2); },
                                       {"max_items 2 is below min_items 3"});
  expect_error<invalid_argument_error>(
      [] {
        constraints c;
        c.cap = capacity{capacity::measure::bytes, -5};
        c.check(4, 2);
      },
      {"capacity -5 is negative"});
  expect_error<invalid_argument_error>([] { constraints{}.check(-1, 2); }, {"-1 items on 2 ranks"});
  expect_error<invalid_argument_error>([] { constraints{}.check(3, -2); }, {"3 items on -2 ranks"});
  // Invalid values are reported even when the counts would make the problem infeasible too.
  CHECK_THROWS_AS(make(-1, 5).check(4, 0), invalid_argument_error);
}

TEST_CASE("constraints: check() reports infeasible counts with n, d and the limit") {
  expect_error<infeasible_error>([] { constraints{}.check(5, 0); }, {"5 items but no ranks"});
  expect_error<infeasible_error>([] { make(2, int64_max).check(7, 4); },
                                 {"7 items", "4 ranks", "at least 2"});
  expect_error<infeasible_error>([] { make(1, int64_max).check(0, 3); },
                                 {"0 items", "3 ranks", "at least 1"});
  expect_error<infeasible_error>([] { make(0, 2).check(9, 4); },
                                 {"9 items do not fit on 4 ranks of at most 2 items"});
  expect_error<infeasible_error>([] { make(0, 0).check(1, 1000); },
                                 {"1 items", "1000 ranks", "at most 0"});
  // infeasible_error is not an invalid_argument_error
  CHECK_THROWS_AS(make(0, 2).check(9, 4), orchmllm::error);
  bool caught_as_invalid = false;
  try {
    make(0, 2).check(9, 4);
  } catch (const invalid_argument_error&) {
    caught_as_invalid = true;
  } catch (const infeasible_error&) {
  }
  CHECK_FALSE(caught_as_invalid);
}

TEST_CASE("constraints: check() has no overflow at 64-bit extremes") {
  // ⌈n / d⌉ must not be computed as (n + d - 1) / d.
  CHECK_NOTHROW(make(0, int64_max / 3 + 1).check(int64_max, 3));
  CHECK_THROWS_AS(make(0, int64_max / 3).check(int64_max, 3), infeasible_error);
  CHECK_NOTHROW(make(0, 1).check(int64_max, int64_max));
  CHECK_NOTHROW(make(1, 1).check(int64_max, int64_max));
  CHECK_NOTHROW(make(int64_max / 2, int64_max).check(int64_max, 2));
  CHECK_THROWS_AS(make(int64_max / 2 + 1, int64_max).check(int64_max, 2), infeasible_error);
  CHECK_NOTHROW(constraints{}.check(int64_max, 1));
}

TEST_CASE("constraints: check() agrees with d·min <= n <= d·max exhaustively") {
  for (std::int64_t n = 0; n <= 13; ++n) {
    for (std::int64_t d = 0; d <= 5; ++d) {
      for (std::int64_t lo = 0; lo <= 5; ++lo) {
        for (std::int64_t hi = lo; hi <= 6; ++hi) {
          const bool feasible = d == 0 ? n == 0 : (d * lo <= n && n <= d * hi);
          INFO("n ", n, " d ", d, " min ", lo, " max ", hi);
          if (feasible) {
            CHECK_NOTHROW(make(lo, hi).check(n, d));
          } else {
            CHECK_THROWS_AS(make(lo, hi).check(n, d), infeasible_error);
          }
        }
      }
    }
  }
}
