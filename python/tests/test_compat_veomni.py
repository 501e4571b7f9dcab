"""orchmllm.compat.veomni against VeOmni's own greedy (vendored in python/benchmarks) on the same
inputs, and the class's round trip on 4 gloo ranks: the tower's outputs and the gradients equal
an unbalanced run's. VeOmni's own tests run against the adapter in veomni_upstream/."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from orchmllm.compat import veomni as ours  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import veomni_balance_sorting_algo as theirs  # noqa: E402
import veomni_compare  # noqa: E402

GREEDY = "post_mbs_balancing_greedy_without_pad"


def loads(rank_table, dim: int) -> list:
    return [sum(int(row[dim]) ** 2 for row in bucket) for bucket in rank_table]


def test_rank_tables_are_never_worse_than_veomnis() -> None:
    for seed in range(40):
        rng = np.random.default_rng(seed)
        d = int(rng.integers(1, 17))
        n = int(rng.integers(d, 6 * d + 1))
        patches = torch.from_numpy(veomni_compare.qwen_vl_images(rng, n))
        table = torch.stack([torch.zeros(n, dtype=torch.long), torch.arange(n), patches], dim=1)
        got = ours.SORTING_ALGO_FUNC[GREEDY](table, d, dim=2)
        want = theirs.post_mbs_balancing_greedy_without_pad(table, d, dim=2)
        assert len(got) == d and all(got)
        assert sorted(int(row[1]) for b in got for row in b) == list(range(n))
        assert all(torch.equal(row, table[int(row[1])]) for b in got for row in b)
        assert max(loads(got, 2)) <= max(loads(want, 2)), seed


def test_fewer_images_than_ranks_leave_ranks_empty() -> None:
    table = torch.tensor([[40], [12]])
    got = ours.balanced_rank_table(table, 4, dim=0)
    assert sorted(len(b) for b in got) == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="num_replicas"):
        ours.balanced_rank_table(table, 0, dim=0)


def test_constructor_errors_say_why() -> None:
    with pytest.raises(ValueError, match="not known"):
        ours.Qwen3VLEncoderDataBalance(4, "fastest")
    with pytest.raises(ValueError, match="spatial_merge_unit"):
        ours.Qwen3VLEncoderDataBalance(0)
    assert ours.Qwen3VLEncoderDataBalance(4, "lpt").balance_args == {"algorithm": "lpt"}
    with pytest.raises(RuntimeError, match="before balance_data"):
        ours.Qwen3VLEncoderDataBalance(4).data_bridge(torch.zeros(0, 2), None)


def images_of(rank: int) -> tuple:
    """Rank 3 has no image; the others 1..5 images of t·h·w patches, h and w even."""
    gen = torch.Generator().manual_seed(100 + rank)
    k = 0 if rank == 3 else 1 + rank + rank % 2
    grid = torch.stack([torch.ones(k, dtype=torch.long),
                        2 * torch.randint(2, 12, (k,), generator=gen),
                        2 * torch.randint(2, 12, (k,), generator=gen)], dim=1)
    pixels = torch.randn(int(grid.prod(dim=1).sum()), 6, generator=gen, dtype=torch.float64)
    return pixels, grid


def tower(pixels: torch.Tensor, weight: torch.Tensor, merge: int) -> tuple:
    """A stand-in vision tower: a row-wise layer, then 'merge' rows into one output row (and a
    'deepstack' feature of the same shape)."""
    hidden = torch.tanh(pixels @ weight).reshape(-1, merge * weight.shape[1]).sum(dim=1,
                                                                               keepdim=True)
    return hidden * 2.0, hidden ** 2


def _worker(rank: int, world: int, store: str) -> None:
    import torch.distributed as dist  # noqa: PLC0415

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        weight = torch.linspace(-1, 1, 18, dtype=torch.float64).reshape(6, 3)
        pixels, grid = images_of(rank)
        merge = 4
        # The unbalanced reference: every rank runs its own images.
        ref_in = pixels.clone().requires_grad_(True)
        ref_h, ref_f = tower(ref_in, weight, merge)
        (ref_h.sum() + 3 * ref_f.sum()).backward()

        balancer = ours.Qwen3VLEncoderDataBalance(spatial_merge_unit=merge,
                                                  dp_group=dist.group.WORLD)
        x = pixels.clone().requires_grad_(True)
        bal_pixels, bal_grid = balancer.balance_data(x, grid)
        assert int(bal_grid.prod(dim=1).sum()) == bal_pixels.shape[0]
        h, f = tower(bal_pixels, weight, merge)
        home_h, (home_f,) = balancer.data_bridge(h, [f])
        torch.testing.assert_close(home_h, ref_h.detach())
        torch.testing.assert_close(home_f, ref_f.detach())
        (home_h.sum() + 3 * home_f.sum()).backward()
        torch.testing.assert_close(x.grad, ref_in.grad)

        # The plan: never a larger Σ patches² than VeOmni's greedy on the same counts.
        counts = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
        dist.all_gather(counts, torch.tensor([grid.shape[0]]))
        plan = balancer.plans["image"]
        patches = np.concatenate([images_of(r)[1].prod(dim=1).numpy() for r in range(world)])
        table = torch.stack([torch.zeros(len(patches), dtype=torch.long),
                             torch.arange(len(patches)), torch.from_numpy(patches)], dim=1)
        want = theirs.post_mbs_balancing_greedy_without_pad(table, world, dim=2)
        assert plan.makespan <= max(loads(want, 2))
        # Without autograd: the same rows home.
        with torch.no_grad():
            again, _ = balancer.data_bridge(h.detach(), None, require_grad=False)
        torch.testing.assert_close(again, ref_h.detach())
    finally:
        dist.destroy_process_group()


def test_round_trip_on_gloo_ranks_equals_the_unbalanced_run(tmp_path) -> None:
    import torch.multiprocessing as mp  # noqa: PLC0415

    mp.spawn(_worker, args=(4, str(tmp_path / "store")), nprocs=4, join=True)


def test_the_side_by_side_benchmark_runs_quick() -> None:
    rows = veomni_compare.run(1, 0, quick=True)
    assert len(rows) == 1 and rows[0].count("|") == 10
