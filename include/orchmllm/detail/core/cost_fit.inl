#pragma once
// The bodies of core/cost_fit.hpp, included by it at its end: the per-item fit
// (fit_quadratic_cost) and cost_calibration's observations and fit.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace orchmllm {

inline quadratic_cost fit_quadratic_cost(std::span<const std::int64_t> lengths,
                                         std::span<const double> seconds, int degree) {
  ORCHMLLM_REQUIRE(degree == 1 || degree == 2, invalid_argument_error, "degree is ", degree,
                   ", must be 1 or 2");
  ORCHMLLM_REQUIRE(lengths.size() == seconds.size(), invalid_argument_error, lengths.size(),
                   " lengths but ", seconds.size(), " timings");
  double max_len = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    ORCHMLLM_REQUIRE(lengths[i] >= 0, invalid_argument_error, "sample ", i, " has negative length ",
                     lengths[i]);
    ORCHMLLM_REQUIRE(std::isfinite(seconds[i]) && seconds[i] >= 0, invalid_argument_error,
                     "sample ", i, " has time ", seconds[i], ", must be finite and >= 0");
    max_len = std::max(max_len, static_cast<double>(lengths[i]));
  }
  {
    std::vector<std::int64_t> distinct(lengths.begin(), lengths.end());
    std::sort(distinct.begin(), distinct.end());
    const auto k = std::unique(distinct.begin(), distinct.end()) - distinct.begin();
    ORCHMLLM_REQUIRE(k >= degree + 1, invalid_argument_error, "fitting degree ", degree,
                     " needs at least ", degree + 1, " distinct lengths, got ", k);
  }
  const double scale = max_len > 0 ? max_len : 1.0;
  const int m = degree + 1;
  // Normal equations on scaled powers x = l / scale: G = Σ φφᵀ, r = Σ φ·t.
  detail::normal_equations eq;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const double x = static_cast<double>(lengths[i]) / scale;
    const double phi[3] = {1.0, x, x * x};
    eq.add_row(phi, m, seconds[i]);
  }
  auto residual = [&](const double* coef) {
    double s = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      const double x = static_cast<double>(lengths[i]) / scale;
      const double pred = coef[0] + rounded_mul(x, coef[1] + rounded_mul(x, coef[2]));
      s += rounded_mul(pred - seconds[i], pred - seconds[i]);
    }
    return s;
  };
  const auto best = detail::nnls_by_active_sets(eq, m, residual);
  // Times near the top of the double range overflow the squared errors and the sums of the
  // normal equations: every coefficient set then looks alike, and the result would be garbage.
  ORCHMLLM_REQUIRE(std::isfinite(residual(best.data())), invalid_argument_error,
                   "fit_quadratic_cost: the squared errors overflow double (times up to ",
                   *std::max_element(seconds.begin(), seconds.end()), " s)");
  return quadratic_cost{best[0], best[1] / scale, best[2] / (scale * scale)};
}

inline void cost_calibration::add_rank(std::span<const std::int64_t> lengths, double seconds) {
  ORCHMLLM_REQUIRE(std::isfinite(seconds) && seconds >= 0, invalid_argument_error, "observation ",
                   rows_.size(), " has time ", seconds, ", must be finite and >= 0");
  std::array<double, 4> row{0, 0, 0, 1.0};
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    ORCHMLLM_REQUIRE(lengths[i] >= 0, invalid_argument_error, "observation ", rows_.size(),
                     ": item ", i, " has negative length ", lengths[i]);
    longest = std::max(longest, lengths[i]);
  }
  const auto n = static_cast<double>(lengths.size());
  if (policy_.is_padded()) {
    if (!lengths.empty()) {
      const auto p = static_cast<double>(policy_.padded_length(longest));
      row[0] = n;
      row[1] = rounded_mul(n, p);
      row[2] = rounded_mul(row[1], p);
    }
  } else {
    row[0] = n;
    for (const auto l : lengths) {
      const auto x = static_cast<double>(l);
      row[1] += x;
      row[2] += rounded_mul(x, x);
    }
  }
  rows_.push_back(row);
  seconds_.push_back(seconds);
}

inline calibration_result cost_calibration::fit() const {
  const int m = degree_ + 1;
  const std::size_t unknowns = static_cast<std::size_t>(m) + (overhead_ ? 1 : 0);
  ORCHMLLM_REQUIRE(rows_.size() >= unknowns, invalid_argument_error,
                   "cost_calibration: ", rows_.size(), " observations for ", unknowns, " unknowns");
  // Columns: a, b, c (the first m), then the overhead at index m; scaled by their largest
  // value so the normal equations are well conditioned.
  const int cols = static_cast<int>(unknowns);
  auto column = [&](const std::array<double, 4>& row, int j) { return row[j < m ? j : 3]; };
  double scale[4] = {1, 1, 1, 1};
  for (int j = 0; j < cols; ++j) {
    double top = 0;
    for (const auto& row : rows_) top = std::max(top, column(row, j));
    scale[j] = top > 0 ? top : 1.0;
  }
  detail::normal_equations eq;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    double phi[4];
    for (int j = 0; j < cols; ++j) phi[j] = column(rows_[i], j) / scale[j];
    eq.add_row(phi, cols, seconds_[i]);
  }
  auto residual = [&](const double* coef) {
    double s = 0;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      double pred = 0;
      for (int j = 0; j < cols; ++j) pred += rounded_mul(column(rows_[i], j) / scale[j], coef[j]);
      s += rounded_mul(pred - seconds_[i], pred - seconds_[i]);
    }
    return s;
  };
  const auto best = detail::nnls_by_active_sets(eq, cols, residual);
  calibration_result out;
  out.cost = quadratic_cost{best[0] / scale[0], m > 1 ? best[1] / scale[1] : 0.0,
                            m > 2 ? best[2] / scale[2] : 0.0};
  out.overhead_seconds = overhead_ ? best[static_cast<std::size_t>(m)] / scale[m] : 0.0;
  out.rms_seconds = std::sqrt(residual(best.data()) / static_cast<double>(rows_.size()));
  out.observations = rows_.size();
  // As in fit_quadratic_cost: an overflowed fit is refused, not returned.
  ORCHMLLM_REQUIRE(std::isfinite(out.rms_seconds) && std::isfinite(out.cost.constant) &&
                       std::isfinite(out.cost.linear) && std::isfinite(out.cost.quadratic) &&
                       std::isfinite(out.overhead_seconds),
                   invalid_argument_error,
                   "cost_calibration: the squared errors overflow double (times up to ",
                   *std::max_element(seconds_.begin(), seconds_.end()), " s)");
  return out;
}

}  // namespace orchmllm
