#pragma once
// Shared plumbing of the balancers: the extreme Cost values and the structural lower bound of a
// balance input (the input itself and its constraint checks are in input.hpp). Internal: may change
// without notice.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/balance/input.hpp"
#include "orchmllm/detail/core/order.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"

namespace orchmllm::detail {

/// The largest Cost (+infinity where it has one): a makespan target no load exceeds, with which
/// a balancer meets only the hard limits.
template <class Cost>
constexpr Cost unbounded() noexcept {
  if constexpr (std::numeric_limits<Cost>::has_infinity) {
    return std::numeric_limits<Cost>::infinity();
  } else {
    return std::numeric_limits<Cost>::max();
  }
}

/// The smallest Cost (-infinity where it has one), below every load and room.
template <class Cost>
constexpr Cost lowest() noexcept {
  if constexpr (std::numeric_limits<Cost>::has_infinity) {
    return -std::numeric_limits<Cost>::infinity();
  } else {
    return std::numeric_limits<Cost>::lowest();
  }
}

/// makespan_lower_bound of the input, computed on its canonical order in O(n) instead of
/// re-deriving the costs and sorting again.
template <class Cost, class C>
Cost input_lower_bound(const balance_input<Cost>& in, const C& cost) {
  return lower_bound_in_order<C>(in.layout, in.order, in.costs, in.d, cost, in.policy, in.limits);
}

}  // namespace orchmllm::detail
