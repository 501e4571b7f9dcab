"""orchmllm.balance side by side with verl's karmarkar_karp / get_seqlen_balanced_partitions.

usage: PYTHONPATH=build/default/python .venv/bin/python3 python/benchmarks/verl_compare.py \
           [--bench build/default/bench/orchmllm-bench] [--repeat 5] [--big-repeat 3] \
           [--verl-timeout 60]

verl (volcengine/verl, verl/utils/seqlen_balancing.py, vendored verbatim in
verl_seqlen_balancing.py) balances one global batch over the data-parallel ranks:
get_seqlen_balanced_partitions(values, k_partitions=dp_size, equal_size) runs largest
differencing (karmarkar_karp) on `values`, either the sequence lengths (sums of tokens) or, as
its PPO trainer does (ray_trainer._balance_batch), calculate_workload(seqlen) =
24576·l + l², always with equal_size=True there. The same problems for orchmllm.balance:

    verl values = seqlen          <->  cost="linear"
    verl values = workload(seqlen) <-> cost="quadratic:24576,1"  (A·l + B·l²)
    verl equal_size=True           <->  algorithm="karmarkar_karp_equal" (counts n/k by
                                       construction), or "automatic" with min_items =
                                       max_items = n/k
    verl equal_size=False          <->  algorithm="karmarkar_karp" (complete differencing) or
                                       "automatic"

Inputs: (a) verl's typical call, one global batch of 256 / 1,024 / 4,096 sequences into 8 / 32 /
128 partitions, lengths drawn from two shapes (docs/results.md says which); (b) the CLI's
2,560 ranks × 64 items (`orchmllm-bench generate --seed 1`, as plan_time.py), if --bench is
given. orchmllm gets the batch as k source ranks of n/k consecutive items (where they were
sampled); verl gets a Python list of ints (its signature; the conversion is not timed).

Quality: makespan (largest partition sum of the values) and its ratio to the lower bound
max(mean load, largest item); whether every partition has n/k items. Time: best of --repeat
wall times per call, verl and orchmllm alternated in one loop, and their ratio. A verl call
that takes longer than --verl-timeout seconds is run once; one whose memory would be out of
reach (equal_size=False builds n states of k Python objects each) is not run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

import orchmllm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verl_seqlen_balancing as verl  # noqa: E402

# verl equal_size=False makes n State objects of k Set objects each (~0.3 kB a Set): skip it
# above this many Sets rather than exhaust the machine's memory.
VERL_MAX_SETS = 20_000_000


def llava665k(rng: np.random.Generator, n: int) -> np.ndarray:
    """LLaVA-1.5 665K SFT samples (docs workloads: 93.9 % one image of 576 CLIP tokens;
    text 70 % LN(90,0.6)[20,1500], 24 % LN(250,0.5)[40,1500], 6 % text-only LN(700,0.9)[50,2048])."""
    kind = rng.choice(3, size=n, p=[0.70, 0.239, 0.061])
    med = np.array([90.0, 250.0, 700.0])[kind]
    sig = np.array([0.6, 0.5, 0.9])[kind]
    lo = np.array([20, 40, 50])[kind]
    hi = np.array([1500, 1500, 2048])[kind]
    text = np.clip(np.rint(med * np.exp(sig * rng.standard_normal(n))), lo, hi)
    return (text + np.where(kind == 2, 0, 576)).astype(np.int64)


def lognormal_rl(rng: np.random.Generator, n: int) -> np.ndarray:
    """Prompt + response of an RL rollout, heavy-tailed: LN(1024, 1.0) clipped to [16, 32768]."""
    return np.clip(np.rint(1024.0 * np.exp(rng.standard_normal(n))), 16, 32768).astype(np.int64)


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def loads_of(values: np.ndarray, part: np.ndarray, k: int) -> np.ndarray:
    """Per-partition sums of values (exact: Python ints via object arrays would be slow; the
    values here stay far below 2**53, so float64 sums of integers are exact)."""
    return np.bincount(part, weights=values.astype(np.float64), minlength=k)


def verl_assignment(partitions: list[list[int]], n: int) -> np.ndarray:
    part = np.full(n, -1, dtype=np.int64)
    for p, idx in enumerate(partitions):
        part[np.asarray(idx, dtype=np.int64)] = p
    assert (part >= 0).all()
    return part


def compare(label: str, lengths: np.ndarray, k: int, repeat: int, verl_timeout: float,
            rows: list[str]) -> None:
    n = len(lengths)
    offsets = np.arange(0, n + 1, n // k, dtype=np.int64)
    assert offsets[-1] == n and len(offsets) == k + 1
    for cost_name, cost in [("seqlen (linear)", "linear"),
                            ("workload 24576·l+l²", "quadratic:24576,1")]:
        values = lengths if cost == "linear" else verl.calculate_workload(lengths)
        bound = max(values.sum() / k, values.max())
        as_list = values.tolist()
        for equal in (True, False):
            # verl, once first to see how long it takes
            sets = n * k if not equal else (n // k) * k
            if sets > VERL_MAX_SETS:
                v_time, v_make, v_eq = None, None, None
            else:
                once = min(repeat, 1)
                v_time, parts = best_of(lambda: verl.get_seqlen_balanced_partitions(
                    as_list, k_partitions=k, equal_size=equal), once)
                reps = repeat - once if v_time < verl_timeout else 0
                if reps:
                    t2, parts = best_of(lambda: verl.get_seqlen_balanced_partitions(
                        as_list, k_partitions=k, equal_size=equal), reps)
                    v_time = min(v_time, t2)
                part = verl_assignment(parts, n)
                v_make = loads_of(values, part, k).max()
                v_eq = bool((np.bincount(part, minlength=k) == n // k).all())
            algos = (["karmarkar_karp_equal", "automatic"] if equal
                     else ["karmarkar_karp", "automatic"])
            for algo in algos:
                extra = {"min_items": n // k, "max_items": n // k} if (equal and algo == "automatic") \
                    else {}
                o_time, plan = best_of(lambda: orchmllm.balance(
                    offsets, lengths, cost, algorithm=algo, **extra), repeat)
                o_make = loads_of(values, plan.dst_rank, k).max()
                assert abs(o_make - plan.makespan) <= 1e-9 * o_make, (o_make, plan.makespan)
                o_eq = bool((np.bincount(plan.dst_rank, minlength=k) == n // k).all())
                shown = algo + (" (n/k each)" if extra else "") + (
                    f" [ran {plan.algorithm}]" if plan.algorithm != algo and algo != "automatic" else "")
                if v_time is None:
                    vcols = "not run (memory) | – | –"
                    ratio = "–"
                else:
                    vcols = f"{v_make / bound:.5f} | {'yes' if v_eq else 'no'} | " \
                            f"{fmt_time(v_time)}"
                    ratio = f"{v_time / o_time:.0f}×" if v_time / o_time >= 10 \
                        else f"{v_time / o_time:.1f}×"
                rows.append(
                    f"| {label} | {cost_name} | {'yes' if equal else 'no'} | {vcols} | "
                    f"{shown} | {o_make / bound:.5f} | {'yes' if o_eq else 'no'} | "
                    f"{fmt_time(o_time)} | {ratio} |")
                print(rows[-1], flush=True)


def fmt_time(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 0.1 else f"{s:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", help="orchmllm-bench, for the 2,560 × 64 input")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--big-repeat", type=int, default=3)
    ap.add_argument("--verl-timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print("| input | values | equal sizes asked | verl makespan / bound | verl equal sizes | "
          "verl time | orchmllm algorithm | orchmllm makespan / bound | orchmllm equal sizes | "
          "orchmllm time | verl time / orchmllm time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows: list[str] = []
    for shape, draw in [("llava665k", llava665k), ("lognormal-rl", lognormal_rl)]:
        for n, k in [(256, 8), (1024, 32), (4096, 128)]:
            compare(f"{shape} {n} → {k}", draw(rng, n), k, args.repeat, args.verl_timeout, rows)
    if args.bench:
        d, per = 2560, 64
        with tempfile.TemporaryDirectory() as tmp:
            items = Path(tmp) / "items.csv"
            subprocess.run([args.bench, "generate", "--ranks", str(d), "--items-per-rank",
                            str(per), "--seed", "1", "--out", str(items)],
                           check=True, capture_output=True)
            r = np.loadtxt(items, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
        r = r[np.lexsort((r[:, 1], r[:, 0]))]
        assert (np.bincount(r[:, 0], minlength=d) == per).all()
        compare(f"CLI generate --seed 1, {d * per} → {d}", np.ascontiguousarray(r[:, 2]), d,
                args.big_repeat, args.verl_timeout, rows)


if __name__ == "__main__":
    main()
