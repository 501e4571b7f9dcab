#pragma once
/// @file step_plan.hpp
/// What `plan_step` (orchestrator/orchestrator.hpp) returns and takes: the per-stage reports,
/// the encoders' plans and routes, an LLM rank's view, one rank's prebuilt routes of a step,
/// the step plan itself and `plan_options`. See docs/orchestrator.md, "Per step".

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/pieces.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// Balance and memory figures of one stage, before (as sampled) and after the plan. Loads are
/// stage costs (the stage's cost model and policy).
struct stage_report {
  std::string name;
  std::string_view used;       ///< name of the algorithm whose plan was kept (`balance_result`)
  double makespan_before = 0;  ///< max over ranks of the stage cost, as sampled
  double makespan_after = 0;
  double lower_bound = 0;       ///< makespan_lower_bound (a splitting stage: split_lower_bound)
  double imbalance_before = 1;  ///< max / mean of the stage cost over ranks, as sampled
  double imbalance_after = 1;
  std::int64_t max_tokens_before = 0;  ///< peak token footprint of a rank (policy's measure)
  std::int64_t max_tokens_after = 0;
  std::int64_t max_bytes_before = 0;  ///< peak payload bytes of a rank
  std::int64_t max_bytes_after = 0;
  std::int64_t moved_bytes = 0;       ///< payload bytes that change rank along the plan
  std::int64_t inter_node_bytes = 0;  ///< ... that change node
  // With micro-batches (the stage's `micro_batches`): M and the step's cost under the stage's
  // sync model (`balance_micro_batches`), as sampled (each rank's items in slot order cut
  // greedily under the same limits, `micro_batch_objective_as_sampled`) and planned. 0 without.
  std::int64_t micro_batches = 0;    ///< M, the same on every rank
  double objective_before = 0;       ///< the input's own micro-batching
  double objective_after = 0;        ///< the plan's
  double objective_lower_bound = 0;  ///< no plan with M micro-batches does better
  // Wall times of the stage's planning phases (measured, not deterministic; a report only).
  double balance_seconds = 0;  ///< the balancer (with its checks)
  double map_seconds = 0;      ///< the mapping onto ranks (`map_bins`)
  double report_seconds = 0;   ///< the figures of this report (`compute_statistics`)
};

/// Plans and routes of one encoder stage. Its *units* are its sub-items, or, when the stage
/// splits (`encoder_stage::split`), the pieces of its sub-items (`pieces`): the plans below
/// move units, and a unit's payload is its rows (input rows of its segments, LLM tokens of its
/// segments).
struct encoder_routes {
  /// The stage's sub-items (origin order; encoder lengths with their segments, input bytes,
  /// parents).
  batch_layout layout;
  /// With `encoder_stage::split`: the cut `balance_split` chose (`pieces->layout()`: the pieces
  /// as items, on their sub-item's origin rank, in (sub-item, first segment) order; piece p is
  /// segments [first_segment(p), last_segment(p)) of sub-item item_of(p)). Empty without.
  std::optional<piece_layout> pieces;
  rearrangement input;     ///< Π_E_k: origin units → encoder ranks
  rearrangement lifted;    ///< L_k: origin units → the LLM rank of their parent sample
  rearrangement output;    ///< L_k ∘ Π_E_k⁻¹: encoder ranks → LLM ranks (encoder outputs)
  rearrangement gradient;  ///< output⁻¹: LLM ranks → encoder ranks (gradients of the outputs)

  /// The layout the plans are over: `pieces->layout()` when the stage splits, else `layout`.
  [[nodiscard]] const batch_layout& units() const noexcept {
    return pieces ? pieces->layout() : layout;
  }
};

/// One unit an encoder rank runs (`step_plan::encoder_view`): a whole sub-item, or a piece of
/// one when its stage splits.
struct encoder_unit {
  std::int64_t sub_item = 0;       ///< global id of its sub-item within the modality
  std::int64_t first_segment = 0;  ///< its segments [first_segment, last_segment) of the
  std::int64_t last_segment = 1;   ///< sub-item's `segments` (0 and S for a whole sub-item)
  std::int64_t segments = 1;       ///< S of the sub-item
  std::int64_t input_rows = 0;     ///< its input rows (= its rows in the received payload)
  std::int64_t llm_tokens = 0;     ///< its output rows
  /// Whether it is the whole sub-item.
  [[nodiscard]] bool whole() const noexcept {
    return first_segment == 0 && last_segment == segments;
  }
  friend bool operator==(const encoder_unit&, const encoder_unit&) = default;
};

/// The micro-batches of one stage's plan (the stage's `micro_batches`): M cells on every rank,
/// each a contiguous range of the rank's received slots, in the order the rank runs them.
struct stage_micro_batches {
  /// M, the same on every rank; 0 when the stage declares no micro-batches.
  std::int64_t count = 0;
  /// d·M + 1 offsets into the stage plan's destination ids (rank-major, as
  /// `rearrangement::dst_offsets`): micro-batch m of rank r is ids [offsets[r·M + m],
  /// offsets[r·M + m + 1]). Empty when count is 0.
  std::vector<std::int64_t> offsets;

  /// Micro-batch m of rank r as slots [first, last) of what r receives (positions in the
  /// stage's payload on r). O(1). Throws `invalid_argument_error` for r or m out of range, or
  /// when the stage has no micro-batches.
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> slots(rank_t r, std::int64_t m) const {
    ORCHMLLM_REQUIRE(count > 0, invalid_argument_error, "the stage has no micro-batches");
    const auto d = static_cast<std::int64_t>(offsets.size() - 1) / count;
    ORCHMLLM_REQUIRE(r >= 0 && r < d && m >= 0 && m < count, invalid_argument_error, "micro-batch ",
                     m, " of rank ", r, " is outside ", d, " ranks × ", count, " micro-batches");
    const auto at = [&](std::int64_t i) { return offsets[static_cast<std::size_t>(i)]; };
    const auto base = at(r * count);
    return {at(r * count + m) - base, at(r * count + m + 1) - base};
  }
};

/// How the trainer reduces gradients over the data-parallel ranks: `sum` (an all-reduce sum) or
/// `mean` (DDP's and FSDP's default: the sum divided by d).
enum class gradient_reduction : std::uint8_t { sum, mean };

/// What an LLM rank needs to assemble its sequences (docs/orchestrator.md, "Where encoder outputs
/// land (the placement contract)").
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
  /// K + 1 entries like `stages`: the micro-batches of every stage that declares them (the
  /// encoder stages' over their units, the LLM stage's over samples); count 0 for the others.
  std::vector<stage_micro_batches> micro_batches;
  /// N, the loss tokens of the whole step (`step_metadata::loss_tokens_of` summed over samples).
  std::int64_t loss_tokens = 0;
  /// The loss tokens of every (LLM rank r, micro-batch m) at entry r·M + m, M the LLM stage's
  /// micro-batch count (1 when it declares none); they add up to `loss_tokens`.
  std::vector<std::int64_t> micro_batch_loss_tokens;
  step_routes routes;       ///< this rank's routes when `plan_options::routes_for` asked for them
  double plan_seconds = 0;  ///< wall time of `plan_step` (not deterministic; a report only)
  // Wall times of the phases around the stages (each stage's are in its report). With
  // `parallel_stages` the work overlaps: an encoder composes and builds its routes as soon as
  // its stage and Π_M are done, while slower stages still run. Each phase here runs from the
  // end of the one before to the end of its last task, so they add up to about plan_seconds.
  double layout_seconds = 0;   ///< building the LLM layout from the metadata (each encoder's
                               ///< is built on its stage's thread, within stages_seconds)
  double stages_seconds = 0;   ///< until the last stage is balanced and mapped (with
                               ///< `routes_for`, routes and compositions overlap it)
  double compose_seconds = 0;  ///< then until the last lift, composed route and inverse
  double routes_seconds = 0;   ///< then until this rank's last route (`plan_options::routes_for`)

  /// The factor a rank multiplies the sum of the token losses of each of its micro-batches by
  /// before backward, so that the gradients accumulated over micro-batches and reduced over the
  /// ranks by `reduction` are those of the per-token mean over the whole step: 1/N for `sum`,
  /// d/N for `mean` (0 when N = 0). The same on every rank and whatever the plan, so balanced
  /// and unbalanced steps give the same gradients. A loss already averaged over micro-batch
  /// (r, m) is multiplied by `loss_tokens_of(r, m) · loss_scale(reduction)` instead. O(1).
  [[nodiscard]] double loss_scale(gradient_reduction reduction = gradient_reduction::mean) const {
    if (loss_tokens == 0) return 0.0;
    const double ranks =
        reduction == gradient_reduction::mean ? static_cast<double>(llm.num_dst_ranks()) : 1.0;
    return ranks / static_cast<double>(loss_tokens);
  }
  /// The loss tokens of micro-batch m of LLM rank r (m = 0 without micro-batches). O(1).
  /// Throws `invalid_argument_error` for r or m out of range.
  [[nodiscard]] std::int64_t loss_tokens_of(rank_t r, std::int64_t m = 0) const {
    const std::int64_t m_count =
        micro_batches.empty() || micro_batches.back().count == 0 ? 1 : micro_batches.back().count;
    const auto d = static_cast<std::int64_t>(micro_batch_loss_tokens.size()) / m_count;
    ORCHMLLM_REQUIRE(r >= 0 && r < d && m >= 0 && m < m_count, invalid_argument_error,
                     "micro-batch ", m, " of rank ", r, " is outside ", d, " ranks × ", m_count,
                     " micro-batches");
    return micro_batch_loss_tokens[static_cast<std::size_t>(r * m_count + m)];
  }

  /// 3K + 1.
  [[nodiscard]] int alltoalls_per_step() const noexcept {
    return 3 * static_cast<int>(encoders.size()) + 1;
  }

  /// What encoder rank r runs for stage k: its received units in Π_E_k slot order (the order
  /// of the payload that `step_routes::encoder_input(k)` delivers, and of the outputs it sends
  /// along `encoder_output(k)`), each with its sub-item, segment range and row counts. A unit's
  /// output rows are those of its segments, in segment order (segment i of a sub-item of S
  /// segments owns output rows [i·llm_tokens/S, (i+1)·llm_tokens/S)). O(units of r). Throws
  /// `invalid_argument_error` for k outside [0, K) or r outside [0, d).
  [[nodiscard]] std::vector<encoder_unit> encoder_view(const step_metadata& meta, int k,
                                                       rank_t r) const;

  /// The receive layout of LLM rank r (see llm_rank_view). O(its samples and sub-items + d).
  /// With splitting, the modality-k payload holds units (one `rows` entry per piece), while
  /// this view indexes sub-items: the pieces of a sub-item arrive consecutively in segment
  /// order, so its rows [row_offsets[k][j], row_offsets[k][j + 1]) are its whole output.
  /// Throws `invalid_argument_error` for r outside [0, d).
  [[nodiscard]] llm_rank_view llm_view(const step_metadata& meta, rank_t r) const;
};

/// Options of `plan_step`.
struct plan_options {
  /// Balance and map the K encoder stages on K extra threads while the calling thread plans the
  /// LLM (the stages are independent), compose the encoders' routes side by side, and build the
  /// routes (`routes_for`) as soon as their plans exist: the text route on its own thread once
  /// Π_M exists, each input route on its stage's thread right after the stage, the rest on up
  /// to `std::thread::hardware_concurrency()` threads. The plans and routes are the same either
  /// way; false does everything one after another on the calling thread.
  bool parallel_stages = true;
  /// Also build the prebuilt routes of every transfer of the step for this rank
  /// (`step_plan::routes`); -1 (the default): none. The rest of the plan does not depend on it.
  rank_t routes_for = -1;
  /// The schedule of those routes; `automatic` chooses per transfer with the topology's link
  /// figures (the same choice on every rank).
  schedule sched = schedule::automatic;
};

}  // namespace orchmllm

// The definitions of step_plan's views.
#include "orchmllm/detail/orchestrator/step_views.inl"  // IWYU pragma: export
