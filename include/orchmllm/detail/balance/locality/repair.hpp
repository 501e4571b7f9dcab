#pragma once
// Phases 4 and 5 of the locality-aware balancer (detail/balance/locality.hpp): what the shed
// and placement phases leave undone, ranks below min_items and ranks still above T.
// Internal: may change without notice.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/detail/balance/input.hpp"
#include "orchmllm/detail/balance/locality/state.hpp"
#include "orchmllm/detail/balance/refine.hpp"

namespace orchmllm::detail::locality_impl {

/// Phase 4: every rank below min_items takes, from a rank above it, the item with the fewest
/// bytes that it can take within T and the cap, same node first (ties: lower id), until it
/// reaches min_items or no item qualifies. O(n) per missing item.
template <class Cost, class C>
void fill_min_items(state<Cost, C>& s) {
  const auto& lim = s.lim;
  if (lim.min_items <= 0) return;
  for (rank_t r = 0; r < s.d; ++r) {
    while (s.count(r) < lim.min_items) {
      std::optional<std::int64_t> best;
      bool best_same = false;
      for (std::int64_t g = 0; g < s.n; ++g) {
        const rank_t from = s.a[static_cast<std::size_t>(g)];
        if (from == r || s.count(from) <= lim.min_items) continue;
        const bool same = s.node(from) == s.node(r);
        if (best && (best_same && !same)) continue;
        if (best && best_same == same && s.bytes_of(g) >= s.bytes_of(*best)) continue;
        if (!s.after_gain(r, g)) continue;
        best = g;
        best_same = same;
      }
      if (!best) break;
      s.move(*best, r);
    }
  }
}

/// Phase 5: if some rank is still above T (and the constraints hold), the refinement of
/// refine.hpp, heaviest against lightest with T as its target, within `refine_budget` steps.
/// It may move items that had stayed home (more bytes) but only acts while a rank is above T.
template <class Cost, class C>
void polish(state<Cost, C>& s, std::int64_t refine_budget) {
  bool over = false;
  for (rank_t r = 0; r < s.d; ++r) over = over || s.load[static_cast<std::size_t>(r)] > s.target;
  if (over && satisfies(s.in, std::span<const rank_t>(s.a)))
    refine(s.in, s.cost, s.a, refine_budget, s.target);
}

}  // namespace orchmllm::detail::locality_impl
