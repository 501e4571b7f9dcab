#pragma once
/// @file stage_parts.hpp
/// The type-erased parts of a stage declaration (orchestrator/stages.hpp), so that stages with
/// different cost models, balancers and mappers fit in one declaration list:
///  * `stage_cost`: any `cost_model`, keeping its kind (an integral model is balanced in exact
///    `std::int64_t`, a floating one in `double`);
///  * `stage_balancer`: a built-in balancer object (or an `any_balancer`) or the application's
///    own, which runs on the stage's cost model type-erased and enters the declarations'
///    fingerprint by its name;
///  * `stage_mapper`: a built-in mapper (or an `any_mapper`), the GLPK one or the application's
///    own, likewise named in the fingerprint.
/// Copies share the wrapped objects, which must be safe to call from several threads
/// (`plan_step` may plan stages concurrently) and deterministic (every rank runs them on the
/// same problem). See docs/orchestrator.md, "Data model".

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/balance/problem.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping.hpp"

namespace orchmllm {

/// A type-erased cost model, so stages with different cost model types fit in one declaration
/// list. It keeps the wrapped model's kind: an integral model (any integer cost type) is held as
/// one returning `std::int64_t` and balanced in exact 64-bit integers, a floating one as one
/// returning `double` (a `long double` model is evaluated in double). `visit` hands the planner
/// the typed model; the call operator returns the cost as double for reports and fingerprints.
///
/// Copying shares nothing mutable. Calling it costs one indirect call. Not default-constructible
/// into an empty state: the default is cost(l) = l (integral).
class stage_cost {
 public:
  /// A type-erased model with the value type `Cost` (`std::int64_t` or `double`); what `visit`
  /// passes to its function. A `cost_model` whose `cost_type_t` is `Cost`.
  template <class Cost>
  class typed {
   public:
    explicit typed(std::function<Cost(std::int64_t)> f) : f_(std::move(f)) {}
    Cost operator()(std::int64_t l) const { return f_(l); }

   private:
    std::function<Cost(std::int64_t)> f_;
  };

  /// cost(l) = l, in exact integers.
  stage_cost() : integral_(std::in_place, [](std::int64_t l) { return l; }) {}

  /// Wraps `c`. The self-type test comes first so that checking `cost_model<stage_cost>` (which
  /// asks whether stage_cost is copy-constructible) never recurses into this constructor.
  template <class C>
  requires(!std::is_same_v<std::remove_cvref_t<C>, stage_cost> && cost_model<C>)
      stage_cost(C c)  // NOLINT(google-explicit-constructor): a declaration reads `.cost =
                       // quadratic_cost{...}`
      : integral_(make<std::int64_t, C>(c, std::is_integral<cost_type_t<C>>{})),
        floating_(make<double, C>(c, std::is_floating_point<cost_type_t<C>>{})) {}

  /// A callable class (a lambda, a function object) that is not a `cost_model`: a compile error
  /// that names the requirement it misses (callable as `(std::int64_t) const`, returning a
  /// non-bool arithmetic type, copy-constructible).
  template <class C>
  requires(!std::is_same_v<std::remove_cvref_t<C>, stage_cost> && std::is_class_v<C> &&
           (requires { &C::operator(); } || std::invocable<C&, std::int64_t>)&&!cost_model<C>)
      stage_cost(C)  // NOLINT(google-explicit-constructor)
  {
    static_assert(std::is_object_v<C> && std::copy_constructible<C>,
                  "orchmllm: a stage's cost model must be a copy-constructible object");
    if constexpr (std::is_object_v<C> && std::copy_constructible<C>) {
      static_assert(std::invocable<const C&, std::int64_t>,
                    "orchmllm: a stage's cost model must be callable as `(std::int64_t) const` "
                    "(a `mutable` lambda or a non-const operator() is not)");
      if constexpr (std::invocable<const C&, std::int64_t>) {
        using result = std::remove_cvref_t<std::invoke_result_t<const C&, std::int64_t>>;
        static_assert(!std::is_same_v<result, bool>,
                      "orchmllm: a stage's cost model returns bool; it must return a non-bool "
                      "arithmetic type (e.g. std::int64_t or double)");
        static_assert(std::is_arithmetic_v<result>,
                      "orchmllm: a stage's cost model must return a non-bool arithmetic type "
                      "(e.g. std::int64_t or double)");
      }
    }
  }

  /// True when the wrapped model's costs are integers (balanced exactly in std::int64_t).
  [[nodiscard]] bool integral() const noexcept { return integral_.has_value(); }

  /// The wrapped cost of length l, as double (exact for integral costs up to 2^53).
  double operator()(std::int64_t l) const {
    return integral_ ? static_cast<double>((*integral_)(l)) : (*floating_)(l);
  }

  /// Calls `f` with the typed model (`typed<std::int64_t>` or `typed<double>`) and returns what
  /// it returns; both calls must return the same type.
  template <class F>
  decltype(auto) visit(F&& f) const {
    if (integral_) return std::forward<F>(f)(*integral_);
    return std::forward<F>(f)(*floating_);
  }

 private:
  template <class Cost, class C, bool Wanted>
  static std::optional<typed<Cost>> make(const C& c, std::bool_constant<Wanted>) {
    if constexpr (Wanted) {
      const detail::normalized_cost<C> n{c};
      return typed<Cost>(std::function<Cost(std::int64_t)>(
          [n](std::int64_t l) { return static_cast<Cost>(n(l)); }));
    } else {
      return std::nullopt;
    }
  }

  std::optional<typed<std::int64_t>> integral_;
  std::optional<typed<double>> floating_;
};

/// The balancer of a stage: a built-in one (a `balancers::*` object or an `any_balancer`, e.g.
/// from `parse_balancer`) or the application's own (any `balancer` over both kinds of stage
/// cost, i.e. a template call operator or a generic lambda; see balance/problem.hpp). Default:
/// `balancers::automatic{}`.
///
/// The application's balancer runs through `balance` with the stage's limits and the stage's
/// cost model seen as `detail::cost_ref` (one indirect call per evaluation), reports "custom"
/// unless its plan names itself, and enters the declarations' fingerprint by its `name`: give
/// two different balancers different names. Copying shares the balancer object (it must be safe
/// to call from several threads: `plan_step` may plan stages concurrently).
class stage_balancer {
 public:
  /// `balancers::automatic{}`.
  stage_balancer() = default;

  /// A built-in balancer (implicit: `.balancer = balancers::lpt{.refine = true}`).
  template <class B>
  requires(is_builtin_balancer_v<B> || std::is_same_v<B, any_balancer>) stage_balancer(B b)
      : builtin_(std::move(b)) {}  // NOLINT(google-explicit-constructor)

  /// The application's balancer `b`, named `name` in the fingerprint and reports. The
  /// self-type test comes first so that checking the balancer concept on stage_balancer itself
  /// never recurses into this constructor.
  template <class B>
  requires(!std::is_same_v<std::remove_cvref_t<B>, stage_balancer> && !is_builtin_balancer_v<B> &&
           !std::is_same_v<B, any_balancer> && balancer<B, detail::cost_ref<std::int64_t>> &&
           balancer<B, detail::cost_ref<double>>)
      stage_balancer(B b, std::string name = "custom")  // NOLINT(google-explicit-constructor)
      : builtin_(std::nullopt), name_(std::move(name)) {
    auto shared = std::make_shared<const B>(std::move(b));
    integral_ = [shared](const balance_problem<detail::cost_ref<std::int64_t>>& p) {
      return detail::to_balancer_plan((*shared)(p));
    };
    floating_ = [shared](const balance_problem<detail::cost_ref<double>>& p) {
      return detail::to_balancer_plan((*shared)(p));
    };
  }

  /// A class that is not a balancer: a compile error that names the requirement it misses
  /// (callable as `(const balance_problem<C>&) const` for the stage's model types, returning
  /// `balancer_plan`, `std::vector<rank_t>` or `std::optional<std::vector<rank_t>>`).
  template <class B>
  requires(!std::is_same_v<std::remove_cvref_t<B>, stage_balancer> && std::is_class_v<B> &&
           !is_builtin_balancer_v<B> && !std::is_same_v<B, any_balancer> &&
           !(balancer<B, detail::cost_ref<std::int64_t>> && balancer<B, detail::cost_ref<double>>))
      stage_balancer(B, std::string = {})  // NOLINT(google-explicit-constructor)
  {
    using P = balance_problem<detail::cost_ref<std::int64_t>>;
    using Q = balance_problem<detail::cost_ref<double>>;
    static_assert(std::invocable<const B&, const P&> && std::invocable<const B&, const Q&>,
                  "orchmllm: a stage's balancer must be callable as `(const "
                  "orchmllm::balance_problem<C>&) const` for every cost model type C (a template "
                  "or `const auto&` parameter; a non-const operator() is not)");
    if constexpr (std::invocable<const B&, const P&> && std::invocable<const B&, const Q&>)
      static_assert(detail::balancer_return<std::invoke_result_t<const B&, const P&>> &&
                        detail::balancer_return<std::invoke_result_t<const B&, const Q&>>,
                    "orchmllm: a stage's balancer must return orchmllm::balancer_plan, "
                    "std::vector<orchmllm::rank_t> (the bin of every item) or "
                    "std::optional<std::vector<orchmllm::rank_t>>");
  }

  /// The built-in balancer, or null for the application's.
  [[nodiscard]] const any_balancer* builtin() const noexcept {
    return builtin_ ? &*builtin_ : nullptr;
  }
  /// Holds the application's own balancer.
  [[nodiscard]] bool custom() const noexcept { return !builtin_; }
  /// The built-in's name, or the name given with the application's balancer.
  [[nodiscard]] std::string_view name() const noexcept {
    return builtin_ ? builtin_->name() : std::string_view(name_);
  }

  /// Runs the application's balancer. Precondition: `custom()`.
  balancer_plan operator()(const balance_problem<detail::cost_ref<std::int64_t>>& p) const {
    return integral_(p);
  }
  balancer_plan operator()(const balance_problem<detail::cost_ref<double>>& p) const {
    return floating_(p);
  }

 private:
  std::optional<any_balancer> builtin_{any_balancer{}};
  std::function<balancer_plan(const balance_problem<detail::cost_ref<std::int64_t>>&)> integral_;
  std::function<balancer_plan(const balance_problem<detail::cost_ref<double>>&)> floating_;
  std::string name_;
};

/// The mapper of a stage: a built-in one (a `mappers::*` object or an `any_mapper`, e.g. from
/// `parse_mapper`), the GLPK one (`glpk::bottleneck_ilp`, backend/glpk/mapping.hpp) or the
/// application's own (any `mapper`). Default: `mappers::transport{}`.
///
/// A mapper other than a built-in is held type-erased (one std::function call per mapping, from
/// the compiled library too) and enters the declarations' fingerprint by its name: the `name`
/// argument, else the mapper's own `name()` if it has one (the GLPK mapper does), else
/// "custom". Give two different mappers different names. Determinism: every rank runs the
/// stage's mapper on the same problem and must get the same ranks (topology/mapper.hpp).
/// Copying shares the mapper object; it must be safe to call from several threads (`plan_step`
/// may plan stages concurrently).
class stage_mapper {
 public:
  /// `mappers::transport{}`.
  stage_mapper() = default;

  /// A built-in mapper (implicit: `.mapper = mappers::auction{.tolerance = 0.003}`). Throws
  /// `invalid_argument_error` for a `mappers::auction` with a tolerance outside (0, 1] (at the
  /// declaration, not at a later map).
  template <class M>
  requires(is_builtin_mapper_v<M> || std::is_same_v<M, any_mapper>) stage_mapper(M m)
      : builtin_(std::move(m)) {  // NOLINT(google-explicit-constructor)
    if (const auto* a = builtin_->get_if<mappers::auction>())
      detail::check_auction_tolerance(a->tolerance);
  }

  /// The application's mapper `m`, named `name` (see the class comment). The self-type test
  /// comes first so that checking the mapper concept on stage_mapper itself never recurses into
  /// this constructor.
  template <class M>
  requires(!std::is_same_v<std::remove_cvref_t<M>, stage_mapper> && !is_builtin_mapper_v<M> &&
           !std::is_same_v<M, any_mapper> && mapper<M>)
      stage_mapper(M m, std::string name = {})  // NOLINT(google-explicit-constructor)
      : builtin_(std::nullopt), name_(std::move(name)) {
    if (name_.empty()) {
      if constexpr (requires { std::string(m.name()); }) {
        name_ = std::string(m.name());
      } else {
        name_ = "custom";
      }
    }
    auto shared = std::make_shared<const M>(std::move(m));
    custom_ = [shared](const bin_mapping_problem& p) { return std::vector<rank_t>((*shared)(p)); };
  }

  /// A class that is not a mapper: a compile error that names the requirement it misses
  /// (callable as `(const bin_mapping_problem&) const`, returning the rank of every bin).
  template <class M>
  requires(!std::is_same_v<std::remove_cvref_t<M>, stage_mapper> && std::is_class_v<M> &&
           !is_builtin_mapper_v<M> && !std::is_same_v<M, any_mapper> && !mapper<M>)
      stage_mapper(M, std::string = {})  // NOLINT(google-explicit-constructor)
  {
    static_assert(std::invocable<const M&, const bin_mapping_problem&>,
                  "orchmllm: a stage's mapper must be callable as `(const "
                  "orchmllm::bin_mapping_problem&) const` (a non-const operator() is not)");
    if constexpr (std::invocable<const M&, const bin_mapping_problem&>)
      static_assert(std::convertible_to<std::invoke_result_t<const M&, const bin_mapping_problem&>,
                                        std::vector<rank_t>>,
                    "orchmllm: a stage's mapper must return std::vector<orchmllm::rank_t> (the "
                    "rank of every bin)");
  }

  /// The built-in mapper, or null for a custom one.
  [[nodiscard]] const any_mapper* builtin() const noexcept {
    return builtin_ ? &*builtin_ : nullptr;
  }
  /// Holds a mapper other than a built-in (the application's, GLPK's).
  [[nodiscard]] bool custom() const noexcept { return !builtin_; }
  /// The built-in's name, or the custom mapper's name (see the class comment).
  [[nodiscard]] std::string_view name() const noexcept {
    return builtin_ ? builtin_->name() : std::string_view(name_);
  }

  /// Runs the held mapper.
  std::vector<rank_t> operator()(const bin_mapping_problem& p) const {
    return builtin_ ? (*builtin_)(p) : custom_(p);
  }

 private:
  std::optional<any_mapper> builtin_{any_mapper{}};
  detail::erased_mapper custom_;
  std::string name_;
};

}  // namespace orchmllm
