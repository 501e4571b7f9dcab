#pragma once
// A cache hint for loops that read or write arrays in a scattered order known a few steps
// ahead (lpt's items in cost order, the auction's queue of bidders, a plan's destination
// order). Internal (namespace detail).

#include <cstdint>

namespace orchmllm::detail {

/// How many items ahead a loop over items in a scattered order prefetches (lpt's cost order,
/// a plan's destination order): far enough to hide a miss behind the work of the items between.
inline constexpr std::int64_t prefetch_distance = 16;

/// Asks the CPU to start fetching the cache line of `p` (for a write with `for_write`). No
/// effect on results; a no-op on compilers without `__builtin_prefetch`. `p` need not be
/// dereferenceable, but the callers only pass addresses inside their arrays.
inline void prefetch(const void* p, bool for_write = false) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  if (for_write)
    __builtin_prefetch(p, 1);
  else
    __builtin_prefetch(p, 0);
#else
  (void)p;
  (void)for_write;
#endif
}

}  // namespace orchmllm::detail
