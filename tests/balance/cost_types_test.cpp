// Every arithmetic cost type the cost_model concept accepts works in every algorithm and in the
// statistics, with the plan of the same values in the computation type (cost_type_t): integral
// types of any width and signedness plan as std::int64_t, float as double. Signed and unsigned
// models of the same costs give identical plans on random inputs.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <type_traits>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/core/statistics.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using orchmllm::test::expect_invalid;
using orchmllm::test::uniform;

// cost(l) = l, returned as T. Lengths stay below 100 so every T (signed char included) holds them.
template <class T>
struct as_type {
  T operator()(std::int64_t l) const noexcept { return static_cast<T>(l); }
};

// A quadratic integer cost 3 + l + l²/16 in T.
template <class T>
struct quadratic_in {
  T operator()(std::int64_t l) const noexcept { return static_cast<T>(3 + l + l * l / 16); }
};

// n items on d ranks, lengths 0..max_len.
batch_layout random_layout(std::mt19937_64& rng, rank_t d, std::int64_t n, std::int64_t max_len) {
  return orchmllm::test::random_uniform_layout(rng, d, n, 0, max_len);
}

struct setting {
  any_balancer balancer;
  padding_policy policy;
};

std::vector<setting> settings() {
  return {{balancers::identity{}, packed},
          {balancers::lpt{.refine = true}, packed},
          {balancers::karmarkar_karp{.refine = true}, packed},
          {balancers::exact{}, packed},
          {balancers::automatic{}, packed},
          {balancers::locality{}, packed},
          {balancers::lpt{.refine = true}, padded},
          {balancers::padded_exact{}, padded},
          {balancers::automatic{}, padded},
          {balancers::automatic{}, padded_to_multiple(4)},
          {balancers::locality{}, padded}};
}

template <class T, class Reference, template <class> class Model>
void check_same_as_reference(const batch_layout& layout, const setting& s) {
  const Model<T> model;
  const Model<Reference> reference;
  static_assert(std::is_same_v<cost_type_t<Model<T>>, Reference>);
  any_balancer balancer = s.balancer;
  if (auto* l = balancer.get_if<balancers::locality>()) {
    l->node_of_rank.resize(static_cast<std::size_t>(layout.num_ranks()));
    for (rank_t r = 0; r < layout.num_ranks(); ++r)
      l->node_of_rank[static_cast<std::size_t>(r)] = r / 2;
  }
  const auto got = balance(layout, model, s.policy, balancer);
  const auto want = balance(layout, reference, s.policy, balancer);
  static_assert(std::is_same_v<decltype(got.makespan), Reference>);
  CHECK(std::ranges::equal(got.plan.dst_ranks(), want.plan.dst_ranks()));
  CHECK(std::ranges::equal(got.plan.dst_slots(), want.plan.dst_slots()));
  CHECK(got.makespan == want.makespan);
  CHECK(got.lower_bound == want.lower_bound);
  CHECK(got.used == want.used);
  const auto a = compute_statistics(layout, got.plan, model, s.policy);
  const auto b = compute_statistics(layout, want.plan, reference, s.policy);
  CHECK(a.load_after == b.load_after);
  CHECK(a.load_before == b.load_before);
  CHECK(a.lower_bound == b.lower_bound);
  CHECK(makespan_lower_bound(layout, layout.num_ranks(), model, s.policy) ==
        makespan_lower_bound(layout, layout.num_ranks(), reference, s.policy));
  CHECK(rank_loads(layout, model, s.policy) == rank_loads(layout, reference, s.policy));
}

template <class T>
void check_type(const char* name) {
  static_assert(cost_model<as_type<T>>);
  using Reference = std::conditional_t<std::is_integral_v<T>, std::int64_t,
                                       std::conditional_t<std::is_same_v<T, float>, double, T>>;
  std::mt19937_64 rng(2026);
  for (int trial = 0; trial < 6; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 6));
    const auto layout = random_layout(rng, d, uniform(rng, 0, 13), 99);
    for (const auto& s : settings()) {
      CAPTURE(name);
      CAPTURE(trial);
      CAPTURE(s.balancer.name());
      check_same_as_reference<T, Reference, as_type>(layout, s);
    }
  }
}

}  // namespace

TEST_CASE("every arithmetic cost type the concept accepts plans like its computation type") {
  static_assert(!cost_model<as_type<bool>>);
  check_type<char>("char");
  check_type<signed char>("signed char");
  check_type<unsigned char>("unsigned char");
  check_type<char8_t>("char8_t");
  check_type<char16_t>("char16_t");
  check_type<char32_t>("char32_t");
  check_type<wchar_t>("wchar_t");
  check_type<short>("short");
  check_type<unsigned short>("unsigned short");
  check_type<int>("int");
  check_type<unsigned>("unsigned");
  check_type<long>("long");
  check_type<unsigned long>("unsigned long");
  check_type<long long>("long long");
  check_type<unsigned long long>("unsigned long long");
  check_type<std::int8_t>("int8_t");
  check_type<std::uint64_t>("uint64_t");
  check_type<float>("float");
  check_type<double>("double");
  check_type<long double>("long double");
}

TEST_CASE("signed and unsigned models of the same costs give identical plans") {
  std::mt19937_64 rng(41);
  int cases = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const rank_t d = static_cast<rank_t>(uniform(rng, 1, 24));
    const std::int64_t n = uniform(rng, 0, trial < 40 ? 12 : 400);
    const auto layout = random_layout(rng, d, n, uniform(rng, 1, 5000));
    for (const auto& s : settings()) {
      if (s.balancer.name() == balancers::exact::name && n > 12) continue;
      CAPTURE(trial);
      CAPTURE(s.balancer.name());
      check_same_as_reference<std::uint32_t, std::int64_t, quadratic_in>(layout, s);
      check_same_as_reference<std::uint64_t, std::int64_t, quadratic_in>(layout, s);
      ++cases;
    }
  }
  CHECK(cases >= 600);
}

TEST_CASE("an unsigned cost above 2^63 - 1 is rejected, naming the length") {
  const auto layout = batch_layout::from_ranks({{1, 2}, {3}});
  const auto huge = [](std::int64_t l) {
    return l == 3 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(l);
  };
  expect_invalid([&] { (void)balance(layout, huge); }, {"length 3", "2^63 - 1"});
  expect_invalid([&] { (void)rank_loads(layout, huge, packed); }, {"length 3"});
}
