"""orchmllm.torch over 4 gloo ranks (torch.multiprocessing, a FileStore in a temporary directory):
dispatch delivers every item's rows to (dst_rank, dst_slot); combine inverts it; gradients;
dtypes and trailing shapes; process groups; gather_lengths; bad inputs; a two-encoder step
through plan_step_dispatchers and AsyncStepPlanner, equal to the unbalanced step. One spawn
runs every case (each rank checks its own part and raises on a mismatch)."""

from __future__ import annotations

import os
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
    algorithm = ("automatic", "lpt", "karmarkar_karp", "identity")[seed % 4]
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
    """Faults that every rank has alike raise the same CommunicationError everywhere, before
    anything moves (the faults of one rank alone: test_torch_agreement.py)."""
    offsets, lengths, rows, plan = random_case(0, WORLD)
    d = orchmllm.torch.Dispatcher(plan, rank, rows)
    rows0 = int(rows[offsets[0]:offsets[1]].sum())
    fault = "rank 0 cannot take part in the forward {} of 'Dispatcher': "
    x = torch.zeros(d.input_rows + 1, 2)
    with pytest.raises(orchmllm.CommunicationError,
                       match=fault.format("dispatch") + f"its tensor has {rows0 + 1} rows in "
                             f"its first dimension, but the plan's items on rank 0 have {rows0}"):
        d.dispatch(x)
    with pytest.raises(orchmllm.CommunicationError, match=fault.format("combine") + "its tensor"):
        d.combine(torch.zeros(d.output_rows + 1))
    with pytest.raises(orchmllm.CommunicationError, match="scalar"):
        d.dispatch(torch.tensor(1.0))
    with pytest.raises(orchmllm.CommunicationError, match="it passed a list"):
        d.dispatch([1.0])  # type: ignore[arg-type]
    # What the constructor cannot check without the group is raised by the first exchange.
    shifted = orchmllm.torch.Dispatcher(plan, (rank + 1) % WORLD, rows)
    with pytest.raises(orchmllm.CommunicationError,
                       match=fault.format("dispatch") + "rank is 1, but this process is rank 0"):
        shifted.dispatch(torch.zeros(shifted.input_rows))
    for bad, text in ((orchmllm.torch.Dispatcher(plan, 7, rows), r"rank is 7, must be in \[0, 4"),
                      (orchmllm.torch.Dispatcher(plan, rank, rows[:3]), "rows has 3 entries"),
                      (orchmllm.torch.Dispatcher(orchmllm.balance([0, 1, 2], [5, 6]), 0),
                       "the plan is over 2 ranks, the process group has 4")):
        with pytest.raises(orchmllm.CommunicationError, match=text):
            bad.dispatch(torch.zeros(bad.input_rows))
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


H = 3  # hidden width of every row


def step_decl():
    return orchmllm.StageDeclarations(
        [orchmllm.EncoderStage("vision", "quadratic:1,1e-3", input_row_bytes=24,
                               output_row_bytes=24, split=True),
         orchmllm.EncoderStage("audio", "linear", "padded", input_row_bytes=24,
                               output_row_bytes=24)],
        orchmllm.LLMStage(cost="quadratic:1,1e-3", text_row_bytes=24))


def step_batch(step_seed: int, r: int):
    """Rank r's sampled batch of one step, and its pixel, audio and text rows (float64), all
    from a fixed seed, so every rank can rebuild every rank's data for the reference. Input
    rows are 2 per output row (the encoders pair rows), segments (vision) 1..3."""
    rng = np.random.default_rng(1000 * step_seed + r)
    ns = int(rng.integers(0 if r == 2 else 1, 5))
    nu = int(rng.integers(0, 2 * ns + 1)) if ns else 0
    big = 8 if r == 0 else 1
    modality = rng.integers(0, 2, nu)
    segments = np.where(modality == 0, rng.integers(1, 4, nu), 1)
    tokens = rng.integers(1, 6 * big, nu) * segments
    batch = orchmllm.LocalBatch(rng.integers(0, 30, ns), modality, rng.integers(0, max(ns, 1), nu),
                                4 * tokens, 2 * tokens, tokens, segments)
    inputs = [torch.from_numpy(rng.standard_normal((int(2 * tokens[modality == k].sum()), H)))
              for k in range(2)]
    text = torch.from_numpy(rng.standard_normal((int(batch.text_tokens.sum()), H)))
    return batch, inputs, text


def encode(k: int, x: "torch.Tensor") -> "torch.Tensor":
    """Encoder k: every pair of input rows -> one output row, elementwise (exact anywhere)."""
    pairs = x.reshape(-1, 2, H)
    return torch.tanh(pairs[:, 0] * (0.7 + k) - pairs[:, 1] * 0.3)


def sample_loss(seq: "torch.Tensor") -> "torch.Tensor":
    pos = torch.arange(seq.shape[0], dtype=torch.float64)[:, None]
    return (torch.sin(seq) * torch.cos(0.1 * pos + 0.3 * torch.arange(H))).sum()


def reference(step_seed: int, world: int):
    """Without balancing, in one process: every sample's loss and every rank's input grads."""
    losses, grads = [], []
    for r in range(world):
        batch, inputs, text = step_batch(step_seed, r)
        inputs = [x.clone().requires_grad_() for x in inputs]
        outs = [encode(k, inputs[k]) for k in range(2)]
        tok = batch.llm_tokens
        start = [np.concatenate([[0], np.cumsum(tok[batch.modality == k])]) for k in range(2)]
        text_at = np.concatenate([[0], np.cumsum(batch.text_tokens)])
        total = torch.zeros((), dtype=torch.float64)
        for s in range(batch.num_samples):
            parts = [text[text_at[s]:text_at[s + 1]]]
            for i in np.flatnonzero(batch.parent == s):
                k = int(batch.modality[i])
                j = int(np.sum(batch.modality[:i] == k))  # its place in the modality-k payload
                parts.append(outs[k][start[k][j]:start[k][j + 1]])
            loss = sample_loss(torch.cat(parts))
            losses.append(loss.detach())
            total = total + loss
        if inputs[0].numel() + inputs[1].numel():
            total.backward()
        grads.append([x.grad if x.grad is not None else torch.zeros_like(x) for x in inputs])
    return losses, grads


def balanced_step(sd: "orchmllm.torch.StepDispatchers", inputs, text):
    """One balanced forward and backward with the step's dispatchers; returns the losses of
    this rank's LLM samples and the input gradients on this rank."""
    inputs = [x.clone().requires_grad_() for x in inputs]
    outs = []
    for k in range(2):
        received = sd.encoder_inputs[k].dispatch(inputs[k])
        assert received.shape[0] == int(sd.encoder_views[k].input_rows.sum())
        outs.append(sd.encoder_outputs[k].dispatch(encode(k, received)))
    # Every sequence from one cat of every output: each exchange is in the graph on every rank.
    seq, cu = sd.llm_input(outs, sd.text.dispatch(text))
    losses = [sample_loss(seq[cu[s]:cu[s + 1]]) for s in range(len(cu) - 1)]
    sum(losses, seq.sum() * 0).backward()
    return [l.detach() for l in losses], [x.grad for x in inputs]


def same_step(a: "orchmllm.StepPlan", b: "orchmllm.StepPlan", rank: int) -> None:
    plans = [(a.llm_plan(), b.llm_plan())] + [
        (a.encoder_plan(k, kind), b.encoder_plan(k, kind))
        for k in range(2) for kind in ("input", "lifted", "output", "gradient")]
    for p, q in plans:
        assert np.array_equal(p.dst_rank, q.dst_rank) and np.array_equal(p.dst_slot, q.dst_slot)
    for name, k in (("encoder_input", 0), ("encoder_input", 1), ("text", 0),
                    ("encoder_output", 0), ("encoder_output", 1), ("encoder_gradient", 1)):
        x, y = a.all_to_all(name, rank, k), b.all_to_all(name, rank, k)
        for f in ("send_splits", "recv_splits", "send_order", "recv_order", "output_items"):
            assert np.array_equal(getattr(x, f), getattr(y, f)), (name, k, f)


def check_step(rank: int, world: int = WORLD) -> int:
    """plan_step_dispatchers moves inputs -> encoders -> LLM ranks and gradients back: the
    losses and input gradients equal those without balancing, exactly (float64). And the
    asynchronous planner gives the synchronous plans."""
    decl = step_decl()
    steps = (1, 2, 3)
    with orchmllm.torch.AsyncStepPlanner(decl, gpus_per_node=2) as planner:
        planner.submit(step_batch(steps[0], rank)[0])
        for t, step_seed in enumerate(steps):
            batch, inputs, text = step_batch(step_seed, rank)
            sd = orchmllm.torch.plan_step_dispatchers(decl, batch, gpus_per_node=2)
            if t + 1 < len(steps):  # step t + 1 is planned while step t "trains"
                planner.submit(step_batch(steps[t + 1], rank)[0])
            # Long videos are cut: the vision stage runs more units than sub-items.
            assert sd.step.encoder_plan(0).num_items > sd.meta.modality(0)["parent"].shape[0]
            losses, grads = balanced_step(sd, inputs, text)
            ref_losses, ref_grads = reference(step_seed, world)
            for s, loss in zip(sd.llm_view.samples, losses):
                assert torch.equal(loss, ref_losses[int(s)]), (step_seed, int(s))
            for k in range(2):
                assert torch.equal(grads[k], ref_grads[rank][k]), (step_seed, k)
            asynchronous = planner.next()
            same_step(asynchronous.step, sd.step, rank)
            assert np.array_equal(asynchronous.meta.text_tokens, sd.meta.text_tokens)
        assert planner.pending == 0
        with pytest.raises(RuntimeError, match="no step is pending"):
            planner.next()
    # A Dispatcher from any AllToAll: the gradient route undoes the output route.
    k = 0
    out = orchmllm.torch.Dispatcher(sd.step.all_to_all("encoder_output", rank, k), rank)
    back = orchmllm.torch.Dispatcher(sd.step.all_to_all("encoder_gradient", rank, k), rank)
    rows = torch.arange(out.input_rows * 2, dtype=torch.float64).reshape(-1, 2) + 1000 * rank
    assert torch.equal(back.dispatch(out.dispatch(rows)), rows)
    assert torch.equal(out.combine(out.dispatch(rows)), rows)
    with pytest.raises(ValueError, match="rows are given with an AllToAll"):
        orchmllm.torch.Dispatcher(sd.step.all_to_all("text", rank), rank, rows=[1])
    # Malformed metadata raises the same error on every rank (no rank left in a collective).
    bad = orchmllm.LocalBatch([1], [0], [0 if rank != 1 else 3], [2], [2], [1])
    with pytest.raises(orchmllm.InvalidArgumentError, match="rank 1: sub-item 0 names parent"):
        orchmllm.torch.plan_step_dispatchers(decl, bad)
    # An error while planning in the background is raised by the next() taking that step.
    capped = orchmllm.StageDeclarations(step_decl().encoders, orchmllm.LLMStage(
        cost="quadratic:1,1e-3", text_row_bytes=24, cap=1))
    with orchmllm.torch.AsyncStepPlanner(capped, max_pending=1) as planner:
        planner.submit(step_batch(1, rank)[0])
        with pytest.raises(RuntimeError, match="1 steps are already pending"):
            planner.submit(step_batch(2, rank)[0])  # raises before its collective, everywhere
        with pytest.raises(orchmllm.InfeasibleError, match="stage 'llm'"):
            planner.next()
    # Declarations that differ on one rank: the same error on every rank, naming it.
    other = step_decl() if rank != 3 else orchmllm.StageDeclarations(
        step_decl().encoders, orchmllm.LLMStage(cost="linear", text_row_bytes=24))
    with pytest.raises(orchmllm.InvalidArgumentError, match="rank 3 declared other stages"):
        orchmllm.torch.gather_step_metadata(step_batch(1, rank)[0], other)
    return len(steps)


def worker(rank: int, store: str, results: str) -> None:
    torch.set_num_threads(1)
    os.environ["ORCHMLLM_TIMEOUT_MS"] = "60000"  # a defect fails the test instead of hanging it
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=WORLD)
    try:
        import orchmllm.torch  # noqa: F401 (the attribute orchmllm.torch)
        cases = check_plans(rank)
        check_errors(rank)
        check_gather_lengths(rank, None, range(WORLD))
        steps = check_step(rank)
        # The trainer's own groups: pairs {0, 2} and {1, 3}, and one group per rank (D = 1).
        pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        singles = [dist.new_group([r]) for r in range(WORLD)]
        pair, members = pairs[rank % 2], [rank % 2, rank % 2 + 2]
        cases += check_plans(dist.get_rank(pair), pair, 2, range(100, 106))
        check_gather_lengths(rank, pair, members)
        cases += check_plans(0, singles[rank], 1, range(200, 204))
        swapped = orchmllm.torch.Dispatcher(random_case(300, 2)[3], 1 - dist.get_rank(pair),
                                            group=pair)
        with pytest.raises(orchmllm.CommunicationError,
                           match="rank 0 cannot take part .*: rank is 1, but this process is rank 0"):
            swapped.dispatch(torch.zeros(swapped.input_rows))
        dist.barrier()
        Path(results, f"rank{rank}").write_text(f"{cases} {steps}")
    finally:
        dist.destroy_process_group()


def test_four_gloo_ranks(tmp_path):
    mp.spawn(worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    done = sorted(p.name for p in tmp_path.glob("rank*"))
    assert done == [f"rank{r}" for r in range(WORLD)], done
    # 12 plans over 4 ranks, 6 over pairs, 4 over single ranks, 3 steps, on every rank.
    assert all((tmp_path / f"rank{r}").read_text() == "22 3" for r in range(WORLD))


def test_import_orchmllm_does_not_import_torch():
    code = "import sys, orchmllm; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
