"""orchmllm.torch over 4 gloo ranks (torch.multiprocessing, a FileStore in a temporary directory):
dispatch delivers every item's rows to (dst_rank, dst_slot); combine inverts it; gradients;
dtypes and trailing shapes; process groups; gather_lengths; bad inputs. One spawn runs every
case (each rank checks its own part and raises on a mismatch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import orchmllm

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # .ci/install-deps installs torch into .venv
    raise ImportError(f"orchmllm.torch's tests need torch: run bash .ci/install-deps ({e})")

WORLD = 4


def random_case(seed: int, ranks: int):
    """offsets, lengths, rows (0..4 rows per item, zero-row items) and a plan (fixed seed)."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 6, size=ranks)
    if seed % 5 == 1:  # every item on one rank
        counts[:] = 0
        counts[seed % ranks] = 7
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    lengths = rng.integers(0, 3000, size=n).astype(np.int64)
    rows = rng.integers(0, 5, size=n).astype(np.int64)
    algorithm = ("auto", "lpt", "kk", "none")[seed % 4]
    plan = orchmllm.balance(offsets, lengths, cost="quadratic:1,1e-3", algorithm=algorithm)
    return offsets, lengths, rows, plan


def item_rows(g: int, rows: np.ndarray, trailing: tuple, dtype) -> "torch.Tensor":
    """The rows of item g: row j holds g * 8 + j + (position in the trailing shape) / 64."""
    width = int(np.prod(trailing)) if trailing else 1
    base = g * 8 + torch.arange(int(rows[g]), dtype=torch.float64)[:, None]
    vals = base + torch.arange(width, dtype=torch.float64)[None, :] / 64
    return vals.reshape(int(rows[g]), *trailing).to(dtype)


def rows_of(items, rows, trailing=(), dtype=torch.float64):
    parts = [item_rows(int(g), rows, trailing, dtype) for g in items]
    return torch.cat(parts) if parts else torch.zeros((0, *trailing), dtype=dtype)


def received_items(plan, rank: int) -> np.ndarray:
    """The items (global ids) the plan puts on ``rank``, in destination slot order, from
    dst_rank / dst_slot (not from the binding's sources)."""
    mine = np.flatnonzero(plan.dst_rank == rank)
    return mine[np.argsort(plan.dst_slot[mine], kind="stable")]


def weight_of(items, rows, trailing) -> "torch.Tensor":
    """A per-element loss weight that depends only on (item, row, position)."""
    return torch.sin(rows_of(items, rows, trailing) * 0.37 + 0.1)


def check_plans(rank: int, group=None, world: int = WORLD, seeds=range(12)) -> int:
    """dispatch / combine / backward for random plans over ``group``; returns cases run."""
    cases = 0
    for seed in seeds:
        offsets, lengths, rows, plan = random_case(seed, world)
        local = np.arange(offsets[rank], offsets[rank + 1])
        arrived = received_items(plan, rank)
        d = orchmllm.torch.Dispatcher(plan, rank, rows, group=group)
        assert d.input_rows == int(rows[local].sum()) and d.output_rows == int(rows[arrived].sum())
        assert np.array_equal(d.output_items, arrived)
        for dtype, trailing in ((torch.float64, ()), (torch.float64, (3, 2)),
                                (torch.bfloat16, (3,)), (torch.int64, (3, 2)),
                                (torch.bool, (2,))):
            x = rows_of(local, rows, trailing, dtype)
            y = d.dispatch(x)
            want = rows_of(arrived, rows, trailing, dtype)
            assert y.dtype == dtype and y.shape == want.shape, (seed, y.shape, want.shape)
            assert torch.equal(y, want), f"seed {seed} {dtype}{trailing}: wrong rows delivered"
            assert torch.equal(d.combine(y), x), f"seed {seed} {dtype}: combine(dispatch(x)) != x"
        # A non-contiguous input (same values) moves the same.
        x = rows_of(local, rows, (3, 2))
        strided = x.transpose(1, 2).contiguous().transpose(1, 2)
        assert not strided.is_contiguous() or x.numel() == 0 or x.shape[0] == 1
        assert torch.equal(d.dispatch(strided), rows_of(arrived, rows, (3, 2)))
        # Gradients: loss = sum(w * dispatch(x)), so dloss/dx at (item, row) is w there.
        trailing = (3, 2)
        x = rows_of(local, rows, trailing).requires_grad_()
        (weight_of(arrived, rows, trailing) * d.dispatch(x)).sum().backward()
        assert torch.equal(x.grad, weight_of(local, rows, trailing)), f"seed {seed}: dispatch grad"
        # And through combine (the backward is a dispatch).
        y = rows_of(arrived, rows, trailing).requires_grad_()
        (weight_of(local, rows, trailing) * d.combine(y)).sum().backward()
        assert torch.equal(y.grad, weight_of(arrived, rows, trailing)), f"seed {seed}: combine grad"
        # The one-off functions give the same; default rows: one row per item.
        assert torch.equal(orchmllm.torch.dispatch(x.detach(), plan, rank, rows, group), d.dispatch(x.detach()))
        ones = np.ones(len(lengths), np.int64)
        assert torch.equal(orchmllm.torch.dispatch(rows_of(local, ones), plan, rank, group=group),
                           rows_of(arrived, ones))
        assert torch.equal(orchmllm.torch.combine(rows_of(arrived, ones), plan, rank, group=group),
                           rows_of(local, ones))
        cases += 1
    return cases


def check_errors(rank: int) -> None:
    offsets, lengths, rows, plan = random_case(0, WORLD)
    d = orchmllm.torch.Dispatcher(plan, rank, rows)
    x = torch.zeros(d.input_rows + 1, 2)
    with pytest.raises(ValueError, match=f"has {d.input_rows + 1} rows in its first dimension.*"
                                         f"rank {rank} have {d.input_rows} rows"):
        d.dispatch(x)
    with pytest.raises(ValueError, match=f"combine: the tensor has {d.output_rows + 1} rows"):
        d.combine(torch.zeros(d.output_rows + 1))
    with pytest.raises(ValueError, match="scalar"):
        d.dispatch(torch.tensor(1.0))
    with pytest.raises(ValueError, match=f"rank is {(rank + 1) % WORLD}, but this process is "
                                         f"rank {rank}"):
        orchmllm.torch.Dispatcher(plan, (rank + 1) % WORLD, rows)
    with pytest.raises(ValueError, match=f"rank is 7, but this process is rank {rank}"):
        orchmllm.torch.Dispatcher(plan, 7, rows)
    with pytest.raises(ValueError, match="rows has 3 entries"):
        orchmllm.torch.Dispatcher(plan, rank, rows[:3])
    two = orchmllm.balance([0, 1, 2], [5, 6])
    with pytest.raises(ValueError, match="the plan is over 2 ranks, the process group has 4"):
        orchmllm.torch.Dispatcher(two, rank)
    # The backward is not itself differentiable: a second derivative raises, not zeros.
    x = torch.ones(d.input_rows, 2, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(d.dispatch(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()
    with pytest.raises(TypeError, match="plan must be an orchmllm.Plan"):
        orchmllm.torch.Dispatcher(object(), rank)  # type: ignore[arg-type]


def check_gather_lengths(rank: int, group, members) -> None:
    """Rank r contributes r*3 % 5 items (some none); every rank gets the same layout."""
    def local_of(r: int) -> np.ndarray:
        return np.arange(100 * r, 100 * r + (r * 3) % 5, dtype=np.int64)

    offsets, lengths = orchmllm.torch.gather_lengths(local_of(rank), group)
    assert offsets.dtype == np.int64 and lengths.dtype == np.int64
    want = [local_of(r) for r in members]
    assert np.array_equal(offsets, np.concatenate([[0], np.cumsum([len(w) for w in want])]))
    assert np.array_equal(lengths, np.concatenate(want))
    # Nothing anywhere: empty lengths.
    offsets, lengths = orchmllm.torch.gather_lengths(np.zeros(0, np.int64), group)
    assert np.array_equal(offsets, np.zeros(len(members) + 1)) and lengths.size == 0


def worker(rank: int, store: str, results: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=WORLD)
    try:
        import orchmllm.torch  # noqa: F401 (the attribute orchmllm.torch)
        cases = check_plans(rank)
        check_errors(rank)
        check_gather_lengths(rank, None, range(WORLD))
        # The trainer's own groups: pairs {0, 2} and {1, 3}, and one group per rank (D = 1).
        pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        singles = [dist.new_group([r]) for r in range(WORLD)]
        pair, members = pairs[rank % 2], [rank % 2, rank % 2 + 2]
        cases += check_plans(dist.get_rank(pair), pair, 2, range(100, 106))
        check_gather_lengths(rank, pair, members)
        cases += check_plans(0, singles[rank], 1, range(200, 204))
        other, own = 1 - dist.get_rank(pair), dist.get_rank(pair)
        with pytest.raises(ValueError, match=f"rank is {other}, but this process is rank {own}"):
            orchmllm.torch.Dispatcher(random_case(300, 2)[3], other, group=pair)
        dist.barrier()
        Path(results, f"rank{rank}").write_text(str(cases))
    finally:
        dist.destroy_process_group()


def test_four_gloo_ranks(tmp_path):
    mp.spawn(worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    done = sorted(p.name for p in tmp_path.glob("rank*"))
    assert done == [f"rank{r}" for r in range(WORLD)], done
    # 12 plans over 4 ranks, 6 over pairs, 4 over single ranks, on every rank.
    assert all(int((tmp_path / f"rank{r}").read_text()) == 22 for r in range(WORLD))


def test_import_orchmllm_does_not_import_torch():
    code = "import sys, orchmllm; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
