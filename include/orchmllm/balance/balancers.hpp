#pragma once
/// @file balancers.hpp
/// The built-in balancers as types, and `any_balancer`, one of them chosen at run time.
///
/// Each built-in is a `balancer` (balance/problem.hpp) with its own knobs, passed to
/// `balance(layout, cost, policy, balancers::lpt{...}, limits)` or to a stage declaration, or
/// called on a `balance_problem` from the application's own balancer (to start from lpt's plan,
/// say). A unit instantiates only the algorithms it names. Run-time choice (configs, the CLI,
/// Python) parses a name with `parse_balancer` into an `any_balancer`; its names are the type
/// names (`balancer_names()`), and a unit that balances with an `any_balancer` compiles every
/// built-in. The algorithms, their bounds and complexities are in balance/balancer.hpp and
/// docs/algorithms.md.
///
/// Calling a balancer directly returns its plan (or none when the constraints stopped it and its
/// constrained first-fit fallback found none); `balance` adds the checks, the makespan and the
/// reported lower bound. Determinism: as `balance`.

#include <array>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "orchmllm/balance/problem.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/error.hpp"

namespace orchmllm {

/// Largest n · d for which `balancers::karmarkar_karp` runs the complete differencing (its
/// tuples hold n · d sums); above it it runs the equal-count differencing and reports
/// "karmarkar_karp_equal".
inline constexpr std::int64_t kk_complete_max_entries = std::int64_t{1} << 21;

/// Fewest items for which `balancers::automatic::concurrent` starts its second thread: below it
/// the thread costs more than it saves.
inline constexpr std::int64_t concurrent_min_items = std::int64_t{1} << 16;

/// Whether the complete differencing runs for n items on d ranks (n · d ≤
/// `kk_complete_max_entries`). O(1).
constexpr bool kk_complete_fits(std::int64_t n, std::int64_t d) noexcept {
  return d <= kk_complete_max_entries / (n > 1 ? n : 1);
}

namespace balancers {

/// Every item stays on the rank that sampled it (the baseline). O(n). Throws `infeasible_error`
/// when the sampled placement breaks a constraint.
struct identity {
  static constexpr std::string_view name = "identity";
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Longest processing time first, optionally refined. O(n log n).
struct lpt {
  static constexpr std::string_view name = "lpt";
  bool refine = false;              ///< refine the greedy plan (moves and swaps)
  std::int64_t refine_budget = -1;  ///< refinement steps (also for the fallback); -1 = 2·n + 64
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Karmarkar–Karp complete largest differencing, packed policy only. O(n · d log d) time,
/// O(n · d) memory; above n · d = `kk_complete_max_entries` it runs the equal-count method
/// instead and reports "karmarkar_karp_equal".
struct karmarkar_karp {
  static constexpr std::string_view name = "karmarkar_karp";
  bool refine = false;              ///< refine the differencing plan
  std::int64_t refine_budget = -1;  ///< refinement steps (also for the fallback); -1 = 2·n + 64
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Karmarkar–Karp equal-count differencing (every rank gets ⌊n/d⌋ or ⌈n/d⌉ items), packed
/// policy only. O(n log n) time, O(n + d) memory, any size.
struct karmarkar_karp_equal {
  static constexpr std::string_view name = "karmarkar_karp_equal";
  bool refine = false;              ///< refine the differencing plan
  std::int64_t refine_budget = -1;  ///< refinement steps (also for the fallback); -1 = 2·n + 64
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Depth-first branch and bound, optimal when it completes within `node_budget` search nodes.
/// For small inputs (n ≲ 20).
struct exact {
  static constexpr std::string_view name = "exact";
  std::int64_t node_budget = 2'000'000;  ///< search nodes, >= 0
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// The exact algorithm for padded policies. O(n log n + d log T). Exact (the optimum under the
/// constraints, or a proof that none exists, bytes caps aside: docs/algorithms.md) for every
/// padded policy: `padded`, `padded_to_multiple(k)`, `bucketed` and any trainer's
/// `padding_rule`. Not for `packed` (throws). With a segmented layout (every segment a padded
/// row) the problem is NP-hard: a heuristic within OPT + (S_max − 1) · cost(pad(longest
/// segment)) without cap and item counts (docs/algorithms.md), never reported proven optimal
/// unless it meets the lower bound.
struct padded_exact {
  static constexpr std::string_view name = "padded_exact";
  std::int64_t refine_budget = -1;  ///< refinement of the fallback plan; -1 = 2·n + 64
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Packed: lpt and its refinement; while the lower bound is missed, the equal-count then the
/// complete differencing (each refined; the complete one on small inputs, n · d ≤ 2^16, or with
/// at least 12 items per rank, where it can pay), then the exact search on small inputs; the
/// best plan found. Padded: `padded_exact`. The default balancer.
struct automatic {
  static constexpr std::string_view name = "automatic";
  std::int64_t refine_budget = -1;             ///< refinement steps; -1 = 2·n + 64
  std::int64_t exact_node_budget = 2'000'000;  ///< search nodes of the exact step, >= 0
  std::int64_t exact_max_items = 14;           ///< the exact step runs up to this many items
  /// Stop at lower bound · (1 + gap_tolerance) (rounded down for integral costs) instead of the
  /// bound itself: the plan is within that target or exactly the plan of 0 (the default).
  /// Trades balance for planning time on large inputs. Finite and >= 0.
  double gap_tolerance = 0;
  /// From `concurrent_min_items` packed items, the equal-count differencing runs on a second
  /// thread beside lpt and its refinement and is stopped unused when they meet the target: the
  /// same plan, sooner where a core is spare. The cost model is not called on that thread.
  bool concurrent = false;
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

/// Keeps data where it is within a makespan slack over `base`: runs `base` for its makespan M,
/// then moves only what a target of M · (1 + tolerance) needs, preferring receivers on the
/// same node (docs/algorithms.md). Never above the target; `base`'s plan when it misses.
struct locality {
  static constexpr std::string_view name = "locality";
  automatic base{};          ///< the balancer whose makespan sets the target
  double tolerance = 0.001;  ///< target = base's makespan · (1 + tolerance); finite, >= 0
  /// The node of every rank (d entries, dense ids 0, 1, … as `topology::node_map()` gives
  /// them), or empty: one node (a stage declaration fills in the topology's).
  std::vector<rank_t> node_of_rank{};
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const;
};

}  // namespace balancers

/// Expands `X(name)` for every built-in balancer type of `orchmllm::balancers`.
#define ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(X) \
  X(identity)                                    \
  X(lpt)                                         \
  X(karmarkar_karp)                              \
  X(karmarkar_karp_equal)                        \
  X(exact)                                       \
  X(padded_exact)                                \
  X(automatic)                                   \
  X(locality)

/// Whether B is one of the built-in balancer types above.
#define ORCHMLLM_DETAIL_IS(B) std::is_same_v<B_, balancers::B> ||
template <class B_>
inline constexpr bool is_builtin_balancer_v =
    ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(ORCHMLLM_DETAIL_IS) false;
#undef ORCHMLLM_DETAIL_IS

/// One of the built-in balancers, chosen at run time: what configs, the command-line tool and
/// the Python package hold. A `balancer` itself (it runs the one it holds), so it goes wherever
/// a balancer object does; `balance` with it plans exactly as with the object it holds. Default:
/// `balancers::automatic{}`. A plain value (copyable, comparable by what it holds); a unit
/// that balances with it compiles every built-in.
class any_balancer {
 public:
  /// The alternatives, in the order of `balancer_names()`.
  using variant = std::variant<balancers::identity, balancers::lpt, balancers::karmarkar_karp,
                               balancers::karmarkar_karp_equal, balancers::exact,
                               balancers::padded_exact, balancers::automatic, balancers::locality>;

  any_balancer() : v_(balancers::automatic{}) {}
  /// Holds `b` (implicit: `any_balancer b = balancers::lpt{.refine = true};`).
  template <class B>
  requires is_builtin_balancer_v<B> any_balancer(B b)
      : v_(std::move(b)) {}  // NOLINT(google-explicit-constructor)

  /// The held balancer's name (its type's `name`).
  [[nodiscard]] std::string_view name() const noexcept {
    return std::visit([](const auto& b) { return b.name; }, v_);
  }
  /// Calls `f` with the held balancer object and returns what it returns (the same type for
  /// every alternative).
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), v_);
  }
  /// The held balancer when it is a B, else null.
  template <class B>
  [[nodiscard]] const B* get_if() const noexcept {
    return std::get_if<B>(&v_);
  }
  /// The held balancer when it is a B, else null; mutable (e.g. to fill in
  /// `locality::node_of_rank` from a topology).
  template <class B>
  [[nodiscard]] B* get_if() noexcept {
    return std::get_if<B>(&v_);
  }
  /// Runs the held balancer (see `balancer`).
  template <class C>
  balancer_plan operator()(const balance_problem<C>& p) const {
    return visit([&](const auto& b) { return b(p); });
  }

 private:
  variant v_;
};

/// The names `parse_balancer` takes, in the order of `any_balancer::variant`: "identity",
/// "lpt", "karmarkar_karp", "karmarkar_karp_equal", "exact", "padded_exact", "automatic",
/// "locality".
[[nodiscard]] constexpr std::array<std::string_view, 8> balancer_names() noexcept {
#define ORCHMLLM_DETAIL_NAME(B) balancers::B::name,
  return {ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(ORCHMLLM_DETAIL_NAME)};
#undef ORCHMLLM_DETAIL_NAME
}

/// The built-in balancer named `name` (one of `balancer_names()`), with its default knobs.
/// O(1). Throws `invalid_argument_error` naming the unknown name and listing the valid ones.
[[nodiscard]] inline any_balancer parse_balancer(std::string_view name);

namespace detail {

/// Checks a built-in's knobs against the policy and the rank count: budgets, tolerances, node
/// ids, and the policies each algorithm balances. `what` prefixes the message (e.g. "stage
/// 'vision': "). d < 0: the rank count is not known yet; node ids are only checked to be >= 0.
/// O(d). Throws `invalid_argument_error` naming the knob and its value.
inline void check_balancer(const any_balancer& b, padding_policy policy, rank_t d,
                           std::string_view what = {});

/// The compiled library's entry points: a built-in balancer run on a problem over a type-erased
/// model (one per computation type).
#define ORCHMLLM_DETAIL_DECLARE_BUILTIN(T) \
  balancer_plan builtin_compiled(const balance_problem<cost_ref<T>>& p, const any_balancer& b);
ORCHMLLM_DETAIL_FOR_COST_TYPES(ORCHMLLM_DETAIL_DECLARE_BUILTIN)
#undef ORCHMLLM_DETAIL_DECLARE_BUILTIN

}  // namespace detail
}  // namespace orchmllm

#include "orchmllm/detail/balance/knobs.hpp"

#if ORCHMLLM_USE_COMPILED
// Compiled mode: every built-in runs in the library on the type-erased problem `balance`
// builds there (and that the trainer's own balancers receive).
#define ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL(B)                                   \
  template <class C>                                                             \
  orchmllm::balancer_plan orchmllm::balancers::B::operator()(                    \
      const orchmllm::balance_problem<C>& p) const {                             \
    return orchmllm::detail::builtin_compiled(p, orchmllm::any_balancer(*this)); \
  }
ORCHMLLM_DETAIL_FOR_BUILTIN_BALANCERS(ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL)
#undef ORCHMLLM_DETAIL_DEFINE_BUILTIN_CALL
#else
#include "orchmllm/detail/balance/builtin.hpp"
#endif
