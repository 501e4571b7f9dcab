// Tests for include/orchmllm/core/cost_fit.hpp: fit_quadratic_cost (exact recovery, clamping,
// NNLS optimality, errors) and cost_calibration, the fit from per-rank stage times (recovery
// under every padding policy, with and without the per-rank overhead, NNLS optimality against
// independently built features, noise, determinism, errors).

#include "orchmllm/core/cost_fit.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "support/test_support.hpp"

namespace {

using orchmllm::batch_layout;
using orchmllm::calibration_result;
using orchmllm::cost_calibration;
using orchmllm::fit_quadratic_cost;
using orchmllm::padding_policy;
using orchmllm::quadratic_cost;
using orchmllm::test::expect_invalid;

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

// A rank's time under `policy` for the model q plus a per-rank overhead, computed directly from
// the definition (not through the calibration's feature rows).
double rank_time(const quadratic_cost& q, double overhead, const padding_policy& policy,
                 const std::vector<std::int64_t>& lengths) {
  double t = overhead;
  if (lengths.empty()) return t;
  if (policy.is_padded()) {
    const auto longest = *std::max_element(lengths.begin(), lengths.end());
    return t + static_cast<double>(lengths.size()) * q(policy.padded_length(longest));
  }
  for (auto l : lengths) t += q(l);
  return t;
}

// Random ranks: 0..max_items items of lengths in [1, max_len].
std::vector<std::vector<std::int64_t>> random_ranks(std::mt19937_64& rng, int ranks, int max_items,
                                                    std::int64_t max_len) {
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(ranks));
  for (auto& r : out) {
    const auto n = static_cast<int>(rng() % static_cast<std::uint64_t>(max_items + 1));
    for (int i = 0; i < n; ++i)
      r.push_back(1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_len)));
  }
  return out;
}

}  // namespace

TEST_CASE("cost_fit: fit_quadratic_cost recovers exact coefficients from noiseless data") {
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

TEST_CASE("cost_fit: fit_quadratic_cost clamps negative coefficients") {
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

TEST_CASE("cost_fit: fit_quadratic_cost is the NNLS optimum on random data") {
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

TEST_CASE("cost_fit: fit_quadratic_cost errors") {
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

TEST_CASE("cost_fit: times whose squares overflow double are refused, not fitted to zero") {
  using L = std::vector<std::int64_t>;
  using T = std::vector<double>;
  const double big = 1e308;  // finite, but its square and any sum of two are not
  expect_invalid(
      [&] {
        (void)fit_quadratic_cost(L{1, 2, 5}, T{big, big, big});
      },
      {"fit_quadratic_cost: the squared errors overflow double", "1e+308"});
  expect_invalid([&] { (void)fit_quadratic_cost(L{1, 2}, T{1, big}, 1); }, {"overflow double"});
  // Large but representable times fit (and scale exactly with the times).
  const auto q = fit_quadratic_cost(L{1, 2, 5}, T{1e150, 2e150, 5e150}, 1);
  CHECK(std::isfinite(q.linear));
  CHECK(q.linear == doctest::Approx(1e150));
  for (const auto& policy : {orchmllm::packed, orchmllm::padded}) {
    cost_calibration calib(policy);
    for (int i = 0; i < 6; ++i) calib.add_rank(L{3 + i, 4}, i % 2 == 0 ? big : 1.0);
    expect_invalid([&] { (void)calib.fit(); },
                   {"cost_calibration: the squared errors overflow double", "1e+308"});
  }
}

TEST_CASE("cost_fit: cost_calibration recovers the model from noiseless rank times") {
  const quadratic_cost truth{2e-3, 3e-6, 4e-10};
  const double overhead = 0.01;
  const padding_policy policies[] = {orchmllm::packed, orchmllm::padded,
                                     orchmllm::padded_to_multiple(64),
                                     padding_policy::bucketed({512, 2048, 8192, 32768})};
  std::mt19937_64 rng(11);
  for (std::size_t k = 0; k < std::size(policies); ++k) {
    const auto& policy = policies[k];
    INFO("policy ", k);
    cost_calibration calib(policy);
    for (int step = 0; step < 4; ++step) {
      // Lengths up to 30000, 7500, 1875, 468 in the four steps, so the padded longest lengths
      // fall in every bucket (the coefficients are identifiable).
      const auto ranks = random_ranks(rng, 16, 6, 30000 >> (2 * step));
      std::vector<double> seconds;
      for (const auto& r : ranks) seconds.push_back(rank_time(truth, overhead, policy, r));
      calib.add_step(batch_layout::from_ranks(ranks), seconds);
    }
    CHECK(calib.observations() == 64);
    const calibration_result fit = calib.fit();
    CHECK(fit.observations == 64);
    CHECK(fit.cost.constant == doctest::Approx(truth.constant).epsilon(1e-7));
    CHECK(fit.cost.linear == doctest::Approx(truth.linear).epsilon(1e-7));
    CHECK(fit.cost.quadratic == doctest::Approx(truth.quadratic).epsilon(1e-7));
    CHECK(fit.overhead_seconds == doctest::Approx(overhead).epsilon(1e-7));
    CHECK(fit.rms_seconds <= 1e-12);
  }
  SUBCASE("degree 1, without the overhead") {
    const quadratic_cost line{0.5, 0.25, 0.0};
    cost_calibration calib(orchmllm::packed, 1, false);
    for (const auto& r : random_ranks(rng, 40, 5, 100))
      calib.add_rank(r, rank_time(line, 0.0, orchmllm::packed, r));
    const auto fit = calib.fit();
    CHECK(fit.cost.constant == doctest::Approx(0.5).epsilon(1e-10));
    CHECK(fit.cost.linear == doctest::Approx(0.25).epsilon(1e-10));
    CHECK(fit.cost.quadratic == 0.0);
    CHECK(fit.overhead_seconds == 0.0);
  }
}

TEST_CASE("cost_fit: cost_calibration is the NNLS optimum of the rank times") {
  // Features built here from the definition, independently of the calibration's rows; the fit
  // must satisfy the KKT conditions of min ‖Φx − t‖² s.t. x ≥ 0, in variables scaled to their
  // column's largest value, and no non-negative perturbation may do better.
  std::mt19937_64 rng(5);
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  for (int iter = 0; iter < 120; ++iter) {
    const int degree = 1 + iter % 2;
    const bool with_overhead = iter % 3 != 0;
    const padding_policy policy = iter % 4 == 0 ? orchmllm::padded : orchmllm::packed;
    const auto ranks = random_ranks(rng, 6 + static_cast<int>(rng() % 30), 5, 4000);
    // Shapes: increasing, decreasing in the load, noise only.
    const int shape = static_cast<int>(rng() % 3);
    std::vector<double> t;
    for (const auto& r : ranks) {
      double y = rank_time(quadratic_cost{1e-3, 2e-6, 1e-10}, 0.005, policy, r);
      if (shape == 1) y = std::max(0.0, 0.05 - y);
      if (shape == 2) y = 0.02;
      t.push_back(std::max(0.0, y * (1 + 0.1 * (unit() - 0.5))));
    }
    INFO("iteration ", iter, " degree ", degree, " overhead ", with_overhead, " shape ", shape);
    cost_calibration calib(policy, degree, with_overhead);
    for (std::size_t r = 0; r < ranks.size(); ++r) calib.add_rank(ranks[r], t[r]);
    const auto fit = calib.fit();
    const double x[4] = {fit.cost.constant, fit.cost.linear, fit.cost.quadratic,
                         fit.overhead_seconds};
    for (double v : x) CHECK(v >= 0.0);
    if (degree == 1) CHECK(fit.cost.quadratic == 0.0);
    if (!with_overhead) CHECK(fit.overhead_seconds == 0.0);
    // Columns of Φ: count, Σ l, Σ l² (or the padded forms), 1.
    std::vector<std::array<double, 4>> phi;
    for (const auto& r : ranks) {
      std::array<double, 4> row{0, 0, 0, 1};
      if (!r.empty()) {
        if (policy.is_padded()) {
          const auto p =
              static_cast<double>(policy.padded_length(*std::max_element(r.begin(), r.end())));
          const auto n = static_cast<double>(r.size());
          row = {n, n * p, n * p * p, 1};
        } else {
          row[0] = static_cast<double>(r.size());
          for (auto l : r) {
            row[1] += static_cast<double>(l);
            row[2] += static_cast<double>(l) * static_cast<double>(l);
          }
        }
      }
      phi.push_back(row);
    }
    auto sse = [&](const double* c) {
      double s = 0;
      for (std::size_t i = 0; i < phi.size(); ++i) {
        double pred = 0;
        for (int j = 0; j < 4; ++j) pred += phi[i][static_cast<std::size_t>(j)] * c[j];
        s += (pred - t[i]) * (pred - t[i]);
      }
      return s;
    };
    const bool active[4] = {true, true, degree == 2, with_overhead};
    for (int j = 0; j < 4; ++j) {
      if (!active[j]) continue;
      double top = 0, grad = 0, mag = 0;
      for (const auto& row : phi) top = std::max(top, row[static_cast<std::size_t>(j)]);
      if (top == 0) continue;
      for (std::size_t i = 0; i < phi.size(); ++i) {
        double pred = 0;
        for (int k = 0; k < 4; ++k) pred += phi[i][static_cast<std::size_t>(k)] * x[k];
        const double f = phi[i][static_cast<std::size_t>(j)] / top;
        grad += f * (pred - t[i]);
        mag += f * (std::abs(pred) + t[i]);
      }
      const double tol = 1e-8 * (mag + 1e-300);
      INFO("coefficient ", j, " = ", x[j], ", gradient ", grad, ", tol ", tol);
      if (x[j] > 0) {
        CHECK(std::abs(grad) <= tol);
      } else {
        CHECK(grad >= -tol);
      }
    }
    const double best = sse(x);
    CHECK(std::sqrt(best / static_cast<double>(phi.size())) ==
          doctest::Approx(fit.rms_seconds).epsilon(1e-9));
    for (int k = 0; k < 20; ++k) {
      double p[4];
      for (int j = 0; j < 4; ++j) {
        double top = 0;
        for (const auto& row : phi) top = std::max(top, row[static_cast<std::size_t>(j)]);
        p[j] = active[j] && top > 0 ? std::max(0.0, x[j] + 0.002 / top * (unit() - 0.5)) : x[j];
      }
      CHECK(sse(p) >= best * (1 - 1e-9));
    }
  }
}

TEST_CASE("cost_fit: cost_calibration under noise predicts rank times and is deterministic") {
  // Per-item times with 5 % multiplicative noise, observed only as rank sums over 8 warmup
  // steps of 64 ranks: the fitted model predicts fresh ranks' times within a few percent.
  const quadratic_cost truth{1e-3, 2e-6, 5e-10};
  std::mt19937_64 rng(3);
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  auto noisy_rank = [&](const std::vector<std::int64_t>& r) {
    double t = 0.004;
    for (auto l : r) t += truth(l) * (1 + 0.1 * (unit() - 0.5));
    return t;
  };
  cost_calibration calib;
  cost_calibration same;
  for (int step = 0; step < 8; ++step) {
    const auto ranks = random_ranks(rng, 64, 8, 16000);
    std::vector<double> seconds;
    for (const auto& r : ranks) seconds.push_back(noisy_rank(r));
    calib.add_step(batch_layout::from_ranks(ranks), seconds);
    for (std::size_t r = 0; r < ranks.size(); ++r) same.add_rank(ranks[r], seconds[r]);
  }
  const auto fit = calib.fit();
  const auto again = same.fit();
  CHECK(fit.cost == again.cost);  // add_step is add_rank per rank, bit for bit
  CHECK(fit.overhead_seconds == again.overhead_seconds);
  CHECK(fit.rms_seconds == again.rms_seconds);
  double worst = 0, mean = 0;
  int counted = 0;
  for (const auto& r : random_ranks(rng, 200, 8, 16000)) {
    if (r.empty()) continue;
    const double want = rank_time(truth, 0.004, orchmllm::packed, r);
    const double got = rank_time(fit.cost, fit.overhead_seconds, orchmllm::packed, r);
    worst = std::max(worst, std::abs(got - want) / want);
    mean += std::abs(got - want) / want;
    ++counted;
  }
  mean /= counted;
  INFO("relative error: mean ", mean, ", worst ", worst);
  CHECK(mean < 0.01);
  CHECK(worst < 0.05);
}

TEST_CASE("cost_fit: cost_calibration with equal item counts keeps the total constant") {
  // Every rank holds 4 items: the per-item constant a and the overhead are confounded; the fit
  // must still predict overhead + 4a right.
  const quadratic_cost truth{0.002, 1e-5, 0.0};
  std::mt19937_64 rng(9);
  cost_calibration calib(orchmllm::packed, 1);
  for (int r = 0; r < 32; ++r) {
    std::vector<std::int64_t> items;
    for (int i = 0; i < 4; ++i) items.push_back(1 + static_cast<std::int64_t>(rng() % 5000));
    calib.add_rank(items, rank_time(truth, 0.01, orchmllm::packed, items));
  }
  const auto fit = calib.fit();
  CHECK(fit.overhead_seconds + 4 * fit.cost.constant == doctest::Approx(0.01 + 4 * 0.002));
  CHECK(fit.cost.linear == doctest::Approx(1e-5).epsilon(1e-9));
  CHECK(fit.rms_seconds <= 1e-12);
}

TEST_CASE("cost_fit: cost_calibration errors") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  using L = std::vector<std::int64_t>;
  expect_invalid([] { cost_calibration c(orchmllm::packed, 3); }, {"degree is 3"});
  expect_invalid([] { cost_calibration c(orchmllm::packed, 0); }, {"degree is 0"});
  cost_calibration calib;
  expect_invalid([&] { calib.add_rank(L{1, -2}, 1.0); }, {"observation 0", "negative length -2"});
  expect_invalid([&] { calib.add_rank(L{1}, nan); }, {"observation 0", "finite"});
  expect_invalid([&] { calib.add_rank(L{1}, -1.0); }, {"observation 0", "-1"});
  CHECK(calib.observations() == 0);  // failed adds leave it unchanged
  const auto layout = batch_layout::from_ranks({{1, 2}, {3}});
  expect_invalid([&] { calib.add_step(layout, std::vector<double>{1.0}); },
                 {"add_step: 1 rank times for 2 ranks"});
  expect_invalid(
      [&] {
        calib.add_step(layout, std::vector<double>{1.0, nan});
      },
      {"add_step: rank 1", "finite"});
  CHECK(calib.observations() == 0);
  calib.add_step(layout, std::vector<double>{1.0, 2.0});
  calib.add_rank(L{}, 0.5);  // an empty rank observes the overhead
  CHECK(calib.observations() == 3);
  expect_invalid([&] { (void)calib.fit(); }, {"3 observations for 4 unknowns"});
  calib.add_rank(L{7, 8, 9}, 3.0);
  CHECK(calib.fit().observations == 4);
}
