#pragma once
// Sparse profit rows of the bin -> node problems (min_cost_flow.hpp) and of the mapping
// problem (mapping_problem.hpp). Its own header, without the solvers, because the public view
// of a mapping problem (topology/mapper.hpp) exposes the rows in compiled mode too. Internal.

#include <cstdint>
#include <vector>

namespace orchmllm::detail {

// One stored positive profit of a bin. In a mapping problem: `profit` = the bin's bytes
// already on node `node`.
struct profit_arc {
  std::int32_t node;
  std::int64_t profit;
};

// Sparse profit rows: the arcs of bin b are arcs[offsets[b] .. offsets[b+1]), profits > 0,
// nodes distinct (any order; the solver scans them in stored order).
struct sparse_profits {
  std::vector<std::int64_t> offsets{0};
  std::vector<profit_arc> arcs;
};

}  // namespace orchmllm::detail
