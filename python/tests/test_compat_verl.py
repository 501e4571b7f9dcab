"""orchmllm.compat.verl against verl's own functions (vendored in python/benchmarks) on the same
inputs: the same shapes of results, never a worse partition, and the documented differences
(micro-batches keep the token budget; empty micro-batches instead of an assertion; any number of
uid groups). verl's own tests run against the adapter in verl_upstream/."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

from orchmllm.compat import verl as ours  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import verl_seqlen_balancing as theirs  # noqa: E402


def lengths_of(seed: int, n: int, sigma: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.lognormal(6.0, sigma, n).astype(np.int64) + 1)


def max_sum(values: np.ndarray, parts: list) -> int:
    return max(int(values[p].sum()) if p else 0 for p in parts)


@pytest.mark.parametrize("equal_size", [True, False])
def test_partitions_are_never_worse_than_verls(equal_size: bool) -> None:
    for seed in range(60):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(1, 9))
        n = k * int(rng.integers(1, 10)) + (0 if equal_size else int(rng.integers(0, k)))
        values = theirs.calculate_workload(lengths_of(seed, n))
        got = ours.get_seqlen_balanced_partitions(values.tolist(), k, equal_size)
        want = theirs.get_seqlen_balanced_partitions(values.tolist(), k, equal_size)
        assert len(got) == k and sorted(i for p in got for i in p) == list(range(n))
        assert all(p and p == sorted(p) for p in got)
        if equal_size:
            assert all(len(p) == n // k for p in got)
        assert max_sum(values, got) <= max_sum(values, want), seed


def test_partitions_take_reals_and_tensors() -> None:
    values = [0.5, 2.25, 1.0, 3.5, 0.75, 2.0]
    parts = ours.get_seqlen_balanced_partitions(values, 2, equal_size=False)
    assert sorted(sum(values[i] for i in p) for p in parts) == [5.0, 5.0]
    parts = ours.get_seqlen_balanced_partitions(torch.tensor([4, 1, 3, 2]), 2, equal_size=True)
    assert sorted(parts) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("args, message", [
    (([1, 2], 3, False), "< k_partitions"),
    (([1, 2, 3], 2, True), "multiple of"),
    (([1, -2, 3], 2, False), "negative"),
    (([1, 2], 0, False), "at least 1"),
])
def test_partition_errors_say_why(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ours.get_seqlen_balanced_partitions(*args)


def padded_batch(seed: int, rows: int, width: int = 100, low: int = 20) -> tensordict.TensorDict:
    gen = torch.Generator().manual_seed(seed)
    valid = torch.randint(low, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width)[None, :] < valid[:, None]).to(torch.int64)
    ids = torch.randint(0, 1000, (rows, width), generator=gen)
    return tensordict.TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[rows])


def check_cut(batch, micro, parts, cap: int) -> None:
    rows = batch.batch_size[0]
    assert len(micro) == len(parts)
    assert sorted(i for p in parts for i in p) == list(range(rows))
    for m, p in zip(micro, parts):
        assert int(m["attention_mask"].sum()) <= cap
        torch.testing.assert_close(m["input_ids"], batch["input_ids"][p])
    order = ours.get_reverse_idx([i for p in parts for i in p])
    torch.testing.assert_close(torch.cat(micro)[torch.tensor(order)], batch)


def test_micro_batches_keep_the_budget_where_verl_does_not() -> None:
    """verl's count is kept whenever parts within the budget exist; verl's own parts exceed the
    budget on these inputs, ours never do, and the heaviest micro-batch is no heavier."""
    over, kept = 0, 0
    for seed in range(40):
        batch = padded_batch(seed, 24)
        cap = 300
        micro, parts = ours.rearrange_micro_batches(batch, cap)
        check_cut(batch, micro, parts, cap)
        tokens = batch["attention_mask"].sum(dim=1).numpy()
        want = theirs.rearrange_micro_batch_indices(tokens, 100, cap)
        over += any(int(tokens[p].sum()) > cap for p in want)
        assert len(parts) >= len(want)
        if len(parts) == len(want):
            kept += 1
            work = theirs.calculate_workload(tokens.astype(np.int64))
            if all(int(tokens[p].sum()) <= cap for p in want):
                assert max_sum(work, parts) <= max_sum(work, want)
    assert over > 0 and kept >= 30


def test_one_more_micro_batch_where_verls_count_cannot_keep_the_budget() -> None:
    """25 sequences of 70 tokens, budget 300: verl cuts ceil(1750 / 300) = 6 parts, one of which
    holds 5 sequences (350 tokens); here 7 micro-batches of at most 4."""
    mask = torch.ones((25, 70), dtype=torch.int64)
    batch = tensordict.TensorDict({"input_ids": mask.clone(), "attention_mask": mask},
                                  batch_size=[25])
    micro, parts = ours.rearrange_micro_batches(batch, 300)
    assert len(parts) == 7 and max(map(len, parts)) == 4
    check_cut(batch, micro, parts, 300)
    want = theirs.rearrange_micro_batch_indices(mask.sum(dim=1), 70, 300)
    assert len(want) == 6 and max(map(len, want)) == 5


def test_sequences_over_half_the_budget_get_a_micro_batch_each() -> None:
    lengths = torch.tensor([160] * 40 + [30] * 20)
    mask = (torch.arange(160)[None, :] < lengths[:, None]).long()
    batch = tensordict.TensorDict({"input_ids": mask.clone(), "attention_mask": mask},
                                  batch_size=[60])
    micro, parts = ours.rearrange_micro_batches(batch, 300)
    assert len(parts) == 40 and sum(1 for p in parts if int(lengths[p].sum()) >= 160) == 40
    check_cut(batch, micro, parts, 300)


def test_micro_batches_order_and_flags() -> None:
    batch = padded_batch(7, 30)
    tokens = batch["attention_mask"].sum(dim=1).numpy()
    work = ours.calculate_workload(tokens.astype(np.int64))
    micro, parts = ours.rearrange_micro_batches(batch, 400, num_batches_divided_by=4)
    assert len(parts) % 4 == 0
    check_cut(batch, micro, parts, 400)
    loads = [int(work[p].sum()) for p in parts]
    peak = loads.index(max(loads))
    assert loads[:peak + 1] == sorted(loads[:peak + 1])
    assert loads[peak:] == sorted(loads[peak:], reverse=True)
    _, unordered = ours.rearrange_micro_batches(batch, 400, num_batches_divided_by=4,
                                                use_dynamic_bsz_balance=False)
    assert sorted(map(sorted, unordered)) == sorted(map(sorted, parts))


def test_more_micro_batches_than_rows_are_empty() -> None:
    batch = padded_batch(3, 3)
    micro, parts = ours.rearrange_micro_batches(batch, 1000, min_num_micro_batch=5)
    assert len(parts) == 5 and sum(1 for p in parts if not p) == 2
    assert all(m.batch_size[0] == len(p) for m, p in zip(micro, parts))
    check_cut(batch, micro, parts, 1000)


def test_nested_input_ids_and_plain_dicts() -> None:
    rows = [torch.arange(n) for n in (50, 120, 80, 30, 200, 90)]
    nested = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    micro, parts = ours.rearrange_micro_batches({"input_ids": nested}, 250)
    assert sorted(i for p in parts for i in p) == list(range(6))
    for m, p in zip(micro, parts):
        assert sum(int(rows[i].shape[0]) for i in p) <= 250
        for got, i in zip(m["input_ids"].unbind(), p):
            assert torch.equal(got, rows[i])
    restored = ours.restore_dynamic_batch(torch.nested.as_nested_tensor(
        [r for m in micro for r in m["input_ids"].unbind()], layout=torch.jagged), parts)
    assert all(torch.equal(a, b) for a, b in zip(restored.unbind(), rows))
    micro, parts = ours.rearrange_micro_batches({"input_ids": nested}, 250, min_num_micro_batch=8)
    assert len(parts) == 8 and [m["input_ids"].size(0) for m in micro] == list(map(len, parts))
    assert sorted(i for p in parts for i in p) == list(range(6))


def test_a_sequence_over_the_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="longest sequence"):
        ours.rearrange_micro_batches(padded_batch(0, 4, low=90), 50)


class Proto:
    """verl's DataProto as prepare_dynamic_batch uses it."""

    def __init__(self, batch, non_tensor_batch, meta_info):
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info

    @classmethod
    def from_dict(cls, tensors, non_tensors, meta_info):
        rows = next(iter(tensors.values())).shape[0]
        return cls(tensordict.TensorDict(tensors, batch_size=[rows]), non_tensors, meta_info)


def test_dynamic_batch_round_trip() -> None:
    batch = padded_batch(11, 17)
    labels = np.array([f"s{i}" for i in range(17)], dtype=object)
    data = Proto(batch, {"labels": labels}, {"step": 3})
    micro, parts = ours.prepare_dynamic_batch(data, 350)
    for m, p in zip(micro, parts):
        assert list(m.non_tensor_batch["labels"]) == [f"s{i}" for i in p]
        assert m.meta_info == {"step": 3} and m.meta_info is not data.meta_info
    out = torch.cat([m.batch["input_ids"] for m in micro])
    torch.testing.assert_close(ours.restore_dynamic_batch(out, parts), batch["input_ids"])


def test_group_partitions_keep_groups_and_are_never_worse() -> None:
    for seed in range(30):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(2, 6))
        groups = k * int(rng.integers(1, 6))
        sizes = rng.integers(1, 5, groups)
        uids = np.repeat(np.arange(groups), sizes).tolist()
        lengths = lengths_of(seed, len(uids)).tolist()
        got = ours.get_group_balanced_partitions(lengths, uids, k)
        assert sorted(i for p in got for i in p) == list(range(len(uids)))
        assert all(p == sorted(p) for p in got)
        for p in got:
            assert len({uids[i] for i in p}) == groups // k
            assert all(set(range(uids.index(u), len(uids) - uids[::-1].index(u))) <= set(p)
                       for u in {uids[i] for i in p})
        work = theirs.calculate_workload(np.asarray(lengths))
        group_work = [int(work[[i for i in range(len(uids)) if uids[i] == g]].sum())
                      for g in range(groups)]
        want = theirs.get_seqlen_balanced_partitions(group_work, k, equal_size=True)
        assert max_sum(work, got) <= max(sum(group_work[g] for g in p) for p in want)


def test_group_counts_need_not_divide() -> None:
    parts = ours.get_group_balanced_partitions([5, 5, 9, 1, 1, 3, 8], [0, 0, 1, 2, 2, 3, 4], 2)
    assert sorted(len({u for u in [0, 0, 1, 2, 2, 3, 4] if u in {[0, 0, 1, 2, 2, 3, 4][i] for i in p}})
                  for p in parts) == [2, 3]
    with pytest.raises(ValueError, match="uid groups"):
        ours.get_group_balanced_partitions([1, 2], [0, 0], 2)


def test_imbalance_metrics_match_verls() -> None:
    values = lengths_of(5, 24).tolist()
    parts = ours.get_seqlen_balanced_partitions(values, 4, equal_size=True)
    got = ours.log_seqlen_unbalance(values, parts, "x")
    assert got["x/balanced_max"] >= got["x/mean"] >= got["x/balanced_min"]
    assert got["x/minmax_diff"] == got["x/max"] - got["x/min"]
    assert got["x/mean"] == sum(values) / 4


def _dp_worker(rank: int, world: int, store: str, cap: int, same: bool, min_mb) -> None:
    import torch.distributed as dist  # noqa: PLC0415

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        batch = padded_batch(42 + rank, 20 + 5 * rank, low=50)
        tokens = batch["attention_mask"].sum(dim=1)
        local, _ = ours.rearrange_micro_batches(batch, cap, same_micro_num_in_dp=False,
                                                min_num_micro_batch=min_mb)
        micro, parts = ours.rearrange_micro_batches(batch, cap, dp_group=dist.group.WORLD,
                                                    same_micro_num_in_dp=same,
                                                    min_num_micro_batch=min_mb)
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(counts, torch.tensor([len(local)]))
        verls = max(min_mb or 0, min(len(tokens), ours.ceildiv(int(tokens.sum()), cap)))
        assert len(local) >= verls
        assert len(micro) == (max(int(c) for c in counts) if same else len(local))
        check_cut(batch, micro, parts, cap)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("same, min_mb", [(False, 4), (True, None), (True, 9)])
def test_data_parallel_counts_on_gloo_ranks(tmp_path, same: bool, min_mb) -> None:
    """verl's test_seqlen_balancing_distributed_params with its expectation corrected for the
    budget: every rank's count is its own count (at least verl's, more where no micro-batches
    within the budget exist at verl's), the group's largest with same_micro_num_in_dp."""
    import torch.multiprocessing as mp  # noqa: PLC0415

    mp.spawn(_dp_worker, args=(2, str(tmp_path / "store"), 300, same, min_mb), nprocs=2,
             join=True)


def test_the_side_by_side_benchmark_runs_quick() -> None:
    import verl_adapter  # noqa: PLC0415

    dp_rows, mb_rows = verl_adapter.run(1, 0, quick=True)
    assert len(dp_rows) == 2 and all(r.count("|") == 10 for r in dp_rows)
    assert len(mb_rows) == 2 and all(r.count("|") == 13 for r in mb_rows)
