#pragma once
// The exact balancer for padded policies (rank load = count · cost(padded length of its longest
// item)). Internal: reached through orchmllm::balance with algorithm::padded_exact (or automatic
// with a padded policy). The optimality proof is in docs/algorithms.md ("Padded policies").
//
// Outline. Items are scanned in `in.order` (length descending, id ascending), positions
// 0..n-1. Some optimal partition into at most d groups is contiguous in that order, so a
// solution is a list of group sizes. For a makespan target T the greedy check opens a group at
// the longest unassigned item s and gives it as many following items as T, max_items, the cap
// and the min_items reservation allow; T is feasible iff at most d groups (exactly d with
// min_items > 0) cover all items. Feasibility is monotone in T, so a binary search over
// [makespan_lower_bound, makespan of the greedy at T = +inf] finds the smallest feasible T,
// which is the optimum (the optimum is itself a feasible target). Group k goes to rank k.
//
// Exactness: holds for any cost non-decreasing in the length, with or without a token cap and
// min/max item counts. With a bytes cap the group footprint is count · max bytes, and bytes need
// not follow lengths: when the bytes along `in.order` are non-increasing the largest byte size
// of a group is its first item's and exactness holds; otherwise the check scans each group
// (O(n) per check), the result is a feasible heuristic and `optimal` is false (feasibility of
// the greedy is then not monotone in T, and a feasible instance may be missed: the façade then
// falls back to constrained_first_fit).
//
// Arithmetic: a group of c items starting at position s costs `Cost(c) * cost(padded(l_s))`,
// exactly the product rank_load::load evaluates, so the makespan the search certifies is the
// one the statistics report, bit for bit, also for floating costs. Integral costs are searched
// over the integers, floating costs over the bit patterns of non-negative values (their integer
// order is the value order), so the search takes at most 64 checks either way.
//
// Complexity: O(n log n) for the lower bound, O(n) to tabulate costs, then at most 64 checks of
// O(min(n, d)) each (O(n) with an unsorted bytes cap). Memory O(n). Deterministic.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/core/statistics_impl.hpp"
#include "orchmllm/detail/balance/common.hpp"

namespace orchmllm::detail {

/// Result of `padded_optimal`. `assignment` holds one destination rank per item (global id
/// order) or nullopt when the greedy found no feasible partition; `optimal` says the result is
/// proven: the assignment's makespan is the minimum over all feasible assignments, or, with no
/// assignment, that no feasible assignment exists.
template <class Cost>
struct padded_result {
  std::optional<std::vector<rank_t>> assignment;
  bool optimal = false;
};

namespace padded_impl {

// Largest c in [0, limit] with Cost(c) * unit <= T, for unit > 0 and limit >= 0. The integral
// quotient is exact; the floating one is rounded, so it is corrected against the product itself
// (the product is monotone in c, so the walk is a step or two).
template <class Cost>
std::int64_t max_count(Cost T, Cost unit, std::int64_t limit) {
  if constexpr (std::is_integral_v<Cost>) {
    const Cost q = T / unit;
    if constexpr (std::is_signed_v<Cost>) {
      if (q < Cost{0}) return 0;
    }
    if (static_cast<std::uint64_t>(q) >= static_cast<std::uint64_t>(limit)) return limit;
    return static_cast<std::int64_t>(q);
  } else {
    const Cost q = std::floor(T / unit);
    std::int64_t c;
    if (!(q >= Cost{0})) {
      c = 0;
    } else if (q >= static_cast<Cost>(limit)) {
      c = limit;
    } else {
      c = static_cast<std::int64_t>(q);
    }
    while (c > 0 && static_cast<Cost>(c) * unit > T) --c;
    while (c < limit && static_cast<Cost>(c + 1) * unit <= T) ++c;
    return c;
  }
}

// The greedy feasibility check and the plan it builds, over items in canonical order.
template <class Cost>
class greedy {
 public:
  greedy(const balance_input<Cost>& in, std::vector<Cost> unit_cost, bool bytes_sorted)
      : in_(in), unit_(std::move(unit_cost)), bytes_sorted_(bytes_sorted) {}

  struct outcome {
    bool feasible = false;
    Cost makespan{};
  };

  // Runs the greedy at target T. When `sizes` is given it receives the group sizes.
  outcome run(Cost T, std::vector<std::int64_t>* sizes = nullptr) const {
    const std::int64_t n = static_cast<std::int64_t>(in_.order.size());
    const std::int64_t d = in_.d;
    const std::int64_t m = in_.limits.min_items;
    const auto& cap = in_.limits.cap;
    outcome out;
    if (sizes) sizes->clear();
    std::int64_t s = 0;
    std::int64_t groups = 0;
    while (s < n) {
      if (groups == d) return out;  // items left, no rank left
      const std::int64_t left = n - s;
      std::int64_t c = left;
      // Reserve min_items for each group still to open after this one.
      if (m > 0) c = std::min(c, left - m * (d - groups - 1));
      c = std::min(c, in_.limits.max_items);
      if (c < std::max<std::int64_t>(m, 1)) return out;
      const Cost unit = unit_[static_cast<std::size_t>(s)];
      if (unit > Cost{0}) c = max_count(T, unit, c);
      const std::int64_t first = in_.order[static_cast<std::size_t>(s)];
      if (cap && c > 0) {
        if (cap->what == capacity::measure::tokens) {
          const std::int64_t pl = in_.policy.padded_length(in_.layout.length(first));
          if (pl > 0) c = std::min(c, cap->limit / pl);
        } else if (bytes_sorted_) {
          const std::int64_t b = in_.layout.bytes(first);
          if (b > 0) c = std::min(c, cap->limit / b);
        } else {
          c = bytes_scan(s, c, cap->limit);
        }
      }
      if (c < std::max<std::int64_t>(m, 1)) return out;
      out.makespan = std::max(out.makespan, static_cast<Cost>(c) * unit);
      if (sizes) sizes->push_back(c);
      s += c;
      ++groups;
    }
    out.feasible = groups <= d && (m == 0 || groups == d);
    return out;
  }

 private:
  // Longest run from position s, at most `limit` items, with count · max bytes <= cap.
  std::int64_t bytes_scan(std::int64_t s, std::int64_t limit, std::int64_t cap) const {
    std::int64_t c = 0;
    std::int64_t max_bytes = 0;
    while (c < limit) {
      const auto g = in_.order[static_cast<std::size_t>(s + c)];
      const std::int64_t mb = std::max(max_bytes, in_.layout.bytes(g));
      if (mb > 0 && c + 1 > cap / mb) break;  // (c + 1) · mb > cap, without overflow
      max_bytes = mb;
      ++c;
    }
    return c;
  }

  const balance_input<Cost>& in_;
  std::vector<Cost> unit_;  // cost(padded length) of the item at each order position
  bool bytes_sorted_;
};

// Bit pattern <-> value of a non-negative floating value (patterns of non-negative IEEE values
// are ordered like the values). -0.0 maps to the pattern of +0.0.
template <class Cost>
using float_bits_t = std::conditional_t<sizeof(Cost) == 4, std::uint32_t, std::uint64_t>;

template <class Cost>
float_bits_t<Cost> to_bits(Cost x) noexcept {
  return std::bit_cast<float_bits_t<Cost>>(x == Cost{0} ? Cost{0} : x);
}

template <class Cost>
Cost from_bits(float_bits_t<Cost> b) noexcept {
  return std::bit_cast<Cost>(b);
}

}  // namespace padded_impl

/// Exact min-makespan assignment for a padded policy (see the file comment). Requires
/// `in.policy.is_padded()` and `in.order` the canonical padded order (length desc, id asc);
/// the cost model must be non-decreasing in the length. Throws `invalid_argument_error` for a
/// packed policy. Returns the assignment in global-id order (group k → rank k, so the ranks
/// holding the longest items come first) and whether it is proven optimal.
template <class Cost, class C>
padded_result<Cost> padded_optimal(const balance_input<Cost>& in, const C& cost) {
  ORCHMLLM_REQUIRE(in.policy.is_padded(), invalid_argument_error,
                   "padded_optimal needs a padded policy, got the packed one");
  const std::int64_t n = in.layout.num_items();
  ORCHMLLM_REQUIRE(static_cast<std::int64_t>(in.order.size()) == n, invalid_argument_error,
                   "item order has ", in.order.size(), " entries for ", n, " items");
  padded_result<Cost> result;
  if (n == 0) {
    result.assignment.emplace();
    result.optimal = true;
    return result;
  }
  if (in.d <= 0) {
    result.optimal = true;  // items but no rank: nothing is feasible
    return result;
  }

  std::vector<Cost> unit(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < n; ++s) {
    const auto l = in.layout.length(in.order[static_cast<std::size_t>(s)]);
    unit[static_cast<std::size_t>(s)] = static_cast<Cost>(cost(in.policy.padded_length(l)));
  }
  bool bytes_sorted = true;
  if (in.limits.cap && in.limits.cap->what == capacity::measure::bytes) {
    for (std::int64_t s = 1; s < n && bytes_sorted; ++s) {
      bytes_sorted = in.layout.bytes(in.order[static_cast<std::size_t>(s)]) <=
                     in.layout.bytes(in.order[static_cast<std::size_t>(s - 1)]);
    }
  }
  const padded_impl::greedy<Cost> check(in, std::move(unit), bytes_sorted);

  // Upper end: the greedy under the hard limits alone. Infeasible there means infeasible
  // everywhere (feasibility only grows with T), which is a proof when the greedy is exact.
  const auto top = check.run(unbounded<Cost>());
  if (!top.feasible) {
    result.optimal = bytes_sorted;
    return result;
  }
  Cost hi = top.makespan;  // feasible
  Cost lo = input_lower_bound(in, cost);
  lo = std::min(lo, hi);  // the bound is valid; this only guards the invariant lo <= hi

  if constexpr (std::is_integral_v<Cost>) {
    while (lo < hi) {
      const Cost mid = static_cast<Cost>(lo + (hi - lo) / 2);
      const auto o = check.run(mid);
      if (o.feasible) {
        hi = o.makespan;  // <= mid: the plan it built achieves it
      } else {
        lo = static_cast<Cost>(mid + 1);
      }
    }
  } else if constexpr (sizeof(Cost) == 4 || sizeof(Cost) == 8) {
    using bits = padded_impl::float_bits_t<Cost>;
    bits blo = padded_impl::to_bits(lo);
    bits bhi = padded_impl::to_bits(hi);
    while (blo < bhi) {
      const bits mid = static_cast<bits>(blo + (bhi - blo) / 2);
      const auto o = check.run(padded_impl::from_bits<Cost>(mid));
      if (o.feasible) {
        bhi = padded_impl::to_bits(o.makespan);
      } else {
        blo = static_cast<bits>(mid + 1);
      }
    }
    hi = padded_impl::from_bits<Cost>(bhi);
  } else {
    // Other floating widths (e.g. 80/128-bit long double): bisect on values until the interval
    // cannot be split; terminates because the midpoint strictly shrinks it each time.
    while (lo < hi) {
      Cost mid = lo + (hi - lo) / 2;
      if (!(mid < hi)) mid = lo;
      const auto o = check.run(mid);
      if (o.feasible) {
        hi = o.makespan;
      } else {
        const Cost next = std::nextafter(mid, hi);
        if (!(next > lo)) break;
        lo = next;
      }
    }
  }

  std::vector<std::int64_t> sizes;
  const auto final_run = check.run(hi, &sizes);
  if (!final_run.feasible) return result;  // unreachable: hi was feasible
  std::vector<rank_t> assignment(static_cast<std::size_t>(n));
  std::int64_t s = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    for (std::int64_t j = 0; j < sizes[k]; ++j, ++s)
      assignment[static_cast<std::size_t>(in.order[static_cast<std::size_t>(s)])] =
          static_cast<rank_t>(k);
  }
  result.assignment = std::move(assignment);
  result.optimal = bytes_sorted;
  return result;
}

}  // namespace orchmllm::detail
