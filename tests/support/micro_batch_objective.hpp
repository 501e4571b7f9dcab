#pragma once
// What a micro-batch plan costs, recomputed by the tests from the loads of its cells (entry
// r·M + m: micro-batch m of rank r): Σ_m max_r load under sync_model::micro_batch, max_r Σ_m
// load under sync_model::step. Independent of the library's own figures.

#include <algorithm>
#include <cstdint>
#include <span>

#include "orchmllm/balance/micro_batches.hpp"

namespace orchmllm::test {

inline double cells_objective(std::span<const double> load, rank_t d, std::int64_t m_count,
                              sync_model sync) {
  const auto at = [&](rank_t r, std::int64_t m) {
    return load[static_cast<std::size_t>(r * m_count + m)];
  };
  double out = 0;
  if (sync == sync_model::micro_batch) {
    for (std::int64_t m = 0; m < m_count; ++m) {
      double top = 0;
      for (rank_t r = 0; r < d; ++r) top = std::max(top, at(r, m));
      out += top;
    }
    return out;
  }
  for (rank_t r = 0; r < d; ++r) {
    double sum = 0;
    for (std::int64_t m = 0; m < m_count; ++m) sum += at(r, m);
    out = std::max(out, sum);
  }
  return out;
}

}  // namespace orchmllm::test
