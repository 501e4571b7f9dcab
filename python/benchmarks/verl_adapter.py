"""orchmllm.compat.verl side by side with verl's own functions, called as verl's trainer calls them.

usage: PYTHONPATH=build/default/python .venv/bin/python3 python/benchmarks/verl_adapter.py \
           [--repeat 5] [--seed 0] [--quick]

Two call sites of verl/utils/seqlen_balancing.py (vendored verbatim in verl_seqlen_balancing.py):

(a) The data-parallel balance of one global batch (ray_trainer._balance_batch):
    get_seqlen_balanced_partitions(calculate_workload(seqlen).tolist(), dp, equal_size=True),
    256 / 1,024 / 4,096 sequences into 8 / 32 / 128 partitions. Quality: the largest partition's
    workload over the lower bound max(total / dp, largest item); every partition n/dp items.
(b) One rank's micro-batches under a token budget (rearrange_micro_batches: FSDP and Megatron
    workers with dynamic batch size): a TensorDict of K sequences without padding (nested
    input_ids and position_ids), budget T = max(longest, 1.1 · tokens / 4), so verl cuts four
    micro-batches. verl's side is its function's own partitioning (vendored as
    rearrange_micro_batch_indices) plus its slicing; orchmllm's side is the adapter's one call. Quality: the heaviest
    micro-batch's workload over the bound max(total / M, largest item) for that side's count
    M, and the micro-batches over the budget T.

Inputs: the length shapes of verl_compare.py (LLaVA-665K SFT, an RL rollout). Times are the best
of --repeat calls, the two sides alternated in one loop; both sides take the same Python objects
(the conversions a caller would do are inside the timed call). --quick: the smallest case of each
table (what the test runs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tensordict import TensorDict

from orchmllm.compat import verl as ours

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verl_seqlen_balancing as verl  # noqa: E402
from verl_compare import best_of, fmt_time, llava665k, lognormal_rl  # noqa: E402

SHAPES = {"LLaVA-665K SFT": llava665k, "RL rollout": lognormal_rl}


def ratio(a: float, b: float) -> str:
    r = a / b
    return f"{r:.0f}×" if r >= 10 else f"{r:.1f}×"


def dp_balance(label: str, lengths: np.ndarray, dp: int, repeat: int, rows: list) -> None:
    n = len(lengths)
    values = verl.calculate_workload(lengths).tolist()
    bound = max(sum(values) / dp, max(values))
    got = {}
    for side, fn in [("verl", verl.get_seqlen_balanced_partitions),
                     ("orchmllm", ours.get_seqlen_balanced_partitions)]:
        t, parts = best_of(lambda: fn(values, k_partitions=dp, equal_size=True), repeat)
        assert sorted(i for p in parts for i in p) == list(range(n))
        equal = all(len(p) == n // dp for p in parts)
        got[side] = (max(sum(values[i] for i in p) for p in parts) / bound, equal, t)
    (vq, ve, vt), (oq, oe, ot) = got["verl"], got["orchmllm"]
    rows.append(f"| {label} | {n:,} → {dp} | {vq:.5f} | {'yes' if ve else 'no'} | "
                f"{fmt_time(vt)} | {oq:.5f} | {'yes' if oe else 'no'} | {fmt_time(ot)} | "
                f"{ratio(vt, ot)} |")
    print(rows[-1], flush=True)


def nested(lengths: np.ndarray) -> TensorDict:
    """A batch without padding (verl's nested layout): input_ids and position_ids as jagged
    tensors, one row per sequence."""
    ids = torch.nested.as_nested_tensor([torch.zeros(int(n), dtype=torch.int64) for n in lengths],
                                        layout=torch.jagged)
    pos = torch.nested.as_nested_tensor([torch.arange(int(n)) for n in lengths],
                                        layout=torch.jagged)
    return TensorDict({"input_ids": ids, "position_ids": pos}, batch_size=[len(lengths)])


def verl_index_select(batch: TensorDict, indices: list) -> TensorDict:
    """verl's index_select_tensor_dict (verl/utils/tensordict_utils.py, commit b178a3c) for
    tensor fields: dense tensors indexed, nested ones unbound and re-nested row by row."""
    rows = torch.tensor(indices)
    data = {}
    for key, tensor in batch.items():
        if tensor.is_nested:
            parts = tensor.unbind()
            data[key] = torch.nested.as_nested_tensor([parts[i] for i in rows], layout=torch.jagged)
        else:
            data[key] = tensor[rows]
    return TensorDict(source=data, batch_size=rows.shape[0])


def verl_micro_batches(batch: TensorDict, cap: int):
    """verl's rearrange_micro_batches: its partitioning of the rows' lengths, then its slicing."""
    tokens = batch["input_ids"].offsets().diff()
    parts = verl.rearrange_micro_batch_indices(tokens, int(tokens.max()), cap)
    return [verl_index_select(batch, p) for p in parts], parts


def micro_batches(label: str, lengths: np.ndarray, repeat: int, rows: list) -> None:
    cap = max(int(lengths.max()), int(1.1 * lengths.sum() / 4))
    batch = nested(lengths)
    work = verl.calculate_workload(lengths.astype(np.int64))
    got = {}
    for side, fn in [("verl", lambda: verl_micro_batches(batch, cap)),
                     ("orchmllm", lambda: ours.rearrange_micro_batches(batch, cap))]:
        t, (micro, parts) = best_of(fn, repeat)
        assert sorted(i for p in parts for i in p) == list(range(len(lengths)))
        m = len(parts)
        bound = max(work.sum() / m, work.max())
        over = sum(int(lengths[p].sum()) > cap for p in parts)
        got[side] = (max(int(work[p].sum()) for p in parts) / bound, m, over, t)
    (vq, vm, vo, vt), (oq, om, oo, ot) = got["verl"], got["orchmllm"]
    rows.append(f"| {label} | {len(lengths):,} | {cap:,} | {vm} | {vq:.4f} | {vo} | "
                f"{fmt_time(vt)} | {om} | {oq:.4f} | {oo} | {fmt_time(ot)} | {ratio(vt, ot)} |")
    print(rows[-1], flush=True)


def run(repeat: int, seed: int, quick: bool) -> tuple[list, list]:
    dp_rows: list = []
    mb_rows: list = []
    print("| shape | sequences → dp | verl max/bound | n/dp each | verl time | orchmllm max/bound"
          " | n/dp each | orchmllm time | speed-up |")
    for name, shape in SHAPES.items():
        for n, dp in [(256, 8)] + ([] if quick else [(1024, 32), (4096, 128)]):
            dp_balance(name, shape(np.random.default_rng(seed), n), dp, repeat, dp_rows)
    print("\n| shape | sequences | budget T | verl M | verl heaviest/bound | verl over T | "
          "verl time | orchmllm M | orchmllm heaviest/bound | orchmllm over T | orchmllm time | "
          "speed-up |")
    for name, shape in SHAPES.items():
        for k in [64] + ([] if quick else [256, 1024]):
            for s in range(1 if quick else 3):
                micro_batches(f"{name} (seed {seed + s})",
                              shape(np.random.default_rng(seed + s), k), repeat, mb_rows)
    return dp_rows, mb_rows


def command_line(run: Callable[[int, int, bool], object]) -> None:
    """The adapter benchmarks' command line (--repeat, --seed, --quick), on one intra-op thread."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    run(args.repeat, args.seed, args.quick)


if __name__ == "__main__":
    command_line(run)
