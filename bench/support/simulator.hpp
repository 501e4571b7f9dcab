#pragma once
/// @file simulator.hpp
/// A SIMULATED cluster step: what one synchronous data-parallel training step of a multimodal LLM
/// would take on D GPUs under seven rearrangement scenarios, from a FLOPs cost model, the
/// communication time model of comm/route.hpp and planning time measured for real. Every figure
/// it produces except `plan_seconds` is a model output, not a measurement. Not part of the
/// library.
///
/// ## The model (also in docs/results.md)
///  * Stages: vision encoder (modality 0, packed: varlen attention over ViT patches), audio encoder
///    (modality 1, padded: rectangular Whisper batches), LLM (packed, varlen attention over the
///    whole sequence = text + encoder output tokens). Each stage's cost of one item is
///    `transformer_flops_cost` (passes = 3: forward + backward) of its model config at the item's
///    length (encoder_length for encoders, sequence length for the LLM); a segmented sub-item
///    (`sub_item::segments` = S > 1: a video's temporal patch groups) costs S times the cost at
///    encoder_length / S (`item_cost` of the layout with its segments), as its encoder attends
///    within one segment only.
///  * A rank's stage time = its stage load / (peak_flops · achievable), where the load is Σ item
///    FLOPs (packed) or count · FLOPs of its longest item (padded). Stages are synchronous: a
///    stage takes as long as its slowest rank; compute_seconds = Σ over stages of max over ranks.
///  * Micro-batches (`sim_options::micro_batch_tokens` = T > 0, FSDP- or ZeRO-3-style): the LLM
///    runs micro-batches of at most T sequence tokens, and every micro-batch synchronises all
///    ranks (its layers' all-gathers and reduce-scatters), so the LLM stage takes Σ_m max_r
///    load(r, m) / rate instead of max_r load(r) / rate. Scenarios that balance rank totals
///    leave the cut to the trainer: each rank's received samples, in slot order, packed
///    greedily under T (`micro_batch_objective_as_sampled`; ranks with fewer micro-batches idle
///    through the others'); `cells` plans the cells (rank, micro-batch) themselves. The encoder
///    stages keep one synchronisation per step.
///  * Communication: each all-to-all along a plan takes
///    `route::build(plan, item_bytes, topo, 0, schedule).predicted_seconds()` (a group-wide
///    figure: per hop, the slowest rank's Σ messages · latency + bytes / bandwidth over intra-
///    and inter-node links, hops add up). No overlap of rearrangement communication with compute
///    (conservative). Bytes: encoder inputs input_rows · row bytes (2352 per ViT patch row, 256
///    per mel frame); text text_tokens · 8; encoder outputs and their gradients
///    llm_tokens · 2 · LLM hidden (bf16).
///  * Encoder stages with no item anywhere in the step issue no all-to-all (every rank knows it
///    from the metadata): K below counts the encoder stages that have items.
///  * Planning (every scenario but `none`): one metadata all-gather, modelled as
///    ⌈log2 D⌉ · latency + bytes · (D − 1)/D / bandwidth of the inter-node link (intra-node on
///    one node), with bytes = 48 · D + 8 · (samples + 5 · sub-items); then the planning code,
///    timed for real on this machine (`plan_step`, or the equivalent for the scenario, plus
///    building rank 0's route of every all-to-all). Planning is asynchronous: it runs while the
///    previous step computes, so only max(0, metadata + plan − compute) lengthens the step.
///  * `sim_options::sync` = `sync_scope::step` (DDP: the ranks wait for each other only at the
///    all-to-alls and the step's end): stages with no all-to-all between them run back to back,
///    compute = max_r of their sum (`none`: the whole step, max_r Σ_stages; otherwise the
///    encoders, then the LLM). `sim_options::seconds_costs` replace a stage's FLOPs / rate by a
///    measured per-item cost in seconds (a real run's `cost_calibration`), `*_row_bytes` the row
///    widths, and `overlap_planning = false` adds metadata + planning to the step (a trainer
///    that plans before it computes): how `python/benchmarks/real_step.py` holds the model to a
///    measured step.
///  * step_seconds = compute + communication + unoverlapped planning;
///    overhead_fraction = (communication + unoverlapped planning) / step_seconds;
///    mfu = model FLOPs / (step_seconds · D · peak_flops), model FLOPs = Σ over every item of
///    every stage of its FLOPs (no padding): the useful work, the same in every scenario.
///
/// ## Scenarios (all on the same sampled batch)
///  * `none`: no balancing, no rearrangement traffic, no planning.
///  * `llm-only`: encoders run where their items were sampled; only the LLM stage is balanced
///    (automatic, identity mapping). Text origin → Π_M, encoder outputs origin → Π_M along the
///    lift L_k, their gradients back along L_k⁻¹: 2K + 1 all-to-alls.
///  * `per-stage`: every stage balanced (automatic, identity mapping); encoder outputs go back
///    to their origin (Π_E⁻¹) and then to the LLM ranks (L_k), gradients the reverse way
///    (L_k⁻¹ then Π_E): 5K + 1 all-to-alls — what existing open systems do.
///  * `full`: `plan_step` with automatic + auction mapping (the transport problem to within
///    1 % of the keepable bytes, measured ≤ 0.014 %) on every stage, composed routes
///    (Π_E → Π_M directly): 3K + 1 — the published system.
///  * `beyond`: `plan_step` with the `locality` balancer (tolerance 0.001) and the `bottleneck`
///    mapping on every stage: 3K + 1.
///  * `split`: `full` plus `encoder_stage::split` (default `split_options`) on the vision stage:
///    `plan_step` may cut segmented sub-items (videos) at segment boundaries into pieces encoded
///    on different ranks; the vision routes move pieces (input rows and LLM tokens pro rata to
///    their segments): 3K + 1. The audio stage does not split: its sub-items are single 30 s
///    windows already (workloads.hpp), so there is nothing to cut. Listed after the five earlier
///    scenarios so they keep their positions.
///  * `cells`: `full`, and the LLM stage declares micro-batches (`llm_stage::micro_batches`:
///    at most T tokens each, `sync_model::micro_batch`, the smallest M that fits): `plan_step`
///    balances Σ_m max_r over the cells (rank, micro-batch) instead of the rank totals, and the
///    LLM stage takes the planned objective / rate. Needs T > 0; listed last.
///
/// Determinism: every figure but `plan_seconds` (and what depends on it, only when planning does
/// not fit under the compute) is a deterministic function of the options and the batch.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/support/models.hpp"
#include "bench/support/workloads.hpp"
#include "orchmllm/balance/balancer.hpp"
#include "orchmllm/balance/micro_batches.hpp"
#include "orchmllm/comm/route.hpp"
#include "orchmllm/core/batch_layout.hpp"
#include "orchmllm/core/cost_model.hpp"
#include "orchmllm/core/error.hpp"
#include "orchmllm/core/padding.hpp"
#include "orchmllm/core/rearrangement.hpp"
#include "orchmllm/orchestrator/orchestrator.hpp"
#include "orchmllm/orchestrator/stages.hpp"
#include "orchmllm/topology/mapper.hpp"
#include "orchmllm/topology/mapping.hpp"
#include "orchmllm/topology/topology.hpp"

namespace orchmllm::bench {

// ---------------------------------------------------------------------------------------------
// Model configurations
// ---------------------------------------------------------------------------------------------

/// The three transformer stacks of a simulated MLLM.
struct model_config {
  std::string name;           ///< "7b" or "72b" for the built-in ones
  transformer_config vision;  ///< ViT-style vision encoder (modality 0)
  transformer_config audio;   ///< Whisper-style audio encoder (modality 1)
  transformer_config llm;     ///< the LLM backbone; its hidden size sets the output row width

  /// Bytes of one encoder output row (one LLM token embedding, bf16): 2 · llm.hidden.
  [[nodiscard]] std::int64_t output_row_bytes() const noexcept { return 2 * llm.hidden; }
};

/// The built-in models: "7b" (default) and "72b". Both share the encoders:
///  * vision: ViT-600M-like (hidden 1280, 32 layers, 16 heads, FFN 5120, not gated, not causal,
///    no vocabulary head);
///  * audio: Whisper-large-v3-encoder-like (hidden 1280, 32 layers, 20 heads, FFN 5120, not
///    gated, not causal);
///  * "7b": LLaMA-7B-like (hidden 4096, 32 layers, 32 heads, SwiGLU FFN 11008, causal, vocab
///    32000); "72b": Qwen2-72B-like (hidden 8192, 80 layers, 64 heads, 8 KV heads, SwiGLU FFN
///    29568, causal, vocab 152064).
/// O(1). Throws `invalid_argument_error` naming an unknown name.
inline model_config model_by_name(std::string_view name) {
  model_config m;
  m.vision = vit_600m();
  m.audio = whisper_encoder();
  if (name == "7b") {
    m.name = "7b";
    m.llm = llm_7b();
  } else if (name == "72b") {
    m.name = "72b";
    m.llm = llm_72b();
  } else {
    ::orchmllm::detail::raise<invalid_argument_error>(
        ::orchmllm::detail::concat("unknown model '", name, "' (expected 7b or 72b)"));
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// Scenarios and options
// ---------------------------------------------------------------------------------------------

/// What the step does about imbalance (see the file comment).
enum class scenario : std::uint8_t { none, llm_only, per_stage, full, beyond, split, cells };

/// The seven scenarios in report order (the later ones appended, so the earlier keep their
/// positions).
inline constexpr std::array<scenario, 7> all_scenarios = {
    scenario::none,   scenario::llm_only, scenario::per_stage, scenario::full,
    scenario::beyond, scenario::split,    scenario::cells};

/// "none", "llm-only", "per-stage", "full", "beyond", "split", "cells". O(1), never throws.
constexpr std::string_view to_string(scenario s) noexcept {
  switch (s) {
    case scenario::none:
      return "none";
    case scenario::llm_only:
      return "llm-only";
    case scenario::per_stage:
      return "per-stage";
    case scenario::full:
      return "full";
    case scenario::beyond:
      return "beyond";
    case scenario::split:
      return "split";
    case scenario::cells:
      return "cells";
  }
  return "?";
}

/// The scenario spelled as `to_string` does. Throws `invalid_argument_error` naming the text.
inline scenario parse_scenario(std::string_view text) {
  for (auto s : all_scenarios)
    if (to_string(s) == text) return s;
  ::orchmllm::detail::raise<invalid_argument_error>(::orchmllm::detail::concat(
      "unknown scenario '", text,
      "' (expected none, llm-only, per-stage, full, beyond, split or cells)"));
}

/// Where the ranks wait for each other besides the all-to-alls.
enum class sync_scope : std::uint8_t {
  /// Every stage waits for its slowest rank (FSDP, ZeRO-3, tensor parallelism: every layer
  /// synchronises): compute = Σ over stages of max over ranks. The default.
  stage,
  /// Once per step (DDP: the gradient all-reduce at the end): stages with no all-to-all between
  /// them run back to back on every rank, so such a run of stages takes max over ranks of the
  /// rank's sum (`none`: the whole step; the other scenarios: the encoders, then the LLM).
  step,
};

/// "stage" or "step". O(1), never throws.
constexpr std::string_view to_string(sync_scope s) noexcept {
  return s == sync_scope::step ? "step" : "stage";
}

/// What to simulate.
struct sim_options {
  workload_options workload;  ///< the sampled batch (D = workload.ranks)
  rank_t gpus_per_node = 8;   ///< G ≥ 1; nodes are consecutive blocks of G ranks
  model_config model = model_by_name("7b");
  scenario which = scenario::full;
  double peak_flops = 989e12;            ///< per GPU, FLOP/s (H100 bf16 dense)
  double achievable = 0.5;               ///< fraction of peak a stage reaches, in (0, 1]
  link_params links{};                   ///< bandwidths and latencies (topology.hpp defaults)
  schedule sched = schedule::automatic;  ///< all-to-all schedule
  /// `balancers::automatic::gap_tolerance` of every balanced stage (and locality's base):
  /// the balancers stop within lower bound · (1 + gap), so a stage's makespan is at most that
  /// fraction above what gap 0 gives. 0 (default): the plans of gap 0.
  double gap_tolerance = 0;
  /// `mappers::auction::tolerance` of the auction-mapped stages (full, split): inter-node bytes
  /// at most the transport minimum + this fraction of the keepable bytes per stage.
  double auction_tolerance = mappers::auction::default_tolerance;
  /// T: the LLM runs micro-batches of at most T sequence tokens, each synchronising every rank
  /// (FSDP, ZeRO-3; see the file comment); at least the longest sequence of the batch. 0
  /// (default): one synchronisation per step.
  std::int64_t micro_batch_tokens = 0;
  /// Measured per-item costs in seconds (e.g. `cost_calibration` of a real run) of the vision,
  /// audio and LLM stages: a set one replaces the stage's FLOPs / (peak · achievable), for the
  /// stage's time and for planning it. Unset (default): the model's FLOPs.
  std::array<std::optional<quadratic_cost>, 3> seconds_costs{};
  /// Row widths in bytes replacing the defaults when > 0: a vision input row (default 2352, a
  /// ViT patch), an encoder output row (default 2 · LLM hidden), a text row (default 8).
  std::int64_t vision_row_bytes = 0;
  std::int64_t output_row_bytes = 0;
  std::int64_t text_row_bytes = 0;
  sync_scope sync = sync_scope::stage;  ///< see `sync_scope`
  /// Planning runs while the previous step computes (default; only what does not fit lengthens
  /// the step), or before the step, blocking it (false: metadata + plan add to the step).
  bool overlap_planning = true;

  /// Throws `invalid_argument_error` naming the value: gpus_per_node < 1, peak_flops not
  /// positive and finite, achievable outside (0, 1], auction_tolerance outside (0, 1],
  /// micro_batch_tokens < 0 (or 0 for the `cells` scenario), invalid links, or invalid model
  /// configs.
  void validate() const {
    ORCHMLLM_REQUIRE(gpus_per_node >= 1, invalid_argument_error, "gpus_per_node is ", gpus_per_node,
                     ", must be >= 1");
    ORCHMLLM_REQUIRE(std::isfinite(peak_flops) && peak_flops > 0, invalid_argument_error,
                     "peak_flops is ", peak_flops, ", must be positive and finite");
    ORCHMLLM_REQUIRE(std::isfinite(gap_tolerance) && gap_tolerance >= 0, invalid_argument_error,
                     "gap_tolerance is ", gap_tolerance, ", must be finite and >= 0");
    ORCHMLLM_REQUIRE(auction_tolerance > 0 && auction_tolerance <= 1, invalid_argument_error,
                     "auction_tolerance is ", auction_tolerance, ", must be in (0, 1]");
    ORCHMLLM_REQUIRE(micro_batch_tokens >= 0, invalid_argument_error, "micro_batch_tokens is ",
                     micro_batch_tokens, ", must be >= 0 (0: no micro-batches)");
    ORCHMLLM_REQUIRE(which != scenario::cells || micro_batch_tokens > 0, invalid_argument_error,
                     "the cells scenario needs micro_batch_tokens > 0 (the LLM's micro-batch cap)");
    ORCHMLLM_REQUIRE(vision_row_bytes >= 0 && output_row_bytes >= 0 && text_row_bytes >= 0,
                     invalid_argument_error, "row bytes must be >= 0 (0: the default)");
    ORCHMLLM_REQUIRE(sync == sync_scope::stage || micro_batch_tokens == 0, invalid_argument_error,
                     "micro-batches synchronise every micro-batch: sync_scope::step needs "
                     "micro_batch_tokens 0");
    for (const auto& c : seconds_costs)
      if (c) (void)c->validated();
    ORCHMLLM_REQUIRE(std::isfinite(achievable) && achievable > 0 && achievable <= 1,
                     invalid_argument_error, "achievable is ", achievable, ", must be in (0, 1]");
    links.validate();
    (void)transformer_flops_cost(model.vision);
    (void)transformer_flops_cost(model.audio);
    (void)transformer_flops_cost(model.llm);
  }
};

/// Compute figures of one stage.
struct stage_figures {
  std::string name;      ///< "vision", "audio", "llm"
  double imbalance = 1;  ///< max / mean over ranks of the stage compute (1 when it has no work)
  /// The slowest rank's compute time of the stage; with micro-batches (the LLM), Σ over
  /// micro-batches of the slowest rank's.
  double seconds = 0;
  std::int64_t micro_batches = 0;  ///< M of the planned cells (`cells`' LLM), else 0
};

/// Figures of one all-to-all.
struct transfer_figures {
  std::string name;                   ///< e.g. "vision.input", "text", "audio.gradient"
  std::int64_t moved_bytes = 0;       ///< bytes of items that change rank
  std::int64_t inter_node_bytes = 0;  ///< bytes of items that change node
  double seconds = 0;                 ///< modelled time (route time model)
  schedule used = schedule::direct;   ///< the schedule the route chose
};

/// MEASURED wall times of the planner's phases (from `step_plan` and its stage reports).
struct planner_phases {
  double layout_seconds = 0;   ///< the LLM layout from the metadata (the encoders' overlap)
  double stages_seconds = 0;   ///< balancing and mapping every stage (wall, threads overlap)
  double compose_seconds = 0;  ///< lifts, composed routes and inverses
  struct stage {
    std::string name;
    double balance_seconds = 0, map_seconds = 0, report_seconds = 0;
  };
  std::vector<stage> stages;  ///< per planned stage, plan_step's order (encoders, then llm)
};

/// What `simulate` returns. All seconds are SIMULATED except `plan_seconds`, which is measured.
struct sim_result {
  scenario which = scenario::none;
  workload_options workload;
  std::string model;
  rank_t ranks = 0;
  rank_t gpus_per_node = 0;
  rank_t nodes = 0;
  int encoder_stages = 0;        ///< K: encoder stages with at least one item
  double step_seconds = 0;       ///< compute + comm + unoverlapped planning
  double compute_seconds = 0;    ///< Σ over stages of the slowest rank (see `sync_scope`)
  double comm_seconds = 0;       ///< Σ over the all-to-alls (no overlap with compute)
  double plan_seconds = 0;       ///< MEASURED planning wall time: plan_step + route seconds
  double plan_step_seconds = 0;  ///< MEASURED wall time of `plan_step` (balancing and mapping)
  double route_seconds = 0;      ///< MEASURED wall time of building rank 0's routes
  double metadata_seconds = 0;   ///< modelled metadata all-gather
  /// max(0, metadata + plan − compute); metadata + plan without `overlap_planning`
  double unoverlapped_plan_seconds = 0;
  double mfu = 0;                     ///< model_flops / (step_seconds · D · peak)
  double overhead_fraction = 0;       ///< (comm + unoverlapped planning) / step_seconds
  double model_flops = 0;             ///< useful FLOPs of the global batch (no padding)
  std::int64_t inter_node_bytes = 0;  ///< Σ over the all-to-alls
  std::int64_t moved_bytes = 0;       ///< Σ over the all-to-alls
  int alltoalls = 0;
  std::vector<stage_figures> stages;        ///< vision, audio, llm
  std::vector<transfer_figures> transfers;  ///< one per all-to-all
  planner_phases planner;                   ///< MEASURED; empty for scenario none
};

// ---------------------------------------------------------------------------------------------
// Implementation
// ---------------------------------------------------------------------------------------------

namespace sim_detail {

/// Per destination rank, the stage load of `plan` applied to `layout` (FLOPs), items added in
/// destination slot order; an item with segments costs the sum of its segments (`item_cost`).
template <class Cost>
std::vector<double> stage_loads(const batch_layout& layout, const rearrangement& plan,
                                const Cost& cost, padding_policy policy) {
  const rank_t d = plan.num_dst_ranks();
  std::vector<double> loads(static_cast<std::size_t>(d), 0.0);
  const auto off = plan.dst_offsets();
  for (rank_t r = 0; r < d; ++r) {
    rank_load<double> load(policy);
    for (auto h = off[static_cast<std::size_t>(r)]; h < off[static_cast<std::size_t>(r) + 1]; ++h) {
      const auto g = plan.source_of(h);
      load.add(layout.length(g), item_cost<double>(layout, g, cost), 0);
    }
    loads[static_cast<std::size_t>(r)] = load.load(cost);
  }
  return loads;
}

/// Stage figures from per-rank loads.
inline stage_figures figures(std::string name, const std::vector<double>& loads, double rate) {
  stage_figures f;
  f.name = std::move(name);
  double mx = 0, sum = 0;
  for (double l : loads) {
    mx = std::max(mx, l);
    sum += l;
  }
  f.seconds = mx / rate;
  const double mean = loads.empty() ? 0 : sum / static_cast<double>(loads.size());
  f.imbalance = mean > 0 ? mx / mean : 1.0;
  return f;
}

/// `values` (indexed by origin item) permuted into the item order of a layout whose item h
/// holds origin item origin_of[h].
inline std::vector<std::int64_t> permuted(std::span<const std::int64_t> values,
                                          std::span<const std::int64_t> origin_of) {
  std::vector<std::int64_t> out(origin_of.size());
  for (std::size_t h = 0; h < origin_of.size(); ++h)
    out[h] = values[static_cast<std::size_t>(origin_of[h])];
  return out;
}

/// Collects the all-to-alls of one scenario and times the building of their routes (those it
/// builds itself: `add`; `plan_step`'s prebuilt ones come in through `add_built`).
class transfer_log {
 public:
  transfer_log(const topology& topo, schedule s) : topo_(topo), sched_(s) {}

  void add(std::string name, const rearrangement& plan, std::span<const std::int64_t> bytes) {
    const auto start = std::chrono::steady_clock::now();
    const auto rt = route::build(plan, bytes, topo_, 0, sched_);
    route_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    add_built(std::move(name), plan, bytes, rt);
  }

  /// A transfer whose route (rank 0's) was built already, e.g. by `plan_step`.
  void add_built(std::string name, const rearrangement& plan, std::span<const std::int64_t> bytes,
                 const route& rt) {
    transfer_figures t;
    t.name = std::move(name);
    const auto src = plan.src_offsets();
    const auto dst = plan.dst_ranks();
    for (std::size_t r = 0; r + 1 < src.size(); ++r)
      for (auto g = src[r]; g < src[r + 1]; ++g) {
        const rank_t to = dst[static_cast<std::size_t>(g)];
        if (to == static_cast<rank_t>(r)) continue;
        t.moved_bytes += bytes[static_cast<std::size_t>(g)];
        if (!topo_.same_node(static_cast<rank_t>(r), to))
          t.inter_node_bytes += bytes[static_cast<std::size_t>(g)];
      }
    t.seconds = rt.predicted_seconds();
    t.used = rt.used();
    transfers_.push_back(std::move(t));
  }

  [[nodiscard]] double route_seconds() const noexcept { return route_seconds_; }
  [[nodiscard]] std::vector<transfer_figures> take() { return std::move(transfers_); }

 private:
  const topology& topo_;
  schedule sched_;
  double route_seconds_ = 0;
  std::vector<transfer_figures> transfers_;
};

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace sim_detail

/// The stage declarations a scenario plans with: encoders "vision" (packed) and "audio" (padded)
/// and "llm" (packed), costs `transformer_flops_cost` of the model's configs, row widths from
/// workloads.hpp (2352, 256, 8) and 2 · LLM hidden per output row; balancer and mapping per
/// scenario: none → identity balancer and mapper everywhere; llm-only → encoders identity, LLM
/// automatic, identity mapper; per-stage → automatic + identity; full → automatic + auction;
/// beyond → locality (tolerance 0.001) + bottleneck; split → full plus `split_options{}` on the
/// vision stage. Every automatic (and locality's base) gets `gap_tolerance`, every auction
/// `auction_tolerance`; cells → full plus micro-batches of at most `micro_batch_tokens` tokens on
/// the LLM stage (`sync_model::micro_batch`). O(1). Throws `invalid_argument_error` for an
/// invalid model config or an auction tolerance outside (0, 1].
inline stage_declarations make_declarations(
    const model_config& model, scenario which, double gap_tolerance = 0,
    double auction_tolerance = mappers::auction::default_tolerance,
    std::int64_t micro_batch_tokens = 0) {
  stage_declarations decl;
  any_balancer enc = balancers::identity{}, llm = balancers::identity{};
  any_mapper map = mappers::identity{};
  switch (which) {
    case scenario::none:
      break;
    case scenario::llm_only:
      llm = balancers::automatic{};
      break;
    case scenario::per_stage:
      enc = llm = balancers::automatic{};
      break;
    case scenario::full:
    case scenario::split:
    case scenario::cells:
      enc = llm = balancers::automatic{};
      map = mappers::auction{.tolerance = auction_tolerance};
      break;
    case scenario::beyond:
      enc = llm = balancers::locality{.tolerance = 0.001};
      map = mappers::bottleneck{};
      break;
  }
  detail::set_gap_tolerance(enc, gap_tolerance);
  detail::set_gap_tolerance(llm, gap_tolerance);
  const auto out_bytes = model.output_row_bytes();
  decl.encoders.push_back(encoder_stage{.name = "vision",
                                        .cost = transformer_flops_cost(model.vision),
                                        .policy = packed,
                                        .balancer = enc,
                                        .mapper = map,
                                        .input_row_bytes = vision_row_bytes,
                                        .output_row_bytes = out_bytes});
  if (which == scenario::split) decl.encoders.back().split = split_options{};
  decl.encoders.push_back(encoder_stage{.name = "audio",
                                        .cost = transformer_flops_cost(model.audio),
                                        .policy = padded,
                                        .balancer = enc,
                                        .mapper = map,
                                        .input_row_bytes = audio_row_bytes,
                                        .output_row_bytes = out_bytes});
  decl.llm = llm_stage{.name = "llm",
                       .cost = transformer_flops_cost(model.llm),
                       .policy = packed,
                       .balancer = llm,
                       .mapper = map,
                       .text_row_bytes = text_row_bytes};
  if (which == scenario::cells)
    decl.llm.micro_batches =
        micro_batching{.sync = sync_model::micro_batch, .limits = {.tokens = micro_batch_tokens}};
  return decl;
}

/// Simulates one step of `batch` (which fixes D and the samples; `options.workload` is not used
/// except that the result reports `batch.options`). Sub-items must use modality 0 (vision) or
/// 1 (audio). Complexity: that of `plan_step` for the scenario plus O(n log n + d) per all-to-all
/// (route building), n = items. Deterministic but for `plan_seconds` (see the file comment).
/// Throws `invalid_argument_error` for invalid options (see `sim_options::validate`), an empty
/// batch, more than 2^31 − 1 ranks or a malformed batch (naming the rank); `infeasible_error`
/// never (no constraints are declared).
inline sim_result simulate(const workload_batch& batch, const sim_options& options) {
  options.validate();
  ORCHMLLM_REQUIRE(!batch.ranks.empty(), invalid_argument_error,
                   "simulate: the batch has no ranks");
  ORCHMLLM_REQUIRE(
      batch.ranks.size() <= static_cast<std::size_t>(std::numeric_limits<rank_t>::max()),
      invalid_argument_error, "simulate: ", batch.ranks.size(), " ranks exceed ",
      std::numeric_limits<rank_t>::max());
  const auto d = static_cast<rank_t>(batch.ranks.size());
  const topology topo = topology::uniform(d, options.gpus_per_node, options.links);
  const auto meta = make_step_metadata(batch.ranks, 2);
  auto decl = make_declarations(options.model, options.which, options.gap_tolerance,
                                options.auction_tolerance, options.micro_batch_tokens);
  // Per stage (vision, audio, llm): FLOPs per second, or 1 for a cost measured in seconds.
  std::array<double, 3> rate;
  rate.fill(options.peak_flops * options.achievable);
  for (std::size_t k = 0; k < 3; ++k) {
    if (!options.seconds_costs[k]) continue;
    (k < 2 ? decl.encoders[k].cost : decl.llm.cost) = *options.seconds_costs[k];
    rate[k] = 1.0;
  }
  if (options.vision_row_bytes > 0) decl.encoders[0].input_row_bytes = options.vision_row_bytes;
  if (options.output_row_bytes > 0)
    for (auto& e : decl.encoders) e.output_row_bytes = options.output_row_bytes;
  if (options.text_row_bytes > 0) decl.llm.text_row_bytes = options.text_row_bytes;
  const std::array<stage_cost, 3> flops = {transformer_flops_cost(options.model.vision),
                                           transformer_flops_cost(options.model.audio),
                                           transformer_flops_cost(options.model.llm)};

  sim_result res;
  res.which = options.which;
  res.workload = batch.options;
  res.model = options.model.name;
  res.ranks = d;
  res.gpus_per_node = options.gpus_per_node;
  res.nodes = topo.num_nodes();

  // Origin layouts (what `plan_step` builds too) and the useful FLOPs.
  std::array<batch_layout, 2> enc_layouts;
  for (std::size_t k = 0; k < 2; ++k) {
    const auto& m = meta.modalities[k];
    enc_layouts[k] = batch_layout(m.offsets, m.encoder_length);
    if (std::any_of(m.segments.begin(), m.segments.end(), [](auto s) { return s != 1; }))
      enc_layouts[k] = enc_layouts[k].with_equal_segments(m.segments);
  }
  std::vector<std::int64_t> seq(static_cast<std::size_t>(meta.num_samples()));
  for (std::size_t g = 0; g < seq.size(); ++g)
    seq[g] = meta.sequence_length(static_cast<std::int64_t>(g));
  const batch_layout llm_layout(meta.sample_offsets, seq);
  for (std::size_t k = 0; k < 2; ++k)
    for (std::int64_t g = 0; g < enc_layouts[k].num_items(); ++g)
      res.model_flops += item_cost<double>(enc_layouts[k], g, flops[k]);
  for (auto l : seq) res.model_flops += flops[2](l);

  // Bytes per origin item.
  std::array<std::vector<std::int64_t>, 2> in_bytes, out_bytes;
  for (std::size_t k = 0; k < 2; ++k) {
    const auto& m = meta.modalities[k];
    for (std::size_t i = 0; i < m.parent.size(); ++i) {
      in_bytes[k].push_back(m.input_rows[i] * decl.encoders[k].input_row_bytes);
      out_bytes[k].push_back(m.llm_tokens[i] * decl.encoders[k].output_row_bytes);
    }
  }
  std::vector<std::int64_t> text_bytes(meta.text_tokens.size());
  for (std::size_t g = 0; g < text_bytes.size(); ++g)
    text_bytes[g] = meta.text_tokens[g] * decl.llm.text_row_bytes;
  std::vector<std::size_t> present;  // encoder stages with items: they get all-to-alls
  for (std::size_t k = 0; k < 2; ++k)
    if (meta.modalities[k].size() > 0) present.push_back(k);
  res.encoder_stages = static_cast<int>(present.size());

  sim_detail::transfer_log log(topo, options.sched);
  std::array<rearrangement, 2> enc_plans;
  std::array<batch_layout, 2> unit_layouts = enc_layouts;  // what enc_plans move (split: pieces)
  rearrangement llm_plan;
  double llm_cells_objective = 0;  // cells: the planned Σ_m max_r of the LLM (FLOPs)
  std::int64_t llm_cells = 0;      // and its M
  if (options.which == scenario::none) {
    for (std::size_t k = 0; k < 2; ++k) enc_plans[k] = rearrangement::identity(enc_layouts[k]);
    llm_plan = rearrangement::identity(llm_layout);
  } else {
    // The composed scenarios move data along plan_step's own routes (rank 0's, built on the
    // planner's threads); the others along routes of their own (the log builds them).
    const bool composed = options.which == scenario::full || options.which == scenario::beyond ||
                          options.which == scenario::split || options.which == scenario::cells;
    plan_options popt;
    popt.sched = options.sched;
    if (composed) popt.routes_for = 0;
    const auto start = std::chrono::steady_clock::now();
    auto step = plan_step(decl, meta, topo, popt);
    const double plan_step_seconds = sim_detail::seconds_since(start) - step.routes_seconds;
    for (std::size_t k : present) {
      const auto& er = step.encoders[k];
      const auto& name = decl.encoders[k].name;
      if (er.pieces) {  // bytes per piece: its share of its sub-item's segments
        const auto& pc = *er.pieces;
        const auto& m = meta.modalities[k];
        std::vector<std::int64_t> pin(static_cast<std::size_t>(pc.num_pieces())), pout(pin.size());
        for (std::int64_t p = 0; p < pc.num_pieces(); ++p) {
          const auto g = static_cast<std::size_t>(pc.item_of(p));
          const auto segs = pc.last_segment(p) - pc.first_segment(p);
          const auto s_g = m.segments_of(static_cast<std::int64_t>(g));
          pin[static_cast<std::size_t>(p)] = in_bytes[k][g] / s_g * segs;
          pout[static_cast<std::size_t>(p)] = out_bytes[k][g] / s_g * segs;
        }
        in_bytes[k] = std::move(pin);
        out_bytes[k] = std::move(pout);
      }
      const auto e_order = sim_detail::permuted(out_bytes[k], er.input.sources());
      const auto l_order = sim_detail::permuted(out_bytes[k], er.lifted.sources());
      switch (options.which) {
        case scenario::llm_only:  // encoders at the origin: outputs along the lift and back
          log.add(name + ".output", er.lifted, out_bytes[k]);
          log.add(name + ".gradient", er.lifted.inverse(), l_order);
          break;
        case scenario::per_stage:  // via the origin both ways
          log.add(name + ".input", er.input, in_bytes[k]);
          log.add(name + ".output.to_origin", er.input.inverse(), e_order);
          log.add(name + ".output.to_llm", er.lifted, out_bytes[k]);
          log.add(name + ".gradient.to_origin", er.lifted.inverse(), l_order);
          log.add(name + ".gradient.to_encoder", er.input, out_bytes[k]);
          break;
        default: {  // full, beyond, split, cells: composed routes, step_routes' order
                    // (inputs, text, outputs, gradients)
          const auto kc = step.encoders.size();
          const auto& rts = step.routes.all;
          log.add_built(name + ".input", er.input, in_bytes[k], rts[k]);
          log.add_built(name + ".output", er.output, e_order, rts[kc + 1 + k]);
          log.add_built(name + ".gradient", er.gradient, l_order, rts[2 * kc + 1 + k]);
          break;
        }
      }
    }
    if (composed) {
      log.add_built("text", step.llm, text_bytes, step.routes.all[step.encoders.size()]);
    } else {
      log.add("text", step.llm, text_bytes);
    }
    res.plan_step_seconds = plan_step_seconds;
    res.route_seconds = log.route_seconds() + step.routes_seconds;
    res.planner.layout_seconds = step.layout_seconds;
    res.planner.stages_seconds = step.stages_seconds;
    res.planner.compose_seconds = step.compose_seconds;
    for (const auto& st : step.stages)
      res.planner.stages.push_back(
          {st.name, st.balance_seconds, st.map_seconds, st.report_seconds});
    res.plan_seconds = plan_step_seconds + res.route_seconds;
    for (std::size_t k = 0; k < 2; ++k) {
      if (step.encoders[k].pieces) unit_layouts[k] = step.encoders[k].units();
      enc_plans[k] = std::move(step.encoders[k].input);
    }
    llm_plan = std::move(step.llm);
    if (options.which == scenario::cells) {
      llm_cells_objective = step.stages.back().objective_after;
      llm_cells = step.micro_batches.back().count;
    }

    // Metadata all-gather (see the file comment).
    if (d > 1) {
      const double words =
          static_cast<double>(meta.num_samples()) +
          5.0 * static_cast<double>(meta.modalities[0].size() + meta.modalities[1].size());
      const double bytes = 48.0 * d + 8.0 * words;
      const bool one_node = topo.num_nodes() == 1;
      const double lat = one_node ? options.links.intra_latency : options.links.inter_latency;
      const double bw = one_node ? options.links.intra_bandwidth : options.links.inter_bandwidth;
      res.metadata_seconds = std::ceil(std::log2(static_cast<double>(d))) * lat +
                             bytes * (static_cast<double>(d) - 1) / static_cast<double>(d) / bw;
    }
  }

  // Compute.
  std::array<std::vector<double>, 3> loads;
  for (std::size_t k = 0; k < 2; ++k) {
    loads[k] = sim_detail::stage_loads(unit_layouts[k], enc_plans[k], decl.encoders[k].cost,
                                       decl.encoders[k].policy);
    res.stages.push_back(sim_detail::figures(decl.encoders[k].name, loads[k], rate[k]));
  }
  loads[2] = sim_detail::stage_loads(llm_layout, llm_plan, decl.llm.cost, decl.llm.policy);
  res.stages.push_back(sim_detail::figures(decl.llm.name, loads[2], rate[2]));
  if (options.micro_batch_tokens > 0) {  // the LLM synchronises every micro-batch
    auto& llm = res.stages.back();
    if (options.which == scenario::cells) {
      llm.seconds = llm_cells_objective / rate[2];
      llm.micro_batches = llm_cells;
    } else {  // the trainer cuts each rank's received samples greedily, in slot order
      const auto offsets = llm_plan.dst_offsets();
      const batch_layout dst(std::vector<std::int64_t>(offsets.begin(), offsets.end()),
                             orchmllm::apply(llm_plan, seq));
      const micro_batching cut{.sync = sync_model::micro_batch,
                               .limits = {.tokens = options.micro_batch_tokens}};
      llm.seconds =
          micro_batch_objective_as_sampled(dst, decl.llm.cost, decl.llm.policy, cut) / rate[2];
    }
  }
  if (options.sync == sync_scope::stage) {
    for (const auto& s : res.stages) res.compute_seconds += s.seconds;
  } else {  // stages with no all-to-all between them run back to back on every rank
    // Stages 0 .. joined - 1 form one run: without rearrangement the whole step; otherwise the
    // encoders (their inputs arrive before both and their outputs leave after both), then the
    // LLM after its all-to-alls.
    const std::size_t joined = options.which == scenario::none ? 3 : 2;
    const auto run_seconds = [&](std::size_t k0, std::size_t k1) {  // max over ranks of the sum
      double mx = 0;
      for (std::size_t r = 0; r < static_cast<std::size_t>(d); ++r) {
        double s = 0;
        for (std::size_t k = k0; k < k1; ++k) s += loads[k][r] / rate[k];
        mx = std::max(mx, s);
      }
      return mx;
    };
    res.compute_seconds = run_seconds(0, joined);
    for (std::size_t k = joined; k < 3; ++k) res.compute_seconds += run_seconds(k, k + 1);
  }

  // Communication and the step.
  res.transfers = log.take();
  res.alltoalls = static_cast<int>(res.transfers.size());
  for (const auto& t : res.transfers) {
    res.comm_seconds += t.seconds;
    res.moved_bytes += t.moved_bytes;
    res.inter_node_bytes += t.inter_node_bytes;
  }
  res.unoverlapped_plan_seconds =
      options.overlap_planning
          ? std::max(0.0, res.metadata_seconds + res.plan_seconds - res.compute_seconds)
          : res.metadata_seconds + res.plan_seconds;
  res.step_seconds = res.compute_seconds + res.comm_seconds + res.unoverlapped_plan_seconds;
  if (res.step_seconds > 0) {
    res.mfu = res.model_flops / (res.step_seconds * static_cast<double>(d) * options.peak_flops);
    res.overhead_fraction = (res.comm_seconds + res.unoverlapped_plan_seconds) / res.step_seconds;
  }
  return res;
}

/// Generates `options.workload` (make_workload) and simulates it. Same figures as
/// `simulate(make_workload(options.workload), options)`; to compare scenarios on one batch,
/// generate it once and call the other overload. Throws what `make_workload` and `simulate`
/// throw (`invalid_argument_error`).
inline sim_result simulate(const sim_options& options) {
  options.validate();
  ORCHMLLM_REQUIRE(options.workload.ranks <= std::numeric_limits<rank_t>::max(),
                   invalid_argument_error, "simulate: ", options.workload.ranks, " ranks exceed ",
                   std::numeric_limits<rank_t>::max());
  return simulate(make_workload(options.workload), options);
}

}  // namespace orchmllm::bench
