"""Plan.all_to_all: the splits and orders, applied with numpy to fake ragged data on every rank
and moved by a simulated torch.distributed.all_to_all_single, deliver every item's rows to
(dst_rank, dst_slot)."""

from __future__ import annotations

import numpy as np
import pytest

import orchmllm
from conftest import random_batch

WIDTH = 3  # elements per row


def fake_rows(offsets, rows_per_item):
    """Every rank's local rows: row j of item g holds (g, j, g * 1000 + j) — traceable."""
    local = []
    for r in range(len(offsets) - 1):
        parts = [np.array([[g, j, g * 1000 + j] for j in range(rows_per_item[g])],
                          dtype=np.int64).reshape(-1, WIDTH)
                 for g in range(offsets[r], offsets[r + 1])]
        local.append(np.concatenate(parts) if parts else np.zeros((0, WIDTH), np.int64))
    return local


def simulate(plan, local, rows):
    """all_to_all_single on every rank: returns every rank's rows in destination-slot order."""
    d = plan.num_ranks
    a2a = [plan.all_to_all(r, rows) for r in range(d)]
    chunks = []
    for r in range(d):
        a = a2a[r]
        assert a.send_splits.shape == (d,) and a.recv_splits.shape == (d,)
        assert a.send_splits.sum() == len(local[r])
        # send_order is a permutation of the local rows.
        np.testing.assert_array_equal(np.sort(a.send_order), np.arange(len(local[r])))
        send = local[r][a.send_order]
        chunks.append(np.split(send, np.cumsum(a.send_splits)[:-1]))
    out = []
    for r in range(d):
        a = a2a[r]
        for s in range(d):  # what rank s sends to r is what r expects from s
            assert len(chunks[s][r]) == a.recv_splits[s], (s, r)
        received = np.concatenate([chunks[s][r] for s in range(d)])
        np.testing.assert_array_equal(np.sort(a.recv_order), np.arange(len(received)))
        out.append(received[a.recv_order])
    return out


def expected_rows(plan, offsets, rows_per_item, local):
    """Rank r's rows in destination-slot order, straight from dst_rank / dst_slot."""
    d = plan.num_ranks
    n = plan.num_items
    by_dst = [dict() for _ in range(d)]
    for g in range(n):
        by_dst[plan.dst_rank[g]][plan.dst_slot[g]] = g
    row_start = np.zeros(n + 1, np.int64)
    row_start[1:] = np.cumsum(rows_per_item)
    flat = np.concatenate(local)
    out = []
    for r in range(d):
        gs = [by_dst[r][k] for k in range(len(by_dst[r]))]
        assert sorted(by_dst[r]) == list(range(len(gs)))  # dense slots
        parts = [flat[row_start[g]:row_start[g + 1]] for g in gs]
        out.append(np.concatenate(parts) if parts else np.zeros((0, WIDTH), np.int64))
    return out


CASES = [
    dict(seed=11, ranks=8, max_items=9, kwargs={}),
    dict(seed=12, ranks=8, max_items=9, kwargs={"cost": "quadratic:1,1.3e-5",
                                                "algorithm": "karmarkar_karp"}),
    dict(seed=13, ranks=5, max_items=12, kwargs={"policy": "padded", "pad_multiple": 16}),
    dict(seed=14, ranks=16, max_items=4, kwargs={"algorithm": "locality", "gpus_per_node": 4}),
    dict(seed=15, ranks=7, max_items=6, kwargs={"algorithm": "identity"}),  # nothing moves
    dict(seed=16, ranks=1, max_items=5, kwargs={}),                     # one rank
    dict(seed=17, ranks=6, max_items=0, kwargs={}),                     # no items at all
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"seed{c['seed']}")
@pytest.mark.parametrize("rows_kind", ["items", "ragged"])
def test_all_to_all_delivers_every_item(case, rows_kind):
    offsets, lengths, _ = random_batch(case["seed"], case["ranks"], case["max_items"])
    plan = orchmllm.balance(offsets, lengths, **case["kwargs"])
    n = plan.num_items
    if rows_kind == "items":
        rows, rows_per_item = None, np.ones(n, np.int64)
    else:  # 0..4 rows per item (zero-row items included)
        rows_per_item = np.random.default_rng(case["seed"]).integers(0, 5, size=n)
        rows = rows_per_item
    local = fake_rows(offsets, rows_per_item)
    got = simulate(plan, local, rows)
    want = expected_rows(plan, offsets, rows_per_item, local)
    for r in range(plan.num_ranks):
        np.testing.assert_array_equal(got[r], want[r], err_msg=f"rank {r}")


def test_all_to_all_moves_something_and_counts_match_the_plan():
    """Not a vacuous pass: the plan moves items, and the splits match the plan's counts."""
    offsets, lengths, _ = random_batch(21, ranks=8, max_items=10)
    plan = orchmllm.balance(offsets, lengths)
    assert plan.statistics()["items_moved"] > 0
    d = plan.num_ranks
    matrix = np.zeros((d, d), np.int64)
    for g in range(plan.num_items):
        src = np.searchsorted(offsets, g, side="right") - 1
        matrix[src, plan.dst_rank[g]] += 1
    for r in range(d):
        a = plan.all_to_all(r)
        np.testing.assert_array_equal(a.send_splits, matrix[r])
        np.testing.assert_array_equal(a.recv_splits, matrix[:, r])
    # The arrays are writable (torch.from_numpy takes them without a warning).
    assert a.send_order.flags.writeable and a.recv_splits.flags.writeable


def test_all_to_all_bad_arguments():
    offsets, lengths, _ = random_batch(22, ranks=4, max_items=5, empty_ranks=False)
    plan = orchmllm.balance(offsets, lengths)
    with pytest.raises(orchmllm.InvalidArgumentError, match=r"rank is 4, must be in \[0, 4\)"):
        plan.all_to_all(4)
    with pytest.raises(ValueError, match="rank is -1"):
        plan.all_to_all(-1)
    with pytest.raises(ValueError, match=f"rows has 3 entries, expected {plan.num_items}"):
        plan.all_to_all(0, rows=[1, 2, 3])
    with pytest.raises(TypeError, match="rows must hold integers, got dtype float64"):
        plan.all_to_all(0, rows=np.ones(plan.num_items))
    with pytest.raises(ValueError, match=r"rows\[0\] is -1, must be >= 0"):
        plan.all_to_all(0, rows=-np.ones(plan.num_items, np.int64))
