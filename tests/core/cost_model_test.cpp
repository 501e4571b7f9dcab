// Tests for include/orchmllm/core/cost_model.hpp: the cost_model concept, linear_cost,
// quadratic_cost, transformer_flops_cost (against an independent FLOP count) and
// fit_quadratic_cost (exact recovery, clamping, NNLS optimality, errors).

#include "orchmllm/core/cost_model.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "orchmllm/core/error.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::cost_model;
using orchmllm::cost_type_t;
using orchmllm::fit_quadratic_cost;
using orchmllm::linear_cost;
using orchmllm::quadratic_cost;
using orchmllm::test::expect_invalid;
using orchmllm::transformer_config;
using orchmllm::transformer_flops_cost;

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

// Residual Σ (pred - t)² of a model on the data.
double sse(const quadratic_cost& q, const std::vector<std::int64_t>& l,
           const std::vector<double>& t) {
  double s = 0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    const double e = q(l[i]) - t[i];
    s += e * e;
  }
  return s;
}

// Checks the KKT conditions of non-negative least squares for the fitted model, in the scaled
// variables x = l / max_l the fit uses (so the three gradient components are comparable):
// gradient 0 where the coefficient is positive, gradient >= 0 where it is 0.
void check_nnls_kkt(const quadratic_cost& q, const std::vector<std::int64_t>& l,
                    const std::vector<double>& t, int degree) {
  double max_l = 0;
  for (auto v : l) max_l = std::max(max_l, static_cast<double>(v));
  const double coef[3] = {q.constant, q.linear * max_l, q.quadratic * max_l * max_l};
  double grad[3] = {0, 0, 0};
  double scale[3] = {0, 0, 0};
  for (std::size_t i = 0; i < l.size(); ++i) {
    const double x = static_cast<double>(l[i]) / max_l;
    const double phi[3] = {1, x, x * x};
    const double pred = coef[0] + x * (coef[1] + x * coef[2]);
    for (int j = 0; j < 3; ++j) {
      grad[j] += phi[j] * (pred - t[i]);
      scale[j] += phi[j] * (std::abs(pred) + std::abs(t[i]));
    }
  }
  for (int j = 0; j < 3; ++j) {
    if (j > degree) {
      CHECK(coef[j] == 0.0);
      continue;
    }
    const double tol = 1e-9 * (scale[j] + 1e-300);
    INFO("coefficient ", j, " = ", coef[j], ", gradient ", grad[j], ", tol ", tol);
    CHECK(coef[j] >= 0.0);
    if (coef[j] > 0) {
      CHECK(std::abs(grad[j]) <= tol);
    } else {
      CHECK(grad[j] >= -tol);
    }
  }
}

void check_non_decreasing(const quadratic_cost& q, std::int64_t up_to) {
  for (std::int64_t len = 0; len < up_to; ++len) REQUIRE(q(len + 1) >= q(len));
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
}

TEST_CASE("cost_model: fit_quadratic_cost recovers exact coefficients from noiseless data") {
  SUBCASE("degree 2, lengths spanning 16..32768") {
    const quadratic_cost truth{2e-3, 3e-6, 4e-10};
    const std::vector<std::int64_t> l{16, 100, 300, 1000, 4000, 16000, 32768, 77};
    std::vector<double> t;
    for (auto v : l) t.push_back(truth(v));
    const auto q = fit_quadratic_cost(l, t);
    CHECK(q.constant == doctest::Approx(truth.constant).epsilon(1e-8));
    CHECK(q.linear == doctest::Approx(truth.linear).epsilon(1e-8));
    CHECK(q.quadratic == doctest::Approx(truth.quadratic).epsilon(1e-8));
    CHECK(sse(q, l, t) <= 1e-20);
    check_nnls_kkt(q, l, t, 2);
  }
  SUBCASE("degree 2, exactly three distinct lengths (interpolation), repeated samples") {
    const quadratic_cost truth{1.0, 0.5, 0.125};
    const std::vector<std::int64_t> l{0, 4, 4, 8, 0, 8};
    std::vector<double> t;
    for (auto v : l) t.push_back(truth(v));
    const auto q = fit_quadratic_cost(l, t);
    CHECK(q.constant == doctest::Approx(1.0).epsilon(1e-10));
    CHECK(q.linear == doctest::Approx(0.5).epsilon(1e-10));
    CHECK(q.quadratic == doctest::Approx(0.125).epsilon(1e-10));
  }
  SUBCASE("degree 1") {
    const std::vector<std::int64_t> l{0, 1, 2, 3, 5, 8, 13, 21, 34, 55};
    std::vector<double> t;
    for (auto v : l) t.push_back(0.5 + 0.25 * static_cast<double>(v));
    const auto q = fit_quadratic_cost(l, t, 1);
    CHECK(q.constant == doctest::Approx(0.5).epsilon(1e-12));
    CHECK(q.linear == doctest::Approx(0.25).epsilon(1e-12));
    CHECK(q.quadratic == 0.0);
  }
  SUBCASE("degree 2 on linear data: no spurious curvature") {
    const std::vector<std::int64_t> l{10, 20, 40, 80, 160, 320};
    std::vector<double> t;
    for (auto v : l) t.push_back(3.0 + 2.0 * static_cast<double>(v));
    const auto q = fit_quadratic_cost(l, t);
    CHECK(q.constant == doctest::Approx(3.0).epsilon(1e-9));
    CHECK(q.linear == doctest::Approx(2.0).epsilon(1e-9));
    CHECK(q.quadratic >= 0.0);
    CHECK(q.quadratic * 320 * 320 <= 1e-9 * 643.0);
  }
  SUBCASE("pure quadratic data") {
    const std::vector<std::int64_t> l{1, 2, 3, 4, 5, 6};
    std::vector<double> t;
    for (auto v : l) t.push_back(0.75 * static_cast<double>(v * v));
    const auto q = fit_quadratic_cost(l, t);
    CHECK(q.quadratic == doctest::Approx(0.75).epsilon(1e-10));
    CHECK(q.constant == doctest::Approx(0.0).epsilon(1e-10));  // NB: Approx(0) is absolute
    CHECK(std::abs(q.constant) <= 1e-10);
    CHECK(std::abs(q.linear) <= 1e-10);
    CHECK(q.constant >= 0.0);
    CHECK(q.linear >= 0.0);
  }
}

TEST_CASE("cost_model: fit_quadratic_cost clamps negative coefficients") {
  SUBCASE("data from a decreasing function: a constant model") {
    std::vector<std::int64_t> l;
    std::vector<double> t;
    double mean = 0;
    for (std::int64_t v = 0; v <= 50; ++v) {
      l.push_back(v);
      t.push_back(100.0 - static_cast<double>(v));
      mean += t.back();
    }
    mean /= static_cast<double>(l.size());
    for (int degree : {1, 2}) {
      const auto q = fit_quadratic_cost(l, t, degree);
      CHECK(q.constant == doctest::Approx(mean).epsilon(1e-12));
      CHECK(q.linear == 0.0);
      CHECK(q.quadratic == 0.0);
      check_non_decreasing(q, 200);
      check_nnls_kkt(q, l, t, degree);
    }
  }
  SUBCASE("a line through the origin when the intercept would be negative") {
    // t = l² on l = 1..10 fitted with a line: unconstrained intercept is -22, so NNLS drops the
    // constant and fits t ≈ b·l with b = Σ l³ / Σ l² = 3025 / 385.
    std::vector<std::int64_t> l;
    std::vector<double> t;
    for (std::int64_t v = 1; v <= 10; ++v) {
      l.push_back(v);
      t.push_back(static_cast<double>(v * v));
    }
    const auto q = fit_quadratic_cost(l, t, 1);
    CHECK(q.constant == 0.0);
    CHECK(q.linear == doctest::Approx(3025.0 / 385.0).epsilon(1e-12));
    CHECK(q.quadratic == 0.0);
    check_nnls_kkt(q, l, t, 1);
  }
  SUBCASE("concave data: degree 2 drops the quadratic term") {
    std::vector<std::int64_t> l;
    std::vector<double> t;
    for (std::int64_t v = 1; v <= 64; v *= 2) {
      l.push_back(v);
      t.push_back(std::sqrt(static_cast<double>(v)));
    }
    const auto q = fit_quadratic_cost(l, t);
    CHECK(q.quadratic == 0.0);
    CHECK(q.linear > 0.0);
    check_non_decreasing(q, 1000);
    check_nnls_kkt(q, l, t, 2);
  }
  SUBCASE("all-zero timings give the zero model") {
    const auto q =
        fit_quadratic_cost(std::vector<std::int64_t>{1, 2, 3}, std::vector<double>{0, 0, 0});
    CHECK(q == quadratic_cost{0, 0, 0});
  }
}

TEST_CASE("cost_model: fit_quadratic_cost is the NNLS optimum on random data") {
  std::mt19937_64 rng(7);
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };  // [0, 1)
  for (int iter = 0; iter < 300; ++iter) {
    const int degree = 1 + iter % 2;
    const int n = 3 + static_cast<int>(rng() % 30);
    const double max_len = iter % 3 == 0 ? 50.0 : 30000.0;
    // Shapes: increasing, decreasing, concave, convex, noise only; with noise.
    const int shape = static_cast<int>(rng() % 5);
    std::vector<std::int64_t> l;
    std::vector<double> t;
    for (int i = 0; i < n; ++i) {
      const auto v = static_cast<std::int64_t>(unit() * max_len);
      const double x = static_cast<double>(v) / max_len;
      double y = 0;
      switch (shape) {
        case 0:
          y = 0.1 + x + 0.5 * x * x;
          break;
        case 1:
          y = 2.0 - x;
          break;
        case 2:
          y = std::sqrt(x);
          break;
        case 3:
          y = x * x * x;
          break;
        default:
          y = 1.0;
          break;
      }
      y += 0.05 * (unit() - 0.5);
      l.push_back(v);
      t.push_back(std::max(0.0, y));
    }
    // make sure there are enough distinct lengths
    l[0] = 0;
    l[1] = static_cast<std::int64_t>(max_len);
    l[2] = static_cast<std::int64_t>(max_len / 2);
    INFO("iteration ", iter, " shape ", shape, " degree ", degree);
    const auto q = fit_quadratic_cost(l, t, degree);
    CHECK(q.constant >= 0.0);
    CHECK(q.linear >= 0.0);
    CHECK(q.quadratic >= 0.0);
    if (degree == 1) CHECK(q.quadratic == 0.0);
    check_nnls_kkt(q, l, t, degree);
    // No non-negative perturbation does better (convexity makes KKT sufficient; this is a
    // direct cross-check).
    const double best = sse(q, l, t);
    for (int k = 0; k < 20; ++k) {
      quadratic_cost p = q;
      p.constant = std::max(0.0, p.constant + 0.01 * (unit() - 0.5));
      p.linear = std::max(0.0, p.linear + 0.01 / max_len * (unit() - 0.5));
      if (degree == 2)
        p.quadratic = std::max(0.0, p.quadratic + 0.01 / (max_len * max_len) * (unit() - 0.5));
      CHECK(sse(p, l, t) >= best * (1 - 1e-9));
    }
    // deterministic
    CHECK(fit_quadratic_cost(l, t, degree) == q);
  }
}

TEST_CASE("cost_model: fit_quadratic_cost errors") {
  using L = std::vector<std::int64_t>;
  using T = std::vector<double>;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_invalid(
      [] {
        (void)fit_quadratic_cost(L{1, 2, 3}, T{1, 2});
      },
      {"3 lengths but 2 timings"});
  expect_invalid(
      [] {
        (void)fit_quadratic_cost(L{5, 5, 7}, T{1, 1, 2});
      },
      {"at least 3 distinct lengths, got 2"});
  expect_invalid(
      [] {
        (void)fit_quadratic_cost(L{4, 4, 4}, T{1, 1, 1}, 1);
      },
      {"at least 2 distinct lengths, got 1"});
  expect_invalid([] { (void)fit_quadratic_cost(L{}, T{}); }, {"got 0"});
  expect_invalid(
      [] {
        (void)fit_quadratic_cost(L{1, -3, 5}, T{1, 1, 1});
      },
      {"sample 1", "negative length -3"});
  expect_invalid(
      [&] {
        (void)fit_quadratic_cost(L{1, 2, 5}, T{nan, 1, 1});
      },
      {"sample 0", "has time", "finite"});
  expect_invalid([&] { (void)fit_quadratic_cost(L{1, 2, 5}, T{1, inf, 1}); }, {"sample 1", "inf"});
  expect_invalid([] { (void)fit_quadratic_cost(L{1, 2, 5}, T{1, 1, -0.5}); }, {"sample 2", "-0.5"});
  expect_invalid([] { (void)fit_quadratic_cost(L{1, 2, 5}, T{1, 1, 1}, 3); }, {"degree is 3"});
  expect_invalid([] { (void)fit_quadratic_cost(L{1, 2, 5}, T{1, 1, 1}, 0); }, {"degree is 0"});
}
