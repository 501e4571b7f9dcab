"""Micro-batches under a token cap: orchmllm.balance against verl's pipeline on the same input.

usage: PYTHONPATH=build/default/python .venv/bin/python3 python/benchmarks/verl_micro_batches.py \
           [--repeat 3] [--seed 0] [--samples-per-rank 32]

verl (volcengine/verl, PPO trainer with dynamic batch size; vendored in verl_seqlen_balancing.py)
plans one step of d data-parallel ranks in two steps: the global batch of d·K sequences is
partitioned over the ranks by get_seqlen_balanced_partitions(workloads, d, equal_size=True)
(ray_trainer._balance_batch), then every rank cuts its K sequences into micro-batches with
rearrange_micro_batches(max_token_len=T, same_micro_num_in_dp=True): M = the largest over the
ranks of min(K, ceil(tokens / T)), each rank's sequences partitioned on their workloads into M
parts (equal_size=False), lightest micro-batches at both ends. Under FSDP every micro-batch
synchronises the ranks, so the step costs Σ_m max_r workload(r, m), workload(l) = 24576·l + l²
(verl's calculate_workload). verl does not hold a part to T: a micro-batch may exceed it.

orchmllm: the same batch as d source ranks of K sequences, cost "quadratic:24576,1" (the same
workload), max_tokens_per_micro_batch=T, sync="micro-batch" (FSDP), in one call
(balance_micro_batches): with M chosen by the library ("auto") and with verl's M.

Columns: objective Σ_m max_r (workload units) of each, as a ratio to orchmllm's lower bound for
that M (no plan with M micro-batches does better; docs/algorithms.md, "Micro-batches"), M, the
micro-batches over T, and the planning time: verl's DP partition plus its slowest rank's
rearrangement (the ranks run theirs side by side), orchmllm's one call (every rank computes it).
Inputs: the length shapes of verl_compare.py (LLaVA-665K SFT, an RL rollout), K sequences per
rank, T = max(longest sequence, ⌈tokens per rank / 4⌉) (about four micro-batches per rank).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import orchmllm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import verl_seqlen_balancing as verl  # noqa: E402
from verl_compare import fmt_time, llava665k, lognormal_rl  # noqa: E402


def verl_pipeline(lengths: np.ndarray, d: int, cap: int) -> tuple[list[list[list[int]]], float]:
    """verl's two steps: the DP partition, then every rank's micro-batches (global ids)."""
    start = time.perf_counter()
    workloads = verl.calculate_workload(lengths)
    parts = verl.get_seqlen_balanced_partitions(workloads.tolist(), d, equal_size=True)
    dp_time = time.perf_counter() - start
    per_rank = [np.asarray(sorted(p), dtype=np.int64) for p in parts]
    # same_micro_num_in_dp: the all-reduce (MAX) of every rank's own count.
    counts = [min(len(ids), verl.ceildiv(int(lengths[ids].sum()), cap)) for ids in per_rank]
    group_count = max(counts)
    slowest, cells = 0.0, []
    for ids in per_rank:
        start = time.perf_counter()
        idx = verl.rearrange_micro_batch_indices(lengths[ids], int(lengths[ids].max()), cap,
                                                 min_num_micro_batch=group_count)
        slowest = max(slowest, time.perf_counter() - start)
        cells.append([[int(ids[i]) for i in part] for part in idx])
    return cells, dp_time + slowest


def objective(cells: list[list[list[int]]], values: np.ndarray) -> float:
    """Σ_m max_r of the micro-batches' workloads (ranks may differ in count: a missing one is 0)."""
    m_count = max(len(c) for c in cells)
    tops = np.zeros(m_count)
    for rank_cells in cells:
        for m, part in enumerate(rank_cells):
            tops[m] = max(tops[m], float(values[part].sum()))
    return float(tops.sum())


def ours(offsets: np.ndarray, lengths: np.ndarray, cap: int, m: object, repeat: int):
    best, plan = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        plan = orchmllm.balance(offsets, lengths, "quadratic:24576,1",
                                max_tokens_per_micro_batch=cap, micro_batches=m,
                                sync="micro-batch")
        best = min(best, time.perf_counter() - start)
    return plan, best


def cells_of(plan, d: int) -> list[list[list[int]]]:
    """Every rank's micro-batches as global ids, from the plan's arrays alone."""
    out = []
    for r in range(d):
        on = np.flatnonzero(plan.dst_rank == r)
        on = on[np.argsort(plan.dst_slot[on])]
        out.append([on[slice(*plan.micro_batch(r, m))].tolist() for m in range(plan.micro_batches)])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples-per-rank", type=int, default=32)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    k = args.samples_per_rank
    print("| input | T | verl M | verl objective / bound | verl micro-batches over T | verl time "
          "| orchmllm M (auto) | objective / bound | orchmllm, verl's M: objective / bound | "
          "over T | orchmllm time | verl objective / orchmllm's |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for shape, draw in [("llava665k", llava665k), ("lognormal-rl", lognormal_rl)]:
        for d in (8, 32, 128):
            lengths = draw(rng, d * k)
            values = verl.calculate_workload(lengths).astype(np.float64)
            offsets = np.arange(0, d * k + 1, k, dtype=np.int64)
            cap = max(int(lengths.max()), -(-int(lengths.sum()) // (4 * d)))
            v_cells, v_time = min((verl_pipeline(lengths, d, cap) for _ in range(args.repeat)),
                                  key=lambda x: x[1])
            v_m = max(len(c) for c in v_cells)
            v_over = sum(int(lengths[p].sum()) > cap for c in v_cells for p in c)
            auto, o_time = ours(offsets, lengths, cap, "auto", args.repeat)
            same, _ = ours(offsets, lengths, cap, v_m, 1)
            rows = []
            for plan in (auto, same):
                stats = plan.statistics()
                mine = objective(cells_of(plan, d), values)
                assert abs(mine - stats["objective"]) <= 1e-9 * mine, (mine, stats["objective"])
                over = sum(int(lengths[p].sum()) > cap for c in cells_of(plan, d) for p in c)
                assert over == 0
                rows.append((plan.micro_batches, mine, stats["objective_lower_bound"]))
            v_obj = objective(v_cells, values)
            print(f"| {shape} {d}×{k} | {cap} | {v_m} | {v_obj / rows[1][2]:.4f} | {v_over} | "
                  f"{fmt_time(v_time)} | {rows[0][0]} | {rows[0][1] / rows[0][2]:.4f} | "
                  f"{rows[1][1] / rows[1][2]:.4f} | 0 | {fmt_time(o_time)} | "
                  f"{v_obj / rows[1][1]:.3f} |", flush=True)


if __name__ == "__main__":
    main()
