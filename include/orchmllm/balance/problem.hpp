#pragma once
/// @file problem.hpp
/// The balancing problem as a public type (`balance_problem`), and the `balancer` concept: the
/// customisation point of `balance`. A balancer is any callable that takes a `balance_problem`
/// and returns a destination rank for every item; `balance(layout, cost, policy, my_balancer,
/// limits)` runs it with the same checks, constrained fallback, figures and guarantees as the
/// built-in ones (balance/balancers.hpp), which are balancers of exactly this kind. See
/// docs/algorithms.md, "Choosing a balancer, and writing your own".

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rank_load.hpp"
#include "orchmllm/detail/balance/input.hpp"

namespace orchmllm {

/// What a balancer returns. A balancer may also return a plain `std::vector<rank_t>` (a plan)
/// or `std::optional<std::vector<rank_t>>` (nullopt: no plan found); `balance` reads them as
/// this struct with the other fields at their defaults.
struct balancer_plan {
  /// One destination rank in [0, d) per item, in global-id order; nullopt when the balancer
  /// found no plan. A plan that breaks a constraint counts as none.
  std::optional<std::vector<rank_t>> destination;
  /// Reported as `balance_result::used`: built-ins name themselves (their `name`, or the
  /// algorithm of theirs that made the plan), others keep "custom" or set a name of static
  /// storage duration.
  std::string_view used = "custom";
  /// The balancer proves the plan optimal (an exact method that completed). `balance` also
  /// reports optimality whenever the makespan meets the lower bound.
  bool proven_optimal = false;
  /// The balancer proves that no plan satisfies the constraints (an exhausted exact search):
  /// `balance` then raises `infeasible_error` without trying its fallback.
  bool proven_infeasible = false;
  /// The plan comes from the constrained first-fit-decreasing fallback (built-ins set it).
  bool fallback = false;
};

/// One balancing problem, as `balance` hands it to a balancer after its checks (costs
/// non-negative, no overflow, the constraints not obviously infeasible): the layout, the cost
/// model and every item's cost, the padding policy, the constraints, the canonical item order
/// and a lower bound on the makespan. A read-only view: it refers to data owned by the `balance`
/// call and must not outlive it. `C` is the model the balancer computes with (see the file
/// comment); `cost_type` its computation type (std::int64_t, double or long double).
///
/// All accessors are O(1) and never throw; `satisfies` and `makespan` are O(n + d).
/// Deterministic: the same inputs give the same problem on every rank.
template <class C>
class balance_problem {
 public:
  using model_type = C;
  using cost_type = cost_type_t<C>;

  /// Internal: `balance` builds the problem; a balancer only reads it.
  balance_problem(const detail::balance_input<cost_type>& input, const C& cost,
                  cost_type lower_bound) noexcept
      : in_(input), cost_(cost), lower_bound_(lower_bound) {}

  /// The items: lengths, byte sizes and the ranks they were sampled on.
  [[nodiscard]] const batch_layout& layout() const noexcept { return in_.layout; }
  /// d, the number of ranks (destinations are in [0, d)).
  [[nodiscard]] rank_t num_ranks() const noexcept { return in_.d; }
  /// n, the number of items.
  [[nodiscard]] std::int64_t num_items() const noexcept { return in_.layout.num_items(); }
  /// The cost model (for the cost of a padded length: `cost_model()(policy().padded_length(l))`).
  [[nodiscard]] const C& cost_model() const noexcept { return cost_; }
  /// cost(length(g)) of item g (global id), precomputed (the sum of its segment costs when it
  /// has segments). Under a padded policy an item with segments is `item_shape_of(layout(), g)`
  /// (core/rank_load.hpp): its rows at its longest segment; `rank_load::add(item_shape, ...)`
  /// evaluates it, and `makespan` and `satisfies` below do.
  [[nodiscard]] cost_type cost(std::int64_t g) const noexcept {
    return in_.costs[static_cast<std::size_t>(g)];
  }
  /// Every item's cost, in global-id order.
  [[nodiscard]] std::span<const cost_type> costs() const noexcept { return in_.costs; }
  /// The item ids in the canonical order: (cost, length) descending for the packed policy,
  /// row length (length, or longest segment) descending for padded ones, ties by id ascending.
  /// Scanning it keeps a greedy deterministic.
  [[nodiscard]] std::span<const std::int64_t> order() const noexcept { return in_.order; }
  /// How the costs on one rank combine into its load (core/padding.hpp).
  [[nodiscard]] padding_policy policy() const noexcept { return in_.policy; }
  /// The per-rank cap and item counts every plan must satisfy.
  [[nodiscard]] const constraints& limits() const noexcept { return in_.limits; }
  /// A lower bound on the makespan of every plan that satisfies the constraints (the
  /// structural bound of core/statistics.hpp): a plan that meets it is optimal.
  [[nodiscard]] cost_type lower_bound() const noexcept { return lower_bound_; }

  /// Whether `destination` (one rank per item) lies in [0, d) and satisfies every constraint.
  [[nodiscard]] bool satisfies(std::span<const rank_t> destination) const {
    return destination.size() == static_cast<std::size_t>(num_items()) &&
           detail::satisfies(in_, destination);
  }
  /// The makespan (largest rank load under the policy) of `destination`. Precondition: one
  /// rank in [0, d) per item.
  [[nodiscard]] cost_type makespan(std::span<const rank_t> destination) const {
    return detail::assignment_makespan(in_, cost_, destination);
  }

  /// Internal: the view the built-in algorithms read.
  [[nodiscard]] const detail::balance_input<cost_type>& input() const noexcept { return in_; }

 private:
  const detail::balance_input<cost_type>& in_;
  const C& cost_;
  cost_type lower_bound_;
};

namespace detail {

// What a balancer's call may return, read as a balancer_plan.
inline balancer_plan to_balancer_plan(balancer_plan p) noexcept { return p; }
inline balancer_plan to_balancer_plan(std::vector<rank_t> p) noexcept {
  return balancer_plan{std::move(p)};
}
inline balancer_plan to_balancer_plan(std::optional<std::vector<rank_t>> p) noexcept {
  return balancer_plan{std::move(p)};
}

template <class R>
concept balancer_return = std::same_as<R, balancer_plan> || std::same_as<R, std::vector<rank_t>> ||
    std::same_as<R, std::optional<std::vector<rank_t>>>;

/// The model a balancer sees for the trainer's cost model C: C itself when it returns its
/// computation type, else C wrapped to do so (header-only); a type-erased model (compiled).
#if ORCHMLLM_USE_COMPILED
template <class C>
using problem_model_t = cost_ref<cost_type_t<C>>;
#else
template <class C>
using problem_model_t = std::conditional_t<is_normal_cost_v<C>, C, normalized_cost<C>>;
#endif

}  // namespace detail

/// A balancer for problems over model C: callable as `b(problem)` on a
/// `const balance_problem<C>&`, returning `balancer_plan`, `std::vector<rank_t>` or
/// `std::optional<std::vector<rank_t>>`.
///
/// Writing one, in a few lines:
///
///     struct round_robin {
///       template <class C>
///       std::vector<orchmllm::rank_t> operator()(const orchmllm::balance_problem<C>& p) const {
///         std::vector<orchmllm::rank_t> dst(static_cast<std::size_t>(p.num_items()));
///         orchmllm::rank_t r = 0;
///         for (auto g : p.order()) dst[static_cast<std::size_t>(g)] = r++ % p.num_ranks();
///         return dst;
///       }
///     };
///
/// Write the call operator as a template over the problem's model type C (or a generic
/// lambda): C is the trainer's cost model in header-only mode and a type-erased one in compiled
/// mode (orchmllm/config.hpp), so the same balancer works in both.
template <class B, class C>
concept balancer = requires(const B& b, const balance_problem<C>& p) {
  { b(p) } -> detail::balancer_return;
};

/// A balancer usable with the trainer's cost model C in `balance` (in either build mode).
template <class B, class C>
concept balancer_for = cost_model<C> && balancer<B, detail::problem_model_t<C>>;

}  // namespace orchmllm
