"""python/benchmarks/verl_compare.py keeps running, and what its table rests on holds: verl's
vendored balancers import without torch or verl, and on the same small inputs both verl's
get_seqlen_balanced_partitions and orchmllm.balance give partitions of the same items, with n/k
items each where equal sizes are asked. (Which makespan is smaller is measured, not asserted:
the two Karmarkar-Karp implementations break ties differently.)"""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import orchmllm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import verl_compare  # noqa: E402
import verl_seqlen_balancing as verl  # noqa: E402


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("equal", [True, False])
def test_both_partition_the_same_items(seed: int, equal: bool) -> None:
    rng = np.random.default_rng(seed)
    n, k = 96, 8
    lengths = verl_compare.lognormal_rl(rng, n)
    offsets = np.arange(0, n + 1, n // k)
    for cost, values in [("linear", lengths), ("quadratic:24576,1",
                                               verl.calculate_workload(lengths))]:
        parts = verl.get_seqlen_balanced_partitions(values.tolist(), k_partitions=k,
                                                    equal_size=equal)
        v_part = verl_compare.verl_assignment(parts, n)
        algos = ["karmarkar_karp_equal", "automatic"] if equal else ["karmarkar_karp", "automatic"]
        for algo in algos:
            extra = {"min_items": n // k, "max_items": n // k} if equal else {}
            plan = orchmllm.balance(offsets, lengths, cost, algorithm=algo, **extra)
            o_part = plan.dst_rank
            assert sorted(plan.sources.tolist()) == list(range(n))
            for part in (v_part, o_part):
                assert part.min() >= 0 and part.max() < k
                if equal:
                    assert (np.bincount(part, minlength=k) == n // k).all()
            bound = max(values.sum() / k, values.max())
            assert verl_compare.loads_of(values, o_part, k).max() == pytest.approx(plan.makespan)
            assert verl_compare.loads_of(values, v_part, k).max() >= bound * (1 - 1e-12)
            assert plan.makespan >= bound * (1 - 1e-12)


def test_the_benchmark_runs_on_a_small_input() -> None:
    rows: list[str] = []
    lengths = verl_compare.llava665k(np.random.default_rng(0), 64)
    verl_compare.compare("small", lengths, 4, repeat=1, verl_timeout=60.0, rows=rows)
    assert len(rows) == 8 and all(r.count("|") == 12 for r in rows)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shape", ["llava665k", "lognormal_rl"])
def test_micro_batches_against_verls_pipeline(seed: int, shape: str) -> None:
    """verl_micro_batches.py on small inputs: both plan every sequence once, orchmllm's cells
    keep the cap, and its Σ_m max_r objective is never above verl's for verl's own M."""
    import verl_micro_batches as vm  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    d, k = 8, 16
    lengths = getattr(verl_compare, shape)(rng, d * k)
    values = verl.calculate_workload(lengths).astype(np.float64)
    offsets = np.arange(0, d * k + 1, k)
    cap = max(int(lengths.max()), -(-int(lengths.sum()) // (4 * d)))
    v_cells, _ = vm.verl_pipeline(lengths, d, cap)
    assert sorted(i for c in v_cells for p in c for i in p) == list(range(d * k))
    v_m = max(len(c) for c in v_cells)
    plan, _ = vm.ours(offsets, lengths, cap, v_m, 1)
    cells = vm.cells_of(plan, d)
    assert sorted(i for c in cells for p in c for i in p) == list(range(d * k))
    assert all(int(lengths[p].sum()) <= cap for c in cells for p in c)
    assert vm.objective(cells, values) <= vm.objective(v_cells, values)
