#pragma once
// CSR helpers shared by the plan types and the route builder.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"

namespace orchmllm::detail {

// The rank of every item of a CSR layout: rank r for items [offsets[r], offsets[r + 1]).
// `offsets` must be a valid CSR array (offsets[0] = 0, non-decreasing; callers check it).
// O(n + d).
inline std::vector<rank_t> ranks_of_items(std::span<const std::int64_t> offsets) {
  std::vector<rank_t> ranks(offsets.empty() ? 0 : static_cast<std::size_t>(offsets.back()));
  for (std::size_t r = 0; r + 1 < offsets.size(); ++r)
    std::fill(ranks.begin() + offsets[r], ranks.begin() + offsets[r + 1], static_cast<rank_t>(r));
  return ranks;
}

}  // namespace orchmllm::detail
