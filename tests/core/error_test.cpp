// Tests for include/orchmllm/core/error.hpp: the exception hierarchy, the message format
// (message + "[file:line]") and the lazy message construction of ORCHMLLM_REQUIRE.

#include "orchmllm/core/error.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"

namespace {

using orchmllm::error;
using orchmllm::infeasible_error;
using orchmllm::invalid_argument_error;
using orchmllm::parse_error;

// A message piece with its own `to_string` (found by argument-dependent lookup) that counts how
// often it was written into a message.
struct counted {
  static inline int writes = 0;
  int value = 0;
  friend std::string to_string(const counted& c) {
    ++writes;
    return "counted(" + std::to_string(c.value) + ")";
  }
};

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The basename of a path (both separators).
std::string basename_of(const std::string& path) {
  const auto p = path.find_last_of("/\\");
  return p == std::string::npos ? path : path.substr(p + 1);
}

}  // namespace

TEST_CASE("error: class hierarchy") {
  static_assert(std::is_base_of_v<std::runtime_error, error>);
  static_assert(std::is_base_of_v<error, invalid_argument_error>);
  static_assert(std::is_base_of_v<invalid_argument_error, parse_error>);
  static_assert(std::is_base_of_v<error, parse_error>);
  static_assert(std::is_base_of_v<error, infeasible_error>);
  static_assert(!std::is_base_of_v<invalid_argument_error, infeasible_error>);
  static_assert(!std::is_base_of_v<infeasible_error, invalid_argument_error>);
  static_assert(!std::is_base_of_v<parse_error, invalid_argument_error>);
  // Not std::invalid_argument: one catch (orchmllm::error) gets everything the library throws.
  static_assert(!std::is_base_of_v<std::invalid_argument, invalid_argument_error>);

  SUBCASE("caught as orchmllm::error") {
    CHECK_THROWS_AS(throw invalid_argument_error("a"), error);
    CHECK_THROWS_AS(throw parse_error("b"), error);
    CHECK_THROWS_AS(throw infeasible_error("c"), error);
    CHECK_THROWS_AS(throw error("d"), error);
  }
  SUBCASE("caught as std::runtime_error and std::exception") {
    CHECK_THROWS_AS(throw invalid_argument_error("a"), std::runtime_error);
    CHECK_THROWS_AS(throw parse_error("b"), std::runtime_error);
    CHECK_THROWS_AS(throw infeasible_error("c"), std::runtime_error);
    CHECK_THROWS_AS(throw infeasible_error("c"), std::exception);
  }
  SUBCASE("parse_error is an invalid_argument_error, infeasible_error is not") {
    CHECK_THROWS_AS(throw parse_error("b"), invalid_argument_error);
    bool caught_as_invalid = false;
    bool caught_as_infeasible = false;
    try {
      throw infeasible_error("c");
    } catch (const invalid_argument_error&) {
      caught_as_invalid = true;
    } catch (const infeasible_error&) {
      caught_as_infeasible = true;
    }
    CHECK_FALSE(caught_as_invalid);
    CHECK(caught_as_infeasible);
  }
  SUBCASE("the dynamic type survives a catch by base reference") {
    try {
      throw parse_error("line 3: bad");
    } catch (const error& e) {
      CHECK(dynamic_cast<const parse_error*>(&e) != nullptr);
      CHECK(dynamic_cast<const infeasible_error*>(&e) == nullptr);
    }
  }
}

TEST_CASE("error: message, what() and location") {
  SUBCASE("constructed directly: the location is the construction site") {
    const unsigned line = __LINE__ + 1;
    const infeasible_error e("total 17 exceeds cap 5 on 3 ranks");
    CHECK(e.message() == "total 17 exceeds cap 5 on 3 ranks");
    CHECK(e.line() == line);
    CHECK(basename_of(e.file()) == "error_test.cpp");
    const std::string what = e.what();
    CHECK(what.rfind("orchmllm: ", 0) == 0);
    CHECK(contains(what, "total 17 exceeds cap 5 on 3 ranks"));
    CHECK(ends_with(what, "error_test.cpp:" + std::to_string(line) + "]"));
    CHECK(contains(what, " ["));
  }
  SUBCASE("ORCHMLLM_REQUIRE: the location is the check") {
    const int value = 42;
    const int limit = 7;
    unsigned line = 0;
    try {
      line = __LINE__ + 1;
      ORCHMLLM_REQUIRE(value <= limit, invalid_argument_error, "value ", value, " above ", limit);
      FAIL("no throw");
    } catch (const invalid_argument_error& e) {
      CHECK(e.message() == "value 42 above 7");
      CHECK(e.line() == line);
      const std::string what = e.what();
      CHECK(what.rfind("orchmllm: value 42 above 7 [", 0) == 0);
      CHECK(ends_with(what, "error_test.cpp:" + std::to_string(line) + "]"));
    }
  }
  SUBCASE("an error raised inside a library header names orchmllm/<path>/<file>:line") {
    try {
      (void)orchmllm::batch_layout({0, 2}, {3, -5});
      FAIL("no throw");
    } catch (const invalid_argument_error& e) {
      const std::string what = e.what();
      CHECK(contains(what, "-5"));
      // The layout's checks live in detail/core/batch_layout.inl (core/batch_layout.hpp's bodies).
      CHECK(contains(what, "[orchmllm/detail/core/batch_layout.inl:"));
      CHECK(ends_with(what, ":" + std::to_string(e.line()) + "]"));
      CHECK(e.line() > 0);
      CHECK(ends_with(e.file(), "batch_layout.inl"));
      // message() is what() without the prefix and the location.
      CHECK(what == "orchmllm: " + e.message() + " [orchmllm/detail/core/batch_layout.inl:" +
                        std::to_string(e.line()) + "]");
    }
  }
  SUBCASE("detail::raise records its caller") {
    CHECK_THROWS_WITH_AS(orchmllm::detail::raise<parse_error>("line 9: not an integer"),
                         doctest::Contains("line 9: not an integer"), parse_error);
    unsigned line = 0;
    try {
      line = __LINE__ + 1;
      orchmllm::detail::raise<parse_error>("x");
    } catch (const parse_error& e) {
      CHECK(e.line() == line);
      CHECK(e.message() == "x");
    }
  }
  SUBCASE("copying keeps message and location") {
    const error original("copy me");
    const error copy = original;  // NOLINT(performance-unnecessary-copy-initialization)
    CHECK(copy.message() == "copy me");
    CHECK(copy.line() == original.line());
    CHECK(std::string(copy.what()) == original.what());
  }
}

TEST_CASE("error: ORCHMLLM_REQUIRE builds the message only on failure") {
  counted::writes = 0;
  int evaluated = 0;
  SUBCASE("passing checks never format the parts and evaluate the condition once") {
    for (int i = 0; i < 100; ++i) {
      ORCHMLLM_REQUIRE(++evaluated > 0, invalid_argument_error, "never ", counted{i});
    }
    CHECK(counted::writes == 0);
    CHECK(evaluated == 100);
  }
  SUBCASE("a failing check formats each part once, in order") {
    try {
      ORCHMLLM_REQUIRE(++evaluated < 0, infeasible_error, "a=", counted{1}, ", b=", counted{2});
      FAIL("no throw");
    } catch (const infeasible_error& e) {
      CHECK(e.message() == "a=counted(1), b=counted(2)");
    }
    CHECK(counted::writes == 2);
    CHECK(evaluated == 1);
  }
  SUBCASE("the thrown type is the one named") {
    CHECK_THROWS_AS(ORCHMLLM_REQUIRE(false, parse_error, "p"), parse_error);
    CHECK_THROWS_AS(ORCHMLLM_REQUIRE(false, infeasible_error, "i"), infeasible_error);
    CHECK_THROWS_AS(ORCHMLLM_REQUIRE(false, error, "e"), error);
    CHECK_NOTHROW(ORCHMLLM_REQUIRE(true, error, "e"));
  }
  SUBCASE("pieces are written as std::ostream writes them by default") {
    try {
      const std::string text = "s";
      const std::string_view view = "v";
      const char* pointer = "p";
      ORCHMLLM_REQUIRE(false, error, text, view, pointer, 'c', true, false, -12, 34u,
                       std::int64_t{-5'000'000'000}, std::uint64_t{18'000'000'000'000'000'000u},
                       ' ', 0.5, ' ', 1.0 / 3, ' ', 1e308, ' ', 2.0, ' ', 1e-7, ' ', 123456789.0,
                       ' ', 0.5f, ' ', -INFINITY);
      FAIL("no throw");
    } catch (const error& e) {
      CHECK(e.message() ==
            "svpc10-1234-500000000018000000000000000000 0.5 0.333333 1e+308 2 1e-07 1.23457e+08 "
            "0.5 -inf");
    }
  }
  SUBCASE("behaves as one statement (if/else without braces)") {
    int branch = 0;
    const bool flag = false;
    if (flag)
      ORCHMLLM_REQUIRE(false, error, "unreachable");
    else
      branch = 2;
    CHECK(branch == 2);
  }
  SUBCASE("mixed streamable parts") {
    const std::string s = "str";
    const std::int64_t big = INT64_MIN;
    CHECK_THROWS_WITH_AS(ORCHMLLM_REQUIRE(false, error, s, ' ', 1.5, ' ', big, ' ', 7u),
                         doctest::Contains("str 1.5 -9223372036854775808 7"), error);
  }
}

TEST_CASE("error: detail::concat") {
  CHECK(orchmllm::detail::concat() == "");
  CHECK(orchmllm::detail::concat("a", 1, 'b', std::string("c"), 2.25) == "a1bc2.25");
  CHECK(orchmllm::detail::concat(std::int64_t{-3}, " items") == "-3 items");
}
