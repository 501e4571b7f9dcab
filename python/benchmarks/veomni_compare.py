"""orchmllm.compat.veomni side by side with VeOmni's encoder data balance on the same images.

usage: PYTHONPATH=build/default/python .venv/bin/python3 python/benchmarks/veomni_compare.py \
           [--repeat 5] [--seed 0] [--quick]

VeOmni's Qwen3VLEncoderDataBalance.balance_data gathers every data-parallel rank's images' patch
counts into a table (rank, position, patches) and deals the rows with its sorting function
post_mbs_balancing_greedy_without_pad (vendored verbatim in veomni_balance_sorting_algo.py):
largest first, each to the rank with the smallest Σ patches² so far. The adapter's balance_data
plans the same gathered counts with its plan() (orchmllm.balance on the same objective,
"locality" without slack: "automatic"'s largest load, fewest patch rows leaving home).

Inputs: D ranks with U{1..16} images each, Qwen-VL patch counts (14-px patches, merged 2×2:
a multiple of 4): 80 % natural images, pixels LN(244K, 0.23) in [40K, 640K] (the COCO fit of
docs/workloads); 20 % documents and charts, LN(1.2M, 0.6) up to 1,280 · 28² pixels (the
max_pixels setting of Qwen-VL's README: at most 1,280 tokens, 5,120 patches). Columns: the
largest Σ patches² over orchmllm's lower bound (no assignment does better; at least
max(total / D, largest image)), the share of patch rows that leave their rank, the planning time
(VeOmni: the table and its sorting function; orchmllm: the plan) and the ratio. The all-to-alls
are not timed: both move each tensor once, orchmllm's fewer rows.
--quick: the smallest case (what the test runs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from orchmllm.compat.veomni import Qwen3VLEncoderDataBalance

sys.path.insert(0, str(Path(__file__).resolve().parent))
import veomni_balance_sorting_algo as veomni  # noqa: E402
from verl_adapter import command_line  # noqa: E402
from verl_compare import best_of, fmt_time  # noqa: E402


def qwen_vl_images(rng: np.random.Generator, n: int) -> np.ndarray:
    """Patch rows of n images (a multiple of 4: 2×2 merged into one LLM token)."""
    doc = rng.random(n) < 0.2
    px = np.where(doc, np.clip(1.2e6 * np.exp(0.6 * rng.standard_normal(n)), 40e3, 1280 * 28**2),
                  np.clip(244e3 * np.exp(0.23 * rng.standard_normal(n)), 40e3, 640e3))
    return np.maximum(4, (np.rint(px / 196 / 4) * 4)).astype(np.int64)


def veomni_plan(per_rank: list) -> list:
    """VeOmni's all_to_all_redistribution up to its sorting function: the table (rank, position,
    patches) of the gathered counts, then the rank table."""
    table = torch.cat([F.pad(torch.cat([torch.arange(len(b)).view(-1, 1), b.unsqueeze(-1)], dim=-1),
                             pad=(1, 0), value=i) for i, b in enumerate(per_rank)])
    return veomni.post_mbs_balancing_greedy_without_pad(table, len(per_rank), dim=2)


def compare(d: int, seed: int, repeat: int, rows: list) -> None:
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 17, d)
    patches = qwen_vl_images(rng, int(counts.sum()))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    per_rank = [torch.from_numpy(patches[offsets[r]:offsets[r + 1]]) for r in range(d)]
    load = patches.astype(np.float64) ** 2

    v_time, table = best_of(lambda: veomni_plan(per_rank), repeat)
    v_dst = np.empty(len(patches), np.int64)
    for r, bucket in enumerate(table):
        for row in bucket:
            v_dst[offsets[int(row[0])] + int(row[1])] = r
    adapter = Qwen3VLEncoderDataBalance(spatial_merge_unit=4)
    o_time, plan = best_of(lambda: adapter.plan(offsets, patches), repeat)
    o_dst = np.asarray(plan.dst_rank)
    bound = max(load.sum() / d, load.max(), plan.lower_bound)
    home = np.repeat(np.arange(d), counts)
    got = []
    for dst in (v_dst, o_dst):
        worst = np.bincount(dst, weights=load, minlength=d).max()
        moved = patches[dst != home].sum() / patches.sum()
        got.append((worst / bound, moved))
    (vq, vm), (oq, om) = got
    ratio = v_time / o_time
    rows.append(f"| {d} | {len(patches):,} | {vq:.4f} | {vm:.0%} | {fmt_time(v_time)} | {oq:.4f} "
                f"| {om:.0%} | {fmt_time(o_time)} | {ratio:.0f}× |" if ratio >= 10 else
                f"| {d} | {len(patches):,} | {vq:.4f} | {vm:.0%} | {fmt_time(v_time)} | {oq:.4f} "
                f"| {om:.0%} | {fmt_time(o_time)} | {ratio:.1f}× |")
    print(rows[-1], flush=True)


def run(repeat: int, seed: int, quick: bool) -> list:
    rows: list = []
    print("| ranks | images | VeOmni max/bound | VeOmni moved | VeOmni time | orchmllm max/bound "
          "| orchmllm moved | orchmllm time | speed-up |")
    for d in [8] + ([] if quick else [32, 128, 512]):
        for s in range(1 if quick else 3):
            compare(d, seed + s, repeat, rows)
    return rows


if __name__ == "__main__":
    command_line(run)
