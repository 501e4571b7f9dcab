"""The Python contract gives the same plan and figures as `orchmllm-bench plan` on the same input.

Each case writes ITEMS.csv, runs the built CLI (ORCHMLLM_BENCH), and compares PLAN.csv with
plan.dst_rank / plan.dst_slot and the JSON with plan.makespan, plan.lower_bound and
plan.statistics(), exactly (the JSON prints doubles with %.17g, so they read back bit-exact).
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

import orchmllm
from conftest import random_batch

# (python keyword arguments, CLI flags); every algorithm, policy and cost form the CLI offers.
CASES = [
    ({}, []),
    ({"algorithm": "identity"}, ["--algorithm", "identity"]),
    ({"algorithm": "lpt"}, ["--algorithm", "lpt"]),
    ({"algorithm": "karmarkar_karp"}, ["--algorithm", "karmarkar_karp"]),
    ({"algorithm": "karmarkar_karp_equal"}, ["--algorithm", "karmarkar_karp_equal"]),
    ({"cost": "quadratic:1,1.3e-5"}, ["--cost", "quadratic:1,1.3e-5"]),
    ({"cost": "quadratic:1,0.0005", "algorithm": "lpt"},
     ["--cost", "quadratic:1,0.0005", "--algorithm", "lpt"]),
    ({"cost": "quadratic:0.5,2e-4", "algorithm": "karmarkar_karp"},
     ["--cost", "quadratic:0.5,2e-4", "--algorithm", "karmarkar_karp"]),
    ({"policy": "padded"}, ["--policy", "padded"]),
    ({"policy": "padded", "pad_multiple": 64, "cost": "quadratic:1,1.3e-5",
      "algorithm": "padded_exact"},
     ["--policy", "padded", "--pad-multiple", "64", "--cost", "quadratic:1,1.3e-5",
      "--algorithm", "padded_exact"]),
    ({"policy": "padded", "pad_multiple": 8, "algorithm": "lpt"},
     ["--policy", "padded", "--pad-multiple", "8", "--algorithm", "lpt"]),
    ({"policy": "bucketed:512,1024,2048,8192"}, ["--policy", "bucketed:512,1024,2048,8192"]),
    ({"policy": "bucketed:512,1024,2048,8192", "cost": "quadratic:1,0.001", "algorithm": "lpt"},
     ["--policy", "bucketed:512,1024,2048,8192", "--cost", "quadratic:1,0.001",
      "--algorithm", "lpt"]),
    ({"cap_bytes": 40000, "min_items": 1}, ["--cap-bytes", "40000", "--min-items", "1"]),
    ({"cap": 30000, "max_items": 9}, ["--cap", "30000", "--max-items", "9"]),
    ({"algorithm": "locality", "gpus_per_node": 4},
     ["--algorithm", "locality", "--gpus-per-node", "4", "--mapping", "identity"]),
    ({"gap_tolerance": 0.01}, ["--gap-tolerance", "0.01"]),
    ({"cost": "quadratic:1,0.001", "gap_tolerance": 0.002},
     ["--cost", "quadratic:1,0.001", "--gap-tolerance", "0.002"]),
    ({"algorithm": "locality", "gpus_per_node": 4, "locality_tolerance": 0.05},
     ["--algorithm", "locality", "--gpus-per-node", "4", "--mapping", "identity",
      "--locality-tolerance", "0.05"]),
]

# Figures of plan.statistics() that the JSON prints under the same key.
SAME_KEYS = [
    "algorithm", "requested", "items", "ranks", "policy", "pad_multiple", "cost", "makespan",
    "makespan_before", "lower_bound", "ratio", "imbalance_before", "imbalance_after", "mean_load",
    "proven_optimal", "items_moved", "bytes_moved", "max_tokens", "max_bytes",
    "max_items_per_rank", "min_items_per_rank",
]


def write_items(path, offsets, lengths, payload):
    lines = ["rank,slot,length,bytes"]
    for r in range(len(offsets) - 1):
        for s, g in enumerate(range(offsets[r], offsets[r + 1])):
            lines.append(f"{r},{s},{lengths[g]},{payload[g]}")
    path.write_text("\n".join(lines) + "\n")


def run_cli(bench, tmp_path, offsets, payload_lengths, payload, flags):
    items = tmp_path / "items.csv"
    plan_csv = tmp_path / "plan.csv"
    write_items(items, offsets, payload_lengths, payload)
    ranks = len(offsets) - 1
    out = subprocess.run(
        [str(bench), "plan", "--items", str(items), "--ranks", str(ranks), "--out",
         str(plan_csv), *flags], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = np.loadtxt(plan_csv, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    return report, rows


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kwargs,flags", CASES, ids=[" ".join(f) or "default" for _, f in CASES])
def test_same_plan_as_cli(bench, tmp_path, seed, kwargs, flags):
    offsets, lengths, payload = random_batch(seed, ranks=16, max_items=12)
    report, rows = run_cli(bench, tmp_path, offsets, lengths, payload, flags)
    plan = orchmllm.balance(offsets, lengths, bytes=payload, **kwargs)

    # PLAN.csv: rank,slot,dst_rank,dst_slot in (rank, slot) order = global id order.
    assert rows.shape == (len(lengths), 4)
    np.testing.assert_array_equal(rows[:, 2], plan.dst_rank)
    np.testing.assert_array_equal(rows[:, 3], plan.dst_slot)
    assert plan.makespan == report["makespan"]
    assert plan.lower_bound == report["lower_bound"]
    stats = plan.statistics()
    for key in SAME_KEYS:
        assert stats[key] == report[key], key
    assert isinstance(plan.makespan, float) and isinstance(plan.lower_bound, float)


def test_same_plan_as_cli_exact(bench, tmp_path):
    """The exact branch and bound, on an input small enough for it."""
    offsets, lengths, payload = random_batch(7, ranks=4, max_items=3, empty_ranks=False)
    report, rows = run_cli(bench, tmp_path, offsets, lengths, payload,
                           ["--algorithm", "exact", "--cost", "quadratic:1,1.3e-5"])
    plan = orchmllm.balance(offsets, lengths, "quadratic:1,1.3e-5", algorithm="exact",
                            bytes=payload)
    np.testing.assert_array_equal(rows[:, 2], plan.dst_rank)
    np.testing.assert_array_equal(rows[:, 3], plan.dst_slot)
    assert (plan.makespan, plan.lower_bound) == (report["makespan"], report["lower_bound"])
    assert plan.algorithm == report["algorithm"] == "exact"
    assert plan.proven_optimal == report["proven_optimal"]


def test_cost_objects_give_the_string_plans():
    offsets, lengths, _ = random_batch(3, ranks=32, max_items=20)
    for text, obj in [("linear", orchmllm.LinearCost()),
                      ("quadratic:1,1.3e-5", orchmllm.QuadraticCost(0.0, 1.0, 1.3e-5))]:
        for algorithm in ["automatic", "lpt", "karmarkar_karp"]:
            a = orchmllm.balance(offsets, lengths, text, algorithm=algorithm)
            b = orchmllm.balance(offsets, lengths, obj, algorithm=algorithm)
            np.testing.assert_array_equal(a.dst_rank, b.dst_rank)
            np.testing.assert_array_equal(a.dst_slot, b.dst_slot)
            assert a.makespan == b.makespan and a.cost == b.cost


MICRO_CASES = [
    ({"max_tokens_per_micro_batch": 20000}, ["--micro-batch-tokens", "20000"]),
    ({"max_tokens_per_micro_batch": 20000, "sync": "step"},
     ["--micro-batch-tokens", "20000", "--sync", "step"]),
    ({"micro_batches": 2, "policy": "padded", "cost": "quadratic:1,1.3e-5"},
     ["--micro-batches", "2", "--policy", "padded", "--cost", "quadratic:1,1.3e-5"]),
    ({"min_micro_batches": 3, "micro_batch_multiple": 2}, ["--min-micro-batches", "3",
                                                           "--micro-batch-multiple", "2"]),
]
MICRO_KEYS = ["sync", "micro_batches", "micro_batch_tokens", "objective", "objective_before",
              "objective_lower_bound", "objective_ratio", "objective_proven_optimal"]


@pytest.mark.parametrize("kwargs,flags", MICRO_CASES, ids=[" ".join(f) for _, f in MICRO_CASES])
def test_same_micro_batches_as_cli(bench, tmp_path, kwargs, flags):
    offsets, lengths, payload = random_batch(5, ranks=8, max_items=14, empty_ranks=False)
    report, rows = run_cli(bench, tmp_path, offsets, lengths, payload, flags)
    plan = orchmllm.balance(offsets, lengths, bytes=payload, **kwargs)
    assert rows.shape == (len(lengths), 5)
    np.testing.assert_array_equal(rows[:, 2], plan.dst_rank)
    np.testing.assert_array_equal(rows[:, 3], plan.dst_slot)
    np.testing.assert_array_equal(rows[:, 4], plan.dst_micro_batch)
    stats = plan.statistics()
    for key in MICRO_KEYS + SAME_KEYS:
        assert stats[key] == report[key], key
