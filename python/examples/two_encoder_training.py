"""A two-encoder multimodal model (vision + audio + tiny LLM) trained on 4 CPU ranks with and
without orchmllm batch post-balancing; the two runs must give the same losses and gradients.

Every step, every rank samples a ragged batch (samples with 0-2 images, 0-1 audio clips, text).
With balancing, each stage is planned with its own cost model from the all-gathered sizes:
the images' patches and the audio frames are dispatched to the balanced encoder arrangements,
encoded there, and combined back to their sample's rank; the assembled sequences (and their
targets, along the same Dispatcher) are dispatched to the balanced LLM arrangement. Gradients
flow back along the inverse routes. Loss = sum of squared errors / global token count, so after
the DDP-style gradient all-reduce both runs agree (float64: <= 1e-10 relative).

    python two_encoder_training.py [--ranks 4] [--steps 3]

Exits non-zero on a mismatch. Needs torch and the orchmllm package (docs/python.md). The model,
the batches and the plain-vs-balanced harness are in two_encoder_model.py (shared with
two_encoder_step.py); this file holds the training step, where orchmllm comes in.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import torch

import orchmllm
import orchmllm.torch as otorch
from two_encoder_model import COST, Block, Model, main, sequence_layout, step_inputs


def encode(block: Block, x: torch.Tensor, local_rows: np.ndarray, stage: str, balanced: bool,
           rank: int, report: Dict[str, Tuple[float, float]]) -> torch.Tensor:
    """The encoder's output for this rank's items, in local slot order."""
    if not balanced:
        return block(x, local_rows.tolist())
    offsets, rows = otorch.gather_lengths(local_rows)    # the metadata all-gather
    plan = orchmllm.balance(offsets, rows, cost=COST[stage])  # rows = patches / frames
    stats = plan.statistics()
    report[stage] = (float(stats["imbalance_before"]), float(stats["imbalance_after"]))
    d = otorch.Dispatcher(plan, rank, rows)               # built once, used both ways
    return d.combine(block(d.dispatch(x), rows[d.output_items].tolist()))


def train_step(model: Model, rank: int, step: int, balanced: bool,
               report: Dict[str, Tuple[float, float]]) -> torch.Tensor:
    b, pixels, sound, tokens, g = step_inputs(rank, step)
    vision = encode(model.vision, pixels, b["patches"], "vision", balanced, rank, report)
    audio = encode(model.audio, sound, b["frames"], "audio", balanced, rank, report)

    # Each sample's sequence: its images' patch embeddings, its audio frames, its text, taken
    # from one cat, so that every encoder output is in the loss's graph on every rank (the
    # backward's collectives must run on all ranks, in the same order, even with 0 rows here).
    seq_rows, order = sequence_layout(b)
    seq = torch.cat([vision, audio, model.embed(tokens)])[torch.from_numpy(order)]
    target = torch.randn(seq.shape, generator=g, dtype=torch.float64)

    offsets, lengths = otorch.gather_lengths(seq_rows)
    global_tokens = float(lengths.sum())
    if balanced:
        plan = orchmllm.balance(offsets, lengths, cost=COST["llm"])
        stats = plan.statistics()
        report["llm"] = (float(stats["imbalance_before"]), float(stats["imbalance_after"]))
        d = otorch.Dispatcher(plan, rank, lengths)
        seq, target, seq_rows = d.dispatch(seq), d.dispatch(target), lengths[d.output_items]
    out = model.llm(seq, seq_rows.tolist())
    return ((out - target) ** 2).sum() / global_tokens


if __name__ == "__main__":
    main(__doc__.splitlines()[0], train_step)
