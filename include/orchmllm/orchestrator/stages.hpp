#pragma once
/// @file stages.hpp
/// What a trainer declares once (its stages) and hands in every step (its local batch
/// metadata), and the global view of one step that every rank rebuilds identically.
///
/// Model: a *sample* is one training sequence for the LLM. It has text tokens and any number of
/// *sub-items* (images, video clips, audio clips), each of one *modality* k (0..K-1, the index of
/// its encoder stage). A sub-item has an encoder length (what its encoder's cost model reads:
/// patches, padded audio positions), encoder input rows (what travels to the encoder: pixels,
/// mel frames) and LLM tokens (the encoder output rows that replace its placeholder tokens in
/// the sample's sequence). The LLM stage sees whole samples: length = text tokens + the LLM
/// tokens of all its sub-items, the sequence the backbone runs on.
///
/// `text_tokens` are the sample's own tokens only (no placeholders): the sequence the LLM sees
/// has text_tokens + Σ llm_tokens of its sub-items positions.
///
/// Thread-safety: plain values. Determinism: everything here is data; `fingerprint` is a
/// platform-independent hash.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
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
#include "orchmllm/balance/split.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/detail/core/checked.hpp"
#include "orchmllm/detail/core/fnv.hpp"
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
  stage_cost(C c)  // NOLINT(google-explicit-constructor): a declaration reads `.cost = quadratic_cost{...}`
      : integral_(make<std::int64_t, C>(c, std::is_integral<cost_type_t<C>>{})),
        floating_(make<double, C>(c, std::is_floating_point<cost_type_t<C>>{})) {}

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
    requires(is_builtin_balancer_v<B> || std::is_same_v<B, any_balancer>)
  stage_balancer(B b) : builtin_(std::move(b)) {}  // NOLINT(google-explicit-constructor)

  /// The application's balancer `b`, named `name` in the fingerprint and reports. The
  /// self-type test comes first so that checking the balancer concept on stage_balancer itself
  /// never recurses into this constructor.
  template <class B>
    requires(!std::is_same_v<std::remove_cvref_t<B>, stage_balancer> &&
             !is_builtin_balancer_v<B> && !std::is_same_v<B, any_balancer> &&
             balancer<B, detail::cost_ref<std::int64_t>> && balancer<B, detail::cost_ref<double>>)
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
    requires(is_builtin_mapper_v<M> || std::is_same_v<M, any_mapper>)
  stage_mapper(M m) : builtin_(std::move(m)) {  // NOLINT(google-explicit-constructor)
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

/// One encoder stage (one modality).
struct encoder_stage {
  std::string name;                ///< e.g. "vision", "audio"; unique, non-empty
  stage_cost cost{};               ///< cost of one sub-item from its encoder length
  padding_policy policy = packed;  ///< how costs combine on a rank (padded: rectangular batches)
  constraints limits{};            ///< per-rank cap and item counts of the stage
  /// The balancer (default automatic). `balancers::locality` with an empty `node_of_rank` gets
  /// the topology's from the planner.
  stage_balancer balancer{};
  stage_mapper mapper{};              ///< bins → ranks (default transport); deterministic
  std::int64_t input_row_bytes = 0;   ///< bytes of one encoder input row (a patch, a mel frame)
  std::int64_t output_row_bytes = 0;  ///< bytes of one encoder output row (one LLM token)
  /// Opt-in splitting: when set, the stage's segmented sub-items (`sub_item::segments` > 1) may
  /// be cut at segment boundaries into pieces encoded on different ranks, balanced by
  /// `balance_split` (balance/split.hpp) with these rules and the stage's balancer; the stage's
  /// plan, routes and `step_plan::encoder_view` are then over pieces (`encoder_routes::pieces`).
  /// Any policy (under a padded one a piece of k segments is k padded rows); needs a built-in
  /// balancer. Empty by default: sub-items stay whole; set without segmented sub-items it
  /// changes no plan.
  std::optional<split_options> split{};
};

/// The LLM stage: whole samples.
struct llm_stage {
  std::string name = "llm";         ///< unique, non-empty
  stage_cost cost{};                ///< cost of a sample from its sequence length
  padding_policy policy = packed;   ///< as `encoder_stage::policy`
  constraints limits{};             ///< as `encoder_stage::limits`
  stage_balancer balancer{};        ///< as `encoder_stage::balancer`
  stage_mapper mapper{};            ///< as `encoder_stage::mapper`
  std::int64_t text_row_bytes = 0;  ///< bytes of one text token row (e.g. id + label = 8)
};

/// Everything a trainer declares once. Must be identical on every rank (checked at every
/// metadata gather through `fingerprint`).
struct stage_declarations {
  std::vector<encoder_stage> encoders;  ///< K ≥ 0 encoder stages; modality k = encoders[k]
  llm_stage llm;

  /// K.
  [[nodiscard]] int num_encoders() const noexcept { return static_cast<int>(encoders.size()); }

  /// Throws `invalid_argument_error`, naming the stage, for an empty or repeated name, a negative
  /// row width, a negative cap, an invalid item-count range, or a built-in balancer's unusable
  /// knob (negative budgets or node ids, a non-finite or negative tolerance, karmarkar_karp with
  /// a padded policy, padded_exact with packed). The size of `locality::node_of_rank` is
  /// checked by `plan_step`, which knows d. O(K² + Σ node_of_rank sizes).
  void validate() const {
    auto check_stage = [](const std::string& name, const auto& stage) {
      const std::string what = detail::concat("stage '", name, "': ");
      // d is not known here: node ids are checked for sign, their count by plan_step.
      if (const auto* b = stage.balancer.builtin())
        detail::check_balancer(*b, stage.policy, -1, what);
      const constraints& l = stage.limits;
      ORCHMLLM_REQUIRE(!l.cap || l.cap->limit >= 0, invalid_argument_error, what, "per-rank cap ",
                       l.cap ? l.cap->limit : 0, " is negative");
      ORCHMLLM_REQUIRE(l.min_items >= 0 && l.max_items >= l.min_items, invalid_argument_error,
                       what, "items per rank ", l.min_items, "..", l.max_items,
                       " is not a valid range");
    };
    std::vector<std::string_view> names;
    for (const auto& e : encoders) {
      ORCHMLLM_REQUIRE(!e.name.empty(), invalid_argument_error, "an encoder stage has no name");
      ORCHMLLM_REQUIRE(e.input_row_bytes >= 0 && e.output_row_bytes >= 0, invalid_argument_error,
                       "stage '", e.name, "': row widths ", e.input_row_bytes, " and ",
                       e.output_row_bytes, " must be >= 0");
      check_stage(e.name, e);
      if (e.split) {
        try {
          detail::check_split_options<double>(*e.split);
        } catch (const invalid_argument_error& err) {
          detail::raise<invalid_argument_error>(detail::concat("stage '", e.name, "': ",
                                                               err.message()));
        }
        ORCHMLLM_REQUIRE(!e.balancer.custom(), invalid_argument_error, "stage '", e.name,
                         "': splitting needs a built-in balancer, not the application's '",
                         e.balancer.name(), "'");
      }
      names.push_back(e.name);
    }
    ORCHMLLM_REQUIRE(!llm.name.empty(), invalid_argument_error, "the LLM stage has no name");
    ORCHMLLM_REQUIRE(llm.text_row_bytes >= 0, invalid_argument_error, "stage '", llm.name,
                     "': text row width ", llm.text_row_bytes, " must be >= 0");
    check_stage(llm.name, llm);
    names.push_back(llm.name);
    for (std::size_t i = 0; i < names.size(); ++i)
      for (std::size_t j = i + 1; j < names.size(); ++j)
        ORCHMLLM_REQUIRE(names[i] != names[j], invalid_argument_error, "two stages are named '",
                         names[i], "'");
  }
};

namespace detail {

/// The lengths at which a stage's cost model enters the declarations' fingerprint (a model is
/// an arbitrary callable: it is compared by its values there). The Python package reads this
/// list for its callable costs.
inline constexpr std::array<std::int64_t, 12> fingerprint_probe_lengths{
    0, 1, 2, 3, 7, 64, 100, 1000, 4096, 12345, 65536, 1000000};

// A built-in balancer in a fingerprint: its name and every knob a plan depends on (not
// `automatic::concurrent`: plans do not depend on it).
inline void mix_balancer(fnv& f, const any_balancer& b) {
  f.mix(b.name());
  const auto automatic = [&](const balancers::automatic& a) {
    f.mix(static_cast<std::uint64_t>(a.refine_budget));
    f.mix(static_cast<std::uint64_t>(a.exact_node_budget));
    f.mix(static_cast<std::uint64_t>(a.exact_max_items));
    f.mix_double(a.gap_tolerance);
  };
  b.visit([&](const auto& x) {
    using B = std::remove_cvref_t<decltype(x)>;
    if constexpr (requires { x.refine; }) f.mix(static_cast<std::uint64_t>(x.refine));
    if constexpr (std::is_same_v<B, balancers::lpt> || std::is_same_v<B, balancers::padded_exact> ||
                  std::is_same_v<B, balancers::karmarkar_karp> ||
                  std::is_same_v<B, balancers::karmarkar_karp_equal>)
      f.mix(static_cast<std::uint64_t>(x.refine_budget));
    if constexpr (std::is_same_v<B, balancers::exact>) f.mix(static_cast<std::uint64_t>(x.node_budget));
    if constexpr (std::is_same_v<B, balancers::automatic>) automatic(x);
    if constexpr (std::is_same_v<B, balancers::locality>) {
      automatic(x.base);
      f.mix_double(x.tolerance);
      f.mix(static_cast<std::uint64_t>(x.node_of_rank.size()));
      for (const auto r : x.node_of_rank) f.mix(static_cast<std::uint64_t>(r));
    }
  });
}

// A built-in mapper in a fingerprint: its name and knob.
inline void mix_mapper(fnv& f, const any_mapper& m) {
  f.mix(m.name());
  if (const auto* b = m.get_if<mappers::bottleneck>()) f.mix(static_cast<std::uint64_t>(b->step_budget));
  if (const auto* a = m.get_if<mappers::auction>()) f.mix_double(a->tolerance);
}

template <class Stage>
void mix_stage(fnv& f, const Stage& stage) {
  const stage_cost& cost = stage.cost;
  const padding_policy policy = stage.policy;
  f.mix(std::string_view(stage.name));
  // A cost model is an arbitrary callable: compare it by its values at fixed probe lengths.
  for (const std::int64_t l : fingerprint_probe_lengths)
    cost.visit([&](const auto& c) {
      if constexpr (std::is_integral_v<decltype(c(l))>) {
        f.mix(static_cast<std::uint64_t>(c(l)));
      } else {
        f.mix_double(c(l));
      }
    });
  f.mix(static_cast<std::uint64_t>(cost.integral()));
  f.mix(static_cast<std::uint64_t>(policy.is_padded()));
  f.mix(static_cast<std::uint64_t>(policy.multiple()));
  if (policy.policy_kind() == padding_policy::kind::bucketed) {
    f.mix(static_cast<std::uint64_t>(policy.buckets().size()));
    for (const auto b : policy.buckets()) f.mix(static_cast<std::uint64_t>(b));
  }
  // A trainer's padding rule, by its name.
  if (policy.policy_kind() == padding_policy::kind::custom) {
    f.mix(std::string_view("padding rule"));
    f.mix(policy.rule_name());
  }
  const constraints& l = stage.limits;
  f.mix(static_cast<std::uint64_t>(l.cap.has_value()));
  if (l.cap) {
    f.mix(static_cast<std::uint64_t>(l.cap->what));
    f.mix(static_cast<std::uint64_t>(l.cap->limit));
  }
  f.mix(static_cast<std::uint64_t>(l.min_items));
  f.mix(static_cast<std::uint64_t>(l.max_items));
  if (const auto* b = stage.balancer.builtin()) {
    mix_balancer(f, *b);
  } else {
    f.mix(std::string_view("custom balancer"));
    f.mix(stage.balancer.name());
  }
  if (const auto* m = stage.mapper.builtin()) {
    mix_mapper(f, *m);
  } else {
    f.mix(std::string_view("custom mapper"));
    f.mix(stage.mapper.name());
  }
}

}  // namespace detail

/// 64-bit fingerprint of the declarations: names, cost models (by their values at twelve fixed
/// lengths), policies (a trainer's padding rule by its name), limits, balancers and mappers
/// with their knobs (the application's by their names), row widths and split options. Equal declarations give equal
/// fingerprints on every platform; two cost models that agree on all probe lengths are treated
/// as equal, and so are two padding rules, balancers or mappers of the same name. O(K), never
/// throws (a throwing cost model aside).
[[nodiscard]] inline std::uint64_t fingerprint(const stage_declarations& decl) {
  detail::fnv f;
  f.mix(static_cast<std::uint64_t>(decl.encoders.size()));
  for (const auto& e : decl.encoders) {
    detail::mix_stage(f, e);
    f.mix(static_cast<std::uint64_t>(e.input_row_bytes));
    f.mix(static_cast<std::uint64_t>(e.output_row_bytes));
    if (e.split) {
      f.mix(std::string_view("split"));
      f.mix(static_cast<std::uint64_t>(e.split->min_piece_segments));
      f.mix(static_cast<std::uint64_t>(e.split->max_pieces));
      f.mix(static_cast<std::uint64_t>(e.split->rounds));
      f.mix_double(e.split->tolerance);
    }
  }
  detail::mix_stage(f, decl.llm);
  f.mix(static_cast<std::uint64_t>(decl.llm.text_row_bytes));
  return f.h;
}

/// One sub-item of a local sample.
struct sub_item {
  std::int32_t modality = 0;        ///< encoder stage index k, 0 ≤ k < K
  std::int64_t parent = 0;          ///< index of its sample in the local batch
  std::int64_t encoder_length = 0;  ///< what the encoder's cost model reads
  std::int64_t input_rows = 0;      ///< encoder input rows that travel to the encoder
  std::int64_t llm_tokens = 0;      ///< encoder output rows (LLM tokens) it becomes
  /// S ≥ 1 equal segments that its encoder processes independently (the temporal patch groups
  /// of a video, the 30 s windows of a recording): encoder_length, input_rows and llm_tokens
  /// must each be divisible by S, and segment i is rows [i·input_rows/S, (i+1)·input_rows/S)
  /// of its input and tokens [i·llm_tokens/S, (i+1)·llm_tokens/S) of its output. Its cost is
  /// the sum of S segment costs of length encoder_length/S (packed; under a padded policy it
  /// is S padded rows of length encoder_length/S), and a stage with `encoder_stage::split` may
  /// cut it at segment boundaries. 1 (the default) costs nothing:
  /// the metadata, plans and routes are those of a sub-item without segments.
  std::int64_t segments = 1;
  friend bool operator==(const sub_item&, const sub_item&) = default;
};

/// What one rank sampled for this step: its samples' text token counts, and its sub-items in
/// the order they appear in their samples (sub-items of one sample keep this order everywhere;
/// sub-items of different samples may interleave).
struct local_batch {
  std::vector<std::int64_t> text_tokens;  ///< one entry per local sample
  std::vector<sub_item> sub_items;
  friend bool operator==(const local_batch&, const local_batch&) = default;
};

/// The global view of one step, identical on every rank after `gather_step_metadata` (or built
/// in one process by `make_step_metadata`).
///
/// Ids: global sample g = sample_offsets[r] + local index; sub-items of modality k get global
/// ids per modality, rank-major, in local order: modalities[k].offsets[r] + (index among rank
/// r's sub-items of modality k).
struct step_metadata {
  /// Sub-items of one modality.
  struct modality_items {
    std::vector<std::int64_t> offsets{0};  ///< CSR per rank (d + 1)
    std::vector<std::int64_t> parent;      ///< global sample id
    std::vector<std::int64_t> encoder_length;
    std::vector<std::int64_t> input_rows;
    std::vector<std::int64_t> llm_tokens;
    /// S of every sub-item (`sub_item::segments`); may be left empty in metadata built by
    /// hand, which means S = 1 for all.
    std::vector<std::int64_t> segments;
    [[nodiscard]] std::int64_t size() const noexcept {
      return static_cast<std::int64_t>(parent.size());
    }
    /// S of sub-item i (1 when `segments` is empty). O(1).
    [[nodiscard]] std::int64_t segments_of(std::int64_t i) const noexcept {
      return segments.empty() ? 1 : segments[static_cast<std::size_t>(i)];
    }
  };
  rank_t ranks = 0;
  std::vector<std::int64_t> sample_offsets{0};  ///< CSR per rank (d + 1)
  std::vector<std::int64_t> text_tokens;        ///< per global sample
  std::vector<modality_items> modalities;       ///< K entries
  /// Every sample's sub-items in their original order, as (modality, id within the modality):
  /// entries [sample_sub_offsets[g], sample_sub_offsets[g + 1]).
  std::vector<std::int64_t> sample_sub_offsets{0};
  std::vector<std::pair<std::int32_t, std::int64_t>> sample_sub_items;

  [[nodiscard]] std::int64_t num_samples() const noexcept {
    return static_cast<std::int64_t>(text_tokens.size());
  }
  /// LLM sequence length of sample g: text + the LLM tokens of its sub-items. O(its sub-items).
  /// Throws `invalid_argument_error` when the sum passes 2^63 − 1.
  [[nodiscard]] std::int64_t sequence_length(std::int64_t g) const {
    std::int64_t len = text_tokens[static_cast<std::size_t>(g)];
    for (auto k = sample_sub_offsets[static_cast<std::size_t>(g)];
         k < sample_sub_offsets[static_cast<std::size_t>(g) + 1]; ++k) {
      const auto& [m, id] = sample_sub_items[static_cast<std::size_t>(k)];
      len = detail::checked_add(
          len, modalities[static_cast<std::size_t>(m)].llm_tokens[static_cast<std::size_t>(id)],
          "sequence length of sample ", g);
    }
    return len;
  }
};

namespace detail {

// Why a local batch is malformed (0 = fine); `where` is the first offending index.
enum class batch_fault : std::int64_t {
  none = 0,
  negative_text,
  bad_modality,
  bad_parent,
  negative_value,
  bad_segments,
};

inline std::string describe(batch_fault f, std::int64_t where, std::int64_t detail_value,
                            int encoders) {
  switch (f) {
    case batch_fault::none: return "no fault";
    case batch_fault::negative_text:
      return concat("sample ", where, " has ", detail_value, " text tokens");
    case batch_fault::bad_modality:
      return concat("sub-item ", where, " has modality ", detail_value, " but ", encoders,
                    " encoder stages are declared");
    case batch_fault::bad_parent:
      return concat("sub-item ", where, " names parent sample ", detail_value,
                    ", which does not exist");
    case batch_fault::negative_value:
      return concat("sub-item ", where, " has a negative length, row count or token count");
    case batch_fault::bad_segments:
      return concat("sub-item ", where, " has ", detail_value,
                    " segments: must be in [1, 2^31] and divide its encoder length, input rows "
                    "and LLM tokens");
  }
  return "?";
}

struct fault_report {
  batch_fault fault = batch_fault::none;
  std::int64_t where = 0;
  std::int64_t value = 0;
};

// The most segments a sub-item may declare: S − 1 travels in the high 32 bits of the modality
// word of the metadata exchange (gather_metadata.hpp).
inline constexpr std::int64_t max_segments = std::int64_t{1} << 31;

inline fault_report check_local_batch(const local_batch& b, int encoders) {
  for (std::size_t i = 0; i < b.text_tokens.size(); ++i)
    if (b.text_tokens[i] < 0)
      return {batch_fault::negative_text, static_cast<std::int64_t>(i), b.text_tokens[i]};
  const auto samples = static_cast<std::int64_t>(b.text_tokens.size());
  for (std::size_t i = 0; i < b.sub_items.size(); ++i) {
    const auto& s = b.sub_items[i];
    if (s.modality < 0 || s.modality >= encoders)
      return {batch_fault::bad_modality, static_cast<std::int64_t>(i), s.modality};
    if (s.parent < 0 || s.parent >= samples)
      return {batch_fault::bad_parent, static_cast<std::int64_t>(i), s.parent};
    if (s.encoder_length < 0 || s.input_rows < 0 || s.llm_tokens < 0)
      return {batch_fault::negative_value, static_cast<std::int64_t>(i), 0};
    if (s.segments != 1 &&
        (s.segments < 1 || s.segments > max_segments || s.encoder_length % s.segments != 0 ||
         s.input_rows % s.segments != 0 || s.llm_tokens % s.segments != 0))
      return {batch_fault::bad_segments, static_cast<std::int64_t>(i), s.segments};
  }
  return {};
}

// Appends rank r's batch (already checked) to the global metadata under construction.
inline void append_rank(step_metadata& m, const local_batch& b) {
  const auto first_sample = static_cast<std::int64_t>(m.text_tokens.size());
  m.text_tokens.insert(m.text_tokens.end(), b.text_tokens.begin(), b.text_tokens.end());
  m.sample_offsets.push_back(static_cast<std::int64_t>(m.text_tokens.size()));
  // Per sample, its sub-items in order.
  std::vector<std::vector<std::pair<std::int32_t, std::int64_t>>> per_sample(b.text_tokens.size());
  for (const auto& s : b.sub_items) {
    auto& mod = m.modalities[static_cast<std::size_t>(s.modality)];
    per_sample[static_cast<std::size_t>(s.parent)].emplace_back(s.modality, mod.size());
    mod.parent.push_back(first_sample + s.parent);
    mod.encoder_length.push_back(s.encoder_length);
    mod.input_rows.push_back(s.input_rows);
    mod.llm_tokens.push_back(s.llm_tokens);
    mod.segments.push_back(s.segments);
  }
  for (auto& mod : m.modalities) mod.offsets.push_back(mod.size());
  for (const auto& list : per_sample) {
    m.sample_sub_items.insert(m.sample_sub_items.end(), list.begin(), list.end());
    m.sample_sub_offsets.push_back(static_cast<std::int64_t>(m.sample_sub_items.size()));
  }
  ++m.ranks;
}

}  // namespace detail

/// Builds the global metadata in one process from every rank's local batch (for simulators,
/// tests and single-process trainers). O(total samples + sub-items). Throws
/// `invalid_argument_error` naming the rank and the fault for a malformed batch (negative
/// values, a modality outside [0, encoders), a parent sample that does not exist) or when
/// `batches` is empty.
inline step_metadata make_step_metadata(const std::vector<local_batch>& batches, int encoders) {
  ORCHMLLM_REQUIRE(!batches.empty(), invalid_argument_error, "a step needs at least one rank");
  ORCHMLLM_REQUIRE(encoders >= 0, invalid_argument_error, encoders, " encoder stages");
  step_metadata m;
  m.modalities.resize(static_cast<std::size_t>(encoders));
  for (std::size_t r = 0; r < batches.size(); ++r) {
    const auto f = detail::check_local_batch(batches[r], encoders);
    ORCHMLLM_REQUIRE(f.fault == detail::batch_fault::none, invalid_argument_error, "rank ", r,
                     ": ", detail::describe(f.fault, f.where, f.value, encoders));
    detail::append_rank(m, batches[r]);
  }
  return m;
}

}  // namespace orchmllm
