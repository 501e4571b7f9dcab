// OrchMLLM end to end: one multimodal training step with and without the Global Orchestrator,
// checked to give the same gradients.
//
// A tiny multimodal model in plain C++20 + Eigen, double precision, forward and backward written
// by hand:
//   * vision encoder (stage "vision", policy packed): every image patch (12 values) goes through
//     tanh(W x + b) (hidden size H = 8), then pairs of patches are averaged into one LLM token —
//     so an image of P patches (its encoder length) becomes P / 2 LLM tokens;
//   * audio encoder (stage "audio", policy padded): every mel frame (6 values) goes through
//     tanh(A x + a), groups of 3 frames are averaged into one LLM token, and a clip-level
//     context mixes the whole clip: out_t = tanh(U pool_t + V mean_t'(pool_t') + c) — so a clip
//     of F frames becomes F / 3 tokens, and its gradient needs the whole clip on one rank;
//   * an LLM-like backbone over each sample's sequence (its text tokens, with every image / clip
//     inserted as a run of rows after the text token it follows): u_i = x_i + P_i (learned
//     position embeddings), c_i = causal running mean of u_0..u_i, h_i = tanh(W1 [u_i; c_i] + b1),
//     logits y_i = W2 h_i + b2 over a vocabulary of 32, softmax cross-entropy against every
//     position's target (text positions and placeholder positions alike). The loss of the step
//     is the sum over ALL tokens of the global batch divided by the GLOBAL token count, so the
//     gradient does not depend on which rank a sample is processed on.
//
// --split: images become videos of S temporal groups (S = 1..4 groups of 1-3 tokens;
// ranks 0, 4, ... also hold one video of 24 groups), the vision encoder attends within each
// group only (a tiny softmax attention over the group's tokens, `segment_attention`), every
// video is a sub-item of S equal segments (`sub_item::segments`) and the vision stage splits
// (`encoder_stage::split`): a long video is cut at group boundaries and its pieces are encoded
// on different ranks (`step_plan::encoder_view` lists them), their outputs reassemble in order
// in front of the LLM and the gradients return to the pieces. The JSON then also has
// "split": true, vision_units (pieces encoded) and cut_videos (videos cut in two or more).
//
// --micro-batches: the LLM stage plans at least 3 micro-batches of at most 288 tokens per rank
// (`llm_stage::micro_batches`, FSDP-style sync per micro-batch) and the encoders two each (per
// step); path (b) runs the LLM micro-batch by micro-batch (`step_plan::micro_batches`, each a
// range of the rank's slots, checked to tile them and to keep the limit) and accumulates the
// gradients. Every run scales path (b)'s per-token loss by the plan's `loss_scale` (the loss
// tokens each rank declares in its local batch: every sequence position), path (a) by its own
// 1 / (global token count). The JSON then has micro_batches (the LLM's M; 0 without).
//
// Synthetic data: every rank draws 2-5 samples from stream `rank` of --seed (text lengths
// lognormal, median 28, clipped to [4, 160]; 0-3 images of 2-48 patches; 0-2 audio clips of
// 3-48 frames; each sub-item inserted after a random text token, in order). Pixels, frames,
// token ids and targets are drawn by the sample's origin rank from that same stream, so they are
// a deterministic function of (seed, origin rank, local index) — i.e. of the global ids — and
// both paths see exactly the same data.
//
// One step is computed twice from the same parameters:
//   (a) no balancing: every rank runs both encoders and the LLM on its own samples;
//   (b) through the orchestrator: gather_step_metadata, plan_step over the communicator
//       (vision, audio, llm, and this rank's prebuilt routes, agreed once), then pixels /
//       frames along routes.encoder_input(k), text rows (token, target, number of sub-items
//       that follow, their target) along routes.text(), encoders on the encoder ranks, outputs
//       along routes.encoder_output(k) (Π_M ∘ Π_E⁻¹), sequences assembled with llm_view, LLM
//       forward and backward, output gradients along routes.encoder_gradient(k), encoder
//       backward there. Each transfer is its route's all-to-all(s) and nothing else.
// Both paths all-reduce the parameter gradients (comm.all_gather of the gradient vector, summed
// in rank order: the communicator concept has no all-reduce) and the loss, and compare:
//   grad_max_rel_diff = max over every scalar parameter j of
//                       |a_j - b_j| / max(|a_j|, |b_j|, 1e-300)
//   loss_rel_diff     = |loss_a - loss_b| / max(|loss_a|, |loss_b|, 1e-300)
// where a and b are the all-reduced gradients (loss) of paths (a) and (b). The two paths add the
// same per-sample contributions in different groupings, so the differences are rounding only
// (~1e-15); anything wrong in the routes (a sub-item at the wrong place, a gradient back to the
// wrong encoder rank) shows up as O(1).
//
// Usage:
//   mpirun -np N mllm_training [--ranks-per-node G] [--seed S]            (MPI backend)
//   mllm_training --backend local --ranks N [--ranks-per-node G] [--seed S] (threads)
//   mllm_training --check-gradients [--seed S]       (finite-difference check, one process)
//   any of them with --split                         (segmented videos, splitting on)
//   and/or --micro-batches                           (every stage in micro-batches)
// Backend: --backend mpi|local. Without --backend: `mpi` when the program was built with MPI
// (ORCHMLLM_HAS_MPI) and started by an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// PMIX_RANK set in the environment), else `local`. --ranks (local only, default 8) is the number
// of ranks; with MPI it is the world size. --ranks-per-node G fakes nodes of G consecutive ranks
// (MPI default 0: the real nodes; local default 4). CI: `mpirun -np 8 mllm_training
// --ranks-per-node 4` (2 nodes of 4) and `mllm_training --backend local --ranks 16`, each also
// with --split and with --micro-batches.
//
// Output (rank 0): a short summary, then as the LAST line one JSON object with
// grad_max_rel_diff, loss_rel_diff, encoders (K = 2), alltoalls_per_step (3K + 1), stages
// [{name, imbalance_before, imbalance_after, ...}] (vision, audio, llm) and extras (ranks,
// nodes, samples, sub_items, tokens, moved bytes). Exit status: 0 when grad_max_rel_diff and
// loss_rel_diff are <= 1e-10 (and every routed item had the expected shape), 1 when not or on an
// error, 2 for bad arguments.
//
// Files: the model, forward and backward (mllm_training_model.hpp); the synthetic data, the stage
// declarations and the payload helpers (mllm_training_data.hpp); both paths of the step, the
// output and the command line (here).

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bench/support/args.hpp"
#include "bench/support/workload.hpp"
#include "mllm_training_data.hpp"
#include "mllm_training_model.hpp"
#include "orchmllm/orchmllm.hpp"

#if defined(ORCHMLLM_HAS_MPI)
#include <mpi.h>

#include "orchmllm/backend/mpi/communicator.hpp"
#endif

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;
using orchmllm::rank_t;
using namespace mllm_training;  // mllm_training_model.hpp, mllm_training_data.hpp

constexpr double tolerance = 1e-10;   // largest relative difference accepted between the paths
constexpr double rel_floor = 1e-300;  // the "tiny" denominator floor of the relative differences

// ---------------------------------------------------------------------------------------------
// One rank's step, both paths
// ---------------------------------------------------------------------------------------------

struct step_result {  // the same on every rank (computed from all-gathered data)
  double loss_a = 0, loss_b = 0, loss_rel_diff = 0, grad_max_rel_diff = 0;
  std::string worst_parameter;
  std::int64_t parameters = 0, samples = 0, tokens = 0;
  std::int64_t sub_items[num_encoders] = {0, 0};
  rank_t ranks = 0, nodes = 0;
  int alltoalls_per_step = 0;
  int dispatches = 0, node_wise_dispatches = 0;  // payload moves of path (b), node-wise ones
  std::vector<orchmllm::stage_report> stages;
  double plan_seconds = 0;
  bool split = false;              // --split: segmented videos, vision stage splits
  std::int64_t vision_units = 0;   // what the vision encoders ran: sub-items or pieces
  std::int64_t cut_videos = 0;     // videos encoded in two or more pieces
  std::int64_t micro_batches = 0;  // --micro-batches: the LLM stage's M
};

/// Sum over ranks, in rank order, of every rank's vector (all the same length).
template <orchmllm::communicator Comm>
std::vector<double> all_reduce_sum(Comm& comm, const std::vector<double>& mine) {
  const auto n = mine.size();
  const auto all = orchmllm::all_gather(comm, std::span<const double>(mine));
  std::vector<double> sum(n, 0.0);
  for (rank_t r = 0; r < comm.size(); ++r)
    for (std::size_t j = 0; j < n; ++j) sum[j] += all[static_cast<std::size_t>(r) * n + j];
  return sum;
}

/// Path (a) on one rank's samples: encoders and LLM locally. Returns the summed cross-entropy;
/// adds the gradients of loss · inv_n to g.
double train_local(const model& m, const std::vector<sample_data>& samples, double inv_n,
                   model& g) {
  double loss = 0;
  for (const auto& s : samples) {
    std::vector<MatrixXd> outs;
    outs.reserve(s.subs.size());
    for (const auto& d : s.subs)
      outs.push_back(encoder_forward(m, d.modality, d.input, d.segments));
    std::vector<const MatrixXd*> ptrs;
    for (const auto& o : outs) ptrs.push_back(&o);
    std::vector<MatrixXd> douts(s.subs.size());
    loss += llm_sample(m, s.text, ptrs, inv_n, g, douts);
    for (std::size_t j = 0; j < s.subs.size(); ++j)
      encoder_backward(m, s.subs[j].modality, s.subs[j].input, douts[j], g, s.subs[j].segments);
  }
  return loss;
}

template <orchmllm::communicator Comm>
step_result run_rank(Comm& comm, std::uint64_t seed, bool split, bool micro) {
  const rank_t me = comm.rank();
  const rank_t d = comm.size();
  const model m = init_model(seed);
  const auto samples = make_rank_data(seed, me, split);
  const auto decl = declarations(split, micro);

  // Metadata and plan (the same on every rank). Nodes as the communicator sees them; the
  // metadata gather checks that the topology matches the communicator.
  const orchmllm::topology topo = orchmllm::gather_topology(comm);
  const auto meta = orchmllm::gather_step_metadata(comm, decl, describe(samples), topo);
  // Plans and this rank's prebuilt route of every transfer, agreed in one small reduction.
  const auto step = orchmllm::plan_step(comm, decl, meta, topo);

  std::int64_t total_tokens = 0;  // the GLOBAL token count: every sequence position
  for (std::int64_t g = 0; g < meta.num_samples(); ++g) total_tokens += meta.sequence_length(g);
  const double inv_n = 1.0 / static_cast<double>(total_tokens);
  // Path (b) scales by the plan's per-token factor (the gradients are summed over the ranks).
  require(step.loss_tokens == total_tokens, "the plan counts another number of loss tokens");
  const double loss_scale = step.loss_scale(orchmllm::gradient_reduction::sum);

  // ---- (a) no balancing ----
  model grad_a;
  const double loss_a_local = train_local(m, samples, inv_n, grad_a);

  // ---- (b) through the orchestrator ----
  model grad_b;
  double loss_b_local = 0;
  // Every payload moves with one `dispatch` along its prebuilt route (3K + 1 per step: its
  // hops' all-to-alls, nothing else); count the schedules they used (chosen from shared data,
  // so the counts are the same on every rank).
  int dispatches = 0, node_wise = 0;
  auto move = [&](const orchmllm::route& route, const orchmllm::ragged_payload& p) {
    auto moved = orchmllm::dispatch(comm, route, p);
    ++dispatches;
    if (route.used() == orchmllm::schedule::node_wise) ++node_wise;
    return moved;
  };
  // Encoder inputs, origin → Π_E_k: this rank's modality-k sub-items in local order.
  std::vector<orchmllm::ragged_payload> enc_in(num_encoders);
  for (int k = 0; k < num_encoders; ++k) {
    orchmllm::ragged_payload p;
    p.row_bytes = input_dim(k) * static_cast<std::int64_t>(sizeof(double));
    for (const auto& s : samples)
      for (const auto& sd : s.subs)
        if (sd.modality == k) append_matrix(p, sd.input);
    enc_in[static_cast<std::size_t>(k)] = move(step.routes.encoder_input(k), p);
  }
  // Text rows, origin → Π_M.
  orchmllm::ragged_payload text_local;
  text_local.row_bytes = sizeof(text_row);
  for (const auto& s : samples) {
    const auto at = text_local.data.size();
    text_local.rows.push_back(static_cast<std::int64_t>(s.text.size()));
    text_local.data.resize(at + s.text.size() * sizeof(text_row));
    std::memcpy(text_local.data.data() + at, s.text.data(), s.text.size() * sizeof(text_row));
  }
  const auto text = move(step.routes.text(), text_local);

  // Encoders on the encoder ranks; outputs Π_E_k → Π_M (one all-to-all per encoder).
  // What this rank encodes: encoder_view lists its units in Π_E_k slot order (whole sub-items,
  // or with --split pieces of videos: a run of temporal groups each).
  std::vector<std::vector<MatrixXd>> enc_inputs(num_encoders);
  std::vector<std::vector<std::int64_t>> enc_segments(num_encoders);  // 0: not a video
  std::vector<orchmllm::ragged_payload> emb(num_encoders);
  for (int k = 0; k < num_encoders; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const auto& in = enc_in[uk];
    const auto units = step.encoder_view(meta, k, me);
    require(in.num_items() == static_cast<std::int64_t>(units.size()),
            "encoder inputs arrived for another number of units than encoder_view lists");
    orchmllm::ragged_payload out;
    out.row_bytes = hidden * static_cast<std::int64_t>(sizeof(double));
    std::int64_t row = 0;
    for (std::size_t i = 0; i < units.size(); ++i) {
      const auto& u = units[i];
      const auto rows = in.rows[i];
      require(rows == u.input_rows, "encoder input of the wrong size");
      auto x = read_matrix(in, row, rows, input_dim(k));
      row += rows;
      const std::int64_t segments = split && k == vision ? u.last_segment - u.first_segment : 0;
      const auto y = encoder_forward(m, k, x, segments);
      require(y.cols() == u.llm_tokens, "encoder output of the wrong size");
      append_matrix(out, y);
      enc_inputs[uk].push_back(std::move(x));
      enc_segments[uk].push_back(segments);
    }
    emb[uk] = move(step.routes.encoder_output(k), out);
  }

  // LLM: assemble every sequence (llm_view order), forward/backward, output gradients.
  const auto view = step.llm_view(meta, me);
  std::vector<orchmllm::ragged_payload> demb(num_encoders);
  for (int k = 0; k < num_encoders; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    // (With splitting the payload holds pieces, llm_view sub-items: compare rows then.)
    require((step.encoders[uk].pieces || emb[uk].num_items() == view.item_offsets[uk].back()) &&
                emb[uk].total_rows() == view.row_offsets[uk].back(),
            "the composed route delivered another number of sub-items or rows than llm_view says");
    demb[uk].rows = emb[uk].rows;
    demb[uk].row_bytes = emb[uk].row_bytes;
    demb[uk].data.assign(emb[uk].data.size(), std::byte{0});
  }
  {
    const auto text_off = text.byte_offsets();
    require(text.num_items() == static_cast<std::int64_t>(view.samples.size()),
            "text payload and llm_view disagree on the sample count");
    // The LLM runs its samples micro-batch by micro-batch (each one range of its slots; with
    // --micro-batches under the token limit), accumulating the gradients.
    const auto& cells = step.micro_batches.back();
    require(!micro || cells.count >= 3, "--micro-batches planned fewer than 3 micro-batches");
    const std::int64_t micro_batches = cells.count > 0 ? cells.count : 1;
    const auto all_slots = static_cast<std::int64_t>(view.samples.size());
    std::int64_t next_slot = 0;
    for (std::int64_t mb = 0; mb < micro_batches; ++mb) {
      const auto [slot_begin, slot_end] = cells.count > 0
                                              ? cells.slots(me, mb)
                                              : std::pair<std::int64_t, std::int64_t>{0, all_slots};
      require(slot_begin == next_slot, "the micro-batches do not tile the rank's samples in order");
      next_slot = slot_end;
      std::int64_t mb_tokens = 0;
      for (auto slot = slot_begin; slot < slot_end; ++slot) {
        const auto s = static_cast<std::size_t>(slot);
        mb_tokens += meta.sequence_length(view.samples[s]);
        std::vector<text_row> rows(static_cast<std::size_t>(text.rows[s]));
        std::memcpy(rows.data(), text.data.data() + text_off[s], rows.size() * sizeof(text_row));
        require(static_cast<std::int64_t>(rows.size()) ==
                    meta.text_tokens[static_cast<std::size_t>(view.samples[s])],
                "text of the wrong length");
        std::vector<MatrixXd> subs;
        std::vector<std::pair<std::size_t, std::int64_t>> where;  // (modality, first row)
        for (auto j = view.sub_item_offsets[s]; j < view.sub_item_offsets[s + 1]; ++j) {
          const auto [k, idx] = view.sub_items[static_cast<std::size_t>(j)];
          const auto uk = static_cast<std::size_t>(k);
          const auto first = view.row_offsets[uk][static_cast<std::size_t>(idx)];
          const auto rows_k = view.row_offsets[uk][static_cast<std::size_t>(idx) + 1] - first;
          require(step.encoders[uk].pieces || rows_k == emb[uk].rows[static_cast<std::size_t>(idx)],
                  "a received encoder output has another row count than llm_view says");
          subs.push_back(read_matrix(emb[uk], first, rows_k, hidden));
          where.emplace_back(uk, first);
        }
        std::vector<const MatrixXd*> ptrs;
        for (const auto& o : subs) ptrs.push_back(&o);
        std::vector<MatrixXd> dsubs(subs.size());
        loss_b_local += llm_sample(m, rows, ptrs, loss_scale, grad_b, dsubs);
        for (std::size_t j = 0; j < subs.size(); ++j)
          write_matrix(demb[where[j].first], where[j].second, dsubs[j]);
      }
      require(cells.count == 0 || mb_tokens <= micro_batch_tokens,
              "a micro-batch above the token limit");
    }
    require(next_slot == all_slots, "the micro-batches do not cover the rank's samples");
  }

  // Output gradients Π_M → Π_E_k, encoder backward where the encoder ran.
  for (int k = 0; k < num_encoders; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const auto back = move(step.routes.encoder_gradient(k), demb[uk]);
    require(back.num_items() == static_cast<std::int64_t>(enc_inputs[uk].size()),
            "gradients came back to another rank than the encoder's");
    std::int64_t row = 0;
    for (std::size_t i = 0; i < enc_inputs[uk].size(); ++i) {
      const auto rows = back.rows[i];
      const auto& x = enc_inputs[uk][i];
      require(rows * (k == vision ? patches_per_token : frames_per_token) == x.cols(),
              "an output gradient of the wrong size");
      encoder_backward(m, k, x, read_matrix(back, row, rows, hidden), grad_b, enc_segments[uk][i]);
      row += rows;
    }
  }

  // ---- all-reduce and compare ----
  const auto ga = all_reduce_sum(comm, grad_a.flatten());
  const auto gb = all_reduce_sum(comm, grad_b.flatten());
  const auto losses = all_reduce_sum(comm, std::vector<double>{loss_a_local, loss_b_local});

  step_result r;
  r.loss_a = losses[0] * inv_n;
  r.loss_b = losses[1] * inv_n;
  auto rel = [](double a, double b) {
    return std::abs(a - b) / std::max({std::abs(a), std::abs(b), rel_floor});
  };
  r.loss_rel_diff = rel(r.loss_a, r.loss_b);
  std::size_t worst = 0;
  for (std::size_t j = 0; j < ga.size(); ++j) {
    const double e = rel(ga[j], gb[j]);
    if (!(e <= r.grad_max_rel_diff)) {  // NaN-aware: a NaN difference is the worst
      r.grad_max_rel_diff = std::isnan(e) ? INFINITY : e;
      worst = j;
    }
  }
  {
    std::size_t at = 0;
    model::visit(grad_a, [&](const char* name, const MatrixXd& x) {
      const auto n = static_cast<std::size_t>(x.size());
      if (worst >= at && worst < at + n)
        r.worst_parameter = name + std::string("[") + std::to_string(worst - at) + "]";
      at += n;
    });
  }
  r.parameters = static_cast<std::int64_t>(ga.size());
  r.samples = meta.num_samples();
  r.tokens = total_tokens;
  for (int k = 0; k < num_encoders; ++k)
    r.sub_items[k] = meta.modalities[static_cast<std::size_t>(k)].size();
  r.ranks = d;
  r.nodes = topo.num_nodes();
  r.alltoalls_per_step = step.alltoalls_per_step();
  r.dispatches = dispatches;
  r.node_wise_dispatches = node_wise;
  r.stages = step.stages;
  r.plan_seconds = step.plan_seconds;
  r.split = split;
  r.micro_batches = step.micro_batches.back().count;
  const auto& vis_routes = step.encoders[static_cast<std::size_t>(vision)];
  r.vision_units = vis_routes.units().num_items();
  if (vis_routes.pieces)
    for (std::int64_t g = 0; g < vis_routes.layout.num_items(); ++g)
      if (vis_routes.pieces->num_pieces_of(g) > 1) ++r.cut_videos;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

bool passed(const step_result& r) {
  return r.grad_max_rel_diff <= tolerance && r.loss_rel_diff <= tolerance;
}

void print(const step_result& r, const char* backend, std::uint64_t seed) {
  std::printf("OrchMLLM end-to-end training step: %d ranks on %d nodes (%s backend), seed %llu\n",
              r.ranks, r.nodes, backend, static_cast<unsigned long long>(seed));
  std::printf(
      "global batch: %lld samples, %lld images, %lld audio clips, %lld tokens; %lld "
      "parameters\n",
      static_cast<long long>(r.samples), static_cast<long long>(r.sub_items[vision]),
      static_cast<long long>(r.sub_items[audio]), static_cast<long long>(r.tokens),
      static_cast<long long>(r.parameters));
  std::printf("%-7s %-20s %9s %9s %12s %12s\n", "stage", "balancer", "imb.bef", "imb.aft",
              "moved B", "inter-node B");
  for (const auto& s : r.stages)
    std::printf("%-7s %-20s %9.4f %9.4f %12lld %12lld\n", s.name.c_str(),
                std::string(s.used).c_str(), s.imbalance_before, s.imbalance_after,
                static_cast<long long>(s.moved_bytes), static_cast<long long>(s.inter_node_bytes));
  std::printf("loss (a) no balancing %.17g, (b) orchestrated %.17g\n", r.loss_a, r.loss_b);
  std::printf("max relative gradient difference %.3e (at %s), loss %.3e: %s (tolerance %.0e)\n",
              r.grad_max_rel_diff, r.worst_parameter.c_str(), r.loss_rel_diff,
              passed(r) ? "same gradients" : "MISMATCH", tolerance);
  std::int64_t moved = 0, inter = 0;
  for (const auto& s : r.stages) {
    moved += s.moved_bytes;
    inter += s.inter_node_bytes;
  }
  std::printf(
      "{\"example\":\"mllm_training\",\"backend\":\"%s\",\"ranks\":%d,\"nodes\":%d,"
      "\"seed\":%llu,\"samples\":%lld,\"sub_items\":{\"vision\":%lld,\"audio\":%lld},"
      "\"tokens\":%lld,\"parameters\":%lld,\"encoders\":%d,\"alltoalls_per_step\":%d,"
      "\"loss\":%.17g,\"loss_rel_diff\":%.6e,\"grad_max_rel_diff\":%.6e,"
      "\"tolerance\":%.1e,\"moved_bytes\":%lld,\"inter_node_bytes\":%lld,"
      "\"dispatches\":%d,\"node_wise_dispatches\":%d,\"plan_ms\":%.3f,\"split\":%s,"
      "\"vision_units\":%lld,\"cut_videos\":%lld,\"micro_batches\":%lld,\"stages\":[",
      backend, r.ranks, r.nodes, static_cast<unsigned long long>(seed),
      static_cast<long long>(r.samples), static_cast<long long>(r.sub_items[vision]),
      static_cast<long long>(r.sub_items[audio]), static_cast<long long>(r.tokens),
      static_cast<long long>(r.parameters), num_encoders, r.alltoalls_per_step, r.loss_b,
      r.loss_rel_diff, r.grad_max_rel_diff, tolerance, static_cast<long long>(moved),
      static_cast<long long>(inter), r.dispatches, r.node_wise_dispatches, 1e3 * r.plan_seconds,
      r.split ? "true" : "false", static_cast<long long>(r.vision_units),
      static_cast<long long>(r.cut_videos), static_cast<long long>(r.micro_batches));
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    const auto& s = r.stages[i];
    std::printf(
        "%s{\"name\":\"%s\",\"balancer\":\"%s\",\"imbalance_before\":%.6f,"
        "\"imbalance_after\":%.6f,\"max_tokens_before\":%lld,\"max_tokens_after\":%lld,"
        "\"moved_bytes\":%lld,\"inter_node_bytes\":%lld}",
        i == 0 ? "" : ",", s.name.c_str(), std::string(s.used).c_str(), s.imbalance_before,
        s.imbalance_after, static_cast<long long>(s.max_tokens_before),
        static_cast<long long>(s.max_tokens_after), static_cast<long long>(s.moved_bytes),
        static_cast<long long>(s.inter_node_bytes));
  }
  std::printf("],\"ok\":%s}\n", passed(r) ? "true" : "false");
  std::fflush(stdout);
}

/// --check-gradients: central finite differences of the path (a) loss on ranks 0 and 1's samples
/// (one process) against the hand-written backward, for every parameter the loss depends on
/// (position embeddings beyond the longest sequence are skipped: their gradient is exactly 0).
/// Error of parameter j: |fd_j - g_j| / max(|fd_j|, |g_j|, 1e-4); must be <= 1e-5 everywhere.
/// Prints one JSON line; returns the exit status.
int check_gradients(std::uint64_t seed, bool split) {
  std::vector<sample_data> samples = make_rank_data(seed, 0, split);
  for (auto& s : make_rank_data(seed, 1, split)) samples.push_back(std::move(s));
  std::int64_t tokens = 0, longest = 0, subs[num_encoders] = {0, 0};
  for (const auto& s : samples) {
    for (const auto& d : s.subs) ++subs[d.modality];
    std::int64_t len = static_cast<std::int64_t>(s.text.size());
    for (const auto& d : s.subs) len += d.tokens();
    tokens += len;
    longest = std::max(longest, len);
  }
  const double inv_n = 1.0 / static_cast<double>(tokens);
  model m = init_model(seed);
  model g;
  train_local(m, samples, inv_n, g);
  const auto analytic = g.flatten();
  auto loss_at = [&](const model& p) {
    model scratch;
    return train_local(p, samples, inv_n, scratch) * inv_n;
  };
  // Central differences with step 1e-5: truncation error ~1e-10 · |third derivative|, rounding
  // ~1e-16 · loss / 1e-5 ≈ 1e-10; hence the 1e-4 floor on the denominator (gradients below it
  // are checked to ~1e-10 absolute).
  constexpr double eps = 1e-5;
  constexpr double grad_floor = 1e-4;
  double worst = 0, worst_abs = 0, worst_value = 0;
  std::string worst_name;
  std::int64_t checked = 0;
  std::size_t at = 0;
  model::visit(m, [&](const char* name, MatrixXd& x) {
    for (Eigen::Index i = 0; i < x.size(); ++i, ++at) {
      if (std::string_view(name) == "pos_emb" && i / hidden >= longest) continue;
      const double keep = x.data()[i];
      x.data()[i] = keep + eps;
      const double up = loss_at(m);
      x.data()[i] = keep - eps;
      const double down = loss_at(m);
      x.data()[i] = keep;
      const double fd = (up - down) / (2 * eps);
      const double abs_err = std::abs(fd - analytic[at]);
      const double e = abs_err / std::max({std::abs(fd), std::abs(analytic[at]), grad_floor});
      ++checked;
      worst_abs = std::max(worst_abs, abs_err);
      if (!(e <= worst)) {
        worst = e;
        worst_name = name + std::string("[") + std::to_string(i) + "]";
        worst_value = analytic[at];
      }
    }
  });
  const bool ok = worst <= 1e-5;
  std::printf(
      "{\"check\":\"gradients\",\"samples\":%zu,\"images\":%lld,\"audio_clips\":%lld,"
      "\"tokens\":%lld,\"checked\":%lld,"
      "\"max_rel_error\":%.3e,\"worst\":\"%s\",\"worst_gradient\":%.6e,"
      "\"max_abs_error\":%.3e,\"ok\":%s}\n",
      samples.size(), static_cast<long long>(subs[vision]), static_cast<long long>(subs[audio]),
      static_cast<long long>(tokens), static_cast<long long>(checked), worst, worst_name.c_str(),
      worst_value, worst_abs, ok ? "true" : "false");
  return ok ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

struct args {
  std::string backend;  // "", "local" or "mpi"
  rank_t ranks = 8;
  bool ranks_given = false;
  std::optional<rank_t> ranks_per_node;
  std::uint64_t seed = 1;
  bool check = false;
  bool split = false;
  bool micro = false;
};

constexpr const char* usage_text =
    "usage: mpirun -np N mllm_training [--ranks-per-node G] [--seed S]\n"
    "       mllm_training --backend local --ranks N [--ranks-per-node G] [--seed S]\n"
    "       mllm_training --check-gradients [--seed S]\n"
    "       (any of them with --split: segmented videos, split across ranks;\n"
    "        --micro-batches: every stage in micro-batches)";

using orchmllm::tool::flag_spec;

/// The flags, for the shared parser (bench/support/args.hpp).
const std::vector<flag_spec>& flags() {
  static const std::vector<flag_spec> specs = {
      {"backend", "local|mpi", "communicator; default mpi under an MPI launcher, else local",
       false},
      {"ranks", "N", "ranks of the local backend, 1 to 4096; default 8", false},
      {"ranks-per-node", "G", "fake nodes of G consecutive ranks; default 0 (mpi), 4 (local)",
       false},
      {"seed", "S", "seed of the synthetic data, >= 0; default 1", false},
      {"check-gradients", "", "finite-difference check of the gradients, one process", false},
      {"split", "", "videos of temporal groups, per-group attention, vision stage splits", false},
      {"micro-batches", "",
       "the LLM in micro-batches under a token limit (per micro-batch sync), the encoders in two "
       "(per step)",
       false},
  };
  return specs;
}

/// Parses argv; returns an error message, "help", or "".
std::string parse(int argc, char** argv, args& a) {
  const std::vector<std::string> words(argv + 1, argv + argc);
  if (orchmllm::tool::wants_help(words)) return "help";
  try {
    const auto p = orchmllm::tool::parse_flags(flags(), words);
    a.check = p.has("check-gradients");
    a.split = p.has("split");
    a.micro = p.has("micro-batches");
    if (const auto backend = p.get("backend")) {
      if (*backend != "local" && *backend != "mpi")
        return "--backend must be local or mpi, not " + orchmllm::tool::quote_text(*backend);
      a.backend = *backend;
    }
    a.ranks_given = p.has("ranks");
    a.ranks = static_cast<rank_t>(p.get_int("ranks", a.ranks, 1, 4096));
    if (p.has("ranks-per-node"))
      a.ranks_per_node = static_cast<rank_t>(p.require_int("ranks-per-node", 0, 1 << 24));
    a.seed = static_cast<std::uint64_t>(p.get_int("seed", 1, 0));
  } catch (const orchmllm::tool::usage_error& e) {
    return e.what();
  }
  return "";
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

int run_local(const args& a) {
  std::optional<step_result> result;
  std::mutex mu;
  orchmllm::local::run_options opts;
  opts.ranks_per_node = a.ranks_per_node.value_or(4);
  orchmllm::local::run(
      a.ranks,
      [&](orchmllm::local::communicator& comm) {
        auto r = run_rank(comm, a.seed, a.split, a.micro);
        if (comm.rank() == 0) {
          std::lock_guard lock(mu);
          result = std::move(r);
        }
      },
      opts);
  print(*result, "local", a.seed);
  return passed(*result) ? 0 : 1;
}

#if defined(ORCHMLLM_HAS_MPI)
int run_mpi(int argc, char** argv, const args& a) {
  orchmllm::mpi::environment env(&argc, &argv);
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (a.ranks_given && a.ranks != world_size) {
    if (world_rank == 0)
      std::fprintf(stderr, "mllm_training: --ranks %d but the MPI world has %d ranks\n", a.ranks,
                   world_size);
    return 2;
  }
  try {
    orchmllm::mpi::communicator::options copts;
    copts.ranks_per_node = a.ranks_per_node.value_or(0);
    orchmllm::mpi::communicator comm(MPI_COMM_WORLD, copts);
    const auto r = run_rank(comm, a.seed, a.split, a.micro);  // identical on every rank
    if (comm.rank() == 0) print(r, "mpi", a.seed);
    return passed(r) ? 0 : 1;
  } catch (const orchmllm::error& e) {
    // The library raises its errors on every rank together (collective agreement).
    if (world_rank == 0) std::fprintf(stderr, "mllm_training: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mllm_training: rank %d: %s\n", world_rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  args a;
  if (const auto problem = parse(argc, argv, a); !problem.empty()) {
    if (problem == "help") {
      std::printf("%s\n", usage_text);
      return 0;
    }
    std::fprintf(stderr, "mllm_training: %s\n%s\n", problem.c_str(), usage_text);
    return 2;
  }
  try {
    if (a.check) return check_gradients(a.seed, a.split);
    std::string backend = a.backend;
#if defined(ORCHMLLM_HAS_MPI)
    if (backend.empty()) backend = launched_by_mpi() ? "mpi" : "local";
    if (backend == "mpi") return run_mpi(argc, argv, a);
#else
    if (backend == "mpi") {
      std::fprintf(stderr, "mllm_training: built without MPI (ORCHMLLM_ENABLE_MPI=OFF)\n");
      return 2;
    }
    (void)launched_by_mpi;
#endif
    return run_local(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mllm_training: %s\n", e.what());
    return 1;
  }
}
