"""orchmllm.balance: its contract (docs/python.md), the options, callable costs, and bad inputs
raising the right Python exceptions with the library's messages."""

from __future__ import annotations

import numpy as np
import pytest

import orchmllm
from conftest import random_batch


def check_plan(plan, offsets, lengths):
    """dst_rank / dst_slot are int64[n] and a bijection onto dense slots of D ranks."""
    n, d = len(lengths), len(offsets) - 1
    assert plan.dst_rank.dtype == np.int64 and plan.dst_rank.shape == (n,)
    assert plan.dst_slot.dtype == np.int64 and plan.dst_slot.shape == (n,)
    assert plan.num_items == n and plan.num_ranks == d
    counts = np.bincount(plan.dst_rank, minlength=d)
    np.testing.assert_array_equal(np.diff(plan.dst_offsets), counts)
    ids = plan.dst_offsets[plan.dst_rank] + plan.dst_slot
    np.testing.assert_array_equal(np.sort(ids), np.arange(n))
    np.testing.assert_array_equal(plan.sources[ids], np.arange(n))


def test_contract():
    offsets, lengths, _ = random_batch(5, ranks=32, max_items=16)
    plan = orchmllm.balance(offsets, lengths, cost="quadratic:1,1.3e-5", policy="packed",
                            algorithm="automatic")
    check_plan(plan, offsets, lengths)
    # makespan: the largest destination load under the cost model, recomputed here.
    cost = lengths * (1.0 + 1.3e-5 * lengths)
    loads = np.bincount(plan.dst_rank, weights=cost, minlength=len(offsets) - 1)
    assert plan.makespan == pytest.approx(loads.max(), rel=1e-12)
    assert plan.lower_bound <= plan.makespan
    assert plan.algorithm in orchmllm.ALGORITHMS and plan.requested == "automatic"
    stats = plan.statistics()
    assert stats["makespan"] == plan.makespan and stats["lower_bound"] == plan.lower_bound
    assert stats["imbalance_after"] < stats["imbalance_before"]
    np.testing.assert_allclose(stats["load_after"], loads, rtol=1e-12)
    assert stats["ratio"] == pytest.approx(plan.makespan / plan.lower_bound)
    # Read-only views: the plan cannot be edited through them.
    with pytest.raises(ValueError):
        plan.dst_rank[0] = 1


def test_every_algorithm_on_lists_and_narrow_ints():
    offsets, lengths, _ = random_batch(6, ranks=4, max_items=3, empty_ranks=False)
    for algorithm in orchmllm.ALGORITHMS:
        policy = "padded" if algorithm == "padded_exact" else "packed"
        plan = orchmllm.balance(list(offsets), lengths.astype(np.int32), policy=policy,
                                algorithm=algorithm)
        check_plan(plan, offsets, lengths)
        assert plan.requested == algorithm


def test_empty_inputs():
    plan = orchmllm.balance([0, 0, 0], [])
    assert plan.num_items == 0 and plan.num_ranks == 2 and plan.makespan == 0
    assert plan.dst_rank.shape == (0,)


def test_callable_cost_is_evaluated_once_on_distinct_lengths():
    offsets, lengths, _ = random_batch(8, ranks=16, max_items=12)
    a, b = 1.0, 1.3e-5
    calls = []

    def cost(ls):
        calls.append(ls.copy())
        ls = ls.astype(np.float64)
        return ls * (a + b * ls)  # the rounding of QuadraticCost(0, a, b)

    plan = orchmllm.balance(offsets, lengths, cost=cost)
    assert len(calls) == 1
    np.testing.assert_array_equal(calls[0], np.unique(lengths))
    same = orchmllm.balance(offsets, lengths, cost=f"quadratic:{a},{b}")
    np.testing.assert_array_equal(plan.dst_rank, same.dst_rank)
    np.testing.assert_array_equal(plan.dst_slot, same.dst_slot)
    assert plan.makespan == same.makespan and plan.cost is None
    assert plan.statistics()["makespan"] == same.makespan

    # Padded policies: the padded lengths are evaluated too, in the same single call.
    calls.clear()
    plan = orchmllm.balance(offsets, lengths, cost=cost, policy="padded", pad_multiple=64,
                            algorithm="automatic")
    assert len(calls) == 1
    want = np.unique(np.concatenate([lengths, (lengths + 63) // 64 * 64]))
    np.testing.assert_array_equal(calls[0], want)
    same = orchmllm.balance(offsets, lengths, cost=f"quadratic:{a},{b}", policy="padded",
                            pad_multiple=64)
    np.testing.assert_array_equal(plan.dst_rank, same.dst_rank)
    calls.clear()
    orchmllm.balance(offsets, lengths, cost=cost, policy="bucketed:1024,4096,8192",
                     algorithm="lpt")
    assert set(calls[0]) >= {1024, 4096} and len(calls) == 1


def test_bad_arrays():
    offsets, lengths, _ = random_batch(9, ranks=4, max_items=5, empty_ranks=False)
    with pytest.raises(TypeError, match="lengths must hold integers, got dtype float64"):
        orchmllm.balance(offsets, lengths.astype(np.float64))
    with pytest.raises(TypeError, match="offsets must hold integers, got dtype bool"):
        orchmllm.balance(np.ones(5, bool), lengths)
    with pytest.raises(ValueError, match=r"lengths must be a 1-D array, got shape \(1, "):
        orchmllm.balance(offsets, lengths.reshape(1, -1))
    with pytest.raises(ValueError, match=r"bytes has 2 entries, expected"):
        orchmllm.balance(offsets, lengths, bytes=[1, 2])
    with pytest.raises(ValueError, match="above 2\\^63 - 1"):
        orchmllm.balance(offsets, np.full(len(lengths), 2**63, dtype=np.uint64))
    bad = offsets.copy()
    bad[1], bad[2] = bad[2], bad[1]
    with pytest.raises(orchmllm.InvalidArgumentError, match=r"offsets\[2\] = .* is below"):
        orchmllm.balance(bad, lengths)
    with pytest.raises(ValueError, match="offsets end at .* lengths were given"):
        orchmllm.balance(offsets[:-1], lengths)
    neg = lengths.copy()
    neg[3] = -7
    with pytest.raises(ValueError, match="item 3 has negative length -7"):
        orchmllm.balance(offsets, neg)
    with pytest.raises(ValueError, match="negative"):
        orchmllm.balance(offsets, lengths, bytes=-np.ones(len(lengths), np.int64))


def test_bad_cost_policy_algorithm():
    offsets, lengths, _ = random_batch(10, ranks=4, max_items=5, empty_ranks=False)
    cases = [
        (dict(cost="cubic"), "cost is 'cubic', expected 'linear' or 'quadratic:A,B\\[,C\\]'"),
        (dict(cost="quadratic:1"), "cost is 'quadratic:1'"),
        (dict(cost="quadratic:1,x"), "cost expects a finite number, got 'x'"),
        (dict(cost="quadratic:-1,0"), "linear coefficient is -1"),
        (dict(policy="ragged"), "policy is 'ragged', expected 'packed', 'padded'"),
        (dict(policy="bucketed:8,4"), "strictly increasing: 8 then 4"),
        (dict(policy="bucketed:0"), r"policy is 0, must be in \[1, 2\^63\)"),
        (dict(policy="packed", pad_multiple=8), "pad multiple 8 needs the padded policy"),
        (dict(policy="padded", pad_multiple=0), "padding multiple is 0, must be >= 1"),
        (dict(policy="bucketed:16"), "exceeds the largest bucket 16"),
        (dict(algorithm="magic"), "unknown balancer 'magic'"),
        (dict(algorithm="auto"), "unknown balancer 'auto' \\(did you mean 'automatic'\\?\\)"),
        (dict(algorithm="karmarkar_karp", policy="padded"), "packed"),
        (dict(cap=10, cap_bytes=10), "cap and cap_bytes are exclusive"),
        (dict(cap=-1), "capacity -1 is negative"),
        (dict(min_items=-1), "min_items is -1"),
        (dict(cost=orchmllm.LinearCost(0)), "LinearCost weight is 0"),
        (dict(gpus_per_node=-1), "gpus_per_node is -1"),
    ]
    for kwargs, message in cases:
        with pytest.raises(orchmllm.InvalidArgumentError, match=message) as info:
            orchmllm.balance(offsets, lengths, **kwargs)
        # A ValueError too, and the library's message with its source location.
        assert isinstance(info.value, ValueError) and isinstance(info.value, orchmllm.Error)
        assert str(info.value).startswith("orchmllm: ") and str(info.value).endswith("]")
    with pytest.raises(orchmllm.InvalidArgumentError, match="quadratic_cost constant"):
        orchmllm.QuadraticCost(-1.0)
    for kwargs in [dict(cost=3.5), dict(policy=None), dict(algorithm=1), dict(cap=1.5),
                   dict(pad_multiple="8")]:
        with pytest.raises(TypeError):
            orchmllm.balance(offsets, lengths, **kwargs)


def test_bad_cost_callables():
    offsets, lengths, _ = random_batch(11, ranks=4, max_items=5, empty_ranks=False)
    with pytest.raises(ValueError, match="returned shape \\(\\) for"):
        orchmllm.balance(offsets, lengths, cost=lambda ls: 1.0)
    with pytest.raises(ValueError, match="costs must be finite and >= 0"):
        orchmllm.balance(offsets, lengths, cost=lambda ls: -ls.astype(float))
    with pytest.raises(ValueError, match="costs must be finite and >= 0"):
        orchmllm.balance(offsets, lengths, cost=lambda ls: np.full(ls.shape, np.inf))
    with pytest.raises(ValueError, match="must be non-decreasing in the length"):
        orchmllm.balance(offsets, lengths, cost=lambda ls: 1e6 - ls.astype(float))

    def boom(ls):
        raise RuntimeError("boom from the cost")

    with pytest.raises(RuntimeError, match="boom from the cost"):
        orchmllm.balance(offsets, lengths, cost=boom)


def test_infeasible_constraints():
    offsets, lengths, payload = random_batch(12, ranks=4, max_items=5, empty_ranks=False)
    n = len(lengths)
    cases = [
        (dict(cap=int(lengths.max()) - 1), "above the per-rank cap"),
        (dict(cap_bytes=int(payload.sum()) // 8, bytes=payload), "cap"),
        (dict(max_items=1), f"{n} items do not fit on 4 ranks of at most 1 items"),
        (dict(min_items=n), f"{n} items cannot give each of 4 ranks at least {n} items"),
    ]
    for kwargs, message in cases:
        with pytest.raises(orchmllm.InfeasibleError, match=message) as info:
            orchmllm.balance(offsets, lengths, **kwargs)
        assert not isinstance(info.value, ValueError)
        assert isinstance(info.value, orchmllm.Error)


def test_exception_hierarchy():
    assert issubclass(orchmllm.InvalidArgumentError, ValueError)
    assert issubclass(orchmllm.ParseError, orchmllm.InvalidArgumentError)
    for cls in (orchmllm.InvalidArgumentError, orchmllm.InfeasibleError,
                orchmllm.CommunicationError, orchmllm.ParseError):
        assert issubclass(cls, orchmllm.Error)
    assert orchmllm.InfeasibleError.__module__.startswith("orchmllm")


def test_cost_objects():
    assert orchmllm.LinearCost()(7) == 7 and orchmllm.LinearCost(3)(7) == 21
    q = orchmllm.QuadraticCost(1.0, 2.0, 0.5)
    assert q(4) == 1.0 + 2.0 * 4 + 0.5 * 16
    assert (q.constant, q.linear, q.quadratic) == (1.0, 2.0, 0.5)
    assert q == orchmllm.QuadraticCost(1.0, 2.0, 0.5) and q != orchmllm.QuadraticCost()
    assert orchmllm.LinearCost() == orchmllm.LinearCost(1) and orchmllm.LinearCost() != "linear"
    assert q != orchmllm.LinearCost()
    assert repr(q) == "QuadraticCost(constant=1, linear=2, quadratic=0.5)"
    # plan.cost: the text form, with the constant as a third coefficient when it is not 0.
    offsets, lengths, _ = random_batch(13, ranks=4, max_items=5)
    assert orchmllm.balance(offsets, lengths, q).cost == "quadratic:2,0.5,1"
    assert orchmllm.balance(offsets, lengths, "quadratic:2,0.5,1").cost == "quadratic:2,0.5,1"
    assert orchmllm.balance(offsets, lengths, orchmllm.QuadraticCost(0, 1, 0.5)).cost == \
        "quadratic:1,0.5"


CALLABLE_CASES = [
    ("packed", None, "automatic"), ("packed", None, "lpt"), ("packed", None, "karmarkar_karp"),
    ("packed", None, "karmarkar_karp_equal"), ("packed", None, "identity"),
    ("packed", None, "locality"),
    ("padded", 16, "automatic"), ("padded", 16, "padded_exact"), ("padded", None, "lpt"),
    ("bucketed:256,1024,4096,8192", None, "automatic"),
    ("bucketed:256,1024,4096,8192", None, "lpt"),
]


@pytest.mark.parametrize("policy,pad_multiple,algorithm", CALLABLE_CASES)
def test_callable_cost_plans_match_every_algorithm(policy, pad_multiple, algorithm):
    """A callable with QuadraticCost's rounding gives the string cost's plan, for every
    algorithm and policy (so the table holds every length the library evaluates)."""
    offsets, lengths, payload = random_batch(14, ranks=6, max_items=7)
    a, b = 0.5, 2e-4
    kwargs = dict(policy=policy, pad_multiple=pad_multiple, algorithm=algorithm, bytes=payload,
                  min_items=1 if algorithm == "automatic" else 0)
    got = orchmllm.balance(offsets, lengths, lambda ls: ls * (a + b * ls.astype(np.float64)),
                           **kwargs)
    want = orchmllm.balance(offsets, lengths, f"quadratic:{a},{b}", **kwargs)
    np.testing.assert_array_equal(got.dst_rank, want.dst_rank)
    np.testing.assert_array_equal(got.dst_slot, want.dst_slot)
    assert (got.makespan, got.lower_bound) == (want.makespan, want.lower_bound)
    assert got.statistics()["imbalance_after"] == want.statistics()["imbalance_after"]


@pytest.mark.parametrize("seed", range(12))
def test_gap_tolerance_within_the_gap_or_the_plan_of_zero(seed):
    """gap_tolerance: auto stops within lower bound * (1 + gap), else gives gap 0's plan."""
    offsets, lengths, _ = random_batch(100 + seed, ranks=24, max_items=20)
    gap = 0.001 * (1 + seed % 5)
    for cost in ("linear", "quadratic:1,1.3e-4"):
        exact = orchmllm.balance(offsets, lengths, cost=cost)
        relaxed = orchmllm.balance(offsets, lengths, cost=cost, gap_tolerance=gap)
        check_plan(relaxed, offsets, lengths)
        assert relaxed.lower_bound == exact.lower_bound
        if np.array_equal(relaxed.dst_rank, exact.dst_rank):
            assert relaxed.makespan == exact.makespan
        else:
            assert relaxed.makespan <= exact.lower_bound * (1 + gap) * (1 + 1e-12)
    with pytest.raises(orchmllm.InvalidArgumentError, match="gap_tolerance is -0.5"):
        orchmllm.balance(offsets, lengths, gap_tolerance=-0.5)


# ---- overflow and the other cases of the fuzz run (python/tests/fuzz_api.py) ----------------


def test_all_to_all_rows_whose_sum_overflows_are_an_error_on_every_rank():
    plan = orchmllm.balance([0, 5, 11], np.arange(11))
    for rank in (0, 1):
        with pytest.raises(orchmllm.InvalidArgumentError,
                           match=r"item sizes at item 1: 4611686018427387904 \+ "
                                 r"4611686018427387904 exceeds 2\^63 - 1 \(int64 overflow\)"):
            plan.all_to_all(rank, rows=np.full(11, 2**62))
    # One huge item fits the sums but not an index array of one entry per row: named, not a
    # C++ runtime's message or an attempt to allocate it.
    # The ranks that neither hold nor receive it are not concerned.
    rows = np.zeros(11, np.int64)
    rows[0] = 2**62  # item 0 starts on rank 0
    for rank in (0, 1):
        if rank in (0, int(plan.dst_rank[0])):
            with pytest.raises(orchmllm.InvalidArgumentError, match="index arrays .* hold at most"):
                plan.all_to_all(rank, rows=rows)
        else:
            a = plan.all_to_all(rank, rows=rows)
            assert int(a.send_splits.sum()) == 0 and int(a.recv_splits.sum()) == 0


def test_linear_cost_overflow_is_an_error_not_a_wrapped_cost():
    # 8 · (2^61 + 1) = 2^64 + 8 wrapped to 8: the longest item looked the cheapest.
    with pytest.raises(orchmllm.InvalidArgumentError,
                       match=r"linear_cost: weight 2305843009213693953 × length 8 overflows "
                             r"2\^63 - 1"):
        orchmllm.balance([0, 1, 2, 3, 4], [8, 1, 1, 1], orchmllm.LinearCost(2**61 + 1))
    with pytest.raises(orchmllm.InvalidArgumentError, match="× length 8 overflows 2\\^63 - 1"):
        orchmllm.balance([0, 1, 2, 3, 4], [8, 1, 1, 1], orchmllm.LinearCost(2**62))
    with pytest.raises(orchmllm.InvalidArgumentError, match="overflows"):
        orchmllm.LinearCost(2**61 + 1)(8)
    assert orchmllm.LinearCost(2**61 + 1)(3) == 3 * (2**61 + 1)
    assert orchmllm.LinearCost(1)(2**63 - 1) == 2**63 - 1
    # Within range the plan is exact: the loads 3w, w, w, w (total 6w < 2^63) stay apart.
    w = 2**60 + 1
    plan = orchmllm.balance([0, 1, 2, 3, 4], [3, 1, 1, 1], orchmllm.LinearCost(w))
    assert plan.makespan == float(3 * w) and len(set(plan.dst_rank.tolist())) == 4
    with pytest.raises(orchmllm.InvalidArgumentError, match="× length 8 overflows"):
        orchmllm.balance([0, 1, 2, 3, 4], [8, 1, 1, 1], orchmllm.LinearCost(w))


def test_sums_of_lengths_bytes_and_costs_that_overflow_say_so():
    cases = [
        (dict(lengths=[2**62, 2**62]), "total length overflows at item 1"),
        (dict(lengths=[1, 1], bytes=[2**62, 2**62]), "total bytes overflow at item 1"),
        (dict(lengths=[2**61, 2**61], cost="quadratic:0,1e300"), "overflows double"),
        (dict(lengths=[2**62, 1], policy="padded"), r"exceed 2\^63 - 1 tokens \(int64 overflow\)"),
        (dict(lengths=[2**63 - 5, 1], policy="padded", pad_multiple=8), r"exceeds 2\^63 - 1"),
        (dict(lengths=[2**62, 1], cost=orchmllm.LinearCost(2)), "overflows 2\\^63 - 1"),
    ]
    for kwargs, message in cases:
        lengths = kwargs.pop("lengths")
        with pytest.raises(orchmllm.InvalidArgumentError, match=message):
            orchmllm.balance([0, 1, 2], lengths, **kwargs)
    # Caps and counts at the top of the range are fine.
    plan = orchmllm.balance([0, 1, 2], [5, 7], cap=2**63 - 1, max_items=2**63 - 1)
    assert plan.makespan == 7
    plan = orchmllm.balance([0, 1, 2], [2**62, 2**62 - 1])
    assert plan.makespan == float(2**62)


def test_fitted_costs_refuse_times_whose_squares_overflow():
    with pytest.raises(orchmllm.InvalidArgumentError, match="overflow double"):
        orchmllm.fit_quadratic_cost([1, 2, 5], [1e308, 1e308, 1e308])
    calib = orchmllm.CostCalibration()
    for i in range(6):
        calib.add_rank([3 + i, 4], 1e308 if i % 2 else 1.0)
    with pytest.raises(orchmllm.InvalidArgumentError, match="overflow double"):
        calib.fit()


def test_zero_ranks_are_refused_as_map_bins_and_make_step_metadata_refuse_them():
    with pytest.raises(orchmllm.InvalidArgumentError, match="at least one rank"):
        orchmllm.balance([0], [])
    with pytest.raises(orchmllm.InvalidArgumentError, match="at least one rank"):
        orchmllm.make_step_metadata([], 0)
    with pytest.raises(orchmllm.InvalidArgumentError, match="offsets must have"):
        orchmllm.balance(np.zeros(0, np.int64), [])
    assert orchmllm.balance([0, 0], []).num_ranks == 1  # one empty rank is fine


def test_text_forms_quote_the_whole_text():
    offsets, lengths = [0, 1, 2], [3, 4]
    with pytest.raises(orchmllm.InvalidArgumentError,
                       match=r"cost is 'quadratic:1,2,3,4', expected 'linear' or "
                             r"'quadratic:A,B\[,C\]'"):
        orchmllm.balance(offsets, lengths, "quadratic:1,2,3,4")
    with pytest.raises(orchmllm.InvalidArgumentError,
                       match=r"cost expects a finite number, got 'x' \(in 'quadratic:1,x'\)"):
        orchmllm.balance(offsets, lengths, "quadratic:1,x")
    with pytest.raises(orchmllm.InvalidArgumentError,
                       match=r"policy expects an integer, got '' \(in 'bucketed:8,,16'\)"):
        orchmllm.balance(offsets, lengths, policy="bucketed:8,,16")


def test_ints_outside_int64_and_odd_values_are_named():
    offsets, lengths = [0, 1, 2], [3, 4]
    for kwargs, message in [(dict(cap=2**63), "cap is 9223372036854775808, outside the int64"),
                            (dict(gpus_per_node=-2**63 - 1), "gpus_per_node is"),
                            (dict(max_items=10**30), "max_items is")]:
        with pytest.raises(ValueError, match=message):
            orchmllm.balance(offsets, lengths, **kwargs)
    with pytest.raises(TypeError, match="gap_tolerance must be a float, got str"):
        orchmllm.balance(offsets, lengths, gap_tolerance="0.1")
    with pytest.raises(TypeError, match="seconds must be a float, got str"):
        orchmllm.CostCalibration().add_rank([1], "1.0")
    for degree in (2**31, 3):
        with pytest.raises(orchmllm.InvalidArgumentError, match=f"degree is {degree}"):
            orchmllm.fit_quadratic_cost([1, 2, 3], [1.0, 2.0, 3.0], degree)
        with pytest.raises(orchmllm.InvalidArgumentError, match=f"degree is {degree}"):
            orchmllm.CostCalibration(degree=degree)
    # A NUL byte in a name does not cut the message short.
    with pytest.raises(orchmllm.InvalidArgumentError) as info:
        orchmllm.balance(offsets, lengths, algorithm="a\x00b")
    assert "unknown balancer 'a\\x00b'; expected" in str(info.value)
    assert str(info.value).startswith("orchmllm: ") and str(info.value).endswith("]")


def test_cost_objects_compare_with_none():
    assert orchmllm.LinearCost() != None  # noqa: E711 -- __eq__ takes any object
    assert not (orchmllm.QuadraticCost() == None)  # noqa: E711
    assert None != orchmllm.LinearCost()  # noqa: E711


def test_version():
    import importlib.metadata
    import re
    from pathlib import Path

    assert re.fullmatch(r"\d+\.\d+\.\d+", orchmllm.__version__), orchmllm.__version__
    # The one source: CMakeLists.txt's project() VERSION (pyproject.toml reads it too).
    cmake = Path(__file__).resolve().parents[2] / "CMakeLists.txt"
    if cmake.is_file():
        found = re.search(r"project\(orchmllm\s+VERSION\s+([0-9.]+)", cmake.read_text())
        assert found and found.group(1) == orchmllm.__version__
    # An installed package's metadata says the same.
    try:
        dist = importlib.metadata.distribution("orchmllm")
    except importlib.metadata.PackageNotFoundError:
        return
    init = Path(str(dist.locate_file("orchmllm/__init__.py"))).resolve()
    if init == Path(orchmllm.__file__).resolve():
        assert dist.version == orchmllm.__version__


@pytest.mark.parametrize("sync", ["micro-batch", "step"])
@pytest.mark.parametrize("policy", ["packed", "padded"])
def test_micro_batches_keep_the_limit_and_tile_every_rank(sync, policy):
    offsets, lengths, _ = random_batch(11, ranks=12, max_items=16, empty_ranks=False)
    limit = 2 * int(lengths.max())
    plan = orchmllm.balance(offsets, lengths, policy=policy, max_tokens_per_micro_batch=limit,
                            sync=sync)
    m_count = plan.micro_batches
    assert m_count >= 1
    dst_mb = plan.dst_micro_batch
    loads = np.zeros((12, m_count))
    for r in range(12):
        on_rank = np.flatnonzero(plan.dst_rank == r)
        by_slot = on_rank[np.argsort(plan.dst_slot[on_rank])]
        end = 0
        for m in range(m_count):
            first, last = plan.micro_batch(r, m)
            assert first == end and last > first  # contiguous, in order, not empty
            end = last
            items = by_slot[first:last]
            assert (dst_mb[items] == m).all()
            tokens = (len(items) * lengths[items].max() if policy == "padded"
                      else lengths[items].sum())
            assert tokens <= limit
            loads[r, m] = tokens
        assert end == len(on_rank)
    stats = plan.statistics()
    objective = loads.max(axis=0).sum() if sync == "micro-batch" else loads.sum(axis=1).max()
    assert stats["objective"] == objective
    assert stats["objective_lower_bound"] <= stats["objective"]
    assert stats["micro_batches"] == m_count and stats["sync"] == sync
    # The cells follow their bins through map_bins.
    mapped = orchmllm.map_bins(plan, gpus_per_node=4)
    for b in range(12):
        r = int(mapped.mapping["rank_of_bin"][b])
        for m in range(m_count):
            assert (np.diff(plan.micro_batch(b, m)) == np.diff(mapped.micro_batch(r, m))).all()


def test_micro_batch_arguments_are_checked():
    offsets, lengths, _ = random_batch(3, ranks=4, max_items=6, empty_ranks=False)
    assert orchmllm.balance(offsets, lengths).micro_batches == 0
    assert orchmllm.balance(offsets, lengths).dst_micro_batch is None
    with pytest.raises(ValueError, match="micro_batches must be"):
        orchmllm.balance(offsets, lengths, micro_batches=0)
    with pytest.raises(ValueError, match="micro_batches must be"):
        orchmllm.balance(offsets, lengths, micro_batches="many")
    with pytest.raises(ValueError, match="micro-batch"):
        orchmllm.balance(offsets, lengths, sync="sometimes")
    with pytest.raises(ValueError, match="alone needs"):
        orchmllm.balance(offsets, lengths, max_tokens_per_micro_batch=1)
    with pytest.raises(ValueError, match="no micro-batches"):
        orchmllm.balance(offsets, lengths).micro_batch(0, 0)
    plan = orchmllm.balance(offsets, lengths, micro_batches=1)
    with pytest.raises(ValueError, match="outside"):
        plan.micro_batch(0, 1)
