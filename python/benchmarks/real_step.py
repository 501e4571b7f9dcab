"""A real model's training step, measured with and without batch post-balancing.

Trains a Hugging Face ``transformers`` Qwen2-VL model (random-initialised from a small config, no
download: its vision tower attends within each image via ``cu_seqlens``, its LLM is the Qwen2
decoder) with ``torch.distributed``: gloo on CPU (one process per rank, pinned to its own core,
one intra-op thread, so a rank's compute time is its own) or NCCL with ``--device cuda``. The
global batches come from a length trace (``sample,image_tokens,text_tokens``, docs/tool.md
"Traces"): step t's batch is trace batch ``seed + t`` (rank r's sample i is row
((b * D + r) * K + i) mod rows, as ``orchmllm-bench workload --trace`` draws it), images
synthesized at the trace's patch counts. Scenarios, on the same samples in the same order:

- ``none``: every rank encodes its own images and runs the LLM on its own samples;
- ``llm``: only the LLM stage is balanced (``orchmllm.balance``); the vision outputs and text
  move to the samples' LLM ranks;
- ``per-stage``: vision and LLM balanced independently; the vision outputs return to their
  sample's home rank first (what open systems do);
- ``orchestrated``: ``orchmllm.torch.plan_step_dispatchers``: one plan for the step, the vision
  outputs go straight to their sample's LLM rank (the composed route).

Each step: plan (metadata all-gather + planning), move the vision inputs, vision forward, move
its outputs (and the text) to the LLM ranks, LLM forward and backward sample by sample (the
per-token-mean loss of next-token prediction over the text), the gradients of the vision
outputs back, vision backward, one all-reduce of every gradient, SGD. The warm-up steps run
unbalanced and, all but the first (which pays one-off costs), calibrate each stage's cost model
(``orchmllm.CostCalibration``) from the ranks' measured stage times, which then plans every
balanced step. Every measured step also computes
the unbalanced step's loss and gradients on the same parameters (untimed) and reports the
largest relative difference (``max_rel_grad_diff``). ``predicted_step_seconds`` is
``orchmllm-bench simulate``'s step for the same batches, fed the calibrated costs and the
measured exchange latency and bandwidth of this setup, plus the gradient all-reduce's model.

    python real_step.py --trace FILE --ranks D --samples-per-rank K --steps N --seed S
        --scenario none|llm|per-stage|orchestrated --json OUT.json [--device cpu|cuda]
        [--warmup W] [--dtype float32|float64] [--paired SCENARIO] [--simulator PATH]

``--paired SCENARIO`` also times SCENARIO on every measured step's batch and parameters, in the
same processes, alternately before and after the step itself, and reports the paired difference
(``paired``): two scenarios whose difference is below what separates two runs of one scenario
on a shared machine are compared without that drift.

Needs torch, transformers (pinned in .ci/install-deps) and the orchmllm package (docs/python.md).
The report's fields are in docs/python.md ("A real model's step").
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import orchmllm
import orchmllm.torch as otorch

SCENARIOS = ("none", "llm", "per-stage", "orchestrated")
MERGE = 4          # vision patches per LLM token (2 x 2 spatial merge)
PATCH_ROW = 96     # one patch's pixel values: 3 channels x 2 frames x 4 x 4
VOCAB = 512
HIDDEN = 256
LR = 1e-3


# ------------------------------------------------------------------------------------------------
# The trace and the batches
# ------------------------------------------------------------------------------------------------

class Trace:
    """A length trace: per row, the patch counts of its images and its text tokens."""

    def __init__(self, path: str) -> None:
        self.images: List[np.ndarray] = []
        self.text: List[int] = []
        with open(path, encoding="utf-8") as f:
            header = f.readline().strip()
            if header != "sample,image_tokens,text_tokens":
                raise ValueError(f"{path}:1: header {header!r}, expected "
                                 "'sample,image_tokens,text_tokens'")
            for number, line in enumerate(f, start=2):
                line = line.strip()
                if not line:
                    continue
                fields = line.split(",")
                if len(fields) != 3:
                    raise ValueError(f"{path}:{number}: {len(fields)} fields, expected 3")
                try:
                    images = [int(p) for p in fields[1].split(";")] if fields[1] else []
                    text = int(fields[2])
                except ValueError as e:
                    raise ValueError(f"{path}:{number}: {e}") from None
                if any(p <= 0 or p % MERGE for p in images):
                    raise ValueError(f"{path}:{number}: image patch counts must be positive "
                                     f"multiples of {MERGE} (2 x 2 patches per LLM token)")
                if text < 0 or (text == 0 and not images):
                    raise ValueError(f"{path}:{number}: a sample needs text or an image")
                self.images.append(np.array(images, np.int64))
                self.text.append(text)
        if not self.text:
            raise ValueError(f"{path}: no samples after the header")

    def __len__(self) -> int:
        return len(self.text)


class Batch:
    """Rank ``rank``'s samples of trace batch ``b``: rows, image patches, text tokens."""

    def __init__(self, trace: Trace, b: int, ranks: int, k: int, rank: int) -> None:
        self.rows = np.array([((b * ranks + rank) * k + i) % len(trace) for i in range(k)],
                             np.int64)
        self.image_sample = np.repeat(np.arange(k), [len(trace.images[r]) for r in self.rows])
        self.patches = (np.concatenate([trace.images[r] for r in self.rows])
                        if k else np.zeros(0, np.int64)).astype(np.int64)
        self.text = np.array([trace.text[r] for r in self.rows], np.int64)
        self.image_tokens = np.bincount(self.image_sample, self.patches // MERGE,
                                        minlength=k).astype(np.int64)
        self.seq = self.image_tokens + self.text

    def local_batch(self) -> orchmllm.LocalBatch:
        p = self.patches
        return orchmllm.LocalBatch(self.text, np.zeros(len(p), np.int64), self.image_sample,
                                   p, p, p // MERGE)


def grid_of(patches: int) -> Tuple[int, int, int]:
    """(t, h, w) of a synthesized image of ``patches`` patches: h and w even (the 2 x 2
    merge), h the largest even divisor with h <= w."""
    h = 2
    for c in range(2, int(math.isqrt(patches)) + 1, 2):
        if patches % c == 0 and (patches // c) % 2 == 0:
            h = c
    return 1, h, patches // h


def pixels_of(row: int, image: int, patches: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1_000_003 * row + image)
    return torch.randn(patches, PATCH_ROW, generator=g, dtype=dtype)


def tokens_of(row: int, text: int) -> torch.Tensor:
    """A sample's text token ids and one more (the next-token label of its last token)."""
    g = torch.Generator().manual_seed(7_000_001 * row + 1)
    return torch.randint(VOCAB, (text + 1,), generator=g)


# ------------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------------

def make_model(dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    cfg = Qwen2VLConfig(
        text_config=dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, vocab_size=VOCAB,
                         max_position_embeddings=32768, bos_token_id=None, eos_token_id=None,
                         rope_scaling={"type": "mrope", "mrope_section": [4, 6, 6]}),
        vision_config=dict(depth=4, embed_dim=128, hidden_size=HIDDEN, num_heads=4, mlp_ratio=2,
                           patch_size=4, in_channels=3, temporal_patch_size=2,
                           spatial_merge_size=2),
        attn_implementation="sdpa", bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    return Qwen2VLForConditionalGeneration(cfg).to(dtype=dtype, device=device)


def model_summary(model: torch.nn.Module) -> Dict[str, Any]:
    v, t = model.config.vision_config, model.config.text_config
    return {"family": "Qwen2-VL (transformers Qwen2VLForConditionalGeneration, random init)",
            "transformers": __import__("transformers").__version__,
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "vision": {"depth": v.depth, "embed_dim": v.embed_dim, "heads": v.num_heads,
                       "patch_row_values": PATCH_ROW},
            "llm": {"layers": t.num_hidden_layers, "hidden": t.hidden_size,
                    "heads": t.num_attention_heads, "kv_heads": t.num_key_value_heads,
                    "vocab": t.vocab_size}}


class Stages:
    """The model's two stages as the step runs them."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.visual = model.model.visual
        self.llm = model.model.language_model
        self.head = model.lm_head
        self.params = [p for p in model.parameters()]

    def vision(self, pixels: torch.Tensor, patches: np.ndarray) -> torch.Tensor:
        """The LLM tokens of these images (patches[i] rows each, in order): patches / 4 rows
        per image."""
        if len(patches) == 0:
            return pixels.new_zeros((0, HIDDEN)).requires_grad_()
        grid = torch.tensor([grid_of(int(p)) for p in patches], dtype=torch.int64,
                            device=pixels.device)
        return self.visual(pixels, grid_thw=grid).pooler_output

    def llm_sample(self, seq: torch.Tensor, labels: torch.Tensor, text: int) -> torch.Tensor:
        """Summed next-token cross-entropy over a sample's text (its last ``text`` rows)."""
        h = self.llm(inputs_embeds=seq[None]).last_hidden_state[0]
        if text == 0:
            return (h.sum() * 0.0)
        logits = self.head(h[-text:])
        return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum").to(
            h.dtype)


# ------------------------------------------------------------------------------------------------
# One step
# ------------------------------------------------------------------------------------------------

class Timer:
    """Wall times by phase on this rank (CUDA: synchronised at every boundary)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: Dict[str, float] = {}
        self.items: Dict[str, List[Tuple[int, float]]] = {}

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def add(self, phase: str, start: float) -> float:
        t = self.now()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + (t - start)
        return t


def assemble(image_rows: torch.Tensor, image_tokens: np.ndarray, emb: torch.Tensor,
             text: np.ndarray) -> List[torch.Tensor]:
    """Per sample: its images' LLM tokens, then its text embeddings."""
    out = []
    ia = np.concatenate([[0], np.cumsum(image_tokens)])
    ta = np.concatenate([[0], np.cumsum(text)])
    for s in range(len(text)):
        out.append(torch.cat([image_rows[ia[s]:ia[s + 1]], emb[ta[s]:ta[s + 1]]]))
    return out


class Step:
    """Runs the scenarios' steps on one rank."""

    def __init__(self, rank: int, stages: Stages, device: torch.device,
                 dtype: torch.dtype) -> None:
        self.rank, self.s = rank, stages
        self.device, self.dtype = device, dtype
        self.row = torch.tensor([], dtype=dtype).element_size()
        # The stages' cost models: calibrated by the warm-up steps (which do not plan).
        self.costs: Dict[str, Any] = {}

    def inputs(self, b: Batch) -> Tuple[torch.Tensor, torch.Tensor]:
        """This rank's pixel rows (image after image) and text rows (sample after sample:
        [token id, next-token label])."""
        px = [pixels_of(int(b.rows[s]), j, int(p), self.dtype)
              for j, (s, p) in enumerate(zip(b.image_sample, b.patches))]
        pixels = torch.cat(px) if px else torch.zeros(0, PATCH_ROW, dtype=self.dtype)
        toks = [tokens_of(int(r), int(t)) for r, t in zip(b.rows, b.text)]
        text = (torch.cat([torch.stack([t[:-1], t[1:]], dim=1) for t in toks]) if toks
                else torch.zeros(0, 2, dtype=torch.int64))
        return pixels.to(self.device), text.to(self.device)

    def llm_stage(self, seq: torch.Tensor, cu: np.ndarray, labels: torch.Tensor,
                  text: np.ndarray, total_tokens: int, timer: Timer) -> torch.Tensor:
        """The LLM's forward and backward, sample by sample (gradients accumulate, as with
        gradient accumulation over micro-batches of one sample), on the sequences ``seq``
        (rows, cu_seqlens); then the backward into what ``seq`` was assembled from. Returns
        this rank's share of the loss (float64)."""
        leaf = seq.detach().requires_grad_()
        loss = torch.zeros((), dtype=torch.float64)
        la = np.concatenate([[0], np.cumsum(text)])
        for s in range(len(text)):
            t0 = timer.now()
            part = self.s.llm_sample(leaf[cu[s]:cu[s + 1]], labels[la[s]:la[s + 1]],
                                     int(text[s]))
            (part / total_tokens).backward()
            loss += float(part.detach()) / total_tokens
            t1 = timer.add("llm", t0)
            timer.items.setdefault("llm", []).append((int(cu[s + 1] - cu[s]), t1 - t0))
        t = timer.now()
        if seq.requires_grad and leaf.grad is not None:
            seq.backward(leaf.grad)
        timer.add("llm", t)
        return loss

    def vision_backward(self, out: torch.Tensor, grad: torch.Tensor, timer: Timer) -> None:
        t = timer.now()
        if out.requires_grad and out.shape[0]:
            out.backward(grad)
        timer.add("vision_backward", t)

    def run(self, scenario: str, b: Batch, pixels: torch.Tensor, text_rows: torch.Tensor,
            timer: Timer) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """One step's forward and backward on this rank's inputs (``inputs(b)``; gradients
        left in .grad, not reduced); returns this rank's share of the loss and the step's
        planned imbalance per stage."""
        embed = self.s.llm.embed_tokens
        rank = self.rank
        info: Dict[str, Any] = {}
        t = timer.now()

        if scenario == "orchestrated":
            # One plan for the step; the vision outputs go straight to their LLM ranks.
            decl = orchmllm.StageDeclarations(
                [orchmllm.EncoderStage("vision", self.costs["vision"],
                                       input_row_bytes=PATCH_ROW * self.row,
                                       output_row_bytes=HIDDEN * self.row)],
                orchmllm.LLMStage(cost=self.costs["llm"], text_row_bytes=16))
            sd = otorch.plan_step_dispatchers(decl, b.local_batch())
            info["stages"] = {s["name"]: s for s in sd.step.stages()}
            total = int(sd.step.loss_tokens)
            t = timer.add("planning", t)
            x = sd.encoder_inputs[0].dispatch(pixels)
            t = timer.add("alltoall", t)
            out = self.s.vision(x, sd.encoder_views[0].input_rows)
            t = timer.add("vision_forward", t)
            y = sd.encoder_outputs[0].dispatch(out.detach()).requires_grad_()
            rtext = sd.text.dispatch(text_rows)
            t = timer.add("alltoall", t)
            seq, cu = sd.llm_input([y], embed(rtext[:, 0]), text_first=False)
            text = sd.meta.text_tokens[sd.llm_view.samples]
            timer.add("llm", t)
            loss = self.llm_stage(seq, cu, rtext[:, 1], text, total, timer)
            t = timer.now()
            g = sd.encoder_outputs[0].combine(y.grad if y.grad is not None
                                              else torch.zeros_like(y))
            timer.add("alltoall", t)
            self.vision_backward(out, g, timer)
            return loss, info

        # The other scenarios: one all-gather of every rank's sizes (per sample its text and
        # image tokens, then its images' patches), then orchmllm.balance per stage.
        vision_plan = llm_plan = None
        offs, sizes = otorch.gather_lengths(np.concatenate([b.text, b.image_tokens, b.patches]))
        K = len(b.text)
        blocks = [sizes[offs[r]:offs[r + 1]] for r in range(len(offs) - 1)]
        text_all = np.concatenate([x[:K] for x in blocks])
        img_tok = np.concatenate([x[K:2 * K] for x in blocks])
        total = int(text_all.sum())
        if scenario in ("llm", "per-stage"):
            soff = np.arange(len(blocks) + 1, dtype=np.int64) * K
            llm_plan = orchmllm.balance(soff, text_all + img_tok, cost=self.costs["llm"])
            info["stages"] = {"llm": llm_plan.statistics()}
            if scenario == "per-stage":
                ipatch = np.concatenate([x[2 * K:] for x in blocks])
                ioff = np.concatenate([[0], np.cumsum([len(x) - 2 * K for x in blocks])])
                vision_plan = orchmllm.balance(ioff.astype(np.int64), ipatch,
                                               cost=self.costs["vision"])
                info["stages"]["vision"] = vision_plan.statistics()
        t = timer.add("planning", t)

        if vision_plan is not None:  # encode where balanced, outputs back to their home rank
            din = otorch.Dispatcher(vision_plan, rank, ipatch)
            dout = otorch.Dispatcher(vision_plan, rank, ipatch // MERGE)
            x = din.dispatch(pixels)
            t = timer.add("alltoall", t)
            out = self.s.vision(x, ipatch[din.output_items])
            t = timer.add("vision_forward", t)
            home = dout.combine(out.detach())
            t = timer.add("alltoall", t)
        else:
            out = self.s.vision(pixels, b.patches)
            t = timer.add("vision_forward", t)
            home = out.detach()
        # home: this rank's samples' image tokens, sample after sample.

        if llm_plan is not None:
            dimg = otorch.Dispatcher(llm_plan, rank, img_tok)
            dtxt = otorch.Dispatcher(llm_plan, rank, text_all)
            y = dimg.dispatch(home)
            rtext = dtxt.dispatch(text_rows)
            t = timer.add("alltoall", t)
            mine = dimg.output_items
            image_tokens, text = img_tok[mine], text_all[mine]
        else:
            y, rtext, image_tokens, text = home, text_rows, b.image_tokens, b.text
        y.requires_grad_()
        emb = embed(rtext[:, 0])
        parts = assemble(y, image_tokens, emb, text)
        seq = torch.cat(parts) if parts else emb
        cu = np.concatenate([[0], np.cumsum(image_tokens + text)]).astype(np.int64)
        timer.add("llm", t)
        loss = self.llm_stage(seq, cu, rtext[:, 1], text, total, timer)
        t = timer.now()
        g = y.grad if y.grad is not None else torch.zeros_like(y)
        if llm_plan is not None:
            g = dimg.combine(g)
        if vision_plan is not None:
            g = dout.dispatch(g)
        timer.add("alltoall", t)
        self.vision_backward(out, g, timer)
        return loss, info


# ------------------------------------------------------------------------------------------------
# Gradients and the communication model
# ------------------------------------------------------------------------------------------------

def reduce_grads(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """One all-reduce (sum) of every gradient, as DDP's buckets do; returns the flat sum."""
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in params])
    dist.all_reduce(flat)
    set_grads(params, flat)
    return flat


def set_grads(params: Sequence[torch.nn.Parameter], flat: torch.Tensor) -> None:
    at = 0
    for p in params:
        p.grad = flat[at:at + p.numel()].view_as(p).clone()
        at += p.numel()


def gather_floats(values: Sequence[float], device: torch.device) -> np.ndarray:
    """Every rank's ``values`` (the same count on each): float64[D, n]."""
    mine = torch.tensor(list(values), dtype=torch.float64, device=device)
    out = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(out, mine)
    return torch.stack(out).cpu().numpy()


def fit_line(sizes: np.ndarray, seconds: np.ndarray) -> Tuple[float, float]:
    """Latency (s) and bandwidth (bytes/s) of seconds = latency + bytes / bandwidth: least
    squares with both terms non-negative (a flat or noisy curve gives the mean time as latency
    and an unbounded bandwidth, written 1e15 bytes/s)."""
    A = np.stack([np.ones_like(sizes), sizes], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, seconds, rcond=None)
    if b <= 0:
        a, b = float(np.mean(seconds)), 0.0
    elif a < 0:
        a, b = 0.0, float(sizes @ seconds / (sizes @ sizes))
    return float(a), (min(1.0 / b, 1e15) if b > 0 else 1e15)


def measure_comm(device: torch.device, reps: int = 7) -> Dict[str, float]:
    """Latency and bandwidth of this setup's exchanges and of the gradient all-reduce.

    An exchange is timed as the step runs it: a :class:`orchmllm.torch.Dispatcher`'s dispatch
    (the ranks' agreement, the reordering, ``all_to_all_single``) of a plan under which rank 0
    sends one item of L rows (1 KiB each) to every other rank, L from 1 to 4,096; fitted as the
    simulator's route model reads it, (D - 1) messages x latency + the bytes rank 0 sends /
    bandwidth. The all-reduce is fitted against its buffer's bytes. Medians of ``reps`` runs,
    the slowest rank's."""
    D, rank = dist.get_world_size(), dist.get_rank()
    width = 256  # float32 values per row: 1 KiB
    rows = np.array([1, 16, 128, 1024, 4096], np.int64)
    a2a, ar = [], []

    def timed(fn: Any) -> float:
        ts = []
        for _ in range(reps + 1):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts[1:]))

    for L in rows:
        lengths = np.full(D, L, np.int64)
        offsets = np.array([0] + [D] * D, np.int64)  # rank 0 holds D items, the others none
        d = otorch.Dispatcher(orchmllm.balance(offsets, lengths, algorithm="lpt"), rank, lengths)
        x = torch.ones((int(D * L) if rank == 0 else 0, width), dtype=torch.float32,
                       device=device)
        a2a.append(timed(lambda: d.dispatch(x)))
        buf = torch.ones(int(L) * width, dtype=torch.float32, device=device)
        ar.append(timed(lambda: dist.all_reduce(buf)))
    both = gather_floats(a2a + ar, device).max(axis=0)
    size = rows.astype(np.float64) * width * 4
    if D > 1:
        la, bwa = fit_line(size * (D - 1), both[:len(rows)])
        la /= D - 1
    else:
        la, bwa = 0.0, 1e15
    lr, bwr = fit_line(size, both[len(rows):])
    return {"exchange_latency_seconds": la, "exchange_bandwidth_bytes_per_second": bwa,
            "allreduce_latency_seconds": lr, "allreduce_bandwidth_bytes_per_second": bwr}


def cost_text(cost: Any) -> str:
    """A calibrated QuadraticCost as the simulator's --*-cost text (A*l + B*l^2 + C)."""
    return f"quadratic:{cost.linear!r},{cost.quadratic!r},{cost.constant!r}"


# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------

PHASES = ("vision_forward", "vision_backward", "llm", "alltoall", "planning", "grad_sync")


def imbalance(loads: np.ndarray) -> float:
    mean = float(np.mean(loads))
    return float(np.max(loads) / mean) if mean > 0 else 1.0


def worker(rank: int, args: argparse.Namespace, store: str, out_path: str) -> None:
    device = torch.device(args.device if args.device == "cpu" else f"cuda:{rank}")
    if args.device == "cpu":
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
        torch.set_num_threads(1)
    else:
        torch.cuda.set_device(device)
    backend = "gloo" if args.device == "cpu" else "nccl"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank,
                            world_size=args.ranks)
    try:
        report = run(rank, args, device, backend)
        if rank == 0:
            with open(out_path, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
    finally:
        dist.destroy_process_group()


def run(rank: int, args: argparse.Namespace, device: torch.device,
        backend: str) -> Dict[str, Any]:
    """The warm-up and measured steps on this rank; rank 0's return value is the report
    (without the prediction, which :func:`predict` adds)."""
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    trace = Trace(args.trace)
    model = make_model(dtype, device)
    stages = Stages(model)
    params = stages.params
    step = Step(rank, stages, device, dtype)
    D, K = args.ranks, args.samples_per_rank
    comm = measure_comm(device)

    # Both stages' costs per item (no per-rank term: the simulator's and the planner's model).
    vision_cal = orchmllm.CostCalibration(degree=2, fit_overhead=False)
    llm_cal = orchmllm.CostCalibration(degree=2, fit_overhead=False)
    steps: List[Dict[str, Any]] = []
    worst_grad = worst_loss = 0.0
    def timed_step(scenario: str, b: Batch, pixels: torch.Tensor, text_rows: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any], Timer, np.ndarray]:
        """One timed step from a barrier to the end of the gradient all-reduce: the summed
        gradients (flat), the global loss, the plan's figures, the timer and every rank's
        [step, phases...] seconds."""
        timer = Timer(device)
        for p in params:
            p.grad = None
        gc.collect()  # no collector pause inside the timed step
        gc.disable()
        dist.barrier()
        t0 = timer.now()
        loss, info = step.run(scenario, b, pixels, text_rows, timer)
        t1 = timer.now()
        flat = reduce_grads(params)
        total = torch.tensor([float(loss)], dtype=torch.float64, device=device)
        dist.all_reduce(total)
        t2 = timer.add("grad_sync", t1)
        gc.enable()
        per_rank = gather_floats([t2 - t0] + [timer.seconds.get(k, 0.0) for k in PHASES], device)
        return flat, total, info, timer, per_rank

    for t in range(args.warmup + args.steps):
        warm = t < args.warmup
        b = Batch(trace, args.seed + t, D, K, rank)
        pixels, text_rows = step.inputs(b)  # the data loader's work, before the step
        paired_seconds = None
        if args.paired and not warm and t % 2 == 1:  # ABBA: the paired scenario first
            paired_seconds = float(timed_step(args.paired, b, pixels, text_rows)[4][:, 0].max())
        flat, total, info, timer, per_rank = timed_step("none" if warm else args.scenario, b,
                                                        pixels, text_rows)
        if args.paired and not warm and t % 2 == 0:
            flat = flat.clone()
            paired_seconds = float(timed_step(args.paired, b, pixels, text_rows)[4][:, 0].max())
            set_grads(params, flat)
        record: Dict[str, Any] = {"step": t, "batch": args.seed + t, "warmup": warm,
                                  "step_seconds": float(per_rank[:, 0].max()),
                                  "loss": float(total)}
        for i, k in enumerate(PHASES):
            record[k + "_seconds_per_rank"] = per_rank[:, 1 + i].tolist()
        if paired_seconds is not None:
            record["paired_step_seconds"] = paired_seconds

        if warm and t > 0:
            # Calibration: every rank's vision time and its images; every LLM sample's time. The
            # first step is left out: it pays one-off costs (lazy initialisation, the allocator
            # growing), several times a later step's vision time.
            ioff, ipatch = otorch.gather_lengths(b.patches)
            vision_cal.add_step(ioff, ipatch, per_rank[:, 1] + per_rank[:, 2])
            items = timer.items.get("llm", [])
            pad = [0.0] * (K - len(items))
            lens = gather_floats([float(x[0]) for x in items] + pad, device)
            secs = gather_floats([x[1] for x in items] + pad, device)
            for l, s in zip(lens.reshape(-1), secs.reshape(-1)):
                if l > 0:
                    llm_cal.add_rank([int(l)], float(s))
            if t == args.warmup - 1:
                step.costs = {"vision": vision_cal.fit().cost, "llm": llm_cal.fit().cost}
        else:
            record["stages"] = {k: {"imbalance_before": float(v["imbalance_before"]),
                                    "imbalance_after": float(v["imbalance_after"])}
                                for k, v in info.get("stages", {}).items()}
            # The unbalanced step on the same parameters and samples (untimed): its loss and
            # gradients are what the scenario's must equal.
            mine = flat.clone()
            for p in params:
                p.grad = None
            ref_loss, _ = step.run("none", b, pixels, text_rows, Timer(device))
            ref = reduce_grads(params)
            ref_total = torch.tensor([float(ref_loss)], dtype=torch.float64, device=device)
            dist.all_reduce(ref_total)
            grad_diff = float((mine - ref).abs().max() / ref.abs().max().clamp_min(1e-300))
            loss_diff = abs(float(total) - float(ref_total)) / max(abs(float(ref_total)), 1e-300)
            worst_grad = max(worst_grad, grad_diff, loss_diff)
            worst_loss = max(worst_loss, loss_diff)
            set_grads(params, mine)
        steps.append(record)
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad

    measured = [s for s in steps if not s["warmup"]]
    times = np.array([s["step_seconds"] for s in measured])

    def stage_summary(name: str, keys: Sequence[str]) -> Dict[str, Any]:
        per = np.array([[sum(s[k + "_seconds_per_rank"][r] for k in keys) for r in range(D)]
                        for s in measured])
        out: Dict[str, Any] = {
            "compute_seconds_per_rank_median": np.median(per, axis=0).tolist(),
            "measured_imbalance_median": float(np.median([imbalance(x) for x in per]))}
        planned = [s["stages"][name] for s in measured if name in s["stages"]]
        if planned:
            out["imbalance_before_median"] = float(np.median([p["imbalance_before"]
                                                              for p in planned]))
            out["imbalance_after_median"] = float(np.median([p["imbalance_after"]
                                                             for p in planned]))
        return out

    def slowest(key: str) -> float:
        return float(np.median([max(s[key + "_seconds_per_rank"]) for s in measured]))

    vfit, lfit = vision_cal.fit(), llm_cal.fit()
    paired: Optional[Dict[str, Any]] = None
    if args.paired:
        other = np.array([s["paired_step_seconds"] for s in measured])
        diff = times - other
        half = (1.96 * float(np.std(diff, ddof=1)) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
        paired = {"scenario": args.paired, "step_seconds": other.tolist(),
                  "step_seconds_mean": float(np.mean(other)),
                  "difference_seconds_mean": float(np.mean(diff)),
                  "difference_seconds_ci95": [float(np.mean(diff)) - half,
                                              float(np.mean(diff)) + half],
                  "ratio_mean": float(np.mean(times) / np.mean(other)),
                  "faster_steps": int((diff < 0).sum())}
    return {
        "benchmark": "real_step", "simulated": False, "scenario": args.scenario,
        "device": args.device, "backend": backend, "ranks": D, "samples_per_rank": K,
        "steps": args.steps, "warmup_steps": args.warmup, "seed": args.seed,
        "trace": args.trace, "trace_rows": len(trace), "dtype": args.dtype,
        "torch": torch.__version__, "model": model_summary(model),
        "step_seconds": times.tolist(),
        "step_seconds_mean": float(np.mean(times)),
        "step_seconds_median": float(np.median(times)),
        "step_seconds_p10": float(np.percentile(times, 10)),
        "step_seconds_p90": float(np.percentile(times, 90)),
        "stages": {"vision": stage_summary("vision", ["vision_forward", "vision_backward"]),
                   "llm": stage_summary("llm", ["llm"])},
        "alltoall_seconds_median": slowest("alltoall"),
        "planning_seconds_median": slowest("planning"),
        "grad_sync_seconds_median": slowest("grad_sync"),
        "max_rel_grad_diff": worst_grad, "max_rel_loss_diff": worst_loss,
        "cost_calibration": {
            name: {"cost": cost_text(f.cost), "constant": float(f.cost.constant),
                   "linear": float(f.cost.linear), "quadratic": float(f.cost.quadratic),
                   "rms_seconds": float(f.rms_seconds), "observations": int(f.observations)}
            for name, f in (("vision", vfit), ("llm", lfit))},
        "comm_model": comm,
        "row_bytes": {"vision": PATCH_ROW * step.row, "output": HIDDEN * step.row, "text": 16},
        "param_bytes": int(sum(p.numel() for p in params) * step.row),
        "paired": paired,
        "per_step": steps,
    }


# ------------------------------------------------------------------------------------------------
# The prediction
# ------------------------------------------------------------------------------------------------

SIM_SCENARIO = {"none": "none", "llm": "llm-only", "per-stage": "per-stage",
                "orchestrated": "full"}


def find_simulator(given: Optional[str]) -> Optional[str]:
    """--simulator, else $ORCHMLLM_BENCH, else the default build's orchmllm-bench."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (given, os.environ.get("ORCHMLLM_BENCH"),
                 os.path.join(here, "..", "..", "build", "default", "bench", "orchmllm-bench")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def predict(report: Dict[str, Any], simulator: str) -> None:
    """Adds the simulator's prediction of every measured step to ``report``.

    ``orchmllm-bench simulate`` on the same batch (``--trace``, ``--seed`` = the step's batch),
    the scenario's counterpart (none, llm-only, per-stage, full), the calibrated costs in
    seconds, this run's row widths, the measured exchange latency and bandwidth, ``--sync
    step`` (the ranks wait for each other only at the exchanges and the gradient all-reduce,
    as here) and ``--blocking-planning`` (this step plans before it computes). The simulator
    has no gradient all-reduce (the same in every scenario): the prediction adds its model,
    latency + parameter bytes / bandwidth, and one more latency for the loss's all-reduce."""
    cal, comm, rows = report["cost_calibration"], report["comm_model"], report["row_bytes"]
    D = report["ranks"]
    grad_sync = (2 * comm["allreduce_latency_seconds"] +
                 report["param_bytes"] / comm["allreduce_bandwidth_bytes_per_second"])
    rows_out = []
    for s in report["per_step"]:
        if s["warmup"]:
            continue
        cmd = [simulator, "simulate", "--trace", report["trace"], "--ranks", str(D),
               "--gpus-per-node", str(D), "--samples-per-rank", str(report["samples_per_rank"]),
               "--seed", str(s["batch"]), "--scenario", SIM_SCENARIO[report["scenario"]],
               "--vision-cost", cal["vision"]["cost"], "--llm-cost", cal["llm"]["cost"],
               "--vision-row-bytes", str(rows["vision"]), "--output-row-bytes",
               str(rows["output"]), "--text-row-bytes", str(rows["text"]),
               "--intra-latency", repr(comm["exchange_latency_seconds"]),
               "--intra-bandwidth", repr(comm["exchange_bandwidth_bytes_per_second"]),
               "--sync", "step", "--blocking-planning"]
        sim = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        rows_out.append({"batch": s["batch"], "measured_step_seconds": s["step_seconds"],
                         "simulator_step_seconds": sim["step_seconds"],
                         "compute_seconds": sim["compute_seconds"],
                         "comm_seconds": sim["comm_seconds"],
                         "plan_seconds": sim["unoverlapped_plan_seconds"],
                         "alltoalls": sim["alltoalls"],
                         "predicted_step_seconds": sim["step_seconds"] + grad_sync})
    predicted = np.array([r["predicted_step_seconds"] for r in rows_out])
    measured = np.array([r["measured_step_seconds"] for r in rows_out])
    report["prediction"] = {
        "simulator_command": " ".join(cmd[1:]), "grad_sync_model_seconds": grad_sync,
        "per_step": rows_out,
        "compute_seconds_median": float(np.median([r["compute_seconds"] for r in rows_out])),
        "comm_seconds_median": float(np.median([r["comm_seconds"] for r in rows_out])),
        "plan_seconds_median": float(np.median([r["plan_seconds"] for r in rows_out]))}
    report["predicted_step_seconds"] = float(np.median(predicted))
    report["predicted_step_seconds_mean"] = float(np.mean(predicted))
    report["prediction_error"] = float(np.median(predicted) / np.median(measured) - 1.0)
    report["prediction_error_mean"] = float(np.mean(predicted) / np.mean(measured) - 1.0)


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True,
                   help="length trace CSV (sample,image_tokens,text_tokens)")
    p.add_argument("--ranks", type=int, default=2, help="data-parallel ranks (processes)")
    p.add_argument("--samples-per-rank", type=int, default=8)
    p.add_argument("--steps", type=int, default=8, help="measured steps, after the warm-up")
    p.add_argument("--warmup", type=int, default=6,
                   help="unbalanced steps; all but the first calibrate the costs (>= 3)")
    p.add_argument("--seed", type=int, default=0, help="the trace batch of the first step")
    p.add_argument("--scenario", choices=SCENARIOS, required=True)
    p.add_argument("--json", required=True, help="where to write the report (one JSON object)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--paired", choices=SCENARIOS,
                   help="also time this scenario on every measured step's batch and parameters "
                        "(alternately before and after the scenario's own step; its gradients "
                        "are discarded) and report the paired difference")
    p.add_argument("--simulator", help="orchmllm-bench for the prediction (default: "
                   "$ORCHMLLM_BENCH, else build/default/bench/orchmllm-bench)")
    args = p.parse_args(argv)
    if args.ranks < 1 or args.samples_per_rank < 1 or args.steps < 1 or args.warmup < 3:
        p.error("--ranks, --samples-per-rank and --steps must be >= 1, --warmup >= 3")
    if args.device == "cuda" and torch.cuda.device_count() < args.ranks:
        p.error(f"--device cuda needs {args.ranks} GPUs, found {torch.cuda.device_count()}")
    if args.device == "cpu" and len(os.sched_getaffinity(0)) < args.ranks:
        print(f"real_step: {args.ranks} ranks on {len(os.sched_getaffinity(0))} cores: ranks "
              "share cores, so their compute times are not their own", file=sys.stderr)
    try:
        Trace(args.trace)  # before spawning
    except (OSError, ValueError) as e:
        p.error(str(e))
    simulator = find_simulator(args.simulator)
    if simulator is None:
        p.error("no orchmllm-bench for the prediction: pass --simulator PATH or set "
                "ORCHMLLM_BENCH (cmake --build --preset default builds it)")
    args.trace = os.path.abspath(args.trace)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, f"{tmp}/store", os.path.abspath(args.json)),
                 nprocs=args.ranks)
    with open(args.json, encoding="utf-8") as f:
        r = json.load(f)
    predict(r, simulator)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(r, f, indent=1)
    if r["paired"]:
        q = r["paired"]
        lo, hi = q["difference_seconds_ci95"]
        print(f"paired with {q['scenario']}: {1e3 * q['difference_seconds_mean']:+.1f} ms a step "
              f"(95 % CI {1e3 * lo:+.1f} … {1e3 * hi:+.1f}), faster on {q['faster_steps']} of "
              f"{len(q['step_seconds'])} steps")
    print(f"{r['scenario']}: step {r['step_seconds_median']:.4f} s median "
          f"(p10 {r['step_seconds_p10']:.4f}, p90 {r['step_seconds_p90']:.4f}); simulator "
          f"{r['predicted_step_seconds']:.4f} s ({100 * r['prediction_error']:+.1f} %); "
          f"loss and gradients vs unbalanced: {r['max_rel_grad_diff']:.1e}")


if __name__ == "__main__":
    main()
