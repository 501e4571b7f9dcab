"""orchmllm.map_bins: the same mapped plan and figures as `orchmllm-bench plan --gpus-per-node G
--mapping M`, balance kept, errors before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

import orchmllm
from conftest import random_batch
from test_cli_parity import run_cli

MAPPING_KEYS = ["moved_bytes", "inter_node_bytes", "inter_node_bytes_lower_bound",
                "max_node_egress_bytes", "max_node_ingress_bytes", "worst_node_bytes_lower_bound"]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("method", ["transport", "identity", "bottleneck", "auction"])
def test_same_mapping_as_cli(bench, tmp_path, seed, method):
    offsets, lengths, payload = random_batch(seed, ranks=16, max_items=12)
    report, rows = run_cli(bench, tmp_path, offsets, lengths, payload,
                           ["--gpus-per-node", "4", "--mapping", method,
                            "--cost", "quadratic:1,1.3e-5"])
    balanced = orchmllm.balance(offsets, lengths, "quadratic:1,1.3e-5", bytes=payload)
    plan = orchmllm.map_bins(balanced, 4, method)
    np.testing.assert_array_equal(rows[:, 2], plan.dst_rank)
    np.testing.assert_array_equal(rows[:, 3], plan.dst_slot)
    assert plan.mapping is not None
    assert plan.mapping["mapping"] == report["mapping"] == method
    assert plan.mapping["gpus_per_node"] == report["gpus_per_node"] == 4
    for key in MAPPING_KEYS:
        assert plan.mapping[key] == report[key], key
    stats = plan.statistics()
    for key in ["makespan", "items_moved", "bytes_moved", "imbalance_after"]:
        assert stats[key] == report[key], key


def test_mapping_permutes_bins_and_keeps_the_input():
    offsets, lengths, payload = random_batch(5, ranks=12, max_items=10)
    balanced = orchmllm.balance(offsets, lengths, bytes=payload)
    before = balanced.dst_rank.copy()
    plan = orchmllm.map_bins(balanced, 3)
    np.testing.assert_array_equal(balanced.dst_rank, before)  # the input plan is unchanged
    assert balanced.mapping is None
    assert plan.mapping is not None
    rank_of_bin = plan.mapping["rank_of_bin"]
    assert sorted(rank_of_bin.tolist()) == list(range(12))
    np.testing.assert_array_equal(plan.dst_rank, rank_of_bin[balanced.dst_rank])
    np.testing.assert_array_equal(plan.mapping["node_of_rank"], np.arange(12) // 3)
    assert plan.makespan == balanced.makespan
    loads = balanced.statistics()["load_after"]
    np.testing.assert_array_equal(plan.statistics()["load_after"][rank_of_bin], loads)
    # Fewer bytes across nodes than the identity mapping, never below the bound.
    ident = orchmllm.map_bins(balanced, 3, "identity").mapping
    assert ident is not None
    assert (plan.mapping["inter_node_bytes_lower_bound"] <= plan.mapping["inter_node_bytes"]
            <= ident["inter_node_bytes"])
    # Uneven nodes by node_of_rank; the same as gpus_per_node for equal blocks.
    same = orchmllm.map_bins(balanced, node_of_rank=np.arange(12) // 3)
    np.testing.assert_array_equal(same.dst_rank, plan.dst_rank)
    uneven = orchmllm.map_bins(balanced, node_of_rank=[0] * 5 + [1] * 7)
    assert uneven.mapping is not None and uneven.mapping["gpus_per_node"] == 0
    # bytes override the plan's
    other = orchmllm.map_bins(balanced, 3, bytes=np.ones_like(payload))
    assert other.mapping is not None
    assert other.mapping["moved_bytes"] == int(np.sum(other.dst_rank != np.repeat(
        np.arange(12), np.diff(offsets))))


def test_mapped_plan_moves_rows():
    offsets, lengths, _ = random_batch(9, ranks=8, max_items=6, empty_ranks=False)
    plan = orchmllm.map_bins(orchmllm.balance(offsets, lengths), 2)
    rows = np.arange(len(lengths)) % 3
    start = np.concatenate([[0], np.cumsum(rows)])
    data = np.arange(start[-1])
    local = [data[start[offsets[r]]:start[offsets[r + 1]]] for r in range(8)]
    a2a = [plan.all_to_all(r, rows) for r in range(8)]
    sent = [np.split(local[r][a2a[r].send_order], np.cumsum(a2a[r].send_splits)[:-1])
            for r in range(8)]
    for r in range(8):
        out = np.concatenate([sent[s][r] for s in range(8)])[a2a[r].recv_order]
        items = plan.sources[plan.dst_offsets[r]:plan.dst_offsets[r + 1]]
        np.testing.assert_array_equal(a2a[r].output_items, items)
        want = [data[start[g]:start[g + 1]] for g in items]
        np.testing.assert_array_equal(out, np.concatenate(want) if want else data[:0])


def test_map_bins_errors():
    offsets, lengths, _ = random_batch(3, ranks=8, max_items=5)
    plan = orchmllm.balance(offsets, lengths)
    with pytest.raises(orchmllm.InvalidArgumentError, match="unknown mapper 'nearest'"):
        orchmllm.map_bins(plan, 2, "nearest")
    with pytest.raises(orchmllm.InvalidArgumentError, match="gpus_per_node is -1"):
        orchmllm.map_bins(plan, -1)
    with pytest.raises(orchmllm.InvalidArgumentError, match="not both"):
        orchmllm.map_bins(plan, 2, node_of_rank=np.zeros(8, np.int64))
    with pytest.raises(orchmllm.InvalidArgumentError, match="node_of_rank has 3 entries"):
        orchmllm.map_bins(plan, node_of_rank=[0, 0, 1])
    with pytest.raises(ValueError, match="bytes has 2 entries"):
        orchmllm.map_bins(plan, 2, bytes=[1, 2])
    with pytest.raises(orchmllm.InvalidArgumentError, match="must be >= 0"):
        orchmllm.map_bins(plan, 2, bytes=-np.ones(plan.num_items, np.int64))
    with pytest.raises(TypeError, match="orchmllm.Plan"):
        orchmllm.map_bins("plan", 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gpus_per_node must be an int"):
        orchmllm.map_bins(plan, 2.0)  # type: ignore[arg-type]
