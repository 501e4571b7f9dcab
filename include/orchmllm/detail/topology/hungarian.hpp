#pragma once
/// @file hungarian.hpp
/// Dense linear assignment (Hungarian method with potentials, Jonker–Volgenant style shortest
/// augmenting paths), used by the topology mapping to place the bins of one node on its GPUs.
///
/// Internal (namespace detail): no input validation beyond sizes; callers pass one node's GPUs
/// (exact and dense up to `dense_assignment_limit` GPUs, greedy and sparse above).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace orchmllm::detail {

// Maximum-profit perfect matching of an n × n integer profit matrix (row-major, n·n entries).
// Returns col_of_row (a permutation of 0..n-1) maximising Σ profit[i][col_of_row[i]].
//
// Why this form: rows are added one at a time and each is matched by a shortest augmenting path
// over columns with dual potentials (the O(n³) formulation of the Hungarian method), so the
// result is exact with integer arithmetic and fully deterministic (ties go to the lowest column
// index because the scan is in index order and uses strict comparisons).
// Costs are -profit; |profit| must stay below ~2^62 / (2n) so potentials cannot overflow
// (the caller bounds it by the largest bin's bytes).
// O(n³) time, O(n²) memory for the input (owned by the caller), O(n) extra.
inline std::vector<int> max_profit_assignment(const std::vector<std::int64_t>& profit, int n) {
  constexpr std::int64_t inf = std::numeric_limits<std::int64_t>::max() / 4;
  const auto un = static_cast<std::size_t>(n);
  // 1-based arrays as in the classic formulation; column 0 is the virtual start column.
  std::vector<std::int64_t> u(un + 1, 0), v(un + 1, 0), minv(un + 1);
  std::vector<int> row_of_col(un + 1, 0), way(un + 1, 0);
  std::vector<char> used(un + 1);
  auto cost = [&](int i, int j) {  // i, j 1-based
    return -profit[static_cast<std::size_t>(i - 1) * un + static_cast<std::size_t>(j - 1)];
  };
  for (int i = 1; i <= n; ++i) {
    row_of_col[0] = i;
    int j0 = 0;
    std::fill(minv.begin(), minv.end(), inf);
    std::fill(used.begin(), used.end(), 0);
    do {
      used[static_cast<std::size_t>(j0)] = 1;
      const int i0 = row_of_col[static_cast<std::size_t>(j0)];
      std::int64_t delta = inf;
      int j1 = 0;
      for (int j = 1; j <= n; ++j) {
        const auto uj = static_cast<std::size_t>(j);
        if (used[uj]) continue;
        const std::int64_t cur = cost(i0, j) - u[static_cast<std::size_t>(i0)] - v[uj];
        if (cur < minv[uj]) {
          minv[uj] = cur;
          way[uj] = j0;
        }
        if (minv[uj] < delta) {
          delta = minv[uj];
          j1 = j;
        }
      }
      for (int j = 0; j <= n; ++j) {
        const auto uj = static_cast<std::size_t>(j);
        if (used[uj]) {
          u[static_cast<std::size_t>(row_of_col[uj])] += delta;
          v[uj] -= delta;
        } else {
          minv[uj] -= delta;
        }
      }
      j0 = j1;
    } while (row_of_col[static_cast<std::size_t>(j0)] != 0);
    do {
      const int j1 = way[static_cast<std::size_t>(j0)];
      row_of_col[static_cast<std::size_t>(j0)] = row_of_col[static_cast<std::size_t>(j1)];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int> col_of_row(un, 0);
  for (int j = 1; j <= n; ++j)
    col_of_row[static_cast<std::size_t>(row_of_col[static_cast<std::size_t>(j)] - 1)] = j - 1;
  return col_of_row;
}

/// One non-zero entry of a sparse profit matrix: `profit` for matching `row` with `col`.
struct profit_entry {
  std::int64_t profit;
  int row;
  int col;
};

/// Nodes with more GPUs than this use `greedy_assignment` instead of the dense
/// `max_profit_assignment` (n² memory, n³ time: hours and tens of GB at n = 30,000).
inline constexpr int dense_assignment_limit = 512;

/// A perfect matching of n rows and n columns from sparse profits: entries by decreasing profit
/// (ties: lower row, then lower column) are taken while both ends are free, then the rows left
/// are matched to the free columns in index order. Keeps at least half the optimal profit (a
/// greedy maximum-weight matching is a 1/2-approximation); deterministic. `entries` may list a
/// (row, col) pair once only. O(E log E + n) time, O(E + n) memory.
inline std::vector<int> greedy_assignment(std::vector<profit_entry> entries, int n) {
  std::sort(entries.begin(), entries.end(), [](const profit_entry& a, const profit_entry& b) {
    if (a.profit != b.profit) return a.profit > b.profit;
    if (a.row != b.row) return a.row < b.row;
    return a.col < b.col;
  });
  const auto un = static_cast<std::size_t>(n);
  std::vector<int> col_of_row(un, -1);
  std::vector<char> col_taken(un, 0);
  for (const auto& e : entries) {
    if (e.profit <= 0) break;
    if (col_of_row[static_cast<std::size_t>(e.row)] >= 0 ||
        col_taken[static_cast<std::size_t>(e.col)])
      continue;
    col_of_row[static_cast<std::size_t>(e.row)] = e.col;
    col_taken[static_cast<std::size_t>(e.col)] = 1;
  }
  std::size_t next = 0;
  for (auto& c : col_of_row) {
    if (c >= 0) continue;
    while (col_taken[next]) ++next;
    c = static_cast<int>(next);
    col_taken[next] = 1;
  }
  return col_of_row;
}

}  // namespace orchmllm::detail
