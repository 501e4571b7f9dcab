"""orchmllm.plan_step: stage declarations, step metadata, the step's plans, routes and views.

The plans are checked against the library called another way (every stage's plan equals
orchmllm.balance + orchmllm.map_bins on that stage's layout, which test_cli_parity and
test_mapping tie to orchmllm-bench), and the routes by invariants: every unit lands exactly
once, the composed route is the lift after the inverse of the encoder plan, the gradient route
its inverse, every rank's splits agree with its peers', and the exchanges simulated with numpy
deliver every row where the plan puts it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import orchmllm

K = 2
D = 8
G = 4
TRANSFERS = [("encoder_input", 0), ("encoder_input", 1), ("text", 0), ("encoder_output", 0),
             ("encoder_output", 1), ("encoder_gradient", 0), ("encoder_gradient", 1)]


def declarations(split: bool = False, **llm: object) -> orchmllm.StageDeclarations:
    return orchmllm.StageDeclarations(
        [orchmllm.EncoderStage("vision", "quadratic:1,1e-3", input_row_bytes=24,
                               output_row_bytes=32, split=split),
         orchmllm.EncoderStage("audio", "linear", "padded", input_row_bytes=16,
                               output_row_bytes=32)],
        orchmllm.LLMStage(cost="quadratic:1,2.5e-4", text_row_bytes=8,
                          **llm))  # type: ignore[arg-type]


def batches(seed: int, ranks: int = D, segmented: bool = False) -> list[orchmllm.LocalBatch]:
    """Random ragged batches (fixed seed): rank 0 samples more and bigger sub-items."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(ranks):
        ns = int(rng.integers(0 if r == 3 else 1, 6))  # rank 3 may hold nothing
        nu = int(rng.integers(0, 3 * ns + 1)) if ns else 0
        big = 6 if r == 0 else 1
        modality = rng.integers(0, K, nu)
        segments = np.where(modality == 0, rng.integers(1, 5, nu), 1) if segmented else None
        s = 1 if segments is None else segments
        base = rng.integers(1, 40 * big, nu)
        out.append(orchmllm.LocalBatch(
            text_tokens=rng.integers(0, 200, ns), modality=modality,
            parent=rng.integers(0, max(ns, 1), nu), encoder_length=8 * base * s,
            input_rows=4 * base * s, llm_tokens=base * s, segments=segments))
    return out


def plan(seed: int = 1, split: bool = False, rank: int | None = None) -> tuple:
    meta = orchmllm.make_step_metadata(batches(seed, segmented=split), K)
    decl = declarations(split)
    return decl, meta, orchmllm.plan_step(decl, meta, G, rank=rank)


def simulate(a2a: list, rows_by_source: np.ndarray, src_offsets: np.ndarray) -> list:
    """Every rank's received rows (each row tagged by its source item and row), in order."""
    start = np.concatenate([[0], np.cumsum(rows_by_source)])
    tags = np.arange(start[-1])
    local = [tags[start[src_offsets[r]]:start[src_offsets[r + 1]]] for r in range(D)]
    sent = [np.split(local[r][a2a[r].send_order], np.cumsum(a2a[r].send_splits)[:-1])
            for r in range(D)]
    return [np.concatenate([sent[s][r] for s in range(D)])[a2a[r].recv_order] for r in range(D)]


def expect(plan: orchmllm.Rearrangement, rows_by_source: np.ndarray, r: int) -> np.ndarray:
    start = np.concatenate([[0], np.cumsum(rows_by_source)])
    items = plan.sources[plan.dst_offsets[r]:plan.dst_offsets[r + 1]]
    parts = [np.arange(start[g], start[g + 1]) for g in items]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def unit_rows(step: orchmllm.StepPlan, meta: orchmllm.StepMetadata, k: int) -> tuple:
    """Input rows and LLM tokens of encoder k's units in source (origin) order, from the
    encoder views (the units as each encoder rank receives them, mapped back by Π_E_k)."""
    pe = step.encoder_plan(k, "input")
    views = [step.encoder_view(k, r) for r in range(D)]
    inp = np.concatenate([v.input_rows for v in views])
    tok = np.concatenate([v.llm_tokens for v in views])
    # Destination global id h holds source unit sources[h].
    rows_in, rows_out = np.zeros(pe.num_items, np.int64), np.zeros(pe.num_items, np.int64)
    rows_in[pe.sources] = inp
    rows_out[pe.sources] = tok
    return rows_in, rows_out


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_plans_compose_and_every_unit_lands_once(seed, split):
    decl, meta, step = plan(seed, split)
    assert step.num_encoders == K and step.num_ranks == D and step.alltoalls_per_step == 3 * K + 1
    for k in range(K):
        pe, lifted = step.encoder_plan(k, "input"), step.encoder_plan(k, "lifted")
        out, grad = step.encoder_plan(k, "output"), step.encoder_plan(k, "gradient")
        n = pe.num_items
        if not split or k == 1:
            assert n == meta.modality(k)["parent"].shape[0]
        # A permutation: every unit lands in exactly one (rank, slot).
        dst = pe.dst_offsets[pe.dst_rank] + pe.dst_slot
        np.testing.assert_array_equal(np.sort(dst), np.arange(n))
        # output = lifted ∘ input⁻¹: the unit in encoder slot h goes where the lift puts it.
        composed = out.dst_offsets[out.dst_rank] + out.dst_slot
        lift = lifted.dst_offsets[lifted.dst_rank] + lifted.dst_slot
        np.testing.assert_array_equal(composed[dst], lift)
        np.testing.assert_array_equal(out.src_offsets, pe.dst_offsets)
        # gradient = output⁻¹
        g = grad.dst_offsets[grad.dst_rank] + grad.dst_slot
        np.testing.assert_array_equal(g[composed], np.arange(n))
        # The lift puts every unit on the LLM rank of its parent sample.
        llm = step.llm_plan()
        parents = meta.modality(k)["parent"]
        if not split or k == 1:
            np.testing.assert_array_equal(lifted.dst_rank, llm.dst_rank[parents])


@pytest.mark.parametrize("split", [False, True])
def test_routes_move_every_row_where_the_plans_put_it(split):
    decl, meta, step = plan(4, split)
    rows_text = meta.text_tokens
    for name, k in TRANSFERS:
        a2a = [step.all_to_all(name, r, k) for r in range(D)]
        # Rank r's send splits to s are rank s's receive splits from r.
        send = np.stack([a.send_splits for a in a2a])
        recv = np.stack([a.recv_splits for a in a2a])
        np.testing.assert_array_equal(send, recv.T)
        if name == "text":
            p, rows = step.llm_plan(), rows_text
        else:
            rows_in, rows_out = unit_rows(step, meta, k)
            pe = step.encoder_plan(k, "input")
            if name == "encoder_input":
                p, rows = pe, rows_in
            elif name == "encoder_output":  # sources: units in encoder (Π_E) order
                p, rows = step.encoder_plan(k, "output"), rows_out[pe.sources]
            else:  # sources: units in LLM order (the lift's destination order)
                lifted = step.encoder_plan(k, "lifted")
                p, rows = step.encoder_plan(k, "gradient"), rows_out[lifted.sources]
        got = simulate(a2a, rows, p.src_offsets)
        for r in range(D):
            np.testing.assert_array_equal(got[r], expect(p, rows, r), err_msg=f"{name} {k} {r}")
            np.testing.assert_array_equal(
                a2a[r].output_items, p.sources[p.dst_offsets[r]:p.dst_offsets[r + 1]])


def test_routes_built_while_planning_equal_those_built_on_demand():
    _, meta, lazy = plan(5)
    for r in [0, 3, 7]:
        _, _, eager = plan(5, rank=r)
        assert eager.routes_rank == r and lazy.routes_rank == -1
        for name, k in TRANSFERS:
            a, b = eager.all_to_all(name, r, k), lazy.all_to_all(name, r, k)
            for field in ["send_splits", "recv_splits", "send_order", "recv_order",
                          "output_items"]:
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_stage_plans_are_balance_then_map_bins():
    """plan_step's Π_M and Π_E_k equal balance + map_bins of the stage's layout (the C++
    planner's definition), with the stage's cost, policy and bytes."""
    decl, meta, step = plan(6)
    seq = meta.sequence_lengths()
    out_bytes = np.zeros(meta.num_samples, np.int64)
    for k in range(K):
        m = meta.modality(k)
        np.add.at(out_bytes, m["parent"], m["llm_tokens"] * 32)
    llm_bytes = meta.text_tokens * 8 + out_bytes
    want = orchmllm.map_bins(orchmllm.balance(meta.sample_offsets, seq, "quadratic:1,2.5e-4",
                                              bytes=llm_bytes), G)
    np.testing.assert_array_equal(step.llm_plan().dst_rank, want.dst_rank)
    np.testing.assert_array_equal(step.llm_plan().dst_slot, want.dst_slot)
    reports = step.stages()
    assert [s["name"] for s in reports] == ["vision", "audio", "llm"]
    assert reports[2]["makespan"] == want.makespan
    assert reports[2]["inter_node_bytes"] == want.mapping["inter_node_bytes"]
    for k, (cost, policy, width) in enumerate([("quadratic:1,1e-3", "packed", 24),
                                               ("linear", "padded", 16)]):
        m = meta.modality(k)
        w = orchmllm.map_bins(orchmllm.balance(m["offsets"], m["encoder_length"], cost, policy,
                                               bytes=m["input_rows"] * width), G)
        np.testing.assert_array_equal(step.encoder_plan(k).dst_rank, w.dst_rank)
        np.testing.assert_array_equal(step.encoder_plan(k).dst_slot, w.dst_slot)
        assert reports[k]["makespan"] == w.makespan
        assert reports[k]["imbalance_after"] <= reports[k]["imbalance_before"]


def test_gap_tolerance_reaches_the_stages():
    """A stage's gap_tolerance is its balance's: the LLM plan equals balance + map_bins with
    the same gap, and the declarations' fingerprint changes with it."""
    meta = orchmllm.make_step_metadata(batches(6), K)
    decl = declarations(gap_tolerance=0.02)
    assert decl.llm.gap_tolerance == 0.02
    assert decl.fingerprint != declarations().fingerprint
    step = orchmllm.plan_step(decl, meta, G)
    seq = meta.sequence_lengths()
    out_bytes = np.zeros(meta.num_samples, np.int64)
    for k in range(K):
        m = meta.modality(k)
        np.add.at(out_bytes, m["parent"], m["llm_tokens"] * 32)
    want = orchmllm.map_bins(orchmllm.balance(meta.sample_offsets, seq, "quadratic:1,2.5e-4",
                                              bytes=meta.text_tokens * 8 + out_bytes,
                                              gap_tolerance=0.02), G)
    np.testing.assert_array_equal(step.llm_plan().dst_rank, want.dst_rank)
    with pytest.raises(TypeError, match="gap_tolerance"):
        orchmllm.LLMStage(gap_tolerance="0.1")  # type: ignore[arg-type]
    with pytest.raises(orchmllm.InvalidArgumentError, match="gap_tolerance is -1"):
        declarations(gap_tolerance=-1.0)


def test_views_match_the_metadata():
    decl, meta, step = plan(7)
    seen = {k: [] for k in range(K)}
    for r in range(D):
        v = step.llm_view(r)
        llm = step.llm_plan()
        np.testing.assert_array_equal(v.samples,
                                      llm.sources[llm.dst_offsets[r]:llm.dst_offsets[r + 1]])
        assert v.sub_item_offsets[-1] == v.sub_item_modality.shape[0] == v.sub_item_index.shape[0]
        for k in range(K):
            m = meta.modality(k)
            # Received sub-items of modality k: the samples' sub-items in order.
            ids = np.concatenate([np.flatnonzero(m["parent"] == g) for g in v.samples]
                                 + [np.zeros(0, np.int64)])
            np.testing.assert_array_equal(np.diff(v.row_offsets[k]), m["llm_tokens"][ids])
            assert v.item_offsets[k][-1] == ids.shape[0]
            seen[k].extend(ids.tolist())
        for k in range(K):
            ev = step.encoder_view(k, r)
            np.testing.assert_array_equal(ev.first_segment, 0)
            np.testing.assert_array_equal(ev.last_segment, ev.segments)
    for k in range(K):
        assert sorted(seen[k]) == list(range(meta.modality(k)["parent"].shape[0]))


def test_splitting_cuts_long_videos_into_pieces():
    rng_batches = batches(8, segmented=True)
    meta = orchmllm.make_step_metadata(rng_batches, K)
    whole = orchmllm.plan_step(declarations(False), meta, G)
    split = orchmllm.plan_step(declarations(True), meta, G)
    assert split.encoder_plan(0).num_items >= whole.encoder_plan(0).num_items
    assert split.stages()[0]["makespan"] <= whole.stages()[0]["makespan"]
    units = [split.encoder_view(0, r) for r in range(D)]
    segs = meta.modality(0)["segments"]
    covered = np.zeros(int(segs.sum()), np.int64)
    first = np.concatenate([[0], np.cumsum(segs)])
    for v in units:
        for i, a, b in zip(v.sub_item, v.first_segment, v.last_segment):
            covered[first[i] + a:first[i] + b] += 1
    np.testing.assert_array_equal(covered, 1)  # every segment encoded exactly once


def test_deterministic_and_serial_equals_parallel():
    meta = orchmllm.make_step_metadata(batches(9), K)
    decl = declarations()
    a = orchmllm.plan_step(decl, meta, G, rank=2)
    b = orchmllm.plan_step(decl, meta, G, rank=2, parallel_stages=False)
    for p, q in [(a.llm_plan(), b.llm_plan())] + [
            (a.encoder_plan(k, kind), b.encoder_plan(k, kind))
            for k in range(K) for kind in ["input", "lifted", "output", "gradient"]]:
        np.testing.assert_array_equal(p.dst_rank, q.dst_rank)
        np.testing.assert_array_equal(p.dst_slot, q.dst_slot)
    assert declarations().fingerprint == decl.fingerprint != declarations(True).fingerprint


def test_plan_step_releases_the_gil():
    """This thread makes progress while a planning thread is inside plan_step (it runs unlocked).

    Progress is counted per call: a call that held the GIL would let this thread tick at most
    once or twice (at the bytecodes around the call), so a call during which it ticks 4 times
    or more ran unlocked. Calls of ~10 ms (4,096 ranks) are retried up to 40 times, so a busy
    machine only makes the test slower, not wrong."""
    meta = orchmllm.make_step_metadata(batches(10, ranks=4096), K)
    decl = declarations()
    done = threading.Event()
    ticks = [0]
    during: list[int] = []  # this thread's ticks during each call

    def work() -> None:
        for _ in range(40):
            before = ticks[0]
            orchmllm.plan_step(decl, meta, 8, rank=0)
            during.append(ticks[0] - before)
            if during[-1] >= 4:
                break
        done.set()

    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():
        ticks[0] += 1
        done.wait(0.001)
    t.join()
    assert max(during) >= 4, during


def test_errors():
    decl = declarations()
    good = batches(11)
    with pytest.raises(orchmllm.InvalidArgumentError, match="rank 1: sub-item 0 has modality 5"):
        orchmllm.make_step_metadata([good[0], orchmllm.LocalBatch([3], [5], [0], [1], [1], [1])], K)
    with pytest.raises(orchmllm.InvalidArgumentError, match="names parent sample 4"):
        orchmllm.make_step_metadata([orchmllm.LocalBatch([3], [0], [4], [1], [1], [1])], K)
    with pytest.raises(orchmllm.InvalidArgumentError, match="segments"):
        orchmllm.make_step_metadata([orchmllm.LocalBatch([3], [0], [0], [5], [4], [4], [2])], K)
    with pytest.raises(orchmllm.InvalidArgumentError, match="at least one rank"):
        orchmllm.make_step_metadata([], K)
    with pytest.raises(ValueError, match="parent has 2 entries, expected 1"):
        orchmllm.LocalBatch([3], [0], [0, 0], [1], [1], [1])
    with pytest.raises(TypeError, match="must hold integers"):
        orchmllm.LocalBatch([3.5])
    meta = orchmllm.make_step_metadata(good, K)
    with pytest.raises(orchmllm.InvalidArgumentError, match="metadata has 2 modalities"):
        orchmllm.plan_step(orchmllm.StageDeclarations([orchmllm.EncoderStage("v")]), meta)
    with pytest.raises(orchmllm.InfeasibleError, match="stage 'llm'"):
        orchmllm.plan_step(declarations(cap=10), meta, G)
    with pytest.raises(orchmllm.InvalidArgumentError, match="rank is 8"):
        orchmllm.plan_step(decl, meta, G, rank=8)
    with pytest.raises(orchmllm.InvalidArgumentError, match="two stages are named 'a'"):
        orchmllm.StageDeclarations([orchmllm.EncoderStage("a"), orchmllm.EncoderStage("a")])
    with pytest.raises(orchmllm.InvalidArgumentError, match="row widths 0"):
        orchmllm.StageDeclarations([orchmllm.EncoderStage("a", input_row_bytes=0)])
    with pytest.raises(orchmllm.InvalidArgumentError, match="unknown mapper"):
        orchmllm.StageDeclarations([orchmllm.EncoderStage("a", mapping="random")])
    with pytest.raises(orchmllm.InvalidArgumentError, match="cost is 'cubic'"):
        orchmllm.StageDeclarations([orchmllm.EncoderStage("a", "cubic")])
    with pytest.raises(TypeError, match="or a callable, got int"):
        orchmllm.EncoderStage("a", 3)
    decreasing = orchmllm.StageDeclarations([orchmllm.EncoderStage("v"), orchmllm.EncoderStage(
        "a", lambda ls: 1e9 - ls)])
    with pytest.raises(ValueError, match="non-decreasing"):
        orchmllm.plan_step(decreasing, meta, G)
    step = orchmllm.plan_step(decl, meta, G)
    with pytest.raises(orchmllm.InvalidArgumentError, match="transfer 'pixels'"):
        step.all_to_all("pixels", 0)
    with pytest.raises(orchmllm.InvalidArgumentError, match="encoder stage 2 outside"):
        step.all_to_all("encoder_input", 0, 2)
    with pytest.raises(orchmllm.InvalidArgumentError, match="rank 9 outside"):
        step.llm_view(9)
    with pytest.raises(orchmllm.InvalidArgumentError, match="plan kind 'x'"):
        step.encoder_plan(0, "x")
    with pytest.raises(TypeError, match="StageDeclarations"):
        orchmllm.plan_step(None, meta)  # type: ignore[arg-type]


def test_cost_callables():
    """A stage's cost callable: plans equal balance + map_bins with the same callable, one
    call per stage and step, and the callable enters the fingerprint."""
    calls = []

    def vit(ls):
        calls.append(ls.shape[0])
        return 0.5 + ls + 1e-3 * ls.astype(np.float64) ** 2

    def llm_cost(ls):
        return ls + 2.5e-4 * ls.astype(np.float64) ** 2

    decl = orchmllm.StageDeclarations(
        [orchmllm.EncoderStage("vision", vit, input_row_bytes=24, output_row_bytes=32),
         orchmllm.EncoderStage("audio", "linear", "padded", input_row_bytes=16,
                               output_row_bytes=32)],
        orchmllm.LLMStage(cost=llm_cost, policy="padded", pad_multiple=8, text_row_bytes=8))
    assert decl.fingerprint != declarations().fingerprint
    # Cost objects are not callables here (they are the library's own models).
    objs = orchmllm.StageDeclarations([orchmllm.EncoderStage("v", orchmllm.LinearCost(2)),
                                       orchmllm.EncoderStage("a", orchmllm.QuadraticCost(1, 1, 0))])
    objs_step = orchmllm.plan_step(objs, meta := orchmllm.make_step_metadata(batches(12), K), G)
    assert objs_step.stages()[0]["makespan"] == 2 * orchmllm.balance(
        meta.modality(0)["offsets"], meta.modality(0)["encoder_length"]).makespan
    same = orchmllm.StageDeclarations(decl.encoders, decl.llm)
    assert same.fingerprint == decl.fingerprint
    other = orchmllm.StageDeclarations(
        [orchmllm.EncoderStage("vision", lambda ls: 2.0 * ls, input_row_bytes=24,
                               output_row_bytes=32), decl.encoders[1]], decl.llm)
    assert other.fingerprint != decl.fingerprint
    calls.clear()
    step = orchmllm.plan_step(decl, meta, G, rank=1)
    assert len(calls) == 1  # once per step, vectorised
    m = meta.modality(0)
    want = orchmllm.map_bins(orchmllm.balance(m["offsets"], m["encoder_length"], vit,
                                              bytes=m["input_rows"] * 24), G)
    np.testing.assert_array_equal(step.encoder_plan(0).dst_rank, want.dst_rank)
    np.testing.assert_array_equal(step.encoder_plan(0).dst_slot, want.dst_slot)
    assert step.stages()[0]["makespan"] == want.makespan
    out_bytes = np.zeros(meta.num_samples, np.int64)
    for k in range(K):
        mk = meta.modality(k)
        np.add.at(out_bytes, mk["parent"], mk["llm_tokens"] * 32)
    llm = orchmllm.map_bins(orchmllm.balance(
        meta.sample_offsets, meta.sequence_lengths(), llm_cost, "padded", pad_multiple=8,
        bytes=meta.text_tokens * 8 + out_bytes), G)
    np.testing.assert_array_equal(step.llm_plan().dst_rank, llm.dst_rank)
    assert step.stages()[2]["makespan"] == llm.makespan
    # Segmented sub-items: the callable is evaluated at segment lengths too.
    seg = orchmllm.make_step_metadata(batches(13, segmented=True), K)
    split = orchmllm.StageDeclarations(
        [orchmllm.EncoderStage("vision", vit, split=True), decl.encoders[1]], decl.llm)
    assert orchmllm.plan_step(split, seg, G).encoder_plan(0).num_items >= seg.modality(0)[
        "parent"].shape[0]


# ---- overflow and the other cases of the fuzz run (python/tests/fuzz_api.py) ----------------


def test_rows_and_bytes_past_2_63_are_named_overflows():
    decl = orchmllm.StageDeclarations([], orchmllm.LLMStage(text_row_bytes=8))
    # Two samples whose text bytes add past 2^63 - 1 (each fits).
    meta = orchmllm.make_step_metadata([orchmllm.LocalBatch([2**59]), orchmllm.LocalBatch([2**59])],
                                       0)
    with pytest.raises(orchmllm.InvalidArgumentError, match="overflow"):
        orchmllm.plan_step(decl, meta)
    # One sample's text bytes alone pass it.
    meta = orchmllm.make_step_metadata([orchmllm.LocalBatch([2**61])], 0)
    with pytest.raises(orchmllm.InvalidArgumentError,
                       match=r"text bytes of sample 0: 2305843009213693952 × 8 exceeds 2\^63 - 1 "
                             r"\(int64 overflow\)"):
        orchmllm.plan_step(decl, meta)
    # Bytes that fit but rows no index array can hold: planned, and the transfer of the rank
    # that holds them refused by name; the other rank's works.
    meta = orchmllm.make_step_metadata([orchmllm.LocalBatch([2**61]), orchmllm.LocalBatch([3])],
                                       0)
    step = orchmllm.plan_step(orchmllm.StageDeclarations([]), meta)
    holder = int(step.llm_plan().dst_rank[0])
    for rank in (0, 1):
        if rank in (0, holder):
            with pytest.raises(orchmllm.InvalidArgumentError, match="index arrays .* hold at most"):
                step.all_to_all("text", rank)
        else:
            assert int(step.all_to_all("text", rank).send_splits.sum()) <= 3
    # A stage's linear cost that overflows is an error naming the product.
    meta = orchmllm.make_step_metadata([orchmllm.LocalBatch([8, 1]), orchmllm.LocalBatch([1])], 0)
    heavy = orchmllm.StageDeclarations([], orchmllm.LLMStage(cost=orchmllm.LinearCost(2**61 + 1)))
    with pytest.raises(orchmllm.InvalidArgumentError, match="× length 8 overflows 2\\^63 - 1"):
        orchmllm.plan_step(heavy, meta)


def test_counts_and_names_from_the_fuzz_run():
    with pytest.raises(orchmllm.InvalidArgumentError, match="num_encoders is 2147483647"):
        orchmllm.make_step_metadata([orchmllm.LocalBatch([3])], 2**31 - 1)
    with pytest.raises(ValueError, match="num_encoders is 9223372036854775808, outside the int64"):
        orchmllm.make_step_metadata([orchmllm.LocalBatch([3])], 2**63)
    with pytest.raises(orchmllm.InvalidArgumentError, match="stage 'v': rounds is 1099511627776"):
        orchmllm.StageDeclarations([orchmllm.EncoderStage(
            "v", split=orchmllm.SplitOptions(rounds=2**40))])
    with pytest.raises(TypeError, match="tolerance must be a float, got str"):
        orchmllm.SplitOptions(tolerance="0.1")  # type: ignore[arg-type]
    batch = orchmllm.LocalBatch([3, 4], [0], [1], [8], [4], [2])
    words = batch.words()
    back = orchmllm.LocalBatch.from_words(words, 2, 1)
    np.testing.assert_array_equal(back.words(), words)
    for samples, sub_items in [(3, 1), (2**63, 0), (-1, 1)]:
        with pytest.raises(ValueError, match="words|int64"):
            orchmllm.LocalBatch.from_words(words, samples, sub_items)
    decl = declarations()
    step = orchmllm.plan_step(decl, orchmllm.make_step_metadata(batches(3), K), G)
    with pytest.raises(orchmllm.InvalidArgumentError, match=r"transfer 'a\\x00b' \(expected"):
        step.all_to_all("a\x00b", 0)
