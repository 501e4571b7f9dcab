#pragma once
/// @file micro_batches.hpp
/// Balancing over cells (rank r, micro-batch m): the step as trainers run it. Each rank runs its
/// items as M micro-batches under a memory limit and accumulates gradients; `sync_model` says
/// what the step then costs: `step` (DDP with local accumulation: max_r Σ_m load(r, m), the rank
/// makespan) or `micro_batch` (FSDP / ZeRO-3, tensor parallelism, pipeline ticks: every
/// micro-batch synchronises the ranks, so Σ_m max_r load(r, m)).
///
/// `balance_micro_batches` assigns every item to a cell: the same M on every rank (the smallest
/// that fits the limits, or the trainer's, a multiple of `multiple_of`), strict per-cell limits
/// (physical tokens after the policy's padding, bytes, cost, items), no empty micro-batch unless
/// asked for, and destination slots grouped by micro-batch, so micro-batch m of rank r is one
/// contiguous range of what the rank receives. Small inputs are solved exactly (a branch and
/// bound over the cells), large ones by a greedy pass and a per-micro-batch rebalance.
/// Deterministic: every rank computes the same cells. The problem, the lower bounds with their
/// proofs and the algorithms: docs/algorithms.md, "Micro-batches".

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/constraints.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"

namespace orchmllm {

/// How the data-parallel ranks synchronise within one step, and so what a plan minimises.
enum class sync_model : std::uint8_t {
  /// Once per step (DDP with local gradient accumulation, `no_sync`): each rank runs its
  /// micro-batches on its own; the step costs max_r Σ_m load(r, m).
  step,
  /// Every micro-batch (FSDP / ZeRO-3 and tensor parallelism synchronise layer by layer, a
  /// pipeline tick by tick): the step costs Σ_m max_r load(r, m).
  micro_batch,
};

/// "step" or "micro-batch" (the command-line tool's `--sync` values).
[[nodiscard]] constexpr std::string_view to_string(sync_model s) noexcept {
  return s == sync_model::step ? "step" : "micro-batch";
}

/// Parses "step" or "micro-batch". Throws `invalid_argument_error` naming the text.
[[nodiscard]] sync_model parse_sync_model(std::string_view text);

/// The order of the micro-batches (the index m every rank runs in turn).
enum class micro_batch_order : std::uint8_t {
  /// As planned: the heaviest first.
  planned,
  /// For pipelines: the lightest at the start and at the end (warm-up, cool-down), the heaviest
  /// in the middle.
  light_ends,
};

/// Limits of one micro-batch of one rank (one cell). A plan never exceeds them.
struct micro_batch_limits {
  /// Physical tokens after the policy's padding: packed Σ lengths, padded count × padded
  /// longest (rows × padded longest segment with segments).
  std::int64_t tokens = std::numeric_limits<std::int64_t>::max();
  std::int64_t bytes = std::numeric_limits<std::int64_t>::max();  ///< payload bytes
  double cost = std::numeric_limits<double>::infinity();          ///< load, in cost units
  std::int64_t items = std::numeric_limits<std::int64_t>::max();  ///< item count
};

/// How a stage is cut into micro-batches.
struct micro_batching {
  /// M, the micro-batches of every rank; 0: the smallest count that fits the limits.
  std::int64_t count = 0;
  std::int64_t min_count = 1;    ///< M ≥ this
  std::int64_t multiple_of = 1;  ///< M a multiple of this (a pipeline's virtual stages)
  sync_model sync = sync_model::micro_batch;  ///< what the plan minimises
  micro_batch_limits limits{};                ///< per cell
  /// False (default): every cell holds an item, and an input with fewer than d·M items is an
  /// error. True: cells may be empty (the trainer runs an empty micro-batch).
  bool allow_empty = false;
  micro_batch_order order = micro_batch_order::planned;  ///< the order of the micro-batches
  /// Inputs of at most this many items, without rank-level constraints, are solved exactly: a
  /// branch and bound over the cells finds the smallest objective for each M tried (≥ 0; 0
  /// turns it off).
  std::int64_t exact_max_items = 12;
  /// Search nodes of the exact step per M tried (≥ 0); when they run out, the best plan found
  /// so far stands and `objective_proven_optimal` may stay false.
  std::int64_t exact_node_budget = 2'000'000;
};

/// What `balance_micro_batches` returns.
template <class Cost>
struct micro_batch_result {
  /// The plan: every item's destination rank and slot, the slots of a rank grouped by
  /// micro-batch (in micro-batch order, then by source id); `makespan` is max_r Σ_m load(r, m)
  /// and `lower_bound` its bound (the rank-level ones, as `balance` reports them).
  balance_result<Cost> balance;
  std::int64_t micro_batches = 0;  ///< M
  /// d·M + 1 destination ids: cell (r, m) is [cell_offsets[r·M + m], cell_offsets[r·M + m + 1]).
  std::vector<std::int64_t> cell_offsets;
  Cost objective{};              ///< the step's cost under the sync model
  Cost objective_lower_bound{};  ///< no plan with M micro-batches does better (docs)
  /// No plan with M micro-batches under the limits has a smaller objective: the exact step
  /// completed, or the objective meets its lower bound.
  bool objective_proven_optimal = false;

  /// `objective / objective_lower_bound` (1 when the bound is 0): how far above the best
  /// possible step the plan can be. O(1).
  [[nodiscard]] double objective_ratio() const noexcept {
    return objective_lower_bound > Cost{}
               ? static_cast<double>(objective) / static_cast<double>(objective_lower_bound)
               : 1.0;
  }

  /// The destination ids of cell (r, m). O(1).
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> cell(rank_t r, std::int64_t m) const {
    const auto i = static_cast<std::size_t>(static_cast<std::int64_t>(r) * micro_batches + m);
    return {cell_offsets[i], cell_offsets[i + 1]};
  }
};

namespace detail {

// The bodies (detail/balance/micro_batches.inl), on a model that returns its computation type.
template <class C>
micro_batch_result<cost_type_t<C>> balance_micro_batches_impl(const batch_layout& layout,
                                                              const C& cost, padding_policy policy,
                                                              const micro_batching& micro,
                                                              const any_balancer& b,
                                                              const constraints& limits);
template <class C>
cost_type_t<C> micro_batch_objective_as_sampled_impl(const batch_layout& layout, const C& cost,
                                                     padding_policy policy,
                                                     const micro_batching& micro);

}  // namespace detail

/// Balances `layout` over its own d ranks and M micro-batches per rank: the cells of the
/// micro-batching `micro`, with the balancer `b` (for the ranks; and for the cells of one
/// micro-batch under `sync_model::micro_batch`) and the rank-level constraints `limits`.
///
/// `sync_model::step`: the rank plan of `balance(layout, cost, policy, b, limits)` (the same
/// makespan), each rank's items then spread over its M cells, heaviest first to the lightest
/// cell that fits; so under either sync model with `balancers::identity` (every item stays on
/// its rank: the input cut into M micro-batches, the baseline of no balancing).
/// `sync_model::micro_batch`: the items in canonical order (heaviest first), each to the
/// micro-batch where Σ_m max_r load grows least (its lightest cell that fits), then each
/// micro-batch's cells balanced again under the cell limits, kept where they do better: with
/// `balancers::automatic` refined where they are (the balancers' moves and swaps from the
/// heaviest cell), with any other `b` balanced by it from scratch; then micro-batches full to
/// the token limit relieved by moving their shortest items to the emptiest one (onto its
/// lightest cells) and balancing both again the same way (kept where it does better); a plan of
/// cells that breaks a rank-level constraint of `limits` (a rank's cap, its item counts) gives way
/// to the per-step plan of the same M, which keeps them. M: `micro.count`, or the smallest multiple
/// of `multiple_of` from the limits' bound up that fits. Up to `exact_max_items` items and without
/// `limits`, each M tried is then searched exactly (its plan is optimal for that M, and an M the
/// heuristics miss is still found). The objective, its lower bound and their proofs:
/// docs/algorithms.md, "Micro-batches".
///
/// Complexity, per M tried (the limits' bound usually fits at once): O(n log n) plus, per step,
/// that of `b` on the whole input and O(n·M); per micro-batch, O(n (M + log d)) for the first
/// pass (plus the cells set aside and reopened), then O(n + d·M) and the refinement steps
/// (`automatic`; at most 2·n + 64 per micro-batch) or `b` on every micro-batch, and up to M
/// rounds of O(n + d·M) and the same on two micro-batches; plus at most `exact_node_budget`
/// search nodes of O(d·M log(d·M)) on small inputs. Deterministic. Throws `invalid_argument_error`
/// for invalid options (count < 0, min_count or multiple_of < 1, a count that is not a multiple,
/// negative limits or budgets) or an item that alone exceeds a limit (naming the item, the limit
/// and its size), and what `balance` throws; `infeasible_error` when no M fits (the given count, or
/// every count that leaves each cell an item) — the message names M and the limits.
template <cost_model C>
micro_batch_result<cost_type_t<C>> balance_micro_batches(const batch_layout& layout, const C& cost,
                                                         padding_policy policy,
                                                         const micro_batching& micro,
                                                         const any_balancer& b = {},
                                                         const constraints& limits = {}) {
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::balance_micro_batches_impl(layout, c, policy, micro, b, limits);
  });
}

/// The step's cost of the input as sampled, cut into micro-batches as a trainer without
/// balancing does: each rank's items in slot order, a new micro-batch whenever the next item
/// would break a cell limit (so ranks may run different counts; a rank's missing micro-batches
/// cost nothing). Under `micro.sync`. O(n). Throws as `balance_micro_batches` for an item that
/// alone exceeds a limit.
template <cost_model C>
cost_type_t<C> micro_batch_objective_as_sampled(const batch_layout& layout, const C& cost,
                                                padding_policy policy,
                                                const micro_batching& micro) {
  return detail::with_normal_cost(cost, [&](const auto& c) {
    return detail::micro_batch_objective_as_sampled_impl(layout, c, policy, micro);
  });
}

/// The cell offsets of a micro-batch plan (`micro_batch_result::cell_offsets`: d·M + 1, in the
/// destination ids of the plan over bins) after `map_bins` moved bin b to rank `rank_of_bin[b]`
/// (a permutation; empty: every bin stays), every item keeping its slot: cell (r, m) of the
/// result is cell (b, m) of the input for the bin b on rank r (no cells, M = 0 and one offset,
/// stay so). O(d·M). Throws `invalid_argument_error` when the sizes disagree (cell_offsets of
/// d·M + 1 entries, rank_of_bin of d entries or none) or a rank is out of range.
[[nodiscard]] inline std::vector<std::int64_t> cell_offsets_on_ranks(
    std::span<const std::int64_t> cell_offsets, std::int64_t micro_batches,
    std::span<const rank_t> rank_of_bin);

/// The micro-batch of every item of `plan`, by item id: m for the item whose destination id lies
/// in cell (r, m) of `cell_offsets` (d·M + 1 offsets into the plan's destination ids, as
/// `micro_batch_result::cell_offsets` or `cell_offsets_on_ranks` give them for that plan). No
/// cells (M = 0, offsets {0}) suit only a plan of no items. O(n + d·M). Throws
/// `invalid_argument_error` when the offsets are not d·M + 1 non-decreasing ids from 0 to the
/// plan's item count.
[[nodiscard]] inline std::vector<std::int64_t> item_micro_batches(
    const rearrangement& plan, std::span<const std::int64_t> cell_offsets,
    std::int64_t micro_batches);

}  // namespace orchmllm

// The definitions: the cells, the exact step, the greedy and rebalancing passes, the bounds.
#include "orchmllm/detail/balance/micro_batches.inl"  // IWYU pragma: export
