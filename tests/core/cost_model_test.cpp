// Tests for include/orchmllm/core/cost_model.hpp: the cost_model concept, linear_cost,
// quadratic_cost and transformer_flops_cost (against an independent FLOP count).

#include "orchmllm/core/cost_model.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::cost_model;
using orchmllm::cost_type_t;
using orchmllm::linear_cost;
using orchmllm::quadratic_cost;
using orchmllm::transformer_config;
using orchmllm::transformer_flops_cost;
using orchmllm::test::expect_invalid;

}  // namespace

// ---- concept ---------------------------------------------------------------------------------

// Candidate cost models. A named namespace, not an anonymous one: clang flags internal
// variables that are only used in decltype.
namespace cost_model_test_cases {

inline auto returns_int = [](std::int64_t l) { return static_cast<int>(l); };
inline auto returns_i64 = [](std::int64_t l) { return l; };
inline auto returns_double = [](std::int64_t l) { return 0.5 * static_cast<double>(l); };
inline auto returns_float = [](std::int64_t l) { return static_cast<float>(l); };
inline auto returns_unsigned = [](std::int64_t l) { return static_cast<unsigned>(l); };
inline auto generic = [](auto l) { return l * 2; };
inline auto takes_int = [](int l) { return l; };  // int64 converts implicitly: still a cost model
inline auto returns_bool = [](std::int64_t l) { return l > 3; };
inline auto returns_void = [](std::int64_t) {};
inline auto returns_string = [](std::int64_t l) { return std::to_string(l); };
inline auto returns_pointer = [](std::int64_t) { return static_cast<int*>(nullptr); };
inline auto returns_complex = [](std::int64_t l) {
  return std::complex<double>(static_cast<double>(l), 0);
};
inline auto takes_string = [](const std::string& s) { return static_cast<int>(s.size()); };
inline auto takes_two = [](std::int64_t a, std::int64_t b) { return a + b; };
inline auto non_copyable = [p = std::make_unique<int>(1)](std::int64_t l) { return l + *p; };
inline auto mutable_lambda = [n = 0](std::int64_t l) mutable { return l + ++n; };
inline double free_function(std::int64_t l) { return static_cast<double>(l); }
struct const_ref_result {
  int value = 1;
  const int& operator()(std::int64_t) const { return value; }
};

}  // namespace cost_model_test_cases

namespace {

using namespace cost_model_test_cases;

static_assert(cost_model<decltype(returns_int)>);
static_assert(cost_model<decltype(returns_i64)>);
static_assert(cost_model<decltype(returns_double)>);
static_assert(cost_model<decltype(returns_float)>);
static_assert(cost_model<decltype(returns_unsigned)>);
static_assert(cost_model<decltype(generic)>);
static_assert(cost_model<decltype(takes_int)>);
static_assert(cost_model<decltype(&free_function)>);
static_assert(cost_model<const_ref_result>);
static_assert(cost_model<linear_cost>);
static_assert(cost_model<quadratic_cost>);
static_assert(cost_model<transformer_flops_cost>);

static_assert(!cost_model<decltype(returns_bool)>);
static_assert(!cost_model<decltype(returns_void)>);
static_assert(!cost_model<decltype(returns_string)>);
static_assert(!cost_model<decltype(returns_pointer)>);
static_assert(!cost_model<decltype(returns_complex)>);
static_assert(!cost_model<decltype(takes_string)>);
static_assert(!cost_model<decltype(takes_two)>);
static_assert(!cost_model<decltype(non_copyable)>);
static_assert(!cost_model<decltype(mutable_lambda)>);  // balancers call through const&
static_assert(!cost_model<int>);
static_assert(!cost_model<double>);

// The computation type: integral results in std::int64_t, float in double (the result type
// itself stays visible as cost_result_t).
static_assert(std::is_same_v<orchmllm::cost_result_t<decltype(returns_int)>, int>);
static_assert(std::is_same_v<cost_type_t<decltype(returns_int)>, std::int64_t>);
static_assert(std::is_same_v<cost_type_t<decltype(returns_unsigned)>, std::int64_t>);
static_assert(std::is_same_v<cost_type_t<decltype(returns_float)>, double>);
static_assert(std::is_same_v<cost_type_t<decltype(returns_i64)>, std::int64_t>);
static_assert(std::is_same_v<cost_type_t<decltype(returns_double)>, double>);
static_assert(std::is_same_v<cost_type_t<decltype(generic)>, std::int64_t>);
static_assert(std::is_same_v<cost_type_t<const_ref_result>, std::int64_t>);
static_assert(std::is_same_v<cost_type_t<linear_cost>, std::int64_t>);
static_assert(std::is_same_v<cost_type_t<quadratic_cost>, double>);
static_assert(std::is_same_v<cost_type_t<transformer_flops_cost>, double>);

// linear_cost and quadratic_cost are usable in constant expressions.
static_assert(linear_cost{}(7) == 7);
static_assert(linear_cost{3}(7) == 21);
static_assert(quadratic_cost{1.0, 2.0, 3.0}(2) == 1.0 + 4.0 + 12.0);

// ---- helpers ---------------------------------------------------------------------------------

// FLOPs of one sequence counted the slow way: every matrix multiply as (rows × inner × cols × 2),
// attention per head and per query position over the keys it sees. Independent of the closed
// form in the header.
double naive_transformer_flops(const transformer_config& c, std::int64_t l) {
  const std::int64_t kv = c.kv_heads == 0 ? c.heads : c.kv_heads;
  const std::int64_t head_dim = c.hidden / c.heads;
  auto matmul = [](std::int64_t rows, std::int64_t inner, std::int64_t cols) {
    return 2.0 * static_cast<double>(rows) * static_cast<double>(inner) * static_cast<double>(cols);
  };
  double layer = 0;
  layer += matmul(l, c.hidden, c.heads * head_dim);  // Q
  layer += matmul(l, c.hidden, kv * head_dim);       // K
  layer += matmul(l, c.hidden, kv * head_dim);       // V
  for (std::int64_t head = 0; head < c.heads; ++head) {
    for (std::int64_t i = 0; i < l; ++i) {
      const std::int64_t keys = c.causal ? i + 1 : l;
      layer += matmul(1, head_dim, keys);  // scores q_i · K^T
      layer += matmul(1, keys, head_dim);  // weighted sum of V
    }
  }
  layer += matmul(l, c.heads * head_dim, c.hidden);             // output projection
  layer += matmul(l, c.hidden, c.ffn_hidden);                   // up
  if (c.gated_ffn) layer += matmul(l, c.hidden, c.ffn_hidden);  // gate
  layer += matmul(l, c.ffn_hidden, c.hidden);                   // down
  double total = static_cast<double>(c.layers) * layer;
  total += matmul(l, c.hidden, c.vocab);  // LM head
  return c.passes * total;
}

}  // namespace

TEST_CASE("cost_model: linear_cost") {
  const linear_cost unit;
  CHECK(unit(0) == 0);
  CHECK(unit(1) == 1);
  CHECK(unit(123456789012) == 123456789012);
  const linear_cost w{4};
  CHECK(w(0) == 0);
  CHECK(w(5) == 20);
  CHECK(w(std::int64_t{1} << 40) == (std::int64_t{1} << 42));
  CHECK(linear_cost{4} == w);
  CHECK(linear_cost{} != w);
  static_assert(linear_cost{3}(5) == 15);  // still a constant expression
}

TEST_CASE("cost_model: linear_cost is exact up to 2^63 - 1 and an overflow is an error") {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  CHECK(linear_cost{1}(max) == max);
  CHECK(linear_cost{max}(1) == max);
  CHECK(linear_cost{max}(0) == 0);
  CHECK(linear_cost{0}(max) == 0);
  CHECK(linear_cost{(std::int64_t{1} << 61) + 1}(3) == 3 * ((std::int64_t{1} << 61) + 1));
  CHECK(linear_cost{-1}(max) == -max);  // the library rejects negative costs, not the model
  CHECK(linear_cost{1}(min) == min);
  // 8 · (2^61 + 1) = 2^64 + 8 used to wrap to 8: the smallest cost of the item, a wrong plan.
  expect_invalid([] { (void)linear_cost{(std::int64_t{1} << 61) + 1}(8); },
                 {"linear_cost: weight 2305843009213693953 × length 8 overflows 2^63 - 1"});
  expect_invalid([] { (void)linear_cost{std::int64_t{1} << 62}(2); },
                 {"weight 4611686018427387904 × length 2 overflows 2^63 - 1"});
  expect_invalid([&] { (void)linear_cost{max}(2); }, {"overflows 2^63 - 1"});
  expect_invalid([&] { (void)linear_cost{2}(max); }, {"weight 2 ×", "overflows 2^63 - 1"});
  expect_invalid([&] { (void)linear_cost{-1}(min); }, {"overflows 2^63 - 1"});
  expect_invalid([&] { (void)linear_cost{2}(min); }, {"overflows -2^63"});
}

TEST_CASE("cost_model: detail::mul_overflows at the edges of std::int64_t") {
  using orchmllm::detail::mul_overflows;
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  struct row {
    std::int64_t a, b;
    bool overflows;
  };
  for (const auto& [a, b, overflows] : std::vector<row>{{0, min, false},
                                                        {1, min, false},
                                                        {-1, min, true},
                                                        {-1, max, false},
                                                        {2, std::int64_t{1} << 62, true},
                                                        {-2, std::int64_t{1} << 62, false},
                                                        {3037000499, 3037000499, false},
                                                        {3037000500, 3037000500, true},
                                                        {max, 1, false},
                                                        {max, 2, true},
                                                        {min / 2, 2, false},
                                                        {min / 2 - 1, 2, true}}) {
    CAPTURE(a);
    CAPTURE(b);
    std::int64_t out = 0;
    CHECK(mul_overflows(a, b, out) == overflows);
    CHECK(mul_overflows(b, a, out) == overflows);
    if (!overflows) CHECK(out == a * b);
  }
}

TEST_CASE("cost_model: quadratic_cost values and validation") {
  const quadratic_cost def;
  CHECK(def(0) == 0.0);
  CHECK(def(7) == 7.0);
  const quadratic_cost q{2.5, 0.5, 0.25};
  for (std::int64_t l : {0, 1, 2, 3, 10, 100, 4096}) {
    const double x = static_cast<double>(l);
    CHECK(q(l) == doctest::Approx(2.5 + 0.5 * x + 0.25 * x * x).epsilon(1e-15));
  }
  CHECK(q(0) == 2.5);
  CHECK(q(4) == 2.5 + 2.0 + 4.0);
  CHECK(q.validated() == q);
  CHECK(quadratic_cost{0, 0, 0}.validated() == quadratic_cost{0, 0, 0});

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_invalid(
      [] {
        (void)quadratic_cost{-1.0, 1.0, 0.0}.validated();
      },
      {"constant coefficient is -1", ">= 0"});
  expect_invalid(
      [] {
        (void)quadratic_cost{0.0, -0.5, 0.0}.validated();
      },
      {"linear coefficient is -0.5"});
  expect_invalid(
      [] {
        (void)quadratic_cost{0.0, 1.0, -2.0}.validated();
      },
      {"quadratic coefficient is -2"});
  expect_invalid(
      [&] {
        (void)quadratic_cost{0.0, nan, 0.0}.validated();
      },
      {"linear coefficient is", "finite"});
  expect_invalid(
      [&] {
        (void)quadratic_cost{0.0, 1.0, inf}.validated();
      },
      {"quadratic coefficient is inf"});
  expect_invalid(
      [&] {
        (void)quadratic_cost{-inf, 1.0, 0.0}.validated();
      },
      {"constant coefficient is -inf"});
}

TEST_CASE("cost_model: transformer_flops_cost against an independent count") {
  transformer_config c;
  c.hidden = 8;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 1;
  c.ffn_hidden = 16;
  c.vocab = 10;

  SUBCASE("hand values for the small config") {
    // Per token (linear part): per layer Q 2·8·8 + K,V 2·(2·8·4) + O 2·8·8 + FFN 3·(2·8·16)
    // = 128 + 128 + 128 + 768 = 1152; two layers 2304; LM head 2·8·10 = 160; total 2464.
    // Attention per layer: causal 2·h·l(l+1) = 16·l(l+1); full 4·h·l² = 32·l².
    c.passes = 1;
    c.causal = true;
    c.gated_ffn = true;
    const transformer_flops_cost f(c);
    CHECK(f(0) == 0.0);
    CHECK(f(1) == 2464.0 + 2 * 16.0 * 2);
    CHECK(f(5) == 2464.0 * 5 + 2 * 16.0 * 30);  // 13280
    c.passes = 3;
    CHECK(transformer_flops_cost(c)(5) == 39840.0);
    c.causal = false;
    CHECK(transformer_flops_cost(c)(5) == 3 * (2464.0 * 5 + 2 * 32.0 * 25));  // 41760
    c.gated_ffn = false;  // FFN 2·(2·8·16) = 512 per layer instead of 768
    CHECK(transformer_flops_cost(c)(5) == 3 * ((2464.0 - 2 * 256) * 5 + 2 * 32.0 * 25));
  }

  SUBCASE("closed form equals the naive count for every variant") {
    for (int gated = 0; gated < 2; ++gated) {
      for (int causal = 0; causal < 2; ++causal) {
        for (double passes : {1.0, 3.0}) {
          for (std::int64_t kv : {0, 1, 2}) {
            for (std::int64_t vocab : {0, 10}) {
              c.gated_ffn = gated == 1;
              c.causal = causal == 1;
              c.passes = passes;
              c.kv_heads = kv;
              c.vocab = vocab;
              const transformer_flops_cost f(c);
              for (std::int64_t l = 0; l <= 40; ++l) {
                INFO("gated ", gated, " causal ", causal, " passes ", passes, " kv ", kv, " vocab ",
                     vocab, " l ", l);
                CHECK(f(l) == doctest::Approx(naive_transformer_flops(c, l)).epsilon(1e-12));
              }
            }
          }
        }
      }
    }
  }

  SUBCASE("causal attention costs (l+1)/(2l) of full attention") {
    c.vocab = 0;
    c.ffn_hidden = 0;
    c.passes = 3;
    c.causal = true;
    const transformer_flops_cost causal(c);
    c.causal = false;
    const transformer_flops_cost full(c);
    // Projections only: 3 passes · 2 layers · (Q+K+V 2·8·16 + O 2·8·8) = 2304 per token.
    const double proj = 2304.0;
    for (std::int64_t l = 1; l < 50; ++l) {
      const double x = static_cast<double>(l);
      const double attn_causal = causal(l) - proj * x;
      const double attn_full = full(l) - proj * x;
      CHECK(attn_full == doctest::Approx(3.0 * 2 * 4 * 8 * x * x).epsilon(1e-12));
      CHECK(attn_causal == doctest::Approx(attn_full * (x + 1) / (2 * x)).epsilon(1e-12));
    }
  }

  SUBCASE("a 7B-class config: linear part is passes · 2 · parameters per token") {
    const transformer_config big;  // defaults: h 4096, 32 layers, 32 heads, f 11008, gated
    const transformer_flops_cost f(big);
    CHECK(f.config().kv_heads == 32);
    const double params = 32.0 * (4.0 * 4096 * 4096 + 3.0 * 4096 * 11008);  // 6,476,005,376
    CHECK(params == 6476005376.0);
    const double attention_l1 = 3.0 * 32 * 2 * 4096 * 2;  // causal, l = 1: l(l+1) = 2
    CHECK(f(1) == doctest::Approx(3.0 * 2.0 * params + attention_l1).epsilon(1e-15));
  }

  SUBCASE("non-decreasing and non-negative") {
    const transformer_flops_cost f(c);
    double prev = f(0);
    CHECK(prev >= 0.0);
    for (std::int64_t l = 1; l < 5000; ++l) {
      const double v = f(l);
      REQUIRE(v >= prev);
      prev = v;
    }
  }

  SUBCASE("kv_heads = 0 means kv_heads = heads") {
    c.kv_heads = 0;
    const transformer_flops_cost a(c);
    CHECK(a.config().kv_heads == 2);
    c.kv_heads = 2;
    const transformer_flops_cost b(c);
    for (std::int64_t l : {1, 7, 100}) CHECK(a(l) == b(l));
    CHECK(a.config().hidden == 8);
    CHECK(a.config().ffn_hidden == 16);
  }

  SUBCASE("ffn_hidden = 0 and vocab = 0 are allowed") {
    c.ffn_hidden = 0;
    c.vocab = 0;
    const transformer_flops_cost f(c);
    CHECK(f(3) == doctest::Approx(naive_transformer_flops(c, 3)).epsilon(1e-15));
  }
}

TEST_CASE("cost_model: transformer_config errors") {
  const transformer_config ok{8, 2, 2, 1, 16, true, true, 10, 3.0};
  CHECK_NOTHROW((void)transformer_flops_cost(ok));
  auto with = [&](auto mutate) {
    transformer_config c = ok;
    mutate(c);
    return c;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.hidden = 0; })); },
                 {"hidden 0"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.hidden = -8; })); },
                 {"hidden -8"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.layers = 0; })); },
                 {"layers 0"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.heads = 0; })); },
                 {"heads 0"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.kv_heads = -1; })); },
                 {"kv_heads -1"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.ffn_hidden = -1; })); },
                 {"ffn_hidden -1"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.vocab = -3; })); },
                 {"vocab -3"});
  expect_invalid(
      [&] {
        (void)transformer_flops_cost(with([](auto& c) {
          c.hidden = 10;
          c.heads = 3;
        }));
      },
      {"hidden 10 is not a multiple of heads 3"});
  expect_invalid(
      [&] {
        (void)transformer_flops_cost(with([](auto& c) {
          c.heads = 4;
          c.kv_heads = 3;
        }));
      },
      {"heads 4 is not a multiple of kv_heads 3"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.kv_heads = 4; })); },
                 {"heads 2 is not a multiple of kv_heads 4"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.passes = 0; })); },
                 {"passes is 0"});
  expect_invalid([&] { (void)transformer_flops_cost(with([](auto& c) { c.passes = -1; })); },
                 {"passes is -1"});
  expect_invalid([&] { (void)transformer_flops_cost(with([&](auto& c) { c.passes = nan; })); },
                 {"passes is"});
  // Factors past the double range would make cost(0) NaN (inf · 0): refused as an overflow.
  expect_invalid(
      [&] {
        (void)transformer_flops_cost(
            with([](auto& c) { c.passes = std::numeric_limits<double>::max(); }));
      },
      {"transformer_config: FLOPs per token (inf)", "overflow double"});
  const auto huge = with([](auto& c) {
    c.hidden = std::int64_t{1} << 62;
    c.heads = 1;
    c.kv_heads = 1;
    c.ffn_hidden = std::int64_t{1} << 62;
    c.layers = std::int64_t{1} << 62;
    c.passes = 1e260;  // about 10^56 FLOPs per token and pass: past 10^308
  });
  expect_invalid([&] { (void)transformer_flops_cost(huge); }, {"overflow double"});
  // The largest sizes with passes 3 stay finite (about 10^76 FLOPs per token).
  const transformer_flops_cost big(with([](auto& c) {
    c.hidden = std::int64_t{1} << 62;
    c.heads = 1;
    c.kv_heads = 1;
    c.ffn_hidden = std::int64_t{1} << 62;
    c.layers = std::int64_t{1} << 62;
  }));
  CHECK(std::isfinite(big(0)));
  CHECK(big(0) == 0.0);
  CHECK(std::isfinite(big(1)));
}
