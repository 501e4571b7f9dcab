// Tests of `balancers::automatic::concurrent` (automatic's equal-count Karmarkar–Karp on a
// thread beside lpt and its refinement; balance/balancers.hpp, detail/balance/kk.hpp):
//  - the same plan, reported balancer, makespan and bound with and without it, on large random
//    inputs (from concurrent_min_items items) where lpt ends the search (the kk thread is
//    stopped unused), where the search goes on to kk (its result considered, and kept in some),
//    with a gap tolerance, with constraints, for integral and floating costs, through an
//    `any_balancer` and as `locality`'s base;
//  - a stopped karmarkar_karp returns nothing; karmarkar_karp_beside returns what the serial
//    call returns, and can be destroyed unused.
// Also run under ThreadSanitizer (the tsan preset).

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/detail/balance/kk.hpp"
#include "orchmllm/detail/core/order.hpp"
#include "support/test_support.hpp"

namespace {

using namespace orchmllm;
using orchmllm::test::uniform;

// n items over d ranks, lengths from a heavy-tailed mix (many short, a few long sequences) or
// near-uniform (`narrow`), so lpt meets the bound on some inputs and misses it on others.
batch_layout large_layout(std::mt19937_64& rng, rank_t d, std::int64_t n, bool narrow) {
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(d) + 1, 0);
  for (rank_t r = 0; r < d; ++r) offsets[static_cast<std::size_t>(r) + 1] = n * (r + 1) / d;
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(n));
  for (auto& l : lengths)
    l = narrow ? uniform(rng, 900, 1100)
               : (uniform(rng, 0, 9) == 0 ? uniform(rng, 2000, 16000) : uniform(rng, 16, 1500));
  return batch_layout(offsets, lengths);
}

// `b` with automatic's `concurrent` knob set (also as locality's base).
any_balancer with_concurrent(any_balancer b, bool concurrent) {
  if (auto* a = b.get_if<balancers::automatic>()) a->concurrent = concurrent;
  if (auto* l = b.get_if<balancers::locality>()) l->base.concurrent = concurrent;
  return b;
}

template <class C>
void check_same(const batch_layout& layout, const C& cost, const any_balancer& b,
                const constraints& limits, int& kept_kk) {
  const auto serial = balance(layout, cost, packed, with_concurrent(b, false), limits);
  const auto beside = balance(layout, cost, packed, with_concurrent(b, true), limits);
  CHECK(beside.plan == serial.plan);
  CHECK(beside.used == serial.used);
  CHECK(beside.makespan == serial.makespan);
  CHECK(beside.lower_bound == serial.lower_bound);
  if (serial.used == "karmarkar_karp_equal") ++kept_kk;
}

}  // namespace

TEST_CASE("automatic with concurrent kk: the same plans as serial") {
  std::mt19937_64 rng(65536);
  int kept_kk = 0;
  const std::int64_t n0 = concurrent_min_items;
  struct shape {
    rank_t d;
    std::int64_t n;
    bool narrow;
  };
  const std::array shapes = {shape{64, n0, false},        // many per rank: lpt meets the bound
                             shape{n0 / 2, n0, true},     // 2 per rank: kk's pairing can win
                             shape{8192, n0 + 1, false},  // 8 per rank: lpt + refinement miss
                             shape{32768, 2 * n0, true},  // 4 per rank, near-equal items
                             shape{n0 / 2, n0, false}};
  // Under a sanitizer the first two: the kk thread stopped unused, and its plan kept.
  for (std::size_t i = 0; i < (test::sanitized ? 2 : shapes.size()); ++i) {
    const shape s = shapes[i];
    INFO("d = ", s.d, ", n = ", s.n, ", narrow = ", s.narrow);
    const auto layout = large_layout(rng, s.d, s.n, s.narrow);
    const balancers::automatic automatic;
    check_same(layout, linear_cost{}, automatic, {}, kept_kk);
    check_same(layout, quadratic_cost{0.0, 1.0, 1.0 / 4096}, automatic, {}, kept_kk);
    check_same(layout, quadratic_cost{0.0, 1.0, 1.0 / 4096},
               balancers::automatic{.gap_tolerance = 0.003}, {}, kept_kk);
    // kk's equal counts satisfy the item-count limit.
    check_same(layout, linear_cost{}, automatic,
               constraints{.max_items = (s.n + s.d - 1) / s.d + 1}, kept_kk);
    check_same(layout, linear_cost{}, balancers::locality{}, {}, kept_kk);
  }
  // Some input went on to kk and kept its plan: the thread's result was the one used.
  CHECK(kept_kk > 0);
}

TEST_CASE(
    "karmarkar_karp: stopped runs return nothing; the thread beside returns the serial result") {
  std::mt19937_64 rng(7);
  const auto layout = large_layout(rng, 256, 4096, false);
  std::vector<double> costs(static_cast<std::size_t>(layout.num_items()));
  for (std::int64_t g = 0; g < layout.num_items(); ++g)
    costs[static_cast<std::size_t>(g)] = static_cast<double>(layout.length(g));
  const auto order = detail::canonical_order<double>(layout, costs, packed);
  const constraints lim;
  const detail::balance_input<double> in{layout, layout.num_ranks(), costs, order, packed, lim};
  const auto serial = detail::karmarkar_karp(in);
  REQUIRE(serial);
  const std::atomic<bool> stop{true};
  CHECK(!detail::karmarkar_karp(in, false, &stop));
  detail::karmarkar_karp_beside<double> beside(in);
  CHECK(beside.get() == serial);
  for (int i = 0; i < 8; ++i) detail::karmarkar_karp_beside<double> unused(in);  // stopped, joined
}
