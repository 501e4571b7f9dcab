"""orchmllm.torch on 4 gloo ranks when one rank differs: a stale plan, other rows, another rank
argument, other declarations, another dtype, trailing shape, direction or row count, a bad
gather input each raise the same CommunicationError on every rank, naming that rank, and leave
the group usable (nothing moved). Exchanges whose output a rank leaves out of its loss never
hang: StepDispatchers.llm_input keeps them in the graph, an encoder that returns a fresh tensor
still runs its backward, a rank that skips a backward or runs without autograd raises on every
rank. verify=False agrees once per step. A rank that never comes ends the others' wait at the
deadline (ORCHMLLM_TIMEOUT_MS)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, List

import numpy as np
import pytest

import orchmllm

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from test_torch import (H, encode, random_case, received_items, rows_of, sample_loss,  # noqa: E402
                        step_decl)

WORLD = 4


def raises_everywhere(pattern: str, call: Callable[[], object]) -> None:
    with pytest.raises(orchmllm.CommunicationError, match=pattern):
        call()


def healthy(rank: int) -> None:
    """A correct exchange after a failed one: the group is usable and in step."""
    offsets, _, rows, plan = random_case(3, WORLD)
    d = orchmllm.torch.Dispatcher(plan, rank, rows)
    local = np.arange(offsets[rank], offsets[rank + 1])
    assert torch.equal(d.dispatch(rows_of(local, rows)), rows_of(received_items(plan, rank), rows))


def check_one_rank_differs(rank: int) -> int:
    offsets, lengths, rows, plan = random_case(0, WORLD)
    local = np.arange(offsets[rank], offsets[rank + 1])
    x = rows_of(local, rows, (3, 2))
    d = orchmllm.torch.Dispatcher(plan, rank, rows)
    exchange = "rank 0 runs the forward dispatch of 'Dispatcher', rank {} runs the forward {} of "
    cases = 0

    # A stale plan on rank 2 (another plan of the same items).
    stale = orchmllm.balance(offsets, lengths, cost="linear", algorithm="lpt")
    other = orchmllm.torch.Dispatcher(stale if rank == 2 else plan, rank, rows)
    assert other.fingerprint != d.fingerprint or rank != 2
    raises_everywhere(exchange.format(2, "dispatch") + r"'Dispatcher' along another plan or "
                      r"route \(fingerprint", lambda: other.dispatch(x))
    # Other rows on rank 1 (one item one row longer).
    more = rows.copy()
    more[int(offsets[-1]) - 1] += 1
    other = orchmllm.torch.Dispatcher(plan, rank, more if rank == 1 else rows)
    raises_everywhere(exchange.format(1, "dispatch") + "'Dispatcher' along another plan",
                      lambda: other.dispatch(rows_of(local, more if rank == 1 else rows, (3, 2))))
    # Another rank argument on rank 3, for a plan and for a step's AllToAll.
    other = orchmllm.torch.Dispatcher(plan, 0 if rank == 3 else rank, rows)
    raises_everywhere("rank 3 cannot take part in the forward dispatch of 'Dispatcher': rank is "
                      "0, but this process is rank 3", lambda: other.dispatch(x))
    cases += 3
    # Another dtype on rank 2, another trailing shape on rank 1, a wrong row count on rank 3.
    raises_everywhere(exchange.format(2, "dispatch") + "'Dispatcher' with a tensor of dtype "
                      "torch.float32 where rank 0's is torch.float64",
                      lambda: d.dispatch(x.float() if rank == 2 else x))
    raises_everywhere(exchange.format(1, "dispatch") + r"'Dispatcher' with a tensor of trailing "
                      r"shape \(2, 3\) where rank 0's is \(3, 2\)",
                      lambda: d.dispatch(x.reshape(-1, 2, 3) if rank == 1 else x))
    rows3 = int(rows[offsets[3]:offsets[4]].sum())
    raises_everywhere(f"rank 3 cannot take part in the forward dispatch of 'Dispatcher': its "
                      f"tensor has {rows3 + 1} rows in its first dimension, but the plan's items "
                      f"on rank 3 have {rows3} rows",
                      lambda: d.dispatch(torch.cat([x, x.new_zeros(1, 3, 2)]) if rank == 3 else x))
    # Rank 2 combines where the others dispatch.
    raises_everywhere(exchange.format(2, "combine") + "'Dispatcher' so they run different "
                      "collectives", lambda: d.combine(rows_of(received_items(plan, rank), rows,
                                                               (3, 2))) if rank == 2 else
                      d.dispatch(x))
    cases += 4
    # Gathers: a bad argument on one rank.
    raises_everywhere("rank 1 cannot take part in gather_lengths: local_lengths must hold "
                      "integers", lambda: orchmllm.torch.gather_lengths(
                          np.ones(2) if rank == 1 else np.ones(2, np.int64)))
    raises_everywhere("rank 2 cannot take part in gather_step_metadata: batch must be an "
                      "orchmllm.LocalBatch, got list", lambda: orchmllm.torch.gather_step_metadata(
                          [] if rank == 2 else orchmllm.LocalBatch([3]), step_decl()))
    # Other declarations on rank 1 (through plan_step_dispatchers).
    decl = step_decl() if rank != 1 else orchmllm.StageDeclarations(
        step_decl().encoders, orchmllm.LLMStage(cost="linear", text_row_bytes=24))
    with pytest.raises(orchmllm.InvalidArgumentError, match="rank 1 declared other stages"):
        orchmllm.torch.plan_step_dispatchers(decl, orchmllm.LocalBatch([3]))
    # An AllToAll of another rank, on rank 3.
    sd = orchmllm.torch.plan_step_dispatchers(step_decl(), orchmllm.LocalBatch([3 + rank]))
    text = orchmllm.torch.Dispatcher(sd.step.all_to_all("text", 0 if rank == 3 else rank), rank)
    raises_everywhere("rank 3 cannot take part in the forward dispatch of 'Dispatcher': its "
                      "AllToAll was built for rank 0, but it exchanges as rank 3",
                      lambda: text.dispatch(torch.zeros(3 + rank, H)))
    healthy(rank)
    return cases + 4


# ---------------------------------------------------------------------------------------------
# Steps where some ranks hold no images.

def few_images(r: int) -> orchmllm.LocalBatch:
    """Rank 0 samples two images (one big, cut in three), the others text only."""
    if r == 0:
        return orchmllm.LocalBatch([5, 2], modality=[0, 0], parent=[0, 1],
                                   encoder_length=[4 * 12, 4 * 2], input_rows=[24, 4],
                                   llm_tokens=[12, 2], segments=[3, 1])
    return orchmllm.LocalBatch([4 + r, 1])


def few_inputs(r: int):
    g = torch.Generator().manual_seed(r)
    batch = few_images(r)
    pixels = torch.randn(int(batch.input_rows.sum()), H, generator=g, dtype=torch.float64)
    text = torch.randn(int(batch.text_tokens.sum()), H, generator=g, dtype=torch.float64)
    return batch, pixels, text


def reference_losses():
    """Every sample's loss and rank 0's pixel gradient, unbalanced, in one process (samples
    numbered rank-major); each sequence is its text rows, then its images' output rows."""
    losses, grad = [], None
    for r in range(WORLD):
        batch, pixels, text = few_inputs(r)
        pixels.requires_grad_()
        out = encode(0, pixels)
        at = np.concatenate([[0], np.cumsum(batch.llm_tokens)])
        text_at = np.concatenate([[0], np.cumsum(batch.text_tokens)])
        total = torch.zeros((), dtype=torch.float64)
        for s in range(batch.num_samples):
            parts = [text[text_at[s]:text_at[s + 1]]]
            parts += [out[at[i]:at[i + 1]] for i in np.flatnonzero(batch.parent == s)]
            loss = sample_loss(torch.cat(parts))
            losses.append(loss.detach())
            total = total + loss
        if r == 0:
            total.backward()
            grad = pixels.grad
    return losses, grad


def balanced_forward(sd, pixels, text, encoder):
    """The step's exchanges: vision inputs, the encoder, outputs to the LLM ranks, the text
    (audio: none anywhere, so its outputs are 0 rows on every rank)."""
    rows = sd.encoder_inputs[0].dispatch(pixels)
    outs = [sd.encoder_outputs[0].dispatch(encoder(rows)),
            sd.encoder_outputs[1].dispatch(torch.zeros(0, H, dtype=torch.float64))]
    return outs, sd.text.dispatch(text)


def check_graph_safety(rank: int) -> int:
    batch, pixels, text = few_inputs(rank)
    ref_losses, ref_grad = reference_losses()
    sample_offsets = np.concatenate([[0], np.cumsum([few_images(r).num_samples
                                                     for r in range(WORLD)])])

    def step(encoder: Callable) -> None:
        sd = orchmllm.torch.plan_step_dispatchers(step_decl(), batch)
        holders = [r for r in range(WORLD) if sd.step.llm_plan().dst_rank[0] == r]
        assert len(holders) == 1  # the big image's sample is on one LLM rank: the others have none
        x = pixels.clone().requires_grad_()
        outs, llm_text = balanced_forward(sd, x, text, encoder)
        seq, cu = sd.llm_input(outs, llm_text)
        losses = [sample_loss(seq[cu[s]:cu[s + 1]]) for s in range(len(cu) - 1)]
        (seq.sum() * 0 + sum(losses, torch.zeros((), dtype=torch.float64))).backward()
        for s, loss in zip(sd.llm_view.samples, losses):
            assert torch.allclose(loss, ref_losses[int(s)], rtol=1e-13, atol=0), int(s)
        if rank == 0:
            assert torch.allclose(x.grad, ref_grad, rtol=1e-12, atol=1e-14)
        else:
            assert x.grad is None or x.grad.numel() == 0

    # The safe assembly: every rank runs every backward exchange.
    step(lambda rows: encode(0, rows))
    # An encoder that returns a fresh tensor for an empty input (no grad there): the exchange
    # still runs its backward on that rank (its output requires grad because others' do).
    step(lambda rows: rows.new_zeros(0, H) if rows.shape[0] == 0 else encode(0, rows))

    # Slicing per sample without one cat: ranks without the images leave the vision outputs
    # out of their loss and skip that backward exchange; the ranks running it raise at the
    # others' next orchmllm collective, every rank the same error (no hang).
    sd = orchmllm.torch.plan_step_dispatchers(step_decl(), batch)

    def sliced() -> None:
        outs, llm_text = balanced_forward(sd, pixels.clone().requires_grad_(), text,
                                          lambda rows: encode(0, rows))
        v = sd.llm_view
        text_at = np.concatenate([[0], np.cumsum(sd.meta.text_tokens[v.samples])])
        total = torch.zeros((), dtype=torch.float64)
        for s in range(len(v.samples)):
            parts = [llm_text[text_at[s]:text_at[s + 1]]]
            for e in range(v.sub_item_offsets[s], v.sub_item_offsets[s + 1]):
                k, j = v.sub_item_modality[e], v.sub_item_index[e]
                parts.append(outs[k][v.row_offsets[k][j]:v.row_offsets[k][j + 1]])
            total = total + sample_loss(torch.cat(parts))
        if total.requires_grad:
            total.backward()

    pattern = (r"ranks run different operations: rank \d runs (the backward combine of "
               r"'encoder_output\[0\]'|gather_lengths), rank \d runs (the backward combine of "
               r"'encoder_output\[0\]'|gather_lengths) so their backward passes differ: a rank "
               r"whose loss does not depend on an exchange's output .*; rank \d never ran the "
               r"backward of the dispatch of 'encoder_output\[0\]' \(its output was freed")
    with pytest.raises(orchmllm.CommunicationError, match=pattern):
        sliced()
        orchmllm.torch.gather_lengths(np.zeros(0, np.int64))  # the next step's metadata
    del sd
    # A rank without autograd where the others record gradients.
    offsets, _, rows, plan = random_case(0, WORLD)
    d = orchmllm.torch.Dispatcher(plan, rank, rows)
    x = rows_of(np.arange(offsets[rank], offsets[rank + 1]), rows).requires_grad_()
    with torch.set_grad_enabled(rank != 3):
        raises_everywhere("rank 3 runs the forward dispatch of 'Dispatcher' without autograd "
                          r"\(torch.no_grad or inference mode\) while rank 0's tensor requires "
                          "grad", lambda: d.dispatch(x))
    healthy(rank)
    return 4 + int(sample_offsets[-1] > 0)


def check_agree_once(rank: int) -> int:
    """verify=False: one all_reduce when the step's dispatchers are made, none per exchange;
    a stale step on one rank fails there, on every rank."""
    calls: List[int] = []
    real = dist.all_reduce

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    batch, pixels, text = few_inputs(rank)
    meta = orchmllm.torch.gather_step_metadata(batch, step_decl())
    step = orchmllm.plan_step(step_decl(), meta, rank=rank)
    dist.all_reduce = counted
    try:
        sd = orchmllm.torch.StepDispatchers(step, meta, rank, verify=False)
        assert len(calls) == 1
        outs, llm_text = balanced_forward(sd, pixels.clone().requires_grad_(), text,
                                          lambda rows: encode(0, rows))
        seq, cu = sd.llm_input(outs, llm_text)
        seq.sum().backward()
        assert len(calls) == 1, "exchanges after the step's agreement must not agree again"
    finally:
        dist.all_reduce = real
    # Rank 1 holds the step of other metadata (every rank's batch rotated by one).
    rotated = orchmllm.make_step_metadata([few_images((r + 1) % WORLD) for r in range(WORLD)], 2)
    stale = orchmllm.plan_step(step_decl(), rotated, rank=rank) if rank == 1 else step
    raises_everywhere("ranks run different operations: rank 0 runs the agreement on the step, "
                      r"rank 1 runs the agreement on the step of another step \(other routes",
                      lambda: orchmllm.torch.StepDispatchers(stale, meta, rank, verify=False))
    return 2


def worker(rank: int, store: str, results: str) -> None:
    torch.set_num_threads(1)
    os.environ["ORCHMLLM_TIMEOUT_MS"] = "60000"  # a defect fails the test instead of hanging it
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        import orchmllm.torch  # noqa: F401 (the attribute orchmllm.torch)
        cases = check_one_rank_differs(rank)
        cases += check_graph_safety(rank)
        cases += check_agree_once(rank)
        dist.barrier()
        Path(results, f"rank{rank}").write_text(str(cases))
    finally:
        dist.destroy_process_group()


def test_one_rank_differs(tmp_path):
    mp.spawn(worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    done = sorted(p.name for p in tmp_path.glob("rank*"))
    assert done == [f"rank{r}" for r in range(WORLD)], done
    counts = {(tmp_path / f"rank{r}").read_text() for r in range(WORLD)}
    assert len(counts) == 1, counts


def late_worker(rank: int, store: str, results: str) -> None:
    """Rank 3 never comes to the second exchange: the others raise at the deadline."""
    torch.set_num_threads(1)
    os.environ["ORCHMLLM_TIMEOUT_MS"] = "1500"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    import time

    import orchmllm.torch  # noqa: F401
    healthy(rank)
    if rank == 3:
        time.sleep(6)
        os._exit(0)  # the group is unusable after the others' timeout: leave without it
    offsets, _, rows, plan = random_case(3, WORLD)
    d = orchmllm.torch.Dispatcher(plan, rank, rows)
    start = time.monotonic()
    with pytest.raises(orchmllm.CommunicationError,
                       match=f"rank {rank}: the other ranks did not join the forward dispatch of "
                             r"'Dispatcher' within 1.5 s \(a rank failed, returned early"):
        d.dispatch(rows_of(np.arange(offsets[rank], offsets[rank + 1]), rows))
    waited = time.monotonic() - start
    assert 1.4 < waited < 5, waited
    Path(results, f"rank{rank}").write_text(f"{waited:.2f}")
    os._exit(0)


def test_a_rank_that_never_comes(tmp_path):
    mp.spawn(late_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD,
             join=True)
    assert sorted(p.name for p in tmp_path.glob("rank*")) == ["rank0", "rank1", "rank2"]


def test_default_timeout(monkeypatch):
    import datetime

    import orchmllm.torch as otorch
    monkeypatch.delenv("ORCHMLLM_TIMEOUT_MS", raising=False)
    assert otorch.default_timeout() == datetime.timedelta(minutes=5)
    monkeypatch.setenv("ORCHMLLM_TIMEOUT_MS", "2500")
    assert otorch.default_timeout() == datetime.timedelta(milliseconds=2500)
    monkeypatch.setenv("ORCHMLLM_TIMEOUT_MS", "0")
    assert otorch.default_timeout() is None
    for bad in ("-1", "5s", "1e3", " 100", "+5", "31536000001"):
        monkeypatch.setenv("ORCHMLLM_TIMEOUT_MS", bad)
        with pytest.raises(ValueError, match="ORCHMLLM_TIMEOUT_MS=.* is not an integer number "
                                             r"of milliseconds in \[0, 31536000000\]"):
            otorch.default_timeout()
    with pytest.raises(ValueError, match="outside"):
        otorch.Dispatcher(orchmllm.balance([0, 1], [1]), 0, timeout=-1.0)
