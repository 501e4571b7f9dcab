"""orchmllm.plan_step with micro-batches and loss tokens: a stage's cells are orchmllm.balance's
with the same micro-batch arguments (then map_bins), every rank receives its items grouped by
micro-batch under the cap, and the step's loss tokens and loss scale are those of the metadata.
"""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
import torch
import torch.distributed as dist

import orchmllm
import orchmllm.torch as otorch
from test_step import D, G, K, batches

CAP = 40


def micro_declarations(vision_cap: int | None = None, **llm: object
                       ) -> orchmllm.StageDeclarations:
    vision = {} if vision_cap is None else dict(max_tokens_per_micro_batch=vision_cap,
                                                micro_batch_multiple=2)
    return orchmllm.StageDeclarations(
        [orchmllm.EncoderStage("vision", "quadratic:1,1e-3", input_row_bytes=24,
                               output_row_bytes=32, **vision),  # type: ignore[arg-type]
         orchmllm.EncoderStage("audio", "linear", "padded", input_row_bytes=16,
                               output_row_bytes=32)],
        orchmllm.LLMStage(cost="quadratic:1,2.5e-4", text_row_bytes=8,
                          **llm))  # type: ignore[arg-type]


@pytest.mark.parametrize("sync", ["micro-batch", "step"])
@pytest.mark.parametrize("seed", [1, 2])
def test_llm_cells_are_balance_with_micro_batches_then_map_bins(seed, sync):
    meta = orchmllm.make_step_metadata(batches(seed), K)
    seq = meta.sequence_lengths()
    cap = int(max(seq.max(), seq.sum() // (2 * D)))
    step = orchmllm.plan_step(micro_declarations(max_tokens_per_micro_batch=cap, sync=sync),
                              meta, G)
    out_bytes = np.zeros(meta.num_samples, np.int64)
    for k in range(K):
        m = meta.modality(k)
        np.add.at(out_bytes, m["parent"], m["llm_tokens"] * 32)
    want = orchmllm.map_bins(orchmllm.balance(
        meta.sample_offsets, seq, "quadratic:1,2.5e-4", bytes=meta.text_tokens * 8 + out_bytes,
        max_tokens_per_micro_batch=cap, sync=sync), G)
    np.testing.assert_array_equal(step.llm_plan().dst_rank, want.dst_rank)
    np.testing.assert_array_equal(step.llm_plan().dst_slot, want.dst_slot)
    M = step.micro_batches(K)
    assert M == want.micro_batches >= 1
    stats = want.statistics()
    report = step.stages()[K]
    assert report["micro_batches"] == M
    assert report["objective"] == pytest.approx(stats["objective"], rel=1e-12)
    assert report["objective_before"] == pytest.approx(stats["objective_before"], rel=1e-12)
    assert report["objective_lower_bound"] == pytest.approx(stats["objective_lower_bound"],
                                                            rel=1e-12)
    for r in range(D):
        samples = step.llm_view(r).samples
        ranges = [step.micro_batch(K, r, m) for m in range(M)]
        assert ranges == [want.micro_batch(r, m) for m in range(M)]
        assert ranges[0][0] == 0 and ranges[-1][1] == len(samples)
        for first, last in ranges:
            assert seq[samples[first:last]].sum() <= cap


def test_encoder_cells_keep_their_cap_and_count():
    # Two ranks of four samples with two images each (encoder lengths 4..24), one clip each.
    rng = np.random.default_rng(12)
    two = []
    for _ in range(2):
        lengths = rng.integers(4, 25, 8)
        two.append(orchmllm.LocalBatch(
            rng.integers(1, 30, 4), modality=[0] * 8 + [1], parent=[0, 0, 1, 1, 2, 2, 3, 3, 0],
            encoder_length=[*lengths, 50], input_rows=[*lengths, 50],
            llm_tokens=[*(lengths // 4), 5]))
    meta = orchmllm.make_step_metadata(two, K)
    step = orchmllm.plan_step(micro_declarations(vision_cap=CAP), meta, 2)
    M = step.micro_batches(0)
    assert M >= 2 and M % 2 == 0  # micro_batch_multiple=2
    assert step.micro_batches(1) == 0 and step.micro_batches(K) == 0
    lengths = meta.modality(0)["encoder_length"]
    seen = []
    for r in range(2):
        view = step.encoder_view(0, r)
        assert step.micro_batch(0, r, M - 1)[1] == len(view.sub_item)
        for m in range(M):
            first, last = step.micro_batch(0, r, m)
            assert lengths[view.sub_item[first:last]].sum() <= CAP
            seen.extend(view.sub_item[first:last].tolist())
    assert sorted(seen) == list(range(len(lengths)))


def test_loss_tokens_and_scale():
    bs = batches(4)
    meta = orchmllm.make_step_metadata(bs, K)
    np.testing.assert_array_equal(meta.loss_tokens, meta.text_tokens)  # the default
    rng = np.random.default_rng(9)
    labelled = [orchmllm.LocalBatch(b.text_tokens, b.modality, b.parent, b.encoder_length,
                                    b.input_rows, b.llm_tokens,
                                    loss_tokens=rng.integers(0, 50, b.num_samples))
                if r % 2 == 0 else b for r, b in enumerate(bs)]
    meta = orchmllm.make_step_metadata(labelled, K)
    want = np.concatenate([b.loss_tokens if b.loss_tokens is not None else b.text_tokens
                           for b in labelled])
    np.testing.assert_array_equal(meta.loss_tokens, want)
    seq = meta.sequence_lengths()
    step = orchmllm.plan_step(
        micro_declarations(max_tokens_per_micro_batch=int(max(seq.max(), seq.sum() // 16))),
        meta, G)
    N = int(want.sum())
    assert step.loss_tokens == N
    assert step.loss_scale() == step.loss_scale("mean") == D / N
    assert step.loss_scale("sum") == 1 / N
    M = step.micro_batches(K)
    for r in range(D):
        samples = step.llm_view(r).samples
        for m in range(M):
            first, last = step.micro_batch(K, r, m)
            assert step.loss_tokens_of(r, m) == want[samples[first:last]].sum()
    with pytest.raises(orchmllm.InvalidArgumentError, match="reduction"):
        step.loss_scale("max")
    with pytest.raises(orchmllm.InvalidArgumentError):
        step.loss_tokens_of(D, 0)
    with pytest.raises(orchmllm.InvalidArgumentError):
        step.loss_tokens_of(0, M)
    nothing = [orchmllm.LocalBatch([3, 4], loss_tokens=[0, 0])]
    empty = orchmllm.plan_step(orchmllm.StageDeclarations([]),
                               orchmllm.make_step_metadata(nothing, 0))
    assert empty.loss_tokens == 0 and empty.loss_scale() == 0.0


def test_words_carry_the_loss_tokens():
    b = orchmllm.LocalBatch([5, 7], [0], [1], [4], [4], [2], loss_tokens=[3, 7])
    back = orchmllm.LocalBatch.from_words(b.words(), 2, 1, b.num_loss_tokens)
    np.testing.assert_array_equal(back.loss_tokens, [3, 7])
    np.testing.assert_array_equal(back.text_tokens, [5, 7])
    plain = orchmllm.LocalBatch([5, 7], [0], [1], [4], [4], [2])
    assert plain.num_loss_tokens == 0 and plain.words().shape[0] == 2 + 6
    assert orchmllm.LocalBatch.from_words(plain.words(), 2, 1).loss_tokens is None
    with pytest.raises(ValueError, match="loss-token"):
        orchmllm.LocalBatch.from_words(b.words(), 2, 1, 1)
    with pytest.raises(ValueError):
        orchmllm.LocalBatch([5, 7], loss_tokens=[1, 2, 3])


def test_errors():
    meta = orchmllm.make_step_metadata(batches(1), K)
    step = orchmllm.plan_step(micro_declarations(max_tokens_per_micro_batch=10**6), meta, G)
    assert step.micro_batches(K) == 1
    with pytest.raises(orchmllm.InvalidArgumentError, match="stage 3 outside"):
        step.micro_batches(K + 1)
    with pytest.raises(orchmllm.InvalidArgumentError, match="no micro-batches"):
        step.micro_batch(1, 0, 0)
    with pytest.raises(orchmllm.InvalidArgumentError, match="outside"):
        step.micro_batch(K, 0, step.micro_batches(K))
    with pytest.raises(orchmllm.InvalidArgumentError):
        step.micro_batch(K, D, 0)
    with pytest.raises(ValueError, match="micro_batches must be"):
        orchmllm.LLMStage(micro_batches="many")
    with pytest.raises(TypeError):
        orchmllm.LLMStage(sync=1)  # type: ignore[arg-type]
    with pytest.raises(orchmllm.InvalidArgumentError, match="sync"):
        orchmllm.StageDeclarations([], orchmllm.LLMStage(sync="sometimes"))
    with pytest.raises(orchmllm.InvalidArgumentError):
        orchmllm.StageDeclarations([orchmllm.EncoderStage("v", split=True, micro_batches=2)])
    with pytest.raises(orchmllm.InvalidArgumentError, match="alone needs"):
        orchmllm.plan_step(micro_declarations(max_tokens_per_micro_batch=1), meta, G)
    with pytest.raises(orchmllm.InfeasibleError, match="stage 'llm'"):
        orchmllm.plan_step(micro_declarations(micro_batches=1000), meta, G)
    # Micro-batches change the declarations' fingerprint (ranks must agree on them).
    assert (micro_declarations().fingerprint
            != micro_declarations(max_tokens_per_micro_batch=10**6).fingerprint)


def test_torch_micro_batch_views():
    """llm_micro_batches and encoder_micro_batches on a one-rank group: views of the received
    rows, one per micro-batch, in run order."""
    decl = orchmllm.StageDeclarations(
        [orchmllm.EncoderStage("vision", max_tokens_per_micro_batch=8)],
        orchmllm.LLMStage(max_tokens_per_micro_batch=12))
    batch = orchmllm.LocalBatch([3, 2, 4], modality=[0, 0, 0], parent=[0, 1, 2],
                                encoder_length=[6, 4, 5], input_rows=[6, 4, 5],
                                llm_tokens=[3, 2, 2])
    dist.init_process_group("gloo", init_method=f"file://{tempfile.mkdtemp()}/store", rank=0,
                            world_size=1)
    try:
        sd = otorch.plan_step_dispatchers(decl, batch)
        pixels = torch.arange(15.0).reshape(15, 1).requires_grad_()
        rows = sd.encoder_inputs[0].dispatch(pixels)
        parts = sd.encoder_micro_batches(0, rows)
        assert len(parts) == sd.step.micro_batches(0) >= 2
        assert sum(sum(units) for _, units in parts) == rows.shape[0]
        for x, units in parts:
            assert sum(units) <= 8 and x.shape[0] == sum(units)
        assert torch.equal(torch.cat([x for x, _ in parts]), rows)
        outs = torch.zeros(7, 1)  # the encoder's output rows: its units' LLM tokens
        seq, cu = sd.llm_input([sd.encoder_outputs[0].dispatch(outs)],
                               sd.text.dispatch(torch.zeros(9, 1)))
        micro = sd.llm_micro_batches(seq, cu)
        assert len(micro) == sd.step.micro_batches(1) >= 2
        for x, cu_m in micro:
            assert cu_m[0] == 0 and cu_m[-1] == x.shape[0] <= 12
        assert sum(x.shape[0] for x, _ in micro) == seq.shape[0] == 16
        with pytest.raises(ValueError, match="cu_seqlens"):
            sd.llm_micro_batches(seq, cu[:-1])
        (sum(x.sum() for x, _ in parts)).backward()
        assert torch.equal(pixels.grad, torch.ones_like(pixels))
    finally:
        dist.destroy_process_group()
