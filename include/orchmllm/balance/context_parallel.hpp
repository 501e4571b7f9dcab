#pragma once
/// @file context_parallel.hpp
/// Context parallelism chosen per sample: an over-long sequence of a packed stage (the LLM) is
/// sharded over a group of c ranks, c from an allowed set (1, 2, 4, 8), each rank holding two
/// chunks in head-tail (zigzag) order so that its causal-attention work equals the others', and
/// everything else is placed around the groups.
///
/// `balance_context_parallel` chooses every sample's c jointly with the placement. Groups are
/// aligned blocks of ranks (inside one node by default: ring attention wants NVLink, and aligned
/// groups can be created once). It tries a placement with a proven guarantee (every sample at
/// the size the lower bound chooses, sharded samples widest first onto the least busy group,
/// then whole ones by LPT) and placements for targets T from the lower bound up (samples by
/// time, each whole on the least loaded rank if it finishes by T there, else sharded over the
/// narrowest size that does), keeps the best, then gives every sample a micro-batch (all its
/// shards the same). The lower bound accounts for the allowed sizes and for the work sharding
/// adds. Deterministic: every rank computes the same shards. The model, the bound and its
/// proof: docs/algorithms.md, "Context parallelism".

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm {

/// Time of a sequence, or of one rank's shard of it, in seconds: a fixed part, a part per token
/// and a part per causal attention entry (query i attends keys 0..i, so a sequence of l tokens
/// has l(l+1)/2 entries), plus, for a shard of a group of c ≥ 2 ranks, the ring exchange of keys
/// and values: `ring_rounds` rounds (layers × passes: a forward pass circulates K and V once per
/// layer, a backward pass K, V and their gradients) of c − 1 steps, each step moving the largest
/// shard's `kv_bytes_per_token` × tokens over the group's link (`link_params`: the intra-node
/// figures inside one node, the inter-node figures otherwise) and paying its latency. The
/// exchange is charged in full, not overlapped with the attention (an upper bound of what ring
/// attention costs). Coefficients finite and ≥ 0 (`validated()`). As a `cost_model` the call
/// operator is the time of the whole sequence on one rank. O(1), deterministic, noexcept.
struct cp_cost {
  double constant = 0.0;            ///< seconds per sequence or shard on a rank
  double linear = 0.0;              ///< seconds per token
  double attention = 0.0;           ///< seconds per causal attention entry
  double kv_bytes_per_token = 0.0;  ///< bytes of K and V per token and ring round
  double ring_rounds = 0.0;         ///< ring rounds per step (layers × passes)

  /// The whole sequence on one rank: constant + linear · l + attention · l(l+1)/2.
  [[nodiscard]] double operator()(std::int64_t length) const noexcept;

  /// The model of a transformer (`transformer_flops_cost`'s FLOPs, causal attention) on GPUs
  /// that sustain `flops_per_second`, K and V of `bytes_per_element` each: linear and attention
  /// from the FLOPs, kv_bytes_per_token = 2 · kv_heads · head_dim · bytes_per_element, ring
  /// rounds = layers × passes. O(1). Throws `invalid_argument_error` for a non-causal or invalid
  /// config, or a non-positive or non-finite rate or element size.
  [[nodiscard]] static cp_cost from_transformer(const transformer_config& config,
                                                double flops_per_second,
                                                double bytes_per_element = 2.0);

  /// Returns *this after checking every coefficient is finite and ≥ 0. Throws
  /// `invalid_argument_error` naming the bad one.
  [[nodiscard]] cp_cost validated() const;

  friend constexpr bool operator==(const cp_cost&, const cp_cost&) = default;
};

/// How samples may be sharded.
struct cp_options {
  /// The allowed group sizes c (≥ 1, strictly increasing). {1, 2, 4, 8}: per-sample CP;
  /// {c}: static CP (every sample over c ranks, as Megatron-LM's fixed context-parallel size);
  /// {1}: none. A size with no group in the topology (larger than every node, with
  /// `within_node`) is not used.
  std::vector<std::int64_t> sizes{1, 2, 4, 8};
  /// Groups of size c are aligned blocks inside one node (local indices [j·c, j·c + c) of a
  /// node); false: aligned blocks of global ranks [j·c, j·c + c), which may span nodes.
  bool within_node = true;
  /// Most tokens a rank may hold (the sum over its chunks): a sample whose shard exceeds it
  /// must be sharded wider, and a rank takes nothing that would exceed it.
  std::int64_t token_cap = std::numeric_limits<std::int64_t>::max();
  /// A sample is sharded over c ≥ 2 ranks only if it has at least c × this many tokens (≥ 0):
  /// attention kernels lose efficiency on tiny shards, which the time model does not see.
  std::int64_t min_shard_tokens = 0;
  /// M, the micro-batches every rank runs (≥ 1). A sample's shards all run in the same
  /// micro-batch index (its group computes together); samples go to micro-batches so that
  /// Σ_m max_r load(r, m) (what FSDP, ZeRO-3 or tensor parallelism pay: every micro-batch waits
  /// for its slowest rank) stays small. A micro-batch may be empty on a rank.
  std::int64_t micro_batches = 1;
  /// Most tokens in one micro-batch of one rank (its shards counted); a shard must fit one.
  std::int64_t micro_batch_tokens = std::numeric_limits<std::int64_t>::max();
  /// Placements tried (≥ 1): first the one with the proven guarantee (the bound's choices,
  /// groups first), then one per target T = L × 1, 1.01, 1.02, 1.05, 1.1, 1.2, 1.5 (L the lower
  /// bound) while they last; each costs one placement, the best is kept.
  int targets = 8;
  friend bool operator==(const cp_options&, const cp_options&) = default;
};

/// A contiguous range [begin, end) of a sample's tokens.
struct token_range {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  [[nodiscard]] constexpr std::int64_t size() const noexcept { return end - begin; }
  friend constexpr bool operator==(const token_range&, const token_range&) = default;
};

/// One rank's part of one sample: the sample, its group (size, position of this rank, the
/// group's ranks through `cp_result::group_rank`), its token ranges (head then tail; one range,
/// the whole sample, when c = 1, the tail then empty) and where they arrive (destination ids of
/// `cp_result::plan`, consecutive: the head at `first_chunk`, the tail right after it).
struct cp_shard {
  std::int64_t item = 0;        ///< the sample's global id in the input layout
  std::int64_t group_size = 1;  ///< c
  std::int64_t position = 0;    ///< this rank's index in the group, 0..c-1
  std::array<token_range, 2> ranges{};
  std::int64_t first_chunk = 0;  ///< destination id of the head chunk in `plan`
  friend constexpr bool operator==(const cp_shard&, const cp_shard&) = default;
};

/// What `balance_context_parallel` returns. The moving units are *chunks*: a sample of c = 1 is
/// one chunk (all its tokens), a sample of c ≥ 2 is 2c chunks, chunk k holding tokens
/// [⌊k·l/2c⌋, ⌊(k+1)·l/2c⌋), and position i of its group holds chunks i and 2c − 1 − i.
struct cp_result {
  /// The chunks as a layout on the samples' own ranks, sample by sample in id order and each
  /// sample's chunks in token order (chunk ids of sample g: [chunk_offsets[g],
  /// chunk_offsets[g + 1])); lengths are token counts, bytes (when the input has them)
  /// apportioned by tokens as `piece_layout` does, parents the samples' parents.
  batch_layout chunks;
  /// Every chunk's destination (rank, slot): a route over `chunks` moves the token ranges as
  /// they are. A rank receives its chunks by micro-batch, then in chunk-id order, so a shard's
  /// head and tail arrive next to each other.
  rearrangement plan;
  std::vector<std::int64_t> chunk_offsets;  ///< n + 1: the chunks of every sample
  std::vector<std::int64_t> chunk_begins;   ///< every chunk's first token in its sample
  std::vector<std::int64_t> group_size;     ///< c of every sample
  std::vector<double> loads;                ///< every rank's time, shards and samples
  std::vector<std::int64_t> tokens;         ///< every rank's tokens
  double makespan = 0.0;                    ///< max of `loads`
  /// No plan with the allowed sizes, groups and cap has a smaller makespan (docs/algorithms.md).
  double lower_bound = 0.0;
  std::int64_t sharded = 0;               ///< samples with c ≥ 2
  std::int64_t micro_batches = 1;         ///< M
  std::vector<std::int64_t> micro_batch;  ///< every sample's micro-batch (all its shards')
  /// d·M + 1 destination ids of `plan`: cell (r, m) is [cell_offsets[r·M + m],
  /// cell_offsets[r·M + m + 1]); a rank receives its chunks by micro-batch, then chunk id.
  std::vector<std::int64_t> cell_offsets;
  /// Σ_m max_r load(r, m): the step under per-micro-batch synchronisation (`makespan` when
  /// M = 1; never below `makespan`, so `lower_bound` bounds it too).
  double objective = 0.0;

  /// `makespan / lower_bound` (1 when the bound is 0). O(1).
  [[nodiscard]] double ratio() const noexcept {
    return lower_bound > 0.0 ? makespan / lower_bound : 1.0;
  }
  /// The token range of chunk k (a chunk id). O(1).
  [[nodiscard]] token_range chunk_range(std::int64_t k) const;
  /// The sample chunk k belongs to. O(log n).
  [[nodiscard]] std::int64_t chunk_item(std::int64_t k) const;
  /// The rank at `position` of sample g's group (the rank itself when c = 1). O(1).
  [[nodiscard]] rank_t group_rank(std::int64_t g, std::int64_t position) const;
  /// The shards rank r holds, in the order its chunks arrive. O(chunks of r · log n).
  [[nodiscard]] std::vector<cp_shard> shards_of(rank_t r) const;
};

/// Rank `position`'s time for sample length l sharded over c ranks under `cost`, the group's
/// link figures `links` and `intra_node` (the group inside one node): its chunks' constant,
/// tokens and attention entries, plus the ring exchange (cp_cost). c = 1: `cost(l)`. O(1).
/// Deterministic. Throws `invalid_argument_error` for l < 0, c < 1 or a position outside
/// [0, c).
[[nodiscard]] double cp_shard_time(const cp_cost& cost, std::int64_t length, std::int64_t c,
                                   std::int64_t position, const link_params& links,
                                   bool intra_node);

/// The lower bound L of `balance_context_parallel`: the smallest T such that every sample has an
/// allowed size whose busiest shard takes ≤ T (and fits the cap), and the least total work of
/// such choices is ≤ d · T (docs/algorithms.md proves no plan does better). O(n · Σ sizes +
/// k log k), k the choices above the largest per-sample minimum. Deterministic. Throws as
/// `balance_context_parallel`.
[[nodiscard]] double cp_lower_bound(const batch_layout& layout, const cp_cost& cost,
                                    const topology& topo, const cp_options& options = {});

/// Shards and places the samples of `layout` (a packed stage: one sequence per item, lengths
/// in tokens) on its d ranks, as the file comment outlines, then gives every sample a
/// micro-batch (the same for all its shards) greedily, samples by busiest shard descending,
/// each to the micro-batch where Σ_m max_r load(r, m) grows least with room for its tokens.
/// Packed, without a token cap, the groups-first placement's makespan is at most W̃/d + max peak
/// (docs/algorithms.md), and the kept one is never worse. Complexity per placement tried:
/// O(n log n + Σ_g c_g · Σ_sizes log(d/c)) (the group trees; a descent that skips full
/// subtrees under a cap), plus O(n · M · c) for the micro-batches. Deterministic. Throws
/// `invalid_argument_error` for a topology of another rank count, bad options (no size, a size
/// < 1, sizes not increasing, cap < 1, min_shard_tokens < 0, targets < 1, micro_batches < 1,
/// micro_batch_tokens < 1), no size with a group, or bad coefficients; `infeasible_error` naming
/// the sample when one fits the caps at no allowed size, when the samples hold more tokens than
/// the d ranks' cap, when no placement keeps the caps, or when no micro-batch has room for a
/// sample's shards.
[[nodiscard]] cp_result balance_context_parallel(const batch_layout& layout, const cp_cost& cost,
                                                 const topology& topo,
                                                 const cp_options& options = {});

}  // namespace orchmllm

// The definitions: shard times, the bound, the placement and the result's accessors.
#include "orchmllm/detail/balance/context_parallel.inl"  // IWYU pragma: export
