#pragma once
/// @file orchestrator.hpp
/// The MLLM Global Orchestrator: one balanced plan per stage and the routes that move every
/// tensor of a multimodal training step.
///
/// Per step, on every rank:
/// @code
///   auto meta = orchmllm::gather_step_metadata(comm, decl, my_batch, topo);  // 1 all-gather(v)
///   auto step = orchmllm::plan_step(comm, decl, meta, topo);  // plans + this rank's routes,
///                                                             // agreed in 1 small reduction
///   const auto& routes = step.routes;
///   // forward
///   auto pixels = orchmllm::dispatch(comm, routes.encoder_input(0), my_pixels);  // origin → Π_E
///   auto text   = orchmllm::dispatch(comm, routes.text(), my_text);              // origin → Π_M
///   ... encoder k forward on pixels ...
///   auto emb    = orchmllm::dispatch(comm, routes.encoder_output(0), enc_out);   // Π_E → Π_M
///   ... place emb at the placeholders (step.llm_view(rank)), LLM forward/backward ...
///   // backward
///   auto grads  = orchmllm::dispatch(comm, routes.encoder_gradient(0), d_emb);   // Π_M → Π_E
///   ... encoder k backward; all-reduce parameter gradients as usual ...
/// @endcode
/// The pure `plan_step(decl, meta, topo)` (no communicator; e.g. on `async_planner`'s thread)
/// gives the same plans; with `plan_options::routes_for` it builds the routes too, and
/// `agree_on_routes(comm, step.routes.all)` makes the agreement. Moving along the plans
/// instead (`dispatch(comm, step.llm, my_text)`) also works and agrees on every transfer.
///
/// Plans (see stages.hpp for the data model):
///  * Π_E_k (`encoders[k].input`): the sub-items of modality k, balanced with stage k's cost
///    model, policy, balancer and constraints, then mapped to ranks (`map_bins`, the stage's
///    mapper or mapping) so pixels cross as few node boundaries as possible.
///  * Π_M (`llm`): whole samples, length = text tokens + the LLM tokens of their sub-items.
///    Its mapping counts, per sample, its text bytes plus its sub-items' output bytes (all
///    attributed to the sample's origin rank: an approximation, since the outputs start from
///    the encoder ranks, which Π_E_k keeps close to the origin).
///  * The composed route (`encoders[k].output`) = L_k ∘ Π_E_k⁻¹, where L_k (`encoders[k].lifted`)
///    lifts Π_M from samples to sub-items: a sub-item goes to the rank of its parent sample. Its
///    source layout is Π_E_k's destination layout (what the encoder ranks hold), so encoder
///    outputs move once, straight from encoder ranks to LLM ranks.
///  * The gradient route (`encoders[k].gradient`) is the composed route's inverse.
///
/// Receive order on an LLM rank (what the trainer relies on to place encoder outputs):
///  * text payload along Π_M: the rank's samples in LLM slot order (increasing origin sample
///    id, the canonical order of `rearrangement::from_destinations`);
///  * modality k payload along `encoders[k].output`: for LLM slot s = 0, 1, ... in order, the
///    sub-items of modality k of that slot's sample in their original order (the order in the
///    origin rank's `local_batch::sub_items`). `llm_view(rank)` returns these offsets and, per
///    sample, its sub-items across modalities in original order: sample j's sequence is its
///    text with each sub-item's placeholder run replaced by that sub-item's rows, taken in
///    this order.
///
/// Communication per step: one metadata all-gather (a fixed record plus one all-gatherv), one
/// small reduction agreeing on the step's routes, then 3K + 1 transfers: K encoder inputs,
/// 1 text, K encoder outputs (forward) and K output gradients (backward). Each is one
/// `dispatch` along a prebuilt route: one all-to-all(v) hop with the direct schedule, two or
/// three with the node-wise one (comm/route.hpp), and nothing else. (A dispatch along a plan
/// instead adds its own agreement and size all-gathers per transfer, comm/dispatch.hpp.)
///
/// Determinism: `plan_step` is a pure function of (declarations, metadata, topology) with
/// deterministic balancers and mappers (the built-ins are; a stage's own balancer or mapper,
/// `glpk::bottleneck_ilp` included, must be too: it runs on every rank), so every rank computes
/// the same plans without further communication. Thread-safety: pure functions.

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/comm/collectives.hpp"
#include "orchmllm/comm/communicator.hpp"
#include "orchmllm/comm/metadata.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/config.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/core/statistics.hpp"
#include "orchmllm/detail/comm/agreement.hpp"
#include "orchmllm/detail/core/checked.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"

#include <chrono>  // the phase timers of plan_stage and plan_step

#if !ORCHMLLM_USE_COMPILED
#include <future>  // plan_step's body (compiled mode: in the library)

#include "orchmllm/detail/core/parallel.hpp"  // its route building, likewise
#endif

namespace orchmllm {

/// Balance and memory figures of one stage, before (as sampled) and after the plan. Loads are
/// stage costs (the stage's cost model and policy).
struct stage_report {
  std::string name;
  balance_method used{};                 ///< the balancer whose plan was kept
  double makespan_before = 0;       ///< max over ranks of the stage cost, as sampled
  double makespan_after = 0;
  double lower_bound = 0;           ///< makespan_lower_bound
  double imbalance_before = 1;      ///< max / mean of the stage cost over ranks, as sampled
  double imbalance_after = 1;
  std::int64_t max_tokens_before = 0;  ///< peak token footprint of a rank (policy's measure)
  std::int64_t max_tokens_after = 0;
  std::int64_t max_bytes_before = 0;   ///< peak payload bytes of a rank
  std::int64_t max_bytes_after = 0;
  std::int64_t moved_bytes = 0;        ///< payload bytes that change rank along the plan
  std::int64_t inter_node_bytes = 0;   ///< ... that change node
  // Wall times of the stage's planning phases (measured, not deterministic; a report only).
  double balance_seconds = 0;  ///< the balancer (with its checks)
  double map_seconds = 0;      ///< the mapping onto ranks (`map_bins`)
  double report_seconds = 0;   ///< the figures of this report (`compute_statistics`)
};

/// Plans and routes of one encoder stage.
struct encoder_routes {
  batch_layout layout;      ///< the stage's layout (origin order; lengths, input bytes, parents)
  rearrangement input;      ///< Π_E_k: origin sub-items → encoder ranks
  rearrangement lifted;     ///< L_k: origin sub-items → the LLM rank of their parent sample
  rearrangement output;     ///< L_k ∘ Π_E_k⁻¹: encoder ranks → LLM ranks (encoder outputs)
  rearrangement gradient;   ///< output⁻¹: LLM ranks → encoder ranks (gradients of the outputs)
};

/// What an LLM rank needs to assemble its sequences (see the file comment).
struct llm_rank_view {
  std::vector<std::int64_t> samples;  ///< global sample id of every LLM slot, in slot order
  /// Per modality k: received items [item_offsets[k][s], item_offsets[k][s+1]) belong to slot s.
  std::vector<std::vector<std::int64_t>> item_offsets;
  /// Per modality k: first row of every received item in the modality-k payload, plus the end.
  std::vector<std::vector<std::int64_t>> row_offsets;
  /// Per slot s: its sub-items across modalities in their original order, entries
  /// [sub_item_offsets[s], sub_item_offsets[s+1]) of `sub_items`, each (modality, index of the
  /// item in that modality's received payload).
  std::vector<std::int64_t> sub_item_offsets{0};
  std::vector<std::pair<std::int32_t, std::int64_t>> sub_items;
};

/// One rank's prebuilt routes of every transfer of a step (`plan_options::routes_for`), in the
/// order a training step runs them: the K encoder inputs (origin → Π_E_k, rows of the stage's
/// `input_row_bytes`), the text (origin → Π_M, `text_row_bytes`), the K encoder outputs
/// (Π_E_k → Π_M, `output_row_bytes`) and the K output gradients (Π_M → Π_E_k, the same width as
/// the outputs; a trainer whose gradients have another width builds that route with
/// `route::build`). Moving a payload along one is `dispatch(comm, route, ...)`: one
/// all-to-all(v) per hop and no other collective once the ranks agreed on the step's routes
/// (`agree_on_routes(comm, routes.all)`, or the collective `plan_step` that does it).
struct step_routes {
  rank_t rank = -1;        ///< the rank they were built for; -1: none were built
  std::vector<route> all;  ///< 3K + 1 routes: inputs, text, outputs, gradients

  /// Whether routes were built.
  [[nodiscard]] bool empty() const noexcept { return all.empty(); }
  /// K.
  [[nodiscard]] int num_encoders() const noexcept {
    return all.empty() ? 0 : static_cast<int>(all.size() - 1) / 3;
  }
  /// The route of stage k's inputs, origin → Π_E_k. No bounds check (k in [0, K)).
  [[nodiscard]] const route& encoder_input(int k) const noexcept { return at(k); }
  /// The route of the text rows, origin → Π_M.
  [[nodiscard]] const route& text() const noexcept { return at(num_encoders()); }
  /// The route of stage k's outputs, Π_E_k → Π_M (the composed route).
  [[nodiscard]] const route& encoder_output(int k) const noexcept {
    return at(num_encoders() + 1 + k);
  }
  /// The route of the gradients of stage k's outputs, Π_M → Π_E_k.
  [[nodiscard]] const route& encoder_gradient(int k) const noexcept {
    return at(2 * num_encoders() + 1 + k);
  }

 private:
  [[nodiscard]] const route& at(int i) const noexcept { return all[static_cast<std::size_t>(i)]; }
};

/// Everything one step needs (identical on every rank).
struct step_plan {
  std::vector<encoder_routes> encoders;  ///< K entries, one per encoder stage
  batch_layout llm_layout;               ///< samples: sequence lengths, bytes, origin order
  rearrangement llm;                     ///< Π_M: origin samples → LLM ranks
  std::vector<stage_report> stages;      ///< K encoder stages, then the LLM stage
  step_routes routes;  ///< this rank's routes when `plan_options::routes_for` asked for them
  double plan_seconds = 0;  ///< wall time of `plan_step` (not deterministic; a report only)
  // Wall times of the phases around the stages (each stage's are in its report; with
  // `parallel_stages` the stages overlap, so the phases need not add up to plan_seconds).
  double layout_seconds = 0;   ///< building the K + 1 layouts from the metadata
  double stages_seconds = 0;   ///< balancing and mapping all stages (wall, threads included;
                               ///< with `routes_for`, the text route overlaps it)
  double compose_seconds = 0;  ///< lifts, composed routes and their inverses (the input routes
                               ///< are built meanwhile)
  double routes_seconds = 0;   ///< the rest of this rank's routes (`plan_options::routes_for`):
                               ///< outputs, gradients, and waiting for the inputs

  /// 3K + 1.
  [[nodiscard]] int alltoalls_per_step() const noexcept {
    return 3 * static_cast<int>(encoders.size()) + 1;
  }

  /// The receive layout of LLM rank r (see llm_rank_view). O(its samples and sub-items + d).
  /// Throws `invalid_argument_error` for r outside [0, d).
  [[nodiscard]] llm_rank_view llm_view(const step_metadata& meta, rank_t r) const {
    ORCHMLLM_REQUIRE(r >= 0 && r < llm.num_dst_ranks(), invalid_argument_error, "rank ", r,
                     " outside [0, ", llm.num_dst_ranks(), ")");
    llm_rank_view v;
    const auto k_count = encoders.size();
    v.item_offsets.assign(k_count, std::vector<std::int64_t>{0});
    v.row_offsets.assign(k_count, std::vector<std::int64_t>{0});
    std::vector<std::int64_t> received(k_count, 0);
    const auto doff = llm.dst_offsets();
    for (auto h = doff[static_cast<std::size_t>(r)]; h < doff[static_cast<std::size_t>(r) + 1];
         ++h) {
      const std::int64_t g = llm.source_of(h);
      v.samples.push_back(g);
      // Sub-items of this sample in original order; per modality they are also in increasing
      // modality id, which is the order the composed route delivers them in.
      std::vector<std::int64_t> seen(k_count, 0);
      for (auto k = meta.sample_sub_offsets[static_cast<std::size_t>(g)];
           k < meta.sample_sub_offsets[static_cast<std::size_t>(g) + 1]; ++k) {
        const auto& [m, id] = meta.sample_sub_items[static_cast<std::size_t>(k)];
        const auto um = static_cast<std::size_t>(m);
        v.sub_items.emplace_back(m, received[um] + seen[um]);
        ++seen[um];
        v.row_offsets[um].push_back(
            v.row_offsets[um].back() +
            meta.modalities[um].llm_tokens[static_cast<std::size_t>(id)]);
      }
      v.sub_item_offsets.push_back(static_cast<std::int64_t>(v.sub_items.size()));
      for (std::size_t m = 0; m < k_count; ++m) {
        received[m] += seen[m];
        v.item_offsets[m].push_back(received[m]);
      }
    }
    return v;
  }
};

namespace detail {

// Balance + map one stage; fills its report. `bytes` are the layout's item bytes.
template <class Stage>
rearrangement plan_stage(const Stage& stage, const batch_layout& layout, const topology& topo,
                         stage_report& rep) {
  balance_options opt = detail::stage_options(stage);
  ORCHMLLM_REQUIRE(opt.node_of_rank.empty() ||
                       opt.node_of_rank.size() == static_cast<std::size_t>(topo.num_ranks()),
                   invalid_argument_error, "stage '", stage.name, "': node_of_rank has ",
                   opt.node_of_rank.size(), " entries for ", topo.num_ranks(), " ranks");
  if (opt.method == balance_method::locality && opt.node_of_rank.empty())
    opt.node_of_rank.assign(topo.node_map().begin(), topo.node_map().end());
  const std::span<const std::int64_t> bytes = layout.item_bytes();
  // Balance in the model's own computation type (exact integers for integral models); the
  // report carries the figures as double.
  mapping_result mapped = stage.cost.visit([&](const auto& cost) {
    using Cost = cost_type_t<std::remove_cvref_t<decltype(cost)>>;
    // The application's balancer sees the stage's model type-erased (stage_balancer); the
    // driver around it (checks, fallback) runs on the stage's own model type, so it shares its
    // instantiations with the built-in path.
    const auto custom = [&](const auto& p) {
      const cost_ref<Cost> erased(p.cost_model());
      return stage.balancer(balance_problem<cost_ref<Cost>>(p.input(), erased, p.lower_bound()));
    };
    auto t0 = std::chrono::steady_clock::now();
    const auto lap = [&t0] {
      const auto t1 = std::chrono::steady_clock::now();
      return std::chrono::duration<double>(t1 - std::exchange(t0, t1)).count();
    };
    const auto balanced = stage.balancer.custom()
                              ? balance(layout, cost, stage.policy, custom, opt.limits)
                              : balance(layout, cost, stage.policy, opt);
    rep.balance_seconds = lap();
    // A custom mapper (the application's, GLPK's) runs behind the stage's std::function; every
    // other stage maps by its method (a built-in mapper object's, or `mapping`).
    auto m = stage.mapper.custom() ? map_bins(balanced.plan, bytes, topo, stage.mapper)
                                   : map_bins(balanced.plan, bytes, topo, stage_mapping(stage));
    rep.map_seconds = lap();
    const auto after = compute_statistics(layout, m.plan, cost, stage.policy, opt.limits);
    rep.report_seconds = lap();
    rep.used = balanced.used;
    rep.makespan_before = static_cast<double>(after.makespan_before);
    rep.makespan_after = static_cast<double>(after.makespan);
    rep.lower_bound = static_cast<double>(after.lower_bound);
    rep.imbalance_before = after.imbalance_before;
    rep.imbalance_after = after.imbalance_after;
    rep.max_tokens_before = after.max_tokens_before;
    rep.max_tokens_after = after.max_tokens;
    rep.max_bytes_before = after.max_bytes_before;
    rep.max_bytes_after = after.max_bytes;
    return m;
  });
  rep.name = stage.name;
  rep.moved_bytes = mapped.moved_bytes;
  rep.inter_node_bytes = mapped.inter_node_bytes;
  return std::move(mapped.plan);
}

}  // namespace detail

/// Options of `plan_step`.
struct plan_options {
  /// Balance and map the K encoder stages on K extra threads while the calling thread plans the
  /// LLM (the stages are independent), compose the encoders' routes side by side, and build
  /// the routes (`routes_for`) as soon as their plans exist: the text route while the encoders
  /// are planned, the input routes during the composition, the rest on up to
  /// `std::thread::hardware_concurrency()` threads. The plans and routes are the same either
  /// way; false does everything one after another on the calling thread.
  bool parallel_stages = true;
  /// Also build the prebuilt routes of every transfer of the step for this rank
  /// (`step_plan::routes`); -1 (the default): none. The rest of the plan does not depend on it.
  rank_t routes_for = -1;
  /// The schedule of those routes; `automatic` chooses per transfer with the topology's link
  /// figures (the same choice on every rank).
  schedule sched = schedule::automatic;
};

#if !ORCHMLLM_USE_COMPILED
namespace detail {

// This rank's 3K + 1 routes (step_routes' order: K inputs, text, K outputs, K gradients),
// built as soon as their plans exist so that they overlap the rest of the planning: the text
// route on the calling thread while the encoder stages are still being planned (`text`), the
// input routes on their own threads during the composition (`start_inputs`), the output and
// gradient routes on up to planning_threads() threads at the end (`finish`). Without
// `parallel` everything runs on the calling thread, in order. The routes are the same either
// way; an error is rethrown from `finish`, the first in step_routes' order.
class step_route_builder {
 public:
  step_route_builder(const stage_declarations& decl, const step_metadata& meta,
                     const topology& topo, rank_t me, schedule sched, bool parallel)
      : decl_(decl), meta_(meta), topo_(topo), me_(me), sched_(sched), parallel_(parallel),
        kc_(meta.modalities.size()), routes_(3 * kc_ + 1), errors_(3 * kc_ + 1) {}

  // Builds the text route (Π_M) here. The byte products cannot overflow: plan_step's LLM
  // layout checked each of them ("text bytes of sample").
  void text(const rearrangement& llm) {
    run(kc_, [&] {
      std::vector<std::int64_t> bytes(meta_.text_tokens.size());
      for (std::size_t g = 0; g < bytes.size(); ++g)
        bytes[g] = meta_.text_tokens[g] * decl_.llm.text_row_bytes;
      return route::build(llm, bytes, topo_, me_, sched_);
    });
  }

  // Starts the input routes (Π_E_k); `plan`'s encoder plans and layouts must stay put.
  void start_inputs(const step_plan& plan) {
    for (std::size_t k = 0; k < kc_; ++k)
      inputs_.push_back(std::async(parallel_ ? std::launch::async : std::launch::deferred,
                                   [this, &plan, k] {
                                     run(k, [&] {
                                       const auto& er = plan.encoders[k];
                                       return route::build(er.input, er.layout.explicit_bytes(),
                                                           topo_, me_, sched_);
                                     });
                                   }));
  }

  // Builds the output and gradient routes, waits for the inputs, returns all.
  step_routes finish(const step_plan& plan) {
    // Encoder output bytes by sub-item, once per encoder. The products cannot overflow:
    // plan_step's LLM layout checked each of them ("encoder output bytes of sample").
    std::vector<std::vector<std::int64_t>> origin(kc_);
    for (std::size_t k = 0; k < kc_; ++k) {
      const auto& tokens = meta_.modalities[k].llm_tokens;
      origin[k].resize(tokens.size());
      for (std::size_t i = 0; i < tokens.size(); ++i)
        origin[k][i] = tokens[i] * decl_.encoders[k].output_row_bytes;
    }
    detail::run_indexed(2 * kc_, parallel_ ? detail::planning_threads() : 1, [&](std::size_t t) {
      const std::size_t k = t % kc_;
      const bool output = t < kc_;
      run(output ? kc_ + 1 + k : 2 * kc_ + 1 + k, [&] {
        // The bytes carried along a plan (an item keeps its bytes): into Π_E_k's destination
        // order for the output route, into Π_M's (the lift L_k) for the gradient route.
        const auto& er = plan.encoders[k];
        return output ? route::build(er.output, orchmllm::apply(er.input, origin[k]), topo_,
                                     me_, sched_)
                      : route::build(er.gradient, orchmllm::apply(er.lifted, origin[k]), topo_,
                                     me_, sched_);
      });
    });
    for (auto& f : inputs_) f.get();
    for (auto& e : errors_)
      if (e) std::rethrow_exception(e);
    step_routes out;
    out.rank = me_;
    out.all = std::move(routes_);
    return out;
  }

 private:
  template <class F>
  void run(std::size_t slot, F&& build) {
    try {
      routes_[slot] = build();
    } catch (...) {
      errors_[slot] = std::current_exception();
    }
  }

  const stage_declarations& decl_;
  const step_metadata& meta_;
  const topology& topo_;
  rank_t me_;
  schedule sched_;
  bool parallel_;
  std::size_t kc_;
  std::vector<route> routes_;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::future<void>> inputs_;
};

}  // namespace detail
#endif

/// Plans one step: Π_E_k and its routes for every encoder stage, Π_M, and the reports.
///
/// Complexity: the balancers and mappings of K + 1 stages (O(n log n) each for `automatic` +
/// `transport`, n = items of the stage), plus O(samples + sub-items + d) for the layouts and
/// routes; with `parallel_stages` the stage planning takes about the time of the slowest stage
/// on K + 1 cores. Deterministic (see the file comment), whatever the thread timing.
///
/// Throws `invalid_argument_error` when the declarations are invalid, the metadata's rank
/// count differs from the topology's, or its modality count differs from K;
/// `infeasible_error` when a stage's constraints (capacity, item counts) cannot be met — the
/// message names the stage. Identical inputs throw identically on every rank: when several
/// stages fail, the error is the LLM's, else the first encoder's by index. `std::system_error`
/// when a thread cannot be started.
ORCHMLLM_FUNC step_plan plan_step(const stage_declarations& decl, const step_metadata& meta,
                                  const topology& topo, const plan_options& options = {})
#if ORCHMLLM_USE_COMPILED
    ;  // defined in the compiled library (orchmllm/config.hpp)
#else
{
  const auto start = std::chrono::steady_clock::now();
  decl.validate();
  ORCHMLLM_REQUIRE(meta.ranks == topo.num_ranks(), invalid_argument_error, "metadata of ",
                   meta.ranks, " ranks for a topology of ", topo.num_ranks());
  ORCHMLLM_REQUIRE(static_cast<int>(meta.modalities.size()) == decl.num_encoders(),
                   invalid_argument_error, "metadata has ", meta.modalities.size(),
                   " modalities, the declarations ", decl.num_encoders(), " encoder stages");
  ORCHMLLM_REQUIRE(options.routes_for >= -1 && options.routes_for < topo.num_ranks(),
                   invalid_argument_error, "plan_options::routes_for is ", options.routes_for,
                   ", outside [-1, ", topo.num_ranks(), ")");
  const rank_t d = topo.num_ranks();
  const auto kc = static_cast<std::size_t>(decl.num_encoders());
  step_plan out;
  out.stages.resize(kc + 1);
  auto in_stage = [](const std::string& name, auto&& f) {
    try {
      return f();
    } catch (const infeasible_error& e) {
      detail::raise<infeasible_error>(detail::concat("stage '", name, "': ", e.message()));
    }
  };

  auto phase = start;
  const auto lap = [&phase] {
    const auto now = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(now - std::exchange(phase, now)).count();
  };
  // Layouts: the LLM stage over samples (sequence lengths, text and encoder-output bytes), then
  // one per encoder stage.
  {
    const auto n = static_cast<std::size_t>(meta.num_samples());
    std::vector<std::int64_t> lengths(n), bytes(n);
    for (std::size_t g = 0; g < n; ++g) {
      lengths[g] = meta.sequence_length(static_cast<std::int64_t>(g));
      // Checked: token and row counts come from the trainer (a wrapped size would move 0 bytes).
      std::int64_t b = detail::checked_mul(meta.text_tokens[g], decl.llm.text_row_bytes,
                                           "text bytes of sample ", g);
      for (auto k = meta.sample_sub_offsets[g]; k < meta.sample_sub_offsets[g + 1]; ++k) {
        const auto& [m, id] = meta.sample_sub_items[static_cast<std::size_t>(k)];
        b = detail::checked_add(
            b,
            detail::checked_mul(
                meta.modalities[static_cast<std::size_t>(m)].llm_tokens[static_cast<std::size_t>(id)],
                decl.encoders[static_cast<std::size_t>(m)].output_row_bytes,
                "encoder output bytes of sample ", g),
            "bytes of sample ", g);
      }
      bytes[g] = b;
    }
    out.llm_layout = batch_layout(meta.sample_offsets, std::move(lengths), std::move(bytes));
  }
  out.encoders.resize(kc);
  for (std::size_t k = 0; k < kc; ++k) {
    const auto& mod = meta.modalities[k];
    std::vector<std::int64_t> bytes(mod.input_rows.size());
    for (std::size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = detail::checked_mul(mod.input_rows[i], decl.encoders[k].input_row_bytes,
                                     "stage '", decl.encoders[k].name, "': input bytes of item ",
                                     i);
    out.encoders[k].layout =
        batch_layout(mod.offsets, mod.encoder_length, std::move(bytes), mod.parent);
  }

  out.layout_seconds = lap();

  // Balance and map the K + 1 stages: independent, so the encoders run on their own threads
  // while this one plans the LLM (each writes only its own plan and report). Errors are raised
  // in the serial order (LLM, then encoders by index), so every rank and every machine reports
  // the same one whatever the thread timing.
  std::vector<std::future<rearrangement>> encoder_plans;
  encoder_plans.reserve(kc);
  for (std::size_t k = 0; k < kc; ++k)
    encoder_plans.push_back(std::async(options.parallel_stages ? std::launch::async
                                                                : std::launch::deferred,
                                       [&, k] {
                                         return in_stage(decl.encoders[k].name, [&] {
                                           return detail::plan_stage(decl.encoders[k],
                                                                     out.encoders[k].layout,
                                                                     topo, out.stages[k]);
                                         });
                                       }));
  std::optional<detail::step_route_builder> routes;
  if (options.routes_for >= 0)
    routes.emplace(decl, meta, topo, options.routes_for, options.sched, options.parallel_stages);
  std::exception_ptr first_error;
  try {
    out.llm = in_stage(decl.llm.name, [&] {
      return detail::plan_stage(decl.llm, out.llm_layout, topo, out.stages[kc]);
    });
    // The text route needs Π_M only: built here while the encoder stages are still planned.
    if (routes) routes->text(out.llm);
  } catch (...) {
    first_error = std::current_exception();
  }
  for (std::size_t k = 0; k < kc; ++k) {
    try {
      out.encoders[k].input = encoder_plans[k].get();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  out.stages_seconds = lap();
  if (routes) routes->start_inputs(out);  // Π_E_k's routes, during the composition

  // The encoders' compositions are independent (each writes only its own routes): on
  // threads as the stages are.
  const auto moff = out.llm.dst_offsets();
  const auto compose = [&](std::size_t k) {
    const auto& mod = meta.modalities[k];
    auto& er = out.encoders[k];

    // L_k and the composed route: walk the LLM ranks' slots in order; each slot's sample hands
    // out the next slots of its modality-k sub-items (in increasing id = original order).
    std::vector<std::int64_t> sub_off(static_cast<std::size_t>(meta.num_samples()) + 1, 0);
    for (auto p : mod.parent) ++sub_off[static_cast<std::size_t>(p) + 1];
    for (std::size_t g = 0; g + 1 < sub_off.size(); ++g) sub_off[g + 1] += sub_off[g];
    std::vector<std::int64_t> subs(mod.parent.size());
    {
      std::vector<std::int64_t> fill(sub_off.begin(), sub_off.end() - 1);
      for (std::size_t i = 0; i < mod.parent.size(); ++i)
        subs[static_cast<std::size_t>(fill[static_cast<std::size_t>(mod.parent[i])]++)] =
            static_cast<std::int64_t>(i);
    }
    std::vector<placement> lifted(mod.parent.size()), composed(mod.parent.size());
    const auto eoff = er.input.dst_offsets();
    for (rank_t r = 0; r < d; ++r) {
      std::int64_t slot = 0;
      for (auto h = moff[static_cast<std::size_t>(r)]; h < moff[static_cast<std::size_t>(r) + 1];
           ++h) {
        const auto g = static_cast<std::size_t>(out.llm.source_of(h));
        for (auto j = sub_off[g]; j < sub_off[g + 1]; ++j) {
          const auto i = subs[static_cast<std::size_t>(j)];
          lifted[static_cast<std::size_t>(i)] = {r, slot};
          const auto e = er.input.destination_of(i);
          composed[static_cast<std::size_t>(eoff[static_cast<std::size_t>(e.rank)] + e.slot)] = {
              r, slot};
          ++slot;
        }
      }
    }
    er.lifted = rearrangement::from_placements(mod.offsets, lifted, d);
    er.output = rearrangement::from_placements(eoff, composed, d);
    er.gradient = er.output.inverse();
  };
  detail::run_indexed(kc, options.parallel_stages ? detail::planning_threads() : 1, compose);
  out.compose_seconds = lap();
  if (routes) out.routes = routes->finish(out);
  out.routes_seconds = lap();
  out.plan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}
#endif

namespace detail {

template <communicator Comm>
step_metadata gather_step_metadata(Comm& comm, const stage_declarations& decl,
                                   const local_batch& local, const topology* topo) {
  const auto d = static_cast<std::size_t>(comm.size());
  const int kc = decl.num_encoders();
  struct record {
    std::uint64_t fingerprint;
    std::int64_t samples;
    std::int64_t sub_items;
    std::int64_t fault;
    std::int64_t where;
    std::int64_t value;
    std::uint64_t topology_fp;   // 0: no topology given
    std::int64_t topology_ranks;  // -1: no topology given
    std::int64_t topology_node;   // this rank's node in the topology (-1: none or out of range)
    std::int64_t comm_node;       // this rank's node as the communicator sees it
  };
  const auto f = detail::check_local_batch(local, kc);
  const rank_t me = comm.rank();
  const record mine{fingerprint(decl),
                    static_cast<std::int64_t>(local.text_tokens.size()),
                    static_cast<std::int64_t>(local.sub_items.size()),
                    static_cast<std::int64_t>(f.fault),
                    f.where,
                    f.value,
                    topo ? fingerprint(*topo) : 0,
                    topo ? topo->num_ranks() : -1,
                    topo && me >= 0 && me < topo->num_ranks() ? topo->node_of(me) : -1,
                    comm.node()};
  const std::vector<record> all = orchmllm::all_gather(comm, mine);
  for (std::size_t r = 0; r < d; ++r) {
    ORCHMLLM_REQUIRE(all[r].fingerprint == all[0].fingerprint, invalid_argument_error, "rank ", r,
                     " declared other stages than rank 0 (declaration fingerprints ",
                     all[r].fingerprint, " and ", all[0].fingerprint, ")");
    ORCHMLLM_REQUIRE(all[r].topology_fp == all[0].topology_fp, invalid_argument_error, "rank ",
                     r, " passed another topology than rank 0 (or passed one where rank 0 did not)");
    if (all[r].topology_ranks >= 0) {
      ORCHMLLM_REQUIRE(all[r].topology_ranks == static_cast<std::int64_t>(d),
                       invalid_argument_error, "the topology has ", all[r].topology_ranks,
                       " ranks but the communicator ", d,
                       " (build it with gather_topology(comm, links))");
      ORCHMLLM_REQUIRE(all[r].topology_node == all[r].comm_node, invalid_argument_error, "rank ",
                       r, " is on node ", all[r].comm_node, " of the communicator but on node ",
                       all[r].topology_node,
                       " of the topology (build it with gather_topology(comm, links))");
    }
    ORCHMLLM_REQUIRE(all[r].fault == 0, invalid_argument_error, "rank ", r, ": ",
                     detail::describe(static_cast<detail::batch_fault>(all[r].fault),
                                      all[r].where, all[r].value, kc));
  }
  // Pack: text tokens, then (modality, parent, length, input rows, llm tokens) per sub-item.
  std::vector<std::int64_t> words;
  words.reserve(local.text_tokens.size() + 5 * local.sub_items.size());
  words.insert(words.end(), local.text_tokens.begin(), local.text_tokens.end());
  for (const auto& s : local.sub_items)
    words.insert(words.end(),
                  {static_cast<std::int64_t>(s.modality), s.parent, s.encoder_length,
                   s.input_rows, s.llm_tokens});
  std::vector<std::int64_t> counts(d);
  for (std::size_t r = 0; r < d; ++r) counts[r] = all[r].samples + 5 * all[r].sub_items;
  const std::vector<std::int64_t> global =
      orchmllm::all_gatherv(comm, std::span<const std::int64_t>(words), counts).values;

  step_metadata m;
  m.modalities.resize(static_cast<std::size_t>(kc));
  local_batch b;
  std::size_t at = 0;
  for (std::size_t r = 0; r < d; ++r) {
    b.text_tokens.assign(global.begin() + static_cast<std::ptrdiff_t>(at),
                         global.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::size_t>(all[r].samples)));
    at += static_cast<std::size_t>(all[r].samples);
    b.sub_items.resize(static_cast<std::size_t>(all[r].sub_items));
    for (auto& s : b.sub_items) {
      s = {static_cast<std::int32_t>(global[at]), global[at + 1], global[at + 2], global[at + 3],
           global[at + 4]};
      at += 5;
    }
    detail::append_rank(m, b);
  }
  return m;
}

}  // namespace detail

/// Collective: gathers every rank's `local_batch` into the step's global metadata, identical on
/// every rank, and checks that every rank declared the same stages.
///
/// One all-gather of an 80-byte record per rank (declaration fingerprint, counts, local fault,
/// topology check) and one all-gatherv of 1 + 5 int64 per sample and sub-item. Deterministic.
///
/// Throws, on every rank alike (all decide from the same gathered records, so no rank is left
/// waiting): `invalid_argument_error` naming the first rank whose declarations differ from
/// rank 0's, or whose batch is malformed (negative counts, a modality outside [0, K), a
/// parent sample that does not exist); what the communicator throws.
template <communicator Comm>
step_metadata gather_step_metadata(Comm& comm, const stage_declarations& decl,
                                   const local_batch& local) {
  return detail::gather_step_metadata(comm, decl, local, nullptr);
}

/// The same, and checks in the same all-gather that `topo` (what `plan_step` will map onto)
/// matches the communicator: every rank passes the same topology (fingerprint), with
/// `comm.size()` ranks, and every rank sits on the topology's node that the communicator puts
/// it on (both number nodes in order of their lowest rank). A topology built by hand for
/// another cluster shape would otherwise be accepted and route bytes over the wrong links.
/// Throws, on every rank alike, `invalid_argument_error` naming the rank and both node numbers
/// (or both sizes), and what the overload above throws.
template <communicator Comm>
step_metadata gather_step_metadata(Comm& comm, const stage_declarations& decl,
                                   const local_batch& local, const topology& topo) {
  return detail::gather_step_metadata(comm, decl, local, &topo);
}

/// Collective: `plan_step` that also builds this rank's routes (`options.routes_for` =
/// `comm.rank()`) and makes the step's one agreement on them: every rank checks, in one small
/// reduction (`detail::all_max` of three values), that every rank planned the same step (one
/// digest of all its routes: plans, item sizes, nodes, schedules) and that none failed. A
/// communicator with its own mover (`mover_providing_communicator`) has the scratch of every
/// route reserved in it first, as `agree_on_routes` does. After
/// it, every `dispatch(comm, step.routes..., ...)` of the step issues only its hops'
/// all-to-alls. Call it where `plan_step` would be called, on every rank (not from a planning
/// thread: it communicates; with `async_planner`, plan with `routes_for` there and call
/// `agree_on_routes(comm, step.routes.all)` on the training thread).
///
/// Throws what `plan_step` throws on the ranks where it threw (identical inputs throw
/// identically everywhere); `communication_error` on the other ranks naming the first rank
/// that failed, and on every rank when the digests differ (the ranks passed other
/// declarations, metadata, topologies or schedules); whatever the communicator throws.
template <communicator Comm>
step_plan plan_step(Comm& comm, const stage_declarations& decl, const step_metadata& meta,
                    const topology& topo, plan_options options = {}) {
  options.routes_for = comm.rank();
  step_plan plan;
  std::exception_ptr failed;
  try {
    plan = plan_step(decl, meta, topo, options);
    // A communicator with its own mover (NCCL's device mover): its scratch for every route of
    // the step, reserved before the agreement, so a failure here is agreed on too.
    if constexpr (mover_providing_communicator<Comm>)
      detail::reserve_scratch(comm.mover(), detail::scratch_reservation(
                                                plan.routes.all, gathering_communicator<Comm>));
  } catch (...) {
    failed = std::current_exception();
  }
  const auto key =
      failed ? std::int64_t{0} : std::bit_cast<std::int64_t>(detail::routes_digest(plan.routes.all));
  std::array<std::int64_t, 3> v{failed ? 1 : 0, key, ~key};
  detail::all_max(comm, std::span<std::int64_t>(v));
  if (v[0] == 0 && v[1] == ~v[2]) return plan;
  // Something is wrong somewhere: learn what (error path only).
  const std::array<std::int64_t, 2> mine{failed ? 1 : 0, key};
  const auto all = orchmllm::all_gather(comm, mine);
  if (failed) std::rethrow_exception(failed);
  for (std::size_t r = 0; r < all.size(); ++r)
    ORCHMLLM_REQUIRE(all[r][0] == 0, communication_error, "rank ", r,
                     " could not plan the step (it raised the error; this rank planned it)");
  for (std::size_t r = 1; r < all.size(); ++r)
    ORCHMLLM_REQUIRE(all[r][1] == all[0][1], communication_error,
                     "ranks planned different steps: rank 0's routes have digest ",
                     std::bit_cast<std::uint64_t>(all[0][1]), ", rank ", r, "'s have ",
                     std::bit_cast<std::uint64_t>(all[r][1]),
                     " (other declarations, metadata, topology or schedule)");
  return plan;  // unreachable: the reduction saw a difference that the gather must show
}

}  // namespace orchmllm
