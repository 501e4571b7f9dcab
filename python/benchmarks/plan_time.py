"""Planning time from Python against orchmllm-bench's plan_seconds on the same input.

usage: PYTHONPATH=build/default/python .venv/bin/python3 python/benchmarks/plan_time.py \
           build/default/bench/orchmllm-bench [--ranks 2560] [--items-per-rank 64] [--repeat 5]
           [--per-call]

Generates ITEMS.csv with `orchmllm-bench generate --seed 1`, then for each cost and algorithm
takes the best of --repeat runs of `orchmllm-bench plan` (its JSON plan_seconds: the balance()
call alone, once per process) and of `orchmllm.balance(...)` timed around the whole Python
call, both as the first call of a fresh Python process (cold, like the CLI's) and as a repeated
call in one process (warm, a trainer's steady state), with the binding's overhead (the whole
call minus the library's own balance() time, plan.plan_seconds), and checks that both give the same
makespan. Prints a Markdown table (docs/python.md, docs/results.md), then the per-call times of
a trainer's steady state (medians over --repeat calls in one process, after one warm-up call):
the binding's overhead of balance(), Plan.statistics() and Plan.all_to_all(0, rows) (rows: one
row per token, the lengths). --per-call prints only those.

The first call of a fresh process pays for touching its working memory for the first time (page
faults: ~9-18 MB at this size; the table gives the median count per call, from getrusage's
ru_minflt); the CLI pays that too, but
while it parses its file, before its timer starts (the parser's growing vectors raise glibc's
dynamic mmap threshold and leave the heap touched). So the first call is also measured under the
CLI's condition: glibc's mmap and trim thresholds fixed high (MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_, in the child process only) and 64 MB touched and freed before the call,
as the CLI's parsing does (column "first call, warmed heap").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import orchmllm


# The first balance() of a fresh process, as the CLI's plan_seconds is (cold allocator).
COLD = """
import resource, sys, time, numpy as np, orchmllm
a = np.load(sys.argv[1])
if len(sys.argv) > 4:  # warm the heap as the CLI's parsing does: touch and free that many bytes
    w = np.ones(int(sys.argv[4]) // 8); del w
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
start = time.perf_counter()
orchmllm.balance(a["offsets"], a["lengths"], sys.argv[2], algorithm=sys.argv[3])
print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""
# glibc keeps what a process frees in its heap (no mmap for large blocks, no trimming): the
# state the CLI's parsing leaves its heap in. Set for the warmed-heap child process only.
WARM_HEAP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}
WARM_HEAP_BYTES = 64 << 20


def minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("--ranks", type=int, default=2560)
    ap.add_argument("--items-per-rank", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--per-call", action="store_true", help="only the per-call times")
    args = ap.parse_args()
    d = args.ranks
    with tempfile.TemporaryDirectory() as tmp:
        items, plan_csv = Path(tmp) / "items.csv", Path(tmp) / "plan.csv"
        subprocess.run([args.bench, "generate", "--ranks", str(d), "--items-per-rank",
                        str(args.items_per_rank), "--seed", "1", "--out", str(items)],
                       check=True, capture_output=True)
        rows = np.loadtxt(items, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
        rows = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
        offsets = np.concatenate([[0], np.cumsum(np.bincount(rows[:, 0], minlength=d))])
        lengths = np.ascontiguousarray(rows[:, 2])
        arrays = Path(tmp) / "arrays.npz"
        np.savez(arrays, offsets=offsets, lengths=lengths)
        if args.per_call:
            per_call(offsets, lengths, args.repeat)
            return
        print(f"{len(lengths)} items on {d} ranks, best of {args.repeat}\n")
        print("| cost | algorithm | CLI `plan_seconds` | Python, first call | ratio |"
              " first call, warmed heap | ratio | Python, repeated | ratio | binding overhead |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for cost in ["linear", "quadratic:1,1.3e-5"]:
            for algorithm in ["automatic", "lpt", "karmarkar_karp_equal"]:
                cli, py, cold, warmed, binding = [], [], [], [], []
                faults: dict[str, list[int]] = {"first": [], "warmed": [], "repeated": []}
                for _ in range(args.repeat):
                    out = subprocess.run(
                        [args.bench, "plan", "--items", str(items), "--ranks", str(d), "--cost",
                         cost, "--algorithm", algorithm, "--out", str(plan_csv)],
                        check=True, capture_output=True, text=True)
                    report = json.loads(out.stdout)
                    cli.append(report["plan_seconds"])
                    f0, start = minflt(), time.perf_counter()
                    plan = orchmllm.balance(offsets, lengths, cost, algorithm=algorithm)
                    py.append(time.perf_counter() - start)
                    faults["repeated"].append(minflt() - f0)
                    binding.append(py[-1] - plan.plan_seconds)  # all but the library's balance()
                    out = subprocess.run([sys.executable, "-c", COLD, str(arrays), cost, algorithm],
                                         check=True, capture_output=True, text=True)
                    cold.append(float(out.stdout.split()[0]))
                    faults["first"].append(int(out.stdout.split()[1]))
                    out = subprocess.run([sys.executable, "-c", COLD, str(arrays), cost, algorithm,
                                          str(WARM_HEAP_BYTES)], env=dict(os.environ, **WARM_HEAP_ENV),
                                         check=True, capture_output=True, text=True)
                    warmed.append(float(out.stdout.split()[0]))
                    faults["warmed"].append(int(out.stdout.split()[1]))
                assert plan.makespan == report["makespan"], (plan.makespan, report["makespan"])
                c, first, heap, warm = min(cli), min(cold), min(warmed), min(py)
                f = {k: int(np.median(v)) for k, v in faults.items()}  # page faults per call
                print(f"| {cost} | {algorithm} | {c * 1e3:.1f} ms | {first * 1e3:.1f} ms "
                      f"({f['first']} faults) | {first / c:.2f} | {heap * 1e3:.1f} ms "
                      f"({f['warmed']} faults) | {heap / c:.2f} | {warm * 1e3:.1f} ms "
                      f"({f['repeated']} faults) | {warm / c:.2f} | "
                      f"{min(binding) * 1e3:.2f} ms |", flush=True)
        print()
        per_call(offsets, lengths, args.repeat)


def per_call(offsets: np.ndarray, lengths: np.ndarray, repeat: int) -> None:
    """Medians over ``repeat`` calls (after one warm-up) of a trainer's per-step calls."""
    def median_ms(fn) -> float:
        fn()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return float(np.median(times)) * 1e3

    cost = "quadratic:1,1.3e-5"
    plan = orchmllm.balance(offsets, lengths, cost)
    overhead = []
    for _ in range(repeat):
        start = time.perf_counter()
        p = orchmllm.balance(offsets, lengths, cost)
        overhead.append(time.perf_counter() - start - p.plan_seconds)
    print(f"per call ({len(lengths)} items, {cost}, median of {repeat}): balance() binding "
          f"overhead {float(np.median(overhead)) * 1e3:.2f} ms, statistics() "
          f"{median_ms(plan.statistics):.2f} ms, all_to_all(0, rows) "
          f"{median_ms(lambda: plan.all_to_all(0, lengths)):.2f} ms", flush=True)


if __name__ == "__main__":
    main()
