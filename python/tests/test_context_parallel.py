"""orchmllm.context_parallel and orchmllm.torch.ContextParallelGroups: the plan is the CLI's
(`orchmllm-bench plan --cp-sizes`, row for row), every rank's shards cover every sample once
with their rows where the chunks' all_to_all puts them, the groups are the ones
ContextParallelGroups makes, bad arguments raise; and over 4 gloo ranks a causal attention
model run on the shards (a reference CP attention: each group all-gathers its keys and values,
exactly) gives the loss and the gradients of the unsharded run."""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import orchmllm
import orchmllm.torch  # noqa: F401 (ContextParallelGroups, context_parallel_blocks)

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # .ci/install-deps installs torch into .venv
    raise ImportError(f"orchmllm.torch's tests need torch: run bash .ci/install-deps ({e})")

WORLD = 4


def batch(seed: int, ranks: int, per_rank: int = 3):
    """offsets and lengths: mostly short samples, some long enough to shard."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, per_rank + 1, size=ranks)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    lengths = np.where(rng.random(n) < 0.25, rng.integers(120, 260, size=n),
                       rng.integers(2, 40, size=n)).astype(np.int64)
    return offsets, lengths


# Attention-heavy seconds so that the long samples shard on 4 ranks.
COST = orchmllm.CpCost(constant=1e-4, linear=1e-5, attention=1e-5, kv_bytes_per_token=64,
                       ring_rounds=2)


def test_shards_cover_every_sample_once_where_the_rows_arrive():
    for seed in range(20):
        ranks = 4 + seed % 5
        offsets, lengths = batch(seed, ranks)
        sizes = (1, 2, 4) if seed % 2 else (1, 2)
        micro = 1 + seed % 3
        plan = orchmllm.context_parallel(offsets, lengths, COST, sizes=sizes, gpus_per_node=4,
                                         micro_batches=micro)
        assert plan.makespan >= plan.lower_bound * (1 - 1e-12)
        assert plan.micro_batches == micro and plan.objective >= plan.makespan * (1 - 1e-12)
        cells = plan.cell_offsets
        blocks = set(orchmllm.torch.context_parallel_blocks(sizes, ranks, 4))
        covered = [np.zeros(int(l), dtype=np.int64) for l in lengths]
        for r in range(ranks):
            a2a = plan.chunks.all_to_all(r, rows=plan.chunk_rows)
            received = int(a2a.recv_splits.sum())
            at = 0
            for s in plan.shards(r):
                assert s.group[s.position] == r
                assert len(s.group) == s.group_size == int(plan.group_size[s.item])
                if s.group_size > 1:
                    assert s.group in blocks
                assert s.rows == (at, at + s.tokens)
                # The shard's rows lie in its micro-batch's cell of this rank.
                first_id = int(plan.chunks.dst_offsets[r])
                cell = r * micro + s.micro_batch
                assert s.micro_batch == int(plan.micro_batch[s.item])
                row_of = np.concatenate([[0], np.cumsum(plan.chunk_rows[plan.chunks.sources])])
                assert row_of[cells[cell]] - row_of[first_id] <= s.rows[0]
                assert s.rows[1] <= row_of[cells[cell + 1]] - row_of[first_id]
                at += s.tokens
                pos = s.positions()
                assert len(pos) == s.tokens
                covered[s.item][pos] += 1
            assert at == received == int(plan.tokens[r])
        assert all((c == 1).all() for c in covered)


def test_the_plan_is_the_clis(tmp_path, bench):
    offsets, lengths = batch(7, 8, 5)
    rows = ["rank,slot,length"] + [f"{r},{g - offsets[r]},{lengths[g]}" for r in range(8)
                                   for g in range(offsets[r], offsets[r + 1])]
    (tmp_path / "items.csv").write_text("\n".join(rows) + "\n")
    # The CLI's --cp-model 7b (bench/support/models.hpp: a 32,000-token head) at --cp-flops.
    cost = orchmllm.CpCost.from_transformer(vocab=32000, flops_per_second=989e12 * 0.5)
    subprocess.run([str(bench), "plan", "--items", str(tmp_path / "items.csv"), "--ranks", "8",
                    "--gpus-per-node", "4", "--cp-sizes", "1,2,4", "--out",
                    str(tmp_path / "plan.csv")], check=True, capture_output=True)
    got = np.loadtxt(tmp_path / "plan.csv", delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    plan = orchmllm.context_parallel(offsets, lengths, cost, sizes=(1, 2, 4), gpus_per_node=4)
    items = np.repeat(np.arange(len(lengths)), np.diff(plan.chunk_offsets))
    ranks = np.searchsorted(offsets, items, side="right") - 1
    want = np.stack([ranks, items - offsets[ranks], plan.chunks.dst_rank, plan.chunks.dst_slot,
                     plan.chunk_begin, plan.chunk_end], axis=1)
    assert np.array_equal(got, want)


def test_bad_arguments_raise():
    offsets, lengths = batch(1, 4)
    with pytest.raises(TypeError, match="CpCost"):
        orchmllm.context_parallel(offsets, lengths, "linear")
    with pytest.raises(TypeError, match="sizes must be integers"):
        orchmllm.context_parallel(offsets, lengths, COST, sizes=(1, 2.5))
    with pytest.raises(orchmllm.InvalidArgumentError, match="must increase"):
        orchmllm.context_parallel(offsets, lengths, COST, sizes=(2, 1))
    with pytest.raises(orchmllm.InvalidArgumentError, match="must be finite and >= 0"):
        orchmllm.CpCost(attention=-1.0)
    with pytest.raises(orchmllm.InfeasibleError, match="token cap 10"):
        orchmllm.context_parallel(offsets, lengths, COST, token_cap=10)
    with pytest.raises(orchmllm.InvalidArgumentError, match="not both"):
        orchmllm.context_parallel(offsets, lengths, COST, gpus_per_node=2,
                                  node_of_rank=[0, 0, 1, 1])
    assert "CpCost(constant=0.0001" in repr(COST)
    t = orchmllm.CpCost.from_transformer(hidden=256, layers=2, heads=4, ffn_hidden=512,
                                         flops_per_second=1e12)
    assert t.ring_rounds == 6 and t.kv_bytes_per_token == 2 * 256 * 2
    assert t(100) > t(10) > 0


# ---------------------------------------------------------------------------------------------
# The model: token and position embeddings, one causal attention layer, a linear head, summed
# next-token cross entropy. float64 so that sharded and whole runs agree to rounding.

V, H = 31, 8


def make_params(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    shapes = {"emb": (V, H), "wq": (H, H), "wk": (H, H), "wv": (H, H), "wo": (H, V)}
    return {k: (torch.randn(*s, generator=g, dtype=torch.float64) * 0.3).requires_grad_()
            for k, s in shapes.items()}


def features(p, tokens, positions):
    freq = torch.arange(1, H + 1, dtype=torch.float64) / H
    return p["emb"][tokens] + torch.sin(positions.to(torch.float64)[:, None] * freq)


def attention_loss(p, q_tokens, q_pos, labels, k, v, k_pos):
    """Summed cross entropy of the queries (q_tokens at q_pos) over keys k, v at k_pos (causal:
    a query attends the keys at or before its position; padded keys have position -1 and are
    dropped by the caller)."""
    q = features(p, q_tokens, q_pos) @ p["wq"]
    scores = (q @ k.T) / math.sqrt(H)
    scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    out = torch.softmax(scores, dim=1) @ v
    logits = out @ p["wo"]
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-1, reduction="sum")


def sample_tokens(g: int, length: int) -> torch.Tensor:
    return (torch.arange(length, dtype=torch.int64) * 7 + g * 13) % V


def labels_of(tokens: torch.Tensor) -> torch.Tensor:
    return torch.cat([tokens[1:], torch.tensor([-1], dtype=torch.int64)])


def whole_loss(p, lengths):
    total = torch.zeros((), dtype=torch.float64)
    for g, l in enumerate(lengths):
        tok = sample_tokens(g, int(l))
        pos = torch.arange(int(l))
        x = features(p, tok, pos)
        total = total + attention_loss(p, tok, pos, labels_of(tok), x @ p["wk"], x @ p["wv"], pos)
    return total / int(sum(int(l) - 1 for l in lengths))


def position_tokens(plan, item: int, c: int, i: int, length: int) -> np.ndarray:
    """Positions held by position i of sample item's group of c (its chunks i and 2c - 1 - i)."""
    first = int(plan.chunk_offsets[item])
    parts = [np.arange(plan.chunk_begin[first + k], plan.chunk_end[first + k]) for k in
             (i, 2 * c - 1 - i)]
    return np.concatenate(parts)


class GroupAllGather(torch.autograd.Function):
    """All-gather within a group, differentiable: the gradient of a rank's input is the sum over
    the group of the gradients of its copy (an all-reduce, then this rank's slice)."""

    @staticmethod
    def forward(ctx, x, group):
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        ctx.group, ctx.rank = group, dist.get_rank(group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank], None


def sharded_loss(p, plan, lengths, offsets, rank, groups):
    """This rank's share of the loss: its samples' tokens and labels moved along the chunks'
    plan, each shard's queries over the keys and values its group all-gathers."""
    mine = range(int(offsets[rank]), int(offsets[rank + 1]))
    local = torch.cat([torch.stack([sample_tokens(g, int(lengths[g])),
                                    labels_of(sample_tokens(g, int(lengths[g])))], dim=1)
                       for g in mine])
    d = orchmllm.torch.Dispatcher(plan.chunks, rank, rows=plan.chunk_rows)
    rows = d.dispatch(local)
    total = torch.zeros((), dtype=torch.float64)
    for s in plan.shards(rank):
        tok, lab = rows[s.rows[0]:s.rows[1], 0], rows[s.rows[0]:s.rows[1], 1]
        pos = torch.from_numpy(s.positions())
        x = features(p, tok, pos)
        k, v = x @ p["wk"], x @ p["wv"]
        if s.group_size == 1:
            total = total + attention_loss(p, tok, pos, lab, k, v, pos)
            continue
        length = int(lengths[s.item])
        held = [position_tokens(plan, s.item, s.group_size, i, length)
                for i in range(s.group_size)]
        width = max(len(h) for h in held)
        pad = width - len(pos)
        kv = torch.cat([torch.cat([k, v], dim=1),
                        torch.zeros(pad, 2 * H, dtype=torch.float64)])
        gathered = GroupAllGather.apply(kv, groups.group(s.group))
        keys = torch.cat([t[:len(h)] for t, h in zip(gathered, held)])
        k_pos = torch.from_numpy(np.concatenate(held))
        total = total + attention_loss(p, tok, pos, lab, keys[:, :H], keys[:, H:], k_pos)
    return total / int(sum(int(l) - 1 for l in lengths))


def worker(rank: int, store: str, results: str) -> None:
    torch.set_num_threads(1)
    os.environ["ORCHMLLM_TIMEOUT_MS"] = "60000"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        import orchmllm.torch  # noqa: F401
        checked = 0
        configs = [((1, 2, 4), 4), ((1, 2), 2), ((2,), 2), ((1, 2, 4), 0)]
        group_sets = {}
        for seed, (sizes, gpus) in enumerate(configs * 2):
            key = (sizes, gpus)
            if key not in group_sets:
                group_sets[key] = orchmllm.torch.ContextParallelGroups(sizes, gpus)
            offsets, lengths = batch(100 + seed, WORLD)
            plan = orchmllm.context_parallel(offsets, lengths, COST, sizes=sizes,
                                             gpus_per_node=gpus)
            params = make_params(seed)
            loss = sharded_loss(params, plan, lengths, offsets, rank, group_sets[key])
            loss.backward()
            grads = torch.cat([params[k].grad.flatten() for k in sorted(params)])
            both = torch.cat([loss.detach().reshape(1), grads])
            dist.all_reduce(both)
            ref_params = make_params(seed)
            ref = whole_loss(ref_params, lengths)
            ref.backward()
            ref_grads = torch.cat([ref_params[k].grad.flatten() for k in sorted(ref_params)])
            assert torch.allclose(both[0], ref.detach(), rtol=1e-12, atol=1e-12), \
                (seed, float(both[0]), float(ref))
            assert torch.allclose(both[1:], ref_grads, rtol=1e-9, atol=1e-12), seed
            checked += 1 if plan.sharded > 0 else 0
        with pytest.raises(ValueError, match="not a context-parallel group"):
            group_sets[((1, 2), 2)].group((1, 2))
        dist.barrier()
        Path(results, f"rank{rank}").write_text(str(checked))
    finally:
        dist.destroy_process_group()


def test_gradients_equal_the_unsharded_run_on_four_gloo_ranks(tmp_path):
    mp.spawn(worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    done = sorted(p.name for p in tmp_path.glob("rank*"))
    assert done == [f"rank{r}" for r in range(WORLD)], done
    # Every configuration's batch sharded some sample (else the test would not test CP).
    assert all(int((tmp_path / f"rank{r}").read_text()) == 8 for r in range(WORLD))
