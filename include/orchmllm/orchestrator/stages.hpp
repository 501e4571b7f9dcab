#pragma once
/// @file stages.hpp
/// What a trainer declares once: its K encoder stages (one per modality) and its LLM stage, each
/// with a cost model, a padding policy, per-rank constraints, a balancer, a mapper and its row
/// widths (`stage_declarations`), and their `fingerprint`, which every metadata gather checks so
/// that ranks with different declarations fail together.
///
/// This header gives the whole data model of a step: the type-erased stage parts
/// (orchestrator/stage_parts.hpp: `stage_cost`, `stage_balancer`, `stage_mapper`) and the
/// per-step batch and metadata types (orchestrator/step_metadata.hpp: `sub_item`, `local_batch`,
/// `step_metadata`, `make_step_metadata`).
///
/// Thread-safety: plain values. Determinism: everything here is data; `fingerprint` is a
/// platform-independent hash. See docs/orchestrator.md, "Data model".

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/balance/micro_batches.hpp"
#include "orchmllm/balance/problem.hpp"
#include "orchmllm/balance/split.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/orchestrator/stage_parts.hpp"
#include "orchmllm/orchestrator/step_metadata.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping.hpp"

namespace orchmllm {

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
  /// Opt-in micro-batches: when set, the stage's units go to cells (rank, micro-batch) by
  /// `balance_micro_batches` (balance/micro_batches.hpp) with these rules, the stage's policy,
  /// limits and balancer; every rank's slots are then grouped by micro-batch
  /// (`step_plan::micro_batches`). Needs a built-in balancer and no `split`. Empty by default:
  /// one batch per rank, as without the option.
  std::optional<micro_batching> micro_batches{};
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
  /// Opt-in micro-batches of the samples, as `encoder_stage::micro_batches` (needs a built-in
  /// balancer).
  std::optional<micro_batching> micro_batches{};
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
  /// a padded policy, padded_exact with packed), invalid split or micro-batch options, or
  /// micro-batches with the application's balancer or with split. The size of
  /// `locality::node_of_rank` is
  /// checked by `plan_step`, which knows d. O(K² + Σ node_of_rank sizes).
  void validate() const;
};

/// 64-bit fingerprint of the declarations: names, cost models (by their values at twelve fixed
/// lengths), policies (a trainer's padding rule by its name), limits, balancers and mappers
/// with their knobs (the application's by their names), row widths, split and micro-batch options.
/// Equal declarations give equal fingerprints on every platform; two cost models that agree on all
/// probe lengths are treated as equal, and so are two padding rules, balancers or mappers of the
/// same name. O(K), never throws (a throwing cost model aside).
[[nodiscard]] inline std::uint64_t fingerprint(const stage_declarations& decl);

}  // namespace orchmllm

// The definitions: the declarations' checks and their fingerprint.
// In this order: each uses what the ones above define.
// clang-format off
#include "orchmllm/detail/orchestrator/validate.inl"     // IWYU pragma: export
#include "orchmllm/detail/orchestrator/fingerprint.inl"  // IWYU pragma: export
// clang-format on
