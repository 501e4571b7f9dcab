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

Exits non-zero on a mismatch. Needs torch and the orchmllm package (docs/python.md).
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from typing import Dict, List, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import orchmllm
import orchmllm.torch as otorch

DIM, PATCH, FRAME, VOCAB = 16, 8, 6, 64
COST = {"vision": "quadratic:1,0.02", "audio": "quadratic:1,0.01", "llm": "quadratic:1,0.005"}


class Block(torch.nn.Module):
    """Input projection and one attention layer within each item (its rows attend to each
    other): an encoder, or the LLM over a sample's sequence."""

    def __init__(self, d_in: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(d_in, DIM)
        self.qkv = torch.nn.Linear(DIM, 3 * DIM)
        self.out = torch.nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor, rows: List[int]) -> torch.Tensor:
        h = torch.tanh(self.proj(x))
        outs = []
        for item in torch.split(h, rows):
            q, k, v = self.qkv(item).chunk(3, dim=-1)
            outs.append(item + self.out(torch.softmax(q @ k.T / DIM ** 0.5, dim=-1) @ v))
        return torch.cat(outs) if outs else h


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.vision, self.audio, self.llm = Block(PATCH), Block(FRAME), Block(DIM)
        self.embed = torch.nn.Embedding(VOCAB, DIM)


def sample_batch(rank: int, step: int) -> Dict[str, np.ndarray]:
    """A ragged batch; rank r's images are larger (so the vision stage is imbalanced)."""
    rng = np.random.default_rng([step, rank])
    n = int(rng.integers(1, 5))
    images = [rng.integers(4, 12 + 12 * rank, size=rng.integers(0, 3)) for _ in range(n)]
    audio = [rng.integers(8, 40, size=rng.integers(0, 2)) for _ in range(n)]
    return {"image_sample": np.repeat(np.arange(n), [len(i) for i in images]),
            "patches": np.concatenate(images).astype(np.int64),
            "audio_sample": np.repeat(np.arange(n), [len(a) for a in audio]),
            "frames": np.concatenate(audio).astype(np.int64),
            "text": rng.integers(2, 20, size=n).astype(np.int64)}


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


def sequence_layout(b: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """Rows per sample, and the row indices into cat([image rows, audio rows, text rows]) that
    put each sample's rows together (images, audio, text)."""
    n = len(b["text"])
    parts: List[List[np.ndarray]] = [[] for _ in range(n)]
    base = 0
    for rows, owner in ((b["patches"], b["image_sample"]), (b["frames"], b["audio_sample"]),
                        (b["text"], np.arange(n))):
        starts = base + np.cumsum(rows) - rows
        for start, count, s in zip(starts, rows, owner):
            parts[s].append(np.arange(start, start + count))
        base += int(rows.sum())
    order = [np.concatenate(p) for p in parts]
    return np.array([len(o) for o in order], np.int64), np.concatenate(order).astype(np.int64)


def train_step(model: Model, rank: int, step: int, balanced: bool,
               report: Dict[str, Tuple[float, float]]) -> torch.Tensor:
    b = sample_batch(rank, step)
    g = torch.Generator().manual_seed(int(1000 * step + rank))
    pixels = torch.randn(int(b["patches"].sum()), PATCH, generator=g, dtype=torch.float64)
    sound = torch.randn(int(b["frames"].sum()), FRAME, generator=g, dtype=torch.float64)
    tokens = torch.randint(VOCAB, (int(b["text"].sum()),), generator=g)
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


def run(model: Model, rank: int, steps: int, balanced: bool) -> List[List[torch.Tensor]]:
    """Trains ``steps`` SGD steps; returns per step the global loss and the reduced grads."""
    history = []
    for step in range(steps):
        report: Dict[str, Tuple[float, float]] = {}
        model.zero_grad()
        loss = train_step(model, rank, step, balanced, report)
        loss.backward()
        for p in model.parameters():                     # DDP-style gradient all-reduce
            if p.grad is None:                           # unused here (e.g. no audio)
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
        total = loss.detach().clone()
        dist.all_reduce(total)
        history.append([total] + [p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        if balanced and rank == 0:
            print(f"step {step}: loss {total.item():.6f}; imbalance (max/mean load) before ->"
                  " after: " + ", ".join(f"{k} {a:.3f} -> {b:.3f}" for k, (a, b) in report.items()))
    return history


def worker(rank: int, world: int, steps: int, store: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = Model().double()
        plain = run(copy.deepcopy(model), rank, steps, balanced=False)
        balanced = run(model, rank, steps, balanced=True)
        worst = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))
                    for p, q in zip(plain, balanced) for a, b in zip(q, p))
        if rank == 0:
            print(f"losses and gradients, balanced vs plain: max relative difference {worst:.2e}")
        if not worst <= 1e-10:
            raise RuntimeError(f"rank {rank}: balanced and plain runs differ by {worst:.2e}")
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args.ranks, args.steps, f"{tmp}/store"), nprocs=args.ranks)
    print("OK")


if __name__ == "__main__":
    main()
