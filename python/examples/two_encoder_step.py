"""A two-encoder multimodal model (vision + audio + tiny LLM) trained on 4 CPU ranks with and
without orchmllm batch post-balancing, planned as one step (orchmllm.plan_step); the two runs
must give the same losses and gradients. two_encoder_training.py is the same model balanced
stage by stage with orchmllm.balance (encoder outputs return to their sample's rank first).

Every step, every rank samples a ragged batch (samples with 0-2 images, 0-1 audio clips, text).
With balancing, one call (orchmllm.torch.plan_step_dispatchers) all-gathers the step's metadata
and plans every stage with its own cost model: the images' patches and the audio frames are
dispatched to the balanced encoder arrangements, encoded there, and their outputs go straight to
their sample's rank of the balanced LLM arrangement (the composed route), with the text
embeddings; each LLM rank assembles its samples' sequences from the step's llm_view. Gradients
flow back along the inverse routes. Loss = sum of squared errors / global token count, so after
the DDP-style gradient all-reduce both runs agree (float64: <= 1e-10 relative).

    python two_encoder_step.py [--ranks 4] [--steps 3] [--micro-batches]

With --micro-batches the LLM runs micro-batches under a token cap, as FSDP or ZeRO-3 trainers do
(every micro-batch synchronises the ranks): the plan puts every sample in a cell (rank,
micro-batch) balanced per micro-batch, each rank receives its samples grouped by micro-batch,
and every micro-batch's summed squared error is scaled by the step's loss_scale (1 / the
step's loss tokens, for the summing all-reduce here), the gradients still those of the plain
run's per-token mean.

Exits non-zero on a mismatch. Needs torch and the orchmllm package (docs/python.md). The model,
the batches and the plain-vs-balanced harness are in two_encoder_model.py.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import torch

import orchmllm
import orchmllm.torch as otorch
from two_encoder_model import (COST, DIM, FRAME, PATCH, Model, main, sequence_layout,
                               step_inputs)


# The step's stages, declared once (the same on every rank): each encoder and the LLM balanced
# with its own cost model; row widths in bytes (float64 rows), for the node-aware mapping.
DECL = orchmllm.StageDeclarations(
    [orchmllm.EncoderStage("vision", COST["vision"], input_row_bytes=8 * PATCH,
                           output_row_bytes=8 * DIM),
     orchmllm.EncoderStage("audio", COST["audio"], input_row_bytes=8 * FRAME,
                           output_row_bytes=8 * DIM)],
    orchmllm.LLMStage(cost=COST["llm"], text_row_bytes=8 * DIM))


# With --micro-batches: the same stages, the LLM's samples in at least two micro-batches of at
# most MICRO_TOKENS sequence rows (at least the longest sequence a rank can sample here).
MICRO_TOKENS = 160
MICRO_DECL = orchmllm.StageDeclarations(
    DECL.encoders, orchmllm.LLMStage(cost=COST["llm"], text_row_bytes=8 * DIM,
                                     max_tokens_per_micro_batch=MICRO_TOKENS,
                                     min_micro_batches=2))


def local_batch(b: Dict[str, np.ndarray]) -> orchmllm.LocalBatch:
    """The rank's batch for the planner: sub-items sample by sample, its images then its audio
    (within a modality, the order of the pixel / sound rows). An image of p patches is encoded
    from p rows into p LLM tokens; an audio clip likewise in frames. Every row of a sequence
    carries a target, so a sample's loss tokens are its sequence rows."""
    parent = np.concatenate([b["image_sample"], b["audio_sample"]])
    order = np.argsort(parent, kind="stable")
    modality = np.repeat([0, 1], [len(b["patches"]), len(b["frames"])])[order]
    rows = np.concatenate([b["patches"], b["frames"]])[order]
    return orchmllm.LocalBatch(b["text"], modality, parent[order], rows, rows, rows,
                               loss_tokens=sequence_layout(b)[0])


def target_of(step: int, sample: int, rows: int) -> torch.Tensor:
    """The regression target of a sample (by global id): the same wherever it is computed."""
    g = torch.Generator().manual_seed(100_000 * step + sample)
    return torch.randn(rows, DIM, generator=g, dtype=torch.float64)


def targets(step: int, samples: np.ndarray, rows: np.ndarray) -> torch.Tensor:
    parts = [target_of(step, int(g), int(n)) for g, n in zip(samples, rows)]
    return torch.cat(parts) if parts else torch.zeros(0, DIM, dtype=torch.float64)


def balanced_sequences(model: Model, b: Dict[str, np.ndarray], pixels: torch.Tensor,
                       sound: torch.Tensor, tokens: torch.Tensor,
                       report: Dict[str, Tuple[float, float]],
                       decl: orchmllm.StageDeclarations = DECL
                       ) -> Tuple[torch.Tensor, np.ndarray, otorch.StepDispatchers]:
    """With balancing: the LLM rank's sequences (rows and cu_seqlens) and the step's
    dispatchers. One call plans the step (metadata all-gather + plan_step); the inputs go to
    the balanced encoder ranks, the outputs straight to their samples' LLM ranks (the composed
    route; gradients come back along its inverse), the text embeddings along Π_M."""
    sd = otorch.plan_step_dispatchers(decl, local_batch(b))
    report.update({s["name"]: (float(s["imbalance_before"]), float(s["imbalance_after"]))
                   for s in sd.step.stages()})
    outs = []
    for k, (block, x) in enumerate(((model.vision, pixels), (model.audio, sound))):
        units = sd.encoder_views[k].input_rows.tolist()   # the items this rank encodes
        outs.append(sd.encoder_outputs[k].dispatch(block(sd.encoder_inputs[k].dispatch(x), units)))
    text = sd.text.dispatch(model.embed(tokens))
    # Each sample's rows (its sub-items in order, then its text) from one cat, so that every
    # exchange is in the loss's graph on every rank (also with 0 rows here; see docs).
    seq, cu = sd.llm_input(outs, text, text_first=False)
    return seq, cu, sd


def train_step(model: Model, rank: int, step: int, balanced: bool,
               report: Dict[str, Tuple[float, float]]) -> torch.Tensor:
    b, pixels, sound, tokens, _ = step_inputs(rank, step)
    if balanced:
        seq, cu, sd = balanced_sequences(model, b, pixels, sound, tokens, report)
        samples, seq_rows = sd.llm_view.samples, np.diff(cu)
        global_tokens = sd.step.loss_tokens
    else:
        vision = model.vision(pixels, b["patches"].tolist())
        audio = model.audio(sound, b["frames"].tolist())
        seq_rows, order = sequence_layout(b)
        seq = torch.cat([vision, audio, model.embed(tokens)])[torch.from_numpy(order)]
        offsets, lengths = otorch.gather_lengths(seq_rows)
        samples, global_tokens = offsets[rank] + np.arange(len(seq_rows)), int(lengths.sum())
    out = model.llm(seq, seq_rows.tolist())
    return ((out - targets(step, samples, seq_rows)) ** 2).sum() / global_tokens


def micro_batch_step(model: Model, rank: int, step: int, balanced: bool,
                     report: Dict[str, Tuple[float, float]]) -> torch.Tensor:
    """--micro-batches: the balanced LLM runs this rank's micro-batches one after another."""
    if not balanced:
        return train_step(model, rank, step, False, report)
    b, pixels, sound, tokens, _ = step_inputs(rank, step)
    seq, cu, sd = balanced_sequences(model, b, pixels, sound, tokens, report, MICRO_DECL)
    llm = sd.step.num_encoders
    figures = sd.step.stages()[llm]  # the step's cost Σ_m max_r over its bound, before -> after
    bound = max(float(figures["objective_lower_bound"]), 1e-300)
    report[f"llm per micro-batch (M = {figures['micro_batches']}, cost / bound)"] = (
        float(figures["objective_before"]) / bound, float(figures["objective"]) / bound)
    scale = sd.step.loss_scale("sum")  # gradients summed over ranks: 1 / the step's loss tokens
    loss = seq.new_zeros(())
    for m, (rows, cu_m) in enumerate(sd.llm_micro_batches(seq, cu)):
        if rows.shape[0] > MICRO_TOKENS:
            raise RuntimeError(f"micro-batch {m} of rank {rank} has {rows.shape[0]} rows")
        first, last = sd.step.micro_batch(llm, rank, m)
        out = model.llm(rows, np.diff(cu_m).tolist())
        target = targets(step, sd.llm_view.samples[first:last], np.diff(cu_m))
        loss = loss + ((out - target) ** 2).sum() * scale
    return loss


if __name__ == "__main__":
    main(__doc__.splitlines()[0], train_step,
         {"--micro-batches": ("the LLM in micro-batches under a token cap", micro_batch_step)})
