#pragma once
/// @file split.hpp
/// Balancing with splitting: items made of segments (core/batch_layout.hpp) may be cut at
/// segment boundaries into contiguous pieces placed on different ranks, so that one long video
/// or recording no longer sets the makespan on its own.
///
/// `balance_split` computes the splitting-aware lower bound L (`split_lower_bound`), then, for
/// targets L, L/2, ..., cuts every item whose cost exceeds the target into the fewest valid
/// pieces under it, balances the pieces with `balance` and the given built-in balancer, and keeps
/// the cut with the smallest makespan; under padded policies it balances the whole items and the
/// finest cut and keeps the better. Packed, no constraints, lpt or automatic: makespan ≤
/// (2 − 1/d) · OPT over every cut and assignment (`split_result::guarantee`). With no segmented
/// item (or max_pieces = 1) the plan is bit-identical to `balance`. Deterministic (integer or
/// order-fixed arithmetic, ties by id). See docs/algorithms.md, "Splitting segmented items"
/// and "Splitting under padded policies".

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/balancers.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/pieces.hpp"

namespace orchmllm {

/// How items may be cut (an encoder stage's splitting rules).
struct split_options {
  /// Fewest segments in a piece of a cut item (≥ 1); an item with fewer than twice as many
  /// segments stays whole.
  std::int64_t min_piece_segments = 1;
  /// Most pieces per item (≥ 1; 1 disables splitting).
  std::int64_t max_pieces = std::numeric_limits<std::int64_t>::max();
  /// Targets tried: L, L/2, …, L/2^(rounds−1) (≥ 1). More rounds can lower the makespan by
  /// cutting finer; each costs one `balance` call on the pieces.
  int rounds = 4;
  /// A round is good enough, and no finer one is tried, once its makespan is within this
  /// relative slack of the lower bound L (makespan ≤ L · (1 + tolerance), rounded down for
  /// integral costs). Finite and ≥ 0; 0 tries finer rounds until one meets L exactly.
  double tolerance = 0.001;
  friend bool operator==(const split_options&, const split_options&) = default;
};

/// What `balance_split` returns.
template <class Cost>
struct split_result {
  /// The cut: for every piece its item, segment range [first, last) and row offset, and the
  /// pieces as a layout of their own (core/pieces.hpp).
  piece_layout pieces;
  /// `balance` of `pieces.layout()`: the destination (rank, slot) of every piece
  /// (`balance.plan.destination_of(p)`), its makespan, and the pieces' own lower bound (pieces
  /// are whole there, so it can exceed `lower_bound`).
  balance_result<Cost> balance;
  /// The splitting-aware lower bound L (≤ the optimum over every cut and assignment); when
  /// nothing may be split (no segments, max_pieces = 1), `balance`'s own bound (≥ L).
  Cost lower_bound{};
  /// p_max: the largest piece's cost in the cut the balancer placed (before boundary shifts;
  /// ≤ `lower_bound` whenever an item was cut).
  Cost largest_piece{};
  /// Σ c_g / d + (1 − 1/d) · p_max (rounded down for integral costs): the makespan bound of
  /// lpt and automatic without constraints. Padded policies with segments: T₀ + (R − 1) ·
  /// u(longest segment), the bound of padded_exact and automatic (docs/algorithms.md,
  /// "Splitting under padded policies"; there `largest_piece` is the kept cut's largest piece
  /// alone, rows × unit).
  Cost guarantee{};
};

/// The splitting-aware lower bound L on the makespan of `layout` on d ranks under the packed
/// policy when items may be cut under `split`: max(Σ c_g / d (rounded up for integral costs),
/// max_g b_g), b_g the smallest largest piece item g can be cut into (c_g when it cannot be
/// cut). Valid for every cut at segment boundaries and every assignment (docs/algorithms.md).
/// O(n + Σ S_g) plus O(S_g log c_g) per item above the average. Deterministic. Throws
/// `invalid_argument_error` for d < 1 with items, bad options, negative costs or overflow.
template <cost_model C>
cost_type_t<C> split_lower_bound(const batch_layout& layout, rank_t d, const C& cost,
                                 const split_options& split = {});

/// Balances `layout` over its own d ranks, cutting segmented items into pieces where that
/// lowers the makespan (the file comment outlines the algorithm and its guarantee). Constraints
/// (`limits`) apply to the pieces (a count limit counts pieces; a piece's bytes are its share of
/// the item's, core/pieces.hpp); the guarantee is not claimed then. Packed: O(R · (balance of
/// the pieces + n + Σ S_g)) for R ≤ rounds, plus O(S_g log c_g) per cut item; padded: two
/// balance calls plus O(64 · (Σ S_g + d)). Deterministic. Throws `invalid_argument_error` for
/// min_piece_segments < 1, max_pieces < 1, rounds < 1, a negative or non-finite tolerance,
/// d < 1 with items, and what `balance` throws (negative costs, overflow, the balancer's
/// knobs); `infeasible_error` as `balance`.
template <cost_model C>
split_result<cost_type_t<C>> balance_split(const batch_layout& layout, const C& cost,
                                           padding_policy policy = packed,
                                           const any_balancer& b = {},
                                           const constraints& limits = {},
                                           const split_options& split = {});

}  // namespace orchmllm

// The definitions: the lower bound, the padded path, the packed rounds.
// In this order: each uses what the ones above define.
// clang-format off
#include "orchmllm/detail/balance/split_costs.inl"   // IWYU pragma: export
#include "orchmllm/detail/balance/split_padded.inl"  // IWYU pragma: export
#include "orchmllm/detail/balance/split_impl.inl"    // IWYU pragma: export
// clang-format on
