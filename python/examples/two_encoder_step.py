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

    python two_encoder_step.py [--ranks 4] [--steps 3]

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


# The step's stages, declared once (the same on every rank): each encoder and the LLM balanced
# with its own cost model; row widths in bytes (float64 rows), for the node-aware mapping.
DECL = orchmllm.StageDeclarations(
    [orchmllm.EncoderStage("vision", COST["vision"], input_row_bytes=8 * PATCH,
                           output_row_bytes=8 * DIM),
     orchmllm.EncoderStage("audio", COST["audio"], input_row_bytes=8 * FRAME,
                           output_row_bytes=8 * DIM)],
    orchmllm.LLMStage(cost=COST["llm"], text_row_bytes=8 * DIM))


def local_batch(b: Dict[str, np.ndarray]) -> orchmllm.LocalBatch:
    """The rank's batch for the planner: sub-items sample by sample, its images then its audio
    (within a modality, the order of the pixel / sound rows). An image of p patches is encoded
    from p rows into p LLM tokens; an audio clip likewise in frames."""
    parent = np.concatenate([b["image_sample"], b["audio_sample"]])
    order = np.argsort(parent, kind="stable")
    modality = np.repeat([0, 1], [len(b["patches"]), len(b["frames"])])[order]
    rows = np.concatenate([b["patches"], b["frames"]])[order]
    return orchmllm.LocalBatch(b["text"], modality, parent[order], rows, rows, rows)


def target_of(step: int, sample: int, rows: int) -> torch.Tensor:
    """The regression target of a sample (by global id): the same wherever it is computed."""
    g = torch.Generator().manual_seed(100_000 * step + sample)
    return torch.randn(rows, DIM, generator=g, dtype=torch.float64)


def targets(step: int, samples: np.ndarray, rows: np.ndarray) -> torch.Tensor:
    parts = [target_of(step, int(g), int(n)) for g, n in zip(samples, rows)]
    return torch.cat(parts) if parts else torch.zeros(0, DIM, dtype=torch.float64)


def sequence_layout(b: Dict[str, np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """Without balancing: rows per sample, and the row indices into cat([image rows, audio
    rows, text rows]) that put each sample's rows together (images, audio, text)."""
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


def balanced_sequences(model: Model, b: Dict[str, np.ndarray], pixels: torch.Tensor,
                       sound: torch.Tensor, tokens: torch.Tensor,
                       report: Dict[str, Tuple[float, float]]
                       ) -> Tuple[torch.Tensor, np.ndarray, np.ndarray, int]:
    """With balancing: the LLM rank's sequences, their rows and global sample ids, and the
    global token count. One call plans the step (metadata all-gather + plan_step); the inputs
    go to the balanced encoder ranks, the outputs straight to their samples' LLM ranks (the
    composed route; gradients come back along its inverse), the text embeddings along Π_M."""
    sd = otorch.plan_step_dispatchers(DECL, local_batch(b))
    report.update({s["name"]: (float(s["imbalance_before"]), float(s["imbalance_after"]))
                   for s in sd.step.stages()})
    outs = []
    for k, (block, x) in enumerate(((model.vision, pixels), (model.audio, sound))):
        units = sd.encoder_views[k].input_rows.tolist()   # the items this rank encodes
        outs.append(sd.encoder_outputs[k].dispatch(block(sd.encoder_inputs[k].dispatch(x), units)))
    text = sd.text.dispatch(model.embed(tokens))
    # Each sample's rows (its sub-items in order, then its text) from one cat, so that every
    # exchange is in the loss's graph on every rank (also with 0 rows here; see docs).
    v, lengths = sd.llm_view, sd.meta.sequence_lengths()
    base = np.cumsum([0, outs[0].shape[0], outs[1].shape[0]])
    text_at = np.concatenate([[0], np.cumsum(sd.meta.text_tokens[v.samples])])
    order: List[np.ndarray] = [np.zeros(0, np.int64)]
    for s in range(len(v.samples)):
        for e in range(v.sub_item_offsets[s], v.sub_item_offsets[s + 1]):
            k, j = v.sub_item_modality[e], v.sub_item_index[e]
            order.append(base[k] + np.arange(v.row_offsets[k][j], v.row_offsets[k][j + 1]))
        order.append(base[2] + np.arange(text_at[s], text_at[s + 1]))
    seq = torch.cat(outs + [text])[torch.from_numpy(np.concatenate(order))]
    return seq, lengths[v.samples], v.samples, int(lengths.sum())


def train_step(model: Model, rank: int, step: int, balanced: bool,
               report: Dict[str, Tuple[float, float]]) -> torch.Tensor:
    b = sample_batch(rank, step)
    g = torch.Generator().manual_seed(int(1000 * step + rank))
    pixels = torch.randn(int(b["patches"].sum()), PATCH, generator=g, dtype=torch.float64)
    sound = torch.randn(int(b["frames"].sum()), FRAME, generator=g, dtype=torch.float64)
    tokens = torch.randint(VOCAB, (int(b["text"].sum()),), generator=g)
    if balanced:
        seq, seq_rows, samples, global_tokens = balanced_sequences(model, b, pixels, sound,
                                                                   tokens, report)
    else:
        vision = model.vision(pixels, b["patches"].tolist())
        audio = model.audio(sound, b["frames"].tolist())
        seq_rows, order = sequence_layout(b)
        seq = torch.cat([vision, audio, model.embed(tokens)])[torch.from_numpy(order)]
        offsets, lengths = otorch.gather_lengths(seq_rows)
        samples, global_tokens = offsets[rank] + np.arange(len(seq_rows)), int(lengths.sum())
    out = model.llm(seq, seq_rows.tolist())
    return ((out - targets(step, samples, seq_rows)) ** 2).sum() / global_tokens


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
