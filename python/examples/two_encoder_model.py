"""The model, data and harness that python/examples/two_encoder_training.py and
two_encoder_step.py share: a two-encoder multimodal model (vision + audio + tiny LLM), the ragged
batches every rank samples, and the run that trains it on CPU ranks (gloo) with and without
balancing and fails unless the losses and all-reduced gradients agree (float64: <= 1e-10
relative). Each example supplies only its training step, which is where orchmllm comes in.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

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


def step_inputs(rank: int, step: int
                ) -> Tuple[Dict[str, np.ndarray], torch.Tensor, torch.Tensor, torch.Tensor,
                           torch.Generator]:
    """Rank ``rank``'s batch of step ``step``, its pixel rows, sound rows and text token ids
    (in local order), and the generator they were drawn from (an example may draw more)."""
    b = sample_batch(rank, step)
    g = torch.Generator().manual_seed(int(1000 * step + rank))
    pixels = torch.randn(int(b["patches"].sum()), PATCH, generator=g, dtype=torch.float64)
    sound = torch.randn(int(b["frames"].sum()), FRAME, generator=g, dtype=torch.float64)
    tokens = torch.randint(VOCAB, (int(b["text"].sum()),), generator=g)
    return b, pixels, sound, tokens, g


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


# A training step: (model, rank, step, balanced, report) -> this rank's share of the global loss;
# with balancing it fills report[stage] = (imbalance before, imbalance after).
TrainStep = Callable[[Model, int, int, bool, Dict[str, Tuple[float, float]]], torch.Tensor]


def run(model: Model, rank: int, steps: int, balanced: bool,
        train_step: TrainStep) -> List[List[torch.Tensor]]:
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


def worker(rank: int, world: int, steps: int, store: str, train_step: TrainStep) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = Model().double()
        plain = run(copy.deepcopy(model), rank, steps, False, train_step)
        balanced = run(model, rank, steps, True, train_step)
        worst = max(float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))
                    for p, q in zip(plain, balanced) for a, b in zip(q, p))
        if rank == 0:
            print(f"losses and gradients, balanced vs plain: max relative difference {worst:.2e}")
        if not worst <= 1e-10:
            raise RuntimeError(f"rank {rank}: balanced and plain runs differ by {worst:.2e}")
    finally:
        dist.destroy_process_group()


def main(description: str, train_step: TrainStep,
         variants: Optional[Dict[str, Tuple[str, TrainStep]]] = None) -> None:
    """Parses --ranks / --steps and trains on that many gloo ranks, plain and balanced.
    variants: flag -> (help, training step): the flag trains with that step instead."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    for flag, (text, _) in (variants or {}).items():
        parser.add_argument(flag, action="store_true", help=text)
    args = parser.parse_args()
    for flag, (_, step) in (variants or {}).items():
        if getattr(args, flag.lstrip("-").replace("-", "_")):
            train_step = step
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args.ranks, args.steps, f"{tmp}/store", train_step),
                 nprocs=args.ranks)
    print("OK")
