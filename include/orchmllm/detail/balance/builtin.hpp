#pragma once
// The bodies of the built-in balancers (balance/balancers.hpp, which includes this file in
// header-only mode): each runs its algorithms from detail/balance/ on the problem, keeps the
// best plan, and applies the constrained first-fit fallback when it found none. `search` returns
// the plan with its makespan, which `balance` reports without recomputing it. Internal.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/balance/problem.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/detail/balance/common.hpp"
#include "orchmllm/detail/balance/exact.hpp"
#include "orchmllm/detail/balance/first_fit.hpp"
#include "orchmllm/detail/balance/kk.hpp"
#include "orchmllm/detail/balance/knobs.hpp"
#include "orchmllm/detail/balance/locality.hpp"
#include "orchmllm/detail/balance/lpt.hpp"
#include "orchmllm/detail/balance/padded.hpp"
#include "orchmllm/detail/balance/refine.hpp"

namespace orchmllm::detail {

/// A built-in balancer's result: the plan and, when it has a destination, its makespan.
template <class Cost>
struct builtin_outcome {
  balancer_plan plan;
  Cost makespan{};
};

/// Refinement steps for a budget option: the option itself, or 2·n + 64 for -1.
inline std::int64_t refine_steps(std::int64_t budget, std::int64_t n) noexcept {
  return budget >= 0 ? budget : 2 * n + 64;
}

/// Whether `balancers::automatic` tries the complete differencing on n items over d ranks: where
/// it fits (`kk_complete_fits`) and either the input is small (n · d ≤ 2^16 sums: about a
/// millisecond) or there are at least 12 items per rank on average. With fewer items per rank
/// it never improved on the refined lpt and equal-count plans over the measured inputs and cost
/// up to 400× lpt (docs/algorithms.md, "Where the complete differencing pays"). O(1).
constexpr bool kk_complete_pays(std::int64_t n, std::int64_t d) noexcept {
  constexpr std::int64_t small_entries = std::int64_t{1} << 16;
  constexpr std::int64_t min_items_per_rank = 12;
  return kk_complete_fits(n, d) &&
         (d <= small_entries / (n > 1 ? n : 1) || n >= min_items_per_rank * d);
}

/// m · (1 + tolerance), rounded down for integral costs, clamped to the largest Cost, never
/// below m: the target of `balancers::locality` (m = the base makespan) and the stopping target
/// of a search with `balancers::automatic::gap_tolerance` (m = the lower bound).
template <class Cost>
Cost locality_target(Cost m, double tolerance) {
  if constexpr (std::is_integral_v<Cost>) {
    const long double t =
        static_cast<long double>(m) * (1.0L + static_cast<long double>(tolerance));
    if (!(t < static_cast<long double>(std::numeric_limits<Cost>::max())))
      return std::numeric_limits<Cost>::max();
    return std::max(m, static_cast<Cost>(std::floor(t)));
  } else {
    return std::max(m, static_cast<Cost>(m * (1 + static_cast<Cost>(tolerance))));
  }
}

/// The best plan found so far by a built-in balancer, and the steps shared by all of them.
template <class C>
class plan_search {
 public:
  using Cost = cost_type_t<C>;

  /// `gap_tolerance` >= 0: the search counts a plan within lower bound · (1 + gap_tolerance)
  /// as good enough (`at_bound`, the refinement's stopping target); 0 = the bound itself.
  plan_search(const balance_problem<C>& p, std::int64_t refine_budget, double gap_tolerance = 0)
      : p_(p),
        in_(p.input()),
        budget_(refine_steps(refine_budget, p.num_items())),
        target_(gap_tolerance > 0 ? locality_target(p.lower_bound(), gap_tolerance)
                                  : p.lower_bound()) {}

  /// Keeps `a` if it satisfies the constraints and beats the best plan so far.
  void consider(std::optional<std::vector<rank_t>>&& a, std::string_view which) {
    if (!a || !satisfies(in_, std::span<const rank_t>(*a))) return;
    const Cost m = assignment_makespan(in_, p_.cost_model(), std::span<const rank_t>(*a));
    if (!best_ || m < best_makespan_) {
      best_ = std::move(a);
      best_makespan_ = m;
      used_ = which;
    }
  }
  /// The best plan meets the search's target (the lower bound, or within the gap tolerance).
  [[nodiscard]] bool at_bound() const { return best_ && best_makespan_ <= target_; }
  /// The makespan at which the search stops: the lower bound · (1 + gap tolerance).
  [[nodiscard]] Cost target() const { return target_; }
  [[nodiscard]] bool found() const { return best_.has_value(); }
  [[nodiscard]] Cost best_makespan() const { return best_makespan_; }
  [[nodiscard]] std::int64_t budget() const { return budget_; }
  /// Refines a copy of the best plan and keeps it if better.
  void refine_best() {
    if (best_ && !at_bound()) {
      std::vector<rank_t> a = *best_;
      refine(in_, p_.cost_model(), a, budget_, target_);
      consider(std::move(a), used_);
    }
  }
  void set_proven(bool proven) { proven_ = proven; }
  void set_infeasible(bool infeasible) { infeasible_ = infeasible; }
  [[nodiscard]] bool infeasible() const { return infeasible_; }

  /// The outcome. Without a plan and without a proof of infeasibility, the constrained
  /// first-fit-decreasing packing is tried first, reported as `fallback_name`, and refined
  /// unless `refine_fallback` is false.
  builtin_outcome<Cost> finish(std::string_view fallback_name, bool refine_fallback = true) {
    bool fallback = false;
    if (!best_ && !infeasible_) {
      consider(constrained_first_fit(in_, p_.cost_model()), fallback_name);
      fallback = best_.has_value();
      if (best_ && refine_fallback) refine_best();
    }
    return builtin_outcome<Cost>{
        balancer_plan{std::move(best_), used_, proven_, infeasible_, fallback}, best_makespan_};
  }

 private:
  const balance_problem<C>& p_;
  const balance_input<Cost>& in_;
  std::int64_t budget_;
  Cost target_;
  std::optional<std::vector<rank_t>> best_;
  Cost best_makespan_{};
  std::string_view used_ = "custom";
  bool proven_ = false;
  bool infeasible_ = false;  // an exact method exhausted its search without a feasible plan
};

/// Checks a built-in's knobs against the problem.
template <class B, class C>
void check_builtin(const B& b, const balance_problem<C>& p) {
  check_knobs(b, p.policy(), p.num_ranks());
}

template <class C>
builtin_outcome<cost_type_t<C>> search(const balancers::identity& b, const balance_problem<C>& p) {
  check_builtin(b, p);
  const auto& layout = p.layout();
  std::vector<rank_t> a(static_cast<std::size_t>(p.num_items()));
  for (rank_t r = 0; r < p.num_ranks(); ++r)
    std::fill(a.begin() + layout.offset(r), a.begin() + layout.offset(r + 1), r);
  ORCHMLLM_REQUIRE(satisfies(p.input(), std::span<const rank_t>(a)), infeasible_error,
                   "the identity plan violates the constraints (cap or item counts)");
  plan_search<C> s(p, -1);
  s.consider(std::move(a), b.name);
  return s.finish(b.name);
}

template <class C>
builtin_outcome<cost_type_t<C>> search(const balancers::lpt& b, const balance_problem<C>& p) {
  check_builtin(b, p);
  plan_search<C> s(p, b.refine_budget);
  s.consider(lpt(p.input(), p.cost_model()), b.name);
  if (b.refine) s.refine_best();
  return s.finish(b.name);
}

template <class C>
builtin_outcome<cost_type_t<C>> search(const balancers::karmarkar_karp& b,
                                       const balance_problem<C>& p) {
  check_builtin(b, p);
  plan_search<C> s(p, b.refine_budget);
  // The complete method where its n · d sums fit the guard, else the equal-count one.
  if (kk_complete_fits(p.num_items(), p.num_ranks())) {
    s.consider(karmarkar_karp(p.input(), true), b.name);
  } else {
    s.consider(karmarkar_karp(p.input()), balancers::karmarkar_karp_equal::name);
  }
  if (b.refine) s.refine_best();
  return s.finish(b.name);
}

template <class C>
builtin_outcome<cost_type_t<C>> search(const balancers::karmarkar_karp_equal& b,
                                       const balance_problem<C>& p) {
  check_builtin(b, p);
  plan_search<C> s(p, b.refine_budget);
  s.consider(karmarkar_karp(p.input()), b.name);
  if (b.refine) s.refine_best();
  return s.finish(b.name);
}

template <class C>
builtin_outcome<cost_type_t<C>> search(const balancers::exact& b, const balance_problem<C>& p) {
  check_builtin(b, p);
  plan_search<C> s(p, -1);
  auto r = exact_search(p.input(), p.cost_model(), b.node_budget);
  s.set_infeasible(r.complete && !r.assignment);
  s.consider(std::move(r.assignment), b.name);
  s.set_proven(r.complete && s.found());
  return s.finish(b.name, /*refine_fallback=*/false);
}

template <class C>
builtin_outcome<cost_type_t<C>> search(const balancers::padded_exact& b,
                                       const balance_problem<C>& p) {
  check_builtin(b, p);
  plan_search<C> s(p, b.refine_budget);
  auto r = padded_optimal(p.input(), p.cost_model());
  s.set_infeasible(r.optimal && !r.assignment);
  s.consider(std::move(r.assignment), b.name);
  s.set_proven(r.optimal && s.found());
  return s.finish(b.name);
}

template <class C>
builtin_outcome<cost_type_t<C>> search(const balancers::automatic& b, const balance_problem<C>& p) {
  check_builtin(b, p);
  const auto& in = p.input();
  const std::int64_t n = p.num_items();
  plan_search<C> s(p, b.refine_budget, b.gap_tolerance);
  bool proven = false;
  if (p.policy().is_padded()) {
    auto r = padded_optimal(in, p.cost_model());
    s.set_infeasible(r.optimal && !r.assignment);
    s.consider(std::move(r.assignment), balancers::padded_exact::name);
    proven = r.optimal && s.found();
    if (!proven && !s.infeasible()) {
      s.consider(lpt(in, p.cost_model()), balancers::lpt::name);
      s.refine_best();
    }
  } else {
    // lpt, then refinement, then kk + refinement: each step only when the bound is not met
    // yet, so the result is never worse than lpt or kk alone. Concurrent and large: the
    // equal-count kk runs from the start on a thread beside lpt and its refinement, and is
    // stopped unused when they end the search (the same steps, so the same plan).
    std::optional<karmarkar_karp_beside<cost_type_t<C>>> kk_beside;
    if (b.concurrent && n >= concurrent_min_items) {
      try {
        kk_beside.emplace(in);
      } catch (const std::system_error&) {  // no thread to be had: kk runs here, as without
      }
    }
    s.consider(lpt(in, p.cost_model()), balancers::lpt::name);
    s.refine_best();
    if (!s.at_bound()) {
      s.consider(kk_beside ? kk_beside->get() : karmarkar_karp(in),
                 balancers::karmarkar_karp_equal::name);
      s.refine_best();
    }
    // Then the complete differencing where it can pay (`kk_complete_pays`), refined in a copy:
    // `consider` keeps it only when its makespan is strictly smaller.
    if (!s.at_bound() && kk_complete_pays(n, p.num_ranks())) {
      auto k = karmarkar_karp(in, true);
      if (k && satisfies(in, std::span<const rank_t>(*k))) {
        refine(in, p.cost_model(), *k, s.budget(), s.target());
        s.consider(std::move(k), balancers::karmarkar_karp::name);
      }
    }
  }
  if (!s.at_bound() && !proven && !s.infeasible() && n <= b.exact_max_items) {
    auto r =
        exact_search(in, p.cost_model(), b.exact_node_budget,
                     s.found() ? std::optional<cost_type_t<C>>(s.best_makespan()) : std::nullopt);
    s.consider(std::move(r.assignment), balancers::exact::name);
    proven = r.complete && s.found();
  }
  s.set_proven(proven);
  // Without a plan, the fallback is reported under lpt.
  return s.finish(balancers::lpt::name);
}

template <class C>
builtin_outcome<cost_type_t<C>> search(const balancers::locality& b, const balance_problem<C>& p) {
  check_builtin(b, p);
  // The base balancer first: its makespan sets the target and its plan is the fallback.
  auto base = search(b.base, p);
  if (!base.plan.destination) return base;
  const auto target = locality_target(base.makespan, b.tolerance);
  std::vector<rank_t> a = locality_assign(p.input(), p.cost_model(), target, b.node_of_rank,
                                          refine_steps(b.base.refine_budget, p.num_items()));
  if (!satisfies(p.input(), std::span<const rank_t>(a))) return base;
  const auto m = assignment_makespan(p.input(), p.cost_model(), std::span<const rank_t>(a));
  if (m > target) return base;
  return builtin_outcome<cost_type_t<C>>{balancer_plan{std::move(a), b.name}, m};
}

}  // namespace orchmllm::detail

#if !ORCHMLLM_USE_COMPILED  // compiled mode defines the calls in balance/balancers.hpp
#define ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL(B)                \
  template <class C>                                          \
  orchmllm::balancer_plan orchmllm::balancers::B::operator()( \
      const orchmllm::balance_problem<C>& p) const {          \
    return orchmllm::detail::search(*this, p).plan;           \
  }
ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL)
#undef ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL
#endif
