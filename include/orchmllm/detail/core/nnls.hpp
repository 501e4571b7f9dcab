#pragma once
// Non-negative least squares for at most four unknowns, by enumerating active sets. Internal:
// the solver behind fit_quadratic_cost and cost_calibration (core/cost_fit.hpp).
//
// The NNLS optimum is the unconstrained least-squares solution on its support (the coefficients
// that are positive), so with m ≤ 4 unknowns it is found by solving the normal equations on each
// of the 2^m − 1 non-empty supports (Gaussian elimination with partial pivoting), discarding the
// singular systems and the solutions with a negative coefficient, and keeping the feasible one of
// least residual; the all-zero solution is the first candidate and ties keep the earlier support.
// O(2^m · m³) after the normal equations; deterministic (fixed order, products through
// rounded_mul).

#include <array>
#include <cmath>
#include <utility>

#include "orchmllm/core/cost_model.hpp"

namespace orchmllm::detail {

/// Normal equations of a least-squares problem in m ≤ 4 unknowns: G = Σ φφᵀ, r = Σ φ·t.
struct normal_equations {
  double G[4][4] = {};
  double r[4] = {};

  /// Adds one observation: features phi[0..m), target t.
  void add_row(const double* phi, int m, double t) noexcept {
    for (int a = 0; a < m; ++a) {
      r[a] += rounded_mul(phi[a], t);
      for (int b = 0; b < m; ++b) G[a][b] += rounded_mul(phi[a], phi[b]);
    }
  }
};

/// The NNLS solution of `eq` restricted to its first `m` unknowns (1 ≤ m ≤ 4), the others 0.
/// `residual(const double* coef)` gives ‖Φc − t‖² for a candidate (the caller evaluates it on
/// its own rows, in its own order, so the figure does not depend on cancellation in G).
template <class Residual>
std::array<double, 4> nnls_by_active_sets(const normal_equations& eq, int m, Residual residual) {
  std::array<double, 4> best{0, 0, 0, 0};
  double best_res = residual(best.data());
  for (int mask = 1; mask < (1 << m); ++mask) {
    int idx[4];
    int k = 0;
    for (int a = 0; a < m; ++a)
      if (mask & (1 << a)) idx[k++] = a;
    double A[4][5] = {};
    for (int i = 0; i < k; ++i) {
      for (int j = 0; j < k; ++j) A[i][j] = eq.G[idx[i]][idx[j]];
      A[i][k] = eq.r[idx[i]];
    }
    bool singular = false;
    for (int c = 0; c < k && !singular; ++c) {  // Gaussian elimination, partial pivoting
      int p = c;
      for (int i = c + 1; i < k; ++i)
        if (std::abs(A[i][c]) > std::abs(A[p][c])) p = i;
      if (std::abs(A[p][c]) < 1e-300) {
        singular = true;
        break;
      }
      for (int j = 0; j <= k; ++j) std::swap(A[c][j], A[p][j]);
      for (int i = 0; i < k; ++i) {
        if (i == c) continue;
        const double f = A[i][c] / A[c][c];
        for (int j = c; j <= k; ++j) A[i][j] -= rounded_mul(f, A[c][j]);
      }
    }
    if (singular) continue;
    std::array<double, 4> coef{0, 0, 0, 0};
    bool feasible = true;
    for (int i = 0; i < k; ++i) {
      coef[idx[i]] = A[i][k] / A[i][i];
      if (!(coef[idx[i]] >= 0)) feasible = false;
    }
    if (!feasible) continue;
    const double res = residual(coef.data());
    if (res < best_res) {
      best_res = res;
      best = coef;
    }
  }
  return best;
}

}  // namespace orchmllm::detail
