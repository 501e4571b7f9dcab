"""orchmllm.torch's dispatch / combine time against a plain all_to_all_single of the same rows
with the same splits (no reordering), on 4 CPU gloo ranks (torch.multiprocessing).

    PYTHONPATH=build/default/python .venv/bin/python3 python/benchmarks/dispatch_time.py \
        [--items-per-rank 64] [--width 64] [--repeats 5]

Each rank holds 64 items of 0..2,047 rows (float32 rows of --width values); the plan balances
them (quadratic cost). Prints, on rank 0, best-of-repeats seconds for: building the Dispatcher
(Plan.all_to_all), dispatch and combine (each agreeing first, the default), dispatch without
the agreement (verify=False, after its first exchange), the agreement alone (one all_reduce of
five int64), and all_to_all_single alone, each timed as the max over ranks (a barrier before
each repeat). --items-per-rank 1 --width 1 shows the agreement's share of a tiny exchange.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Callable, Dict

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import orchmllm
import orchmllm.torch as otorch

WORLD = 4


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Best over repeats of the slowest rank's time."""
    best = float("inf")
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        fn()
        took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        best = min(best, float(took))
    return best


def worker(rank: int, store: str, items: int, width: int, repeats: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    rng = np.random.default_rng(1)
    offsets = np.arange(WORLD + 1, dtype=np.int64) * items
    rows = rng.integers(0, 2048, size=WORLD * items).astype(np.int64)
    rows[: items] //= 4  # rank 0 light, so the plan moves rows
    plan = orchmllm.balance(offsets, rows, cost="quadratic:1,1e-4")
    d = otorch.Dispatcher(plan, rank, rows)
    x = torch.randn(d.input_rows, width)
    y = d.dispatch(x)
    assert torch.equal(d.combine(y), x)
    unverified = otorch.Dispatcher(plan, rank, rows, verify=False)
    assert torch.equal(unverified.dispatch(x), y)  # its one agreement
    header = torch.zeros(5, dtype=torch.int64)

    def plain() -> None:
        out = x.new_empty((d.output_rows, width))
        dist.all_to_all_single(out, x, d.recv_splits, d.send_splits)

    result: Dict[str, float] = {
        "Dispatcher(plan, rank, rows)": timed(lambda: otorch.Dispatcher(plan, rank, rows), repeats),
        "dispatch": timed(lambda: d.dispatch(x), repeats),
        "combine": timed(lambda: d.combine(y), repeats),
        "dispatch, verify=False": timed(lambda: unverified.dispatch(x), repeats),
        "the agreement alone": timed(lambda: dist.all_reduce(header, op=dist.ReduceOp.MAX),
                                     repeats),
        "all_to_all_single alone": timed(plain, repeats),
    }
    moved = torch.tensor([d.input_rows], dtype=torch.int64)
    dist.all_reduce(moved)
    if rank == 0:
        print(f"{WORLD} gloo ranks, {int(moved)} rows of {width} float32 ({int(moved) * width * 4 / 2**20:.1f} MiB) "
              f"in all, {int(plan.statistics()['items_moved'])} of {WORLD * items} items move:")
        for name, seconds in result.items():
            print(f"  {name:32s} {seconds * 1e3:8.2f} ms")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items-per-rank", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(f"{tmp}/store", args.items_per_rank, args.width, args.repeats),
                 nprocs=WORLD)


if __name__ == "__main__":
    main()
