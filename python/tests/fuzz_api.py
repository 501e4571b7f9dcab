"""Random and boundary values through every public function and method of ``orchmllm``.

Each case builds valid inputs for one target (``balance``, ``Plan.all_to_all``, ``plan_step``,
a view, ...), replaces some of its arguments (or some entries of its arrays) by boundary or
garbage values -- 0, +-1, 2**31, 2**62, 2**63 - 1, -2**63, 2**63, huge floats, nan, inf, empty
arrays, wrong dtypes and shapes, bools, None, strings, mismatched sizes -- and calls it. The
call must either succeed, and then its result must keep the API's invariants (a plan is a
permutation of the items, a rank's splits add up to its rows, loads computed here in exact
integers equal the reported makespan, ...), or raise one of :data:`DOCUMENTED` with a message
that is the library's or the package's own (never a C++ runtime's). A crash, a hang (a call
slower than --max-call-seconds), another exception or a broken invariant is a failure: the
script prints the case (replay it with --case N) and exits 1.

Deterministic: case i draws everything from numpy's generator seeded with (seed, i).

    PYTHONPATH=build/default/python .venv/bin/python3 python/tests/fuzz_api.py --calls 10000

Not covered: orchmllm.torch (it needs process groups; python/tests/test_torch.py). Sizes that
succeed stay small: a row count is either small or large enough that its sum cannot be
allocated (>= 2**61), so no call asks for gigabytes of index arrays.
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import math
import operator
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import orchmllm

#: What a public function may raise on bad input (docs/python.md, "Errors"): TypeError for a
#: wrong type, ValueError for a wrong shape or size (orchmllm.InvalidArgumentError and
#: orchmllm.ParseError are ValueErrors), orchmllm.InfeasibleError when no plan meets the
#: constraints. A user's cost callable's own exception propagates (UserCostError here).
DOCUMENTED: Tuple[type, ...] = (TypeError, ValueError, orchmllm.InfeasibleError)

#: Text that only a C++ runtime's exception carries: such a message is not a clean error.
FOREIGN = ("std::", "vector::", "basic_string", "bad_alloc", "max_size()", "stoll", "stod")


class UserCostError(Exception):
    """Raised by the fuzzer's own misbehaving cost callable (propagates unchanged)."""


class Failure(Exception):
    """A broken invariant or an undocumented outcome."""


INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# Boundary integers that fit in int64 (array entries), and beyond (Python ints).
EDGE64 = [0, 1, -1, 2, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**61, 2**62, INT64_MAX, INT64_MIN]
EDGE = EDGE64 + [2**63, 2**64, INT64_MIN - 1, 10**30]
# Row counts (and segment counts): small, or so large that no sum of them can be allocated.
EDGE_ROWS = [0, 1, -1, 2, 2**61, 2**62, INT64_MAX, INT64_MIN]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 1e308, -1e308, math.inf, -math.inf, math.nan]


def garbage(rng: np.random.Generator) -> Any:
    """A value of the wrong kind for almost any parameter."""
    choices: List[Any] = [None, True, False, "x", "", b"1", 1.5, math.nan, math.inf, [],
                          [1, 2], (), {}, object(), np.int32(3), np.uint64(2**64 - 1),
                          np.float32(2.0), np.array(1), np.zeros((2, 2), np.int64), 1 + 1j,
                          "linear", -7, 2**63, np.bool_(True)]
    return choices[int(rng.integers(len(choices)))]


class Gen:
    """Draws one case's values: sane most of the time, a boundary or garbage value sometimes."""

    def __init__(self, rng: np.random.Generator, bad: float) -> None:
        self.rng = rng
        self.bad = bad  # probability that one argument is replaced

    def coin(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, xs: Sequence[Any]) -> Any:
        return xs[int(self.rng.integers(len(xs)))]

    def int_(self, lo: int, hi: int, edge: Sequence[int] = EDGE) -> Any:
        """An int in [lo, hi], or a boundary int, or garbage."""
        if self.coin(self.bad):
            return self.pick(edge) if self.coin(0.7) else garbage(self.rng)
        return int(self.rng.integers(lo, hi + 1))

    def opt_int(self, lo: int, hi: int, p_none: float = 0.6) -> Any:
        if self.coin(p_none):
            return None
        return self.int_(lo, hi)

    def float_(self, lo: float, hi: float) -> Any:
        if self.coin(self.bad):
            return self.pick(FLOATS) if self.coin(0.7) else garbage(self.rng)
        return float(self.rng.uniform(lo, hi))

    def str_(self, valid: Sequence[str], invalid: Sequence[Any] = ()) -> Any:
        if self.coin(self.bad):
            pool = list(invalid) + ["", "x", "\x00", " auto", "AUTO", "é"]
            return self.pick(pool) if self.coin(0.7) else garbage(self.rng)
        return self.pick(valid)

    def array(self, values: np.ndarray, edge: Sequence[int] = EDGE64) -> Any:
        """`values` (int64), or a mutation of it: an entry or all entries at a boundary, another
        dtype, shape or size, a list, a non-contiguous view, garbage."""
        a = np.asarray(values, np.int64)
        if not self.coin(self.bad):
            return a.tolist() if self.coin(0.1) else a
        kind = self.pick(["entry", "entry", "entry", "all", "dtype", "shape", "size", "empty",
                          "list", "strided", "garbage", "uint64", "float_int"])
        if kind == "entry" and a.size:
            a = a.copy()
            a[int(self.rng.integers(a.size))] = self.pick(edge)
            return a
        if kind == "all" and a.size:
            return np.full(a.size, self.pick(edge), np.int64)
        if kind == "dtype":
            dtype = self.pick([np.float64, np.bool_, np.int8, np.int32, np.uint32, object, str,
                               np.float32, np.complex128])
            try:
                return a.astype(dtype)
            except (OverflowError, ValueError):
                return a.astype(np.float64)
        if kind == "shape":
            return a.reshape(1, -1) if self.coin(0.5) else np.int64(a[0] if a.size else 0)
        if kind == "size":
            return np.append(a, 1) if self.coin(0.5) or not a.size else a[:-1]
        if kind == "empty":
            return np.zeros(0, np.int64) if self.coin(0.5) else []
        if kind == "list":
            return a.tolist()
        if kind == "strided":
            return np.repeat(a, 2)[::2]
        if kind == "uint64":
            u = a.astype(np.uint64) if (a >= 0).all() else np.abs(a).astype(np.uint64)
            if u.size and self.coin(0.5):
                u[0] = np.uint64(2**64 - 1)
            return u
        if kind == "float_int":
            return a.astype(np.float64) + (0.5 if self.coin(0.5) else 0.0)
        return garbage(self.rng)

    def counts(self, d: int, hi: int) -> np.ndarray:
        return self.rng.integers(0, hi + 1, d).astype(np.int64)

    def lengths(self, n: int) -> np.ndarray:
        scale = self.pick([8, 100, 5000, 100000])
        ls = self.rng.integers(0, scale + 1, n).astype(np.int64)
        return ls


# ---------------------------------------------------------------------------------------------
# Checks of results.

def as_index(value: Any) -> int:
    """An int argument a native method accepted: anything with __index__ (Python's rule, so
    True is 1, as for numpy); a float or a string accepted is a failure."""
    try:
        return operator.index(value)
    except TypeError:
        raise Failure(f"{value!r} accepted as an int") from None


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


def is_int64_array(a: Any, shape: Optional[Tuple[int, ...]] = None) -> bool:
    return (isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 1 and
            (shape is None or a.shape == shape))


def check_permutation(dst_rank: np.ndarray, dst_slot: np.ndarray, d: int, n: int,
                      dst_offsets: Optional[np.ndarray] = None,
                      sources: Optional[np.ndarray] = None) -> None:
    """Every item lands exactly once: (dst_rank, dst_slot) is a bijection onto the slots."""
    check(is_int64_array(dst_rank, (n,)) and is_int64_array(dst_slot, (n,)),
          f"dst arrays: {getattr(dst_rank, 'shape', None)} for {n} items")
    if n:
        check(int(dst_rank.min()) >= 0 and int(dst_rank.max()) < d, "dst_rank outside [0, D)")
        check(int(dst_slot.min()) >= 0, "negative dst_slot")
    counts = np.bincount(dst_rank, minlength=d) if n else np.zeros(d, np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    ids = offsets[dst_rank] + dst_slot if n else np.zeros(0, np.int64)
    check(bool(n == 0 or (dst_slot < counts[dst_rank]).all()), "dst_slot past its rank's count")
    check(np.array_equal(np.sort(ids), np.arange(n)), "plan is not a permutation")
    if dst_offsets is not None:
        check(np.array_equal(dst_offsets, offsets), "dst_offsets disagree with dst_rank")
    if sources is not None:
        expect = np.empty(n, np.int64)
        expect[ids] = np.arange(n)
        check(np.array_equal(sources, expect), "sources is not the inverse of the plan")


def padded_length(length: int, policy: str, multiple: int) -> int:
    if policy == "padded":
        return -(-length // multiple) * multiple
    if policy.startswith("bucketed:"):
        for b in (int(x) for x in policy.split(":")[1].split(",")):
            if b >= length:
                return b
        raise Failure("bucketed plan with an item above the largest bucket")
    return length


def exact_linear_loads(plan: orchmllm.Plan, lengths: np.ndarray, weight: int, policy: str,
                       multiple: int) -> List[int]:
    """Every destination rank's load under weight * l, in Python integers (no overflow)."""
    d = plan.num_ranks
    loads = []
    for r in range(d):
        mine = [int(x) for x in lengths[plan.dst_rank == r]]
        if policy == "packed":
            loads.append(sum(weight * x for x in mine))
        elif mine:
            loads.append(len(mine) * weight * padded_length(max(mine), policy, multiple))
        else:
            loads.append(0)
    return loads


def check_plan(plan: Any, d: int, n: int) -> None:
    check(isinstance(plan, orchmllm.Plan), f"returned {type(plan).__name__}, not a Plan")
    check(plan.num_ranks == d and plan.num_items == n,
          f"plan of {plan.num_ranks} ranks / {plan.num_items} items for {d} / {n}")
    check_permutation(plan.dst_rank, plan.dst_slot, d, n, plan.dst_offsets, plan.sources)
    check(math.isfinite(plan.makespan) and plan.makespan >= 0, f"makespan {plan.makespan}")
    check(math.isfinite(plan.lower_bound) and plan.lower_bound >= 0,
          f"lower bound {plan.lower_bound}")
    check(plan.lower_bound <= plan.makespan * (1 + 1e-9) + 1e-9,
          f"lower bound {plan.lower_bound} above makespan {plan.makespan}")
    # A plan of cells reports the micro-batch planner.
    check(isinstance(plan.algorithm, str) and (
        plan.algorithm in orchmllm.ALGORITHMS or
        (plan.micro_batches > 0 and plan.algorithm.startswith("micro_batches"))),
        f"algorithm {plan.algorithm!r}")


def check_statistics(plan: orchmllm.Plan, stats: Any) -> None:
    check(isinstance(stats, dict), "statistics() is not a dict")
    for key in ("makespan", "makespan_before", "lower_bound", "mean_load", "min_load"):
        v = stats[key]
        check(isinstance(v, float) and math.isfinite(v) and v >= 0, f"statistics {key} = {v}")
    # Cells under padding: the plan's makespan pads each micro-batch on its own, the statistics
    # a rank's items together (the CLI's figures).
    if plan.micro_batches == 0 or plan.policy == "packed":
        check(stats["makespan"] == plan.makespan or
              abs(stats["makespan"] - plan.makespan) <= 1e-9 * max(1.0, plan.makespan),
              f"statistics makespan {stats['makespan']} != plan makespan {plan.makespan}")
    else:
        check(plan.makespan <= stats["makespan"] * (1 + 1e-9),
              f"padded cells' makespan {plan.makespan} above the rank's {stats['makespan']}")
    after = stats["load_after"]
    check(after.shape == (plan.num_ranks,) and bool(np.isfinite(after).all()), "load_after")
    for key in ("items_moved", "bytes_moved", "max_tokens", "max_bytes"):
        check(isinstance(stats[key], int) and stats[key] >= 0, f"statistics {key} = {stats[key]}")


def check_all_to_all(a: Any, rank: int, d: int, local_rows: np.ndarray,
                     landing_rows: np.ndarray, output_items: Optional[np.ndarray]) -> None:
    """`local_rows`: rows of the rank's items (slot order); `landing_rows`: of those it holds
    after (destination slot order)."""
    check(isinstance(a, orchmllm.AllToAll), f"returned {type(a).__name__}")
    send, recv = a.send_splits, a.recv_splits
    check(is_int64_array(send, (d,)) and is_int64_array(recv, (d,)), "split shapes")
    check(bool((send >= 0).all() and (recv >= 0).all()), "negative split")
    total_in, total_out = int(local_rows.sum()), int(landing_rows.sum())
    check(int(send.sum()) == total_in, f"send splits add up to {int(send.sum())}, not {total_in}")
    check(int(recv.sum()) == total_out,
          f"recv splits add up to {int(recv.sum())}, not {total_out}")
    check(np.array_equal(np.sort(a.send_order), np.arange(total_in)), "send_order")
    check(np.array_equal(np.sort(a.recv_order), np.arange(total_out)), "recv_order")
    if output_items is not None:
        check(np.array_equal(a.output_items, output_items), "output_items")
    check(a.rank == rank, f"AllToAll.rank {a.rank} for rank {rank}")


def check_exchange(splits: Dict[int, Any], d: int) -> None:
    """Every rank's send split to s is rank s's receive split from it; one fingerprint."""
    for r, a in splits.items():
        for s, b in splits.items():
            check(int(a.send_splits[s]) == int(b.recv_splits[r]),
                  f"rank {r} sends {int(a.send_splits[s])} rows to {s}, which expects "
                  f"{int(b.recv_splits[r])}")
    check(len({a.fingerprint for a in splits.values()}) <= 1, "ranks disagree on fingerprint")


# ---------------------------------------------------------------------------------------------
# Inputs.

def batch(g: Gen, max_ranks: int = 6, max_items: int = 6) -> Tuple[np.ndarray, np.ndarray]:
    d = int(g.rng.integers(1, max_ranks + 1))
    counts = g.counts(d, max_items)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return offsets, g.lengths(int(offsets[-1]))


def cost_callable(g: Gen) -> Callable[[np.ndarray], Any]:
    good: List[Callable[[np.ndarray], Any]] = [
        lambda ls: ls * 1.0, lambda ls: np.sqrt(ls.astype(np.float64)),
        lambda ls: 3.0 + ls * 2.0 + ls.astype(np.float64) ** 2 * 1e-3]
    bad: List[Callable[[np.ndarray], Any]] = [
        lambda ls: -np.ones(ls.shape), lambda ls: np.full(ls.shape, np.nan),
        lambda ls: np.full(ls.shape, np.inf), lambda ls: ls[:-1] * 1.0 if ls.size else [1.0],
        lambda ls: -ls * 1.0, lambda ls: "x", lambda ls: None,
        lambda ls: np.full(ls.shape, 1e308), lambda ls: ls.astype(np.float64) ** 40,
        lambda ls: (_ for _ in ()).throw(UserCostError("cost callable failed")),
        lambda ls: np.ones((ls.size, 2)), lambda ls: ls.astype(object)]
    f = g.pick(bad) if g.coin(g.bad) else g.pick(good)

    def quiet(ls: np.ndarray) -> Any:  # its own overflows are on purpose (warnings are errors)
        with np.errstate(all="ignore"):
            return f(ls)

    return quiet


POLICIES = ["packed", "padded", "bucketed:16,256,4096,100000,1000000"]
BAD_POLICIES = ["ragged", "bucketed:", "bucketed:0", "bucketed:8,4", "bucketed:1,,2",
                "bucketed:99999999999999999999", "bucketed:9223372036854775807", "padded:8",
                "bucketed:1,2,x"]
COSTS = ["linear", "quadratic:1,1e-3", "quadratic:0,0", "quadratic:1,0"]
BAD_COSTS = ["cubic", "quadratic:1", "quadratic:1,2,3,4", "quadratic:-1,0", "quadratic:1,nan",
             "quadratic:1e308,1e308", "quadratic:inf,0", "linear:2", "quadratic:,"]


def cost_arg(g: Gen, callables: bool = True) -> Any:
    r = g.rng.random()
    if r < 0.35:
        return g.str_(COSTS, BAD_COSTS)
    if r < 0.55:
        return orchmllm.LinearCost(int(g.pick([1, 1, 2, 3, 1000, 2**20, 2**40, 2**61 + 1,
                                                2**62, INT64_MAX])))
    if r < 0.75:
        return orchmllm.QuadraticCost(*(float(g.pick([0.0, 1.0, 1e-3, 7.5, 1e300, 1e-300]))
                                        for _ in range(3)))
    if r < 0.9 and callables:
        return cost_callable(g)
    return garbage(g.rng) if g.coin(g.bad) else "linear"


def policy_arg(g: Gen) -> Tuple[Any, Any]:
    policy = g.str_(POLICIES, BAD_POLICIES)
    multiple = None
    if policy == "padded" and g.coin(0.5):
        multiple = g.int_(1, 64)
    elif g.coin(g.bad / 2):
        multiple = g.int_(1, 64)
    return policy, multiple


def micro_batch_kwargs(g: Gen, tokens: int, kw: Dict[str, Any]) -> None:
    """Sometimes the micro-batch arguments (of balance and of a stage), into ``kw``; ``tokens``
    sizes the token cap."""
    if not g.coin(0.2):
        return
    if g.coin(0.5):
        kw["micro_batches"] = g.pick(["auto", None]) if g.coin(0.3) else g.int_(1, 4)
    if g.coin(0.6):
        kw["max_tokens_per_micro_batch"] = g.int_(1, max(tokens, 1))
    if g.coin(0.2):
        kw["micro_batch_multiple"] = g.int_(1, 3)
    if g.coin(0.2):
        kw["min_micro_batches"] = g.int_(1, 3)
    if g.coin(0.4):
        kw["sync"] = g.str_(["micro-batch", "step"], ["micro_batch", "steps"])


def balance_kwargs(g: Gen, offsets: np.ndarray, lengths: np.ndarray) -> Dict[str, Any]:
    n = int(lengths.shape[0])
    policy, multiple = policy_arg(g)
    kw: Dict[str, Any] = dict(cost=cost_arg(g), policy=policy,
                              algorithm=g.str_(orchmllm.ALGORITHMS, ["magic", "padded_exact"]))
    if multiple is not None:
        kw["pad_multiple"] = multiple
    if g.coin(0.3):
        kw["bytes"] = g.array(lengths * g.rng.integers(1, 4, n))
    if g.coin(0.15):
        kw["cap"] = g.int_(0, int(lengths.sum()) + 1)
    elif g.coin(0.1):
        kw["cap_bytes"] = g.int_(0, 4 * int(lengths.sum()) + 1)
    if g.coin(0.15):
        kw["min_items"] = g.int_(0, 3)
    if g.coin(0.15):
        kw["max_items"] = g.int_(0, 8)
    if g.coin(0.2):
        kw["gpus_per_node"] = g.int_(0, 4)
    if g.coin(0.1):
        kw["locality_tolerance"] = g.float_(0.0, 0.1)
    if g.coin(0.1):
        kw["gap_tolerance"] = g.float_(0.0, 0.1)
    micro_batch_kwargs(g, int(lengths.sum()), kw)
    return kw


def valid_plan(g: Gen) -> Tuple[orchmllm.Plan, np.ndarray, np.ndarray]:
    offsets, lengths = batch(g)
    algorithm = g.pick(["automatic", "lpt", "karmarkar_karp", "identity", "locality"])
    return orchmllm.balance(offsets, lengths, algorithm=algorithm), offsets, lengths


# ---------------------------------------------------------------------------------------------
# Targets: each draws its inputs, makes the fuzzed call(s), checks a success. Returns the
# number of public calls it fuzzed.

def t_balance(g: Gen) -> int:
    offsets, lengths = batch(g)
    if g.coin(0.05):
        offsets = np.zeros(1, np.int64) if g.coin(0.5) else np.zeros(0, np.int64)
        lengths = np.zeros(0, np.int64)
    kw = balance_kwargs(g, offsets, lengths)
    off_arg, len_arg = g.array(offsets), g.array(lengths)
    plan = orchmllm.balance(off_arg, len_arg, **kw)
    # Success: the arguments were valid, so they are the arrays drawn (or equal to them).
    off = np.asarray(off_arg, np.int64)
    ls = np.asarray(len_arg, np.int64)
    d, n = off.shape[0] - 1, ls.shape[0]
    check(d >= 1, "balance accepted zero ranks")
    check_plan(plan, d, n)
    stats = plan.statistics()
    check_statistics(plan, stats)
    cost, policy = kw["cost"], kw["policy"]
    multiple = kw.get("pad_multiple") or 1
    weight = (cost.weight if isinstance(cost, orchmllm.LinearCost) else
              1 if cost == "linear" else None)
    if weight is not None and (plan.micro_batches == 0 or policy == "packed"):
        # Integer costs: the makespan is exact; recompute it without overflow (cells under
        # padding pad each micro-batch on its own: below these rank loads, checked above).
        loads = exact_linear_loads(plan, ls, weight, policy, multiple)
        check(max(loads, default=0) <= INT64_MAX, f"a load of {max(loads)} was not refused")
        check(float(max(loads, default=0)) == plan.makespan,
              f"makespan {plan.makespan}, the loads give {max(loads, default=0)}")
    counts = np.diff(plan.dst_offsets)
    if kw.get("max_items") is not None:
        check(bool((counts <= kw["max_items"]).all()), "max_items broken")
    if kw.get("min_items"):
        check(bool((counts >= kw["min_items"]).all()), "min_items broken")
    if kw.get("cap") is not None and not plan.fallback:
        check(stats["max_tokens"] <= kw["cap"], f"cap {kw['cap']} broken: {stats['max_tokens']}")
    if plan.micro_batches:
        m_count = plan.micro_batches
        check(stats["objective"] >= stats["objective_lower_bound"] * (1 - 1e-12),
              "objective below its bound")
        for r in range(d):
            ranges = [plan.micro_batch(r, m) for m in range(m_count)]
            received = int(plan.dst_offsets[r + 1] - plan.dst_offsets[r])
            check(ranges[0][0] == 0 and ranges[-1][1] == received and
                  all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), "micro-batch ranges")
        return 1 + d * m_count
    return 1


def t_plan_methods(g: Gen) -> int:
    plan, offsets, lengths = valid_plan(g)
    d, n = plan.num_ranks, plan.num_items
    calls = 0
    for _ in range(3):
        which = g.pick(["all_to_all", "all_to_all", "statistics", "props", "map_bins"])
        calls += 1
        if which == "statistics":
            check_statistics(plan, plan.statistics())
        elif which == "props":
            for name in ("dst_rank", "dst_slot", "dst_offsets", "sources", "num_ranks",
                         "num_items", "makespan", "lower_bound", "proven_optimal", "fallback",
                         "algorithm", "requested", "policy", "pad_multiple", "cost",
                         "plan_seconds", "mapping"):
                getattr(plan, name)
            check(repr(plan) != "", "repr")
        elif which == "map_bins":
            calls += fuzz_map_bins(g, plan, d, n) - 1
        else:
            rows = np.asarray(g.rng.integers(0, 4, n), np.int64)
            rows_arg: Any = None if g.coin(0.2) else g.array(rows, EDGE_ROWS)
            rank = g.int_(0, d - 1)
            a = plan.all_to_all(rank, rows=rows_arg)
            r_rows = np.ones(n, np.int64) if rows_arg is None else np.asarray(rows_arg, np.int64)
            rank = as_index(rank)
            local = r_rows[offsets[rank]:offsets[rank + 1]]
            dst_off = plan.dst_offsets
            landing_ids = plan.sources[dst_off[rank]:dst_off[rank + 1]]
            check_all_to_all(a, int(rank), d, local, r_rows[landing_ids], landing_ids)
            if d <= 4 and g.coin(0.3):
                check_exchange({r: plan.all_to_all(r, rows=rows_arg) for r in range(d)}, d)
    return calls


def fuzz_map_bins(g: Gen, plan: orchmllm.Plan, d: int, n: int) -> int:
    kw: Dict[str, Any] = {}
    if g.coin(0.3):
        nodes = np.repeat(np.arange(d), 1)[:d] // max(1, int(g.rng.integers(1, 4)))
        kw["node_of_rank"] = g.array(nodes)
    if g.coin(0.3):
        kw["bytes"] = g.array(g.rng.integers(0, 100, n))
    gpn = 0 if "node_of_rank" in kw and g.coin(0.8) else g.int_(0, 4)
    method = g.str_(orchmllm.MAPPINGS, ["flow", "glpk"])
    target: Any = plan if not g.coin(g.bad / 3) else garbage(g.rng)
    mapped = orchmllm.map_bins(target, gpn, method, **kw)
    check_plan(mapped, d, n)
    m: Any = mapped.mapping
    check(isinstance(m, dict), "mapping is not a dict")
    check(np.array_equal(np.sort(m["rank_of_bin"]), np.arange(d)), "rank_of_bin")
    for key in ("moved_bytes", "inter_node_bytes", "inter_node_bytes_lower_bound"):
        check(isinstance(m[key], int) and m[key] >= 0, f"mapping {key} = {m[key]}")
    check(m["inter_node_bytes_lower_bound"] <= m["inter_node_bytes"], "inter-node bound")
    check_statistics(mapped, mapped.statistics())
    return 1


def t_map_bins(g: Gen) -> int:
    plan, _, _ = valid_plan(g)
    return fuzz_map_bins(g, plan, plan.num_ranks, plan.num_items)


def t_cost_objects(g: Gen) -> int:
    which = g.pick(["linear", "linear", "quadratic", "quadratic", "eq_repr"])
    if which == "linear":
        w = g.int_(1, 1000) if g.coin(0.7) else g.pick(EDGE)
        c = orchmllm.LinearCost(w) if g.coin(0.9) else orchmllm.LinearCost()
        length = g.int_(0, 10**6) if g.coin(0.6) else g.pick(EDGE)
        v = c(length)
        exact = int(c.weight) * int(length)
        check(isinstance(v, int) and v == exact, f"LinearCost({c.weight})({length}) = {v}")
        return 2
    if which == "quadratic":
        args = [g.float_(0.0, 10.0) for _ in range(3)]
        q = orchmllm.QuadraticCost(*args)
        check(all(math.isfinite(x) and x >= 0 for x in (q.constant, q.linear, q.quadratic)),
              f"QuadraticCost accepted {args}")
        length = g.int_(0, 10**6) if g.coin(0.6) else g.pick(EDGE)
        value = q(length)
        # The polynomial's value (the library evaluates it at lengths >= 0 only).
        check(isinstance(value, float) and not math.isnan(value) and (value >= 0 or length < 0),
              f"QuadraticCost{tuple(args)}({length}) = {value}")
        return 2
    a = orchmllm.LinearCost(3)
    b = orchmllm.QuadraticCost(1.0, 2.0, 0.5)
    if g.coin(0.5):
        # The weight is writable: a value set later is checked where it is used.
        a.weight = g.pick(EDGE) if g.coin(0.5) else garbage(g.rng)
        offsets, lengths = batch(g, 3, 3)
        plan = orchmllm.balance(offsets, lengths, a)
        loads = exact_linear_loads(plan, lengths, a.weight, "packed", 1)
        check(float(max(loads, default=0)) == plan.makespan,
              f"makespan {plan.makespan} with weight {a.weight}")
        return 3
    other = garbage(g.rng)
    check(isinstance(a == other, bool) and isinstance(b == other, bool), "__eq__")
    check("LinearCost" in repr(a) and "QuadraticCost" in repr(b), "__repr__")
    check(repr(orchmllm.SplitOptions()).startswith("SplitOptions("), "SplitOptions repr")
    return 3


def t_fit(g: Gen) -> int:
    k = int(g.rng.integers(0, 12))
    lengths = g.rng.integers(0, 5000, k)
    seconds = 1e-3 + lengths * 1e-6 + lengths.astype(np.float64) ** 2 * 1e-10
    sec_arg: Any = seconds
    if g.coin(g.bad):
        sec_arg = seconds.copy()
        if k:
            sec_arg[int(g.rng.integers(k))] = g.pick(FLOATS)
        else:
            sec_arg = garbage(g.rng)
    degree = g.int_(1, 2)
    q = orchmllm.fit_quadratic_cost(g.array(lengths), sec_arg, degree)
    check(isinstance(q, orchmllm.QuadraticCost), "fit result")
    check(all(math.isfinite(x) and x >= 0 for x in (q.constant, q.linear, q.quadratic)),
          f"fit gave {q!r}")
    return 1


def t_calibration(g: Gen) -> int:
    policy, multiple = policy_arg(g)
    kw: Dict[str, Any] = {}
    if multiple is not None:
        kw["pad_multiple"] = multiple
    fit_overhead = g.pick([True, False]) if not g.coin(g.bad / 2) else garbage(g.rng)
    calib = orchmllm.CostCalibration(policy, g.int_(1, 2), fit_overhead, **kw)
    calls = 1
    for _ in range(int(g.rng.integers(0, 6))):
        calls += 1
        if g.coin(0.5):
            ls = g.rng.integers(0, 3000, int(g.rng.integers(0, 6)))
            calib.add_rank(g.array(ls), g.float_(0.0, 2.0))
        else:
            offsets, lengths = batch(g, 4, 4)
            secs: Any = g.rng.uniform(0, 2, offsets.shape[0] - 1)
            if g.coin(g.bad):
                secs = g.pick([garbage(g.rng), np.full(offsets.shape[0] - 1, math.nan),
                               secs[:-1], np.full(offsets.shape[0] - 1, 1e308)])
            calib.add_step(g.array(offsets), g.array(lengths), secs)
    check(isinstance(calib.observations, int) and calib.observations >= 0, "observations")
    calls += 1
    result = calib.fit()
    q = result.cost
    check(all(math.isfinite(x) and x >= 0 for x in (q.constant, q.linear, q.quadratic)),
          f"calibration gave {q!r}")
    check(math.isfinite(result.overhead_seconds) and result.overhead_seconds >= 0,
          f"overhead {result.overhead_seconds}")
    check(math.isfinite(result.rms_seconds) and result.rms_seconds >= 0, "rms")
    check(repr(result).startswith("CalibrationResult("), "repr")
    return calls


# ---- the step ---------------------------------------------------------------------------------

def stage_kwargs(g: Gen) -> Dict[str, Any]:
    policy, multiple = policy_arg(g)
    kw: Dict[str, Any] = dict(cost=cost_arg(g), policy=policy,
                              algorithm=g.str_(orchmllm.ALGORITHMS, ["magic"]))
    if multiple is not None:
        kw["pad_multiple"] = multiple
    if g.coin(0.1):
        kw["cap"] = g.int_(0, 10**6)
    if g.coin(0.1):
        kw["min_items"] = g.int_(0, 2)
    if g.coin(0.1):
        kw["max_items"] = g.int_(0, 10)
    if g.coin(0.3):
        kw["mapping"] = g.str_(orchmllm.MAPPINGS, ["flow"])
    if g.coin(0.1):
        kw["gap_tolerance"] = g.float_(0.0, 0.1)
    micro_batch_kwargs(g, 400, kw)
    return kw


def declarations(g: Gen, k: int) -> orchmllm.StageDeclarations:
    encoders = []
    for i in range(k):
        kw = stage_kwargs(g)
        if g.coin(0.4):
            kw["input_row_bytes"] = g.int_(1, 64)
        if g.coin(0.4):
            kw["output_row_bytes"] = g.int_(1, 64)
        if g.coin(0.3):
            kw["split"] = (True if g.coin(0.3) else orchmllm.SplitOptions(
                g.int_(1, 3), g.opt_int(1, 4), g.int_(0, 4), g.float_(0.0, 0.1)))
        name = f"enc{i}" if not g.coin(g.bad / 3) else g.pick(["", "llm", "enc0", None, 3])
        encoders.append(orchmllm.EncoderStage(name, **kw))
    kw = stage_kwargs(g)
    if g.coin(0.4):
        kw["text_row_bytes"] = g.int_(1, 16)
    llm = orchmllm.LLMStage(**kw) if not g.coin(0.1) else None
    return orchmllm.StageDeclarations(encoders, llm)


def local_batches(g: Gen, d: int, k: int) -> List[orchmllm.LocalBatch]:
    out = []
    for _ in range(d):
        ns = int(g.rng.integers(0, 4))
        nu = int(g.rng.integers(0, 2 * ns + 1)) if ns and k else 0
        segments = g.rng.integers(1, 4, nu)
        base = g.rng.integers(1, 30, nu)
        fields = dict(
            text_tokens=g.array(g.rng.integers(0, 50, ns), EDGE_ROWS),
            modality=g.array(g.rng.integers(0, max(k, 1), nu)),
            parent=g.array(g.rng.integers(0, max(ns, 1), nu)),
            encoder_length=g.array(4 * base * segments),
            input_rows=g.array(2 * base * segments, EDGE_ROWS),
            llm_tokens=g.array(base * segments, EDGE_ROWS),
            segments=None if g.coin(0.3) else g.array(segments, EDGE_ROWS),
            loss_tokens=None if g.coin(0.7) else g.array(g.rng.integers(0, 50, ns), EDGE_ROWS))
        out.append(orchmllm.LocalBatch(**fields))
    return out


def meta_rows_fit(meta: orchmllm.StepMetadata, limit: int = 10**6) -> bool:
    """Whether every transfer's rows stay small (the fuzzer keeps successful calls cheap: rows
    are small or past 2**61, and a single huge one is refused by name on its rank only)."""
    total = int(meta.text_tokens.sum())
    for k in range(meta.num_encoders):
        m = meta.modality(k)
        total += int(m["input_rows"].sum()) + int(m["llm_tokens"].sum())
    return total <= limit


def t_step(g: Gen) -> int:
    k = int(g.rng.integers(0, 3))
    d = int(g.rng.integers(1, 5))
    calls = 0
    which = g.pick(["decl", "meta", "plan", "plan", "plan", "views", "batch"])
    if which == "decl":
        decl = declarations(g, k)
        calls += 1
        check(decl.num_encoders == k, "num_encoders")
        check(isinstance(decl.fingerprint, int) and 0 <= decl.fingerprint < 2**64, "fingerprint")
        return calls
    if which == "batch":
        b = local_batches(g, 1, k)[0]
        words = b.words()
        samples: Any = b.num_samples if not g.coin(g.bad) else g.pick(EDGE + [garbage(g.rng)])
        subs: Any = b.num_sub_items if not g.coin(g.bad) else g.pick(EDGE + [garbage(g.rng)])
        loss: Any = (b.num_loss_tokens if not g.coin(g.bad)
                     else g.pick(EDGE + [garbage(g.rng)]))
        back = orchmllm.LocalBatch.from_words(words, samples, subs, loss)
        check(np.array_equal(back.words(), words), "from_words(words()) round trip")
        return 2
    decl = declarations(orchmllm_gen_ok(g), k)
    batches: Any = local_batches(g, d, k)
    if g.coin(g.bad / 2):
        batches = g.pick([[], [garbage(g.rng)], garbage(g.rng)])
    num_enc = k if not g.coin(g.bad / 2) else g.int_(0, 3)
    meta = orchmllm.make_step_metadata(batches, num_enc)
    calls += 1
    check(meta.num_ranks == len(batches) and meta.num_encoders == num_enc, "metadata shape")
    if num_enc != k:
        return calls
    check(is_int64_array(meta.sample_offsets, (d + 1,)), "sample_offsets")
    check(meta.num_samples == int(meta.sample_offsets[-1]), "num_samples")
    seq = meta.sequence_lengths()
    check(is_int64_array(seq, (meta.num_samples,)) and bool((seq >= 0).all()),
          "sequence_lengths")
    for j in range(k):
        m = meta.modality(j)
        check(all(is_int64_array(v) for v in m.values()), "modality arrays")
    if which == "meta":
        meta.modality(g.int_(0, max(k - 1, 0)))
        return calls + 1
    gpn = g.int_(0, 4) if g.coin(0.8) else 0
    kw: Dict[str, Any] = {}
    if g.coin(0.2):
        kw["node_of_rank"] = g.array(np.arange(d) // 2)
        gpn = 0 if g.coin(0.8) else gpn
    if g.coin(0.5):
        kw["rank"] = g.int_(0, d - 1)
    if g.coin(0.2):
        kw["parallel_stages"] = g.pick([True, False])
    step = orchmllm.plan_step(decl, meta, gpn, **kw)
    calls += 1
    check(isinstance(step, orchmllm.StepPlan), "plan_step result")
    check(step.num_ranks == d and step.num_encoders == k, "step shape")
    check(step.alltoalls_per_step == 3 * k + 1, "alltoalls_per_step")
    reports = step.stages()
    check(len(reports) == k + 1, "stages()")
    for rep in reports:
        makespan = rep["makespan"]
        check(isinstance(makespan, float) and math.isfinite(makespan) and makespan >= 0,
              f"stage makespan {makespan}")
    for stage in range(k + 1):
        m_count = step.micro_batches(stage)
        check(isinstance(m_count, int) and m_count >= 0, "micro_batches")
        if m_count:
            for r in range(d):
                ranges = [step.micro_batch(stage, r, m) for m in range(m_count)]
                check(ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])),
                      "a stage's micro-batch ranges")
            calls += d * m_count
    loss_tokens = int(meta.loss_tokens.sum())
    check(step.loss_tokens == loss_tokens, "loss_tokens")
    reduction = g.str_(["mean", "sum"], ["avg", "Mean"])
    scale = step.loss_scale(reduction)
    check(scale == (0.0 if loss_tokens == 0 else
                    (d if reduction == "mean" else 1) / loss_tokens), "loss_scale")
    llm_m = max(step.micro_batches(k), 1)
    check(sum(step.loss_tokens_of(r, m) for r in range(d) for m in range(llm_m)) == loss_tokens,
          "loss_tokens_of")
    if g.coin(0.2):
        step.micro_batch(g.int_(0, k), g.int_(0, d - 1), g.int_(0, 3))
        step.loss_tokens_of(g.int_(0, d - 1), g.int_(0, 3))
    calls += 3 + d * llm_m
    routes_rank = -1 if kw.get("rank") is None else as_index(kw["rank"])
    check(step.routes_rank == routes_rank and step.plan_seconds >= 0, "routes_rank")
    llm = step.llm_plan()
    check_permutation(llm.dst_rank, llm.dst_slot, d, meta.num_samples, llm.dst_offsets,
                      llm.sources)
    check(np.array_equal(llm.src_offsets, meta.sample_offsets) and llm.num_ranks == d,
          "llm_plan's source layout is not the metadata's")
    for j in range(k):
        for kind in ("input", "lifted", "output", "gradient"):
            r = step.encoder_plan(j, kind)
            check_permutation(r.dst_rank, r.dst_slot, d, r.num_items, r.dst_offsets, r.sources)
            check(r.src_offsets.shape == (d + 1,) and int(r.src_offsets[-1]) == r.num_items,
                  "encoder plan src_offsets")
    calls += 2 + 4 * k
    if g.coin(0.3):
        kind = g.str_(["input", "lifted", "output", "gradient"], ["Input", "units"])
        step.encoder_plan(g.int_(0, max(k - 1, 0)), kind)
        calls += 1
    if which == "views" or not meta_rows_fit(meta):
        # Views only (a transfer's index arrays would be large; the rows are checked below).
        for _ in range(3):
            rank = g.int_(0, d - 1)
            if g.coin(0.5):
                v = step.llm_view(rank)
                check(isinstance(v, orchmllm.LLMView) and len(v.item_offsets) == k, "llm_view")
                v.samples, v.sub_item_offsets, v.sub_item_modality, v.sub_item_index
                v.row_offsets
            else:
                e = step.encoder_view(g.int_(0, max(k - 1, 0)), rank)
                check(isinstance(e, orchmllm.EncoderView), "encoder_view")
                e.sub_item, e.first_segment, e.last_segment, e.segments, e.input_rows
                e.llm_tokens
            calls += 1
        if not meta_rows_fit(meta):
            calls += fuzz_huge_transfer(g, step, meta, d, k)
        return calls
    transfers = ["text"] + [t for t in ("encoder_input", "encoder_output", "encoder_gradient")
                            if k]
    for _ in range(3):
        transfer = g.str_(transfers, ["gradient", "TEXT"])
        rank = g.int_(0, d - 1)
        j = g.int_(0, max(k - 1, 0))
        a = step.all_to_all(transfer, rank, j)
        calls += 1
        check(isinstance(a, orchmllm.AllToAll), "all_to_all")
        if g.coin(0.3):
            check_exchange({r: step.all_to_all(transfer, r, j) for r in range(d)}, d)
    return calls


def fuzz_huge_transfer(g: Gen, step: orchmllm.StepPlan, meta: orchmllm.StepMetadata, d: int,
                       k: int) -> int:
    """A step with a row count past 2**61 plans (its bytes fit), but a rank that would hold
    that many rows is refused by name; ranks without it work."""
    transfer = "text" if not k or g.coin(0.4) else g.pick(
        ["encoder_input", "encoder_output", "encoder_gradient"])
    j = int(g.rng.integers(0, max(k, 1)))
    try:
        step.all_to_all(transfer, int(g.rng.integers(0, d)), j)
    except orchmllm.InvalidArgumentError as e:
        check("rows" in str(e) or "overflow" in str(e) or "2^63" in str(e),
              f"huge transfer refused with {e}")
    return 1


class _OkGen(Gen):
    """A generator that never replaces an argument (for the setup of another target)."""

    def __init__(self, g: Gen) -> None:
        super().__init__(g.rng, 0.0)


def orchmllm_gen_ok(g: Gen) -> Gen:
    return _OkGen(g) if g.coin(0.7) else g


TARGETS: Dict[str, Tuple[float, Callable[[Gen], int]]] = {
    "balance": (0.30, t_balance),
    "plan_methods": (0.15, t_plan_methods),
    "map_bins": (0.08, t_map_bins),
    "cost_objects": (0.10, t_cost_objects),
    "fit_quadratic_cost": (0.05, t_fit),
    "CostCalibration": (0.07, t_calibration),
    "step": (0.25, t_step),
}


def clean_error(e: BaseException) -> Optional[str]:
    """None when `e` is a documented exception with a clean message, else why not."""
    if isinstance(e, UserCostError):
        return None
    if not isinstance(e, DOCUMENTED):
        return f"undocumented exception {type(e).__module__}.{type(e).__name__}: {e}"
    message = str(e)
    if isinstance(e, orchmllm.Error) and type(e) is orchmllm.Error:
        return f"bare orchmllm.Error: {message}"
    if not message:
        return f"{type(e).__name__} without a message"
    if any(word in message for word in FOREIGN) and not isinstance(e, TypeError):
        return f"a C++ runtime's message: {type(e).__name__}: {message}"
    return None


def run_case(seed: int, i: int, bad: float, max_seconds: float,
             counters: Dict[str, collections.Counter[str]],
             messages: Optional[collections.Counter[Tuple[str, str, str]]] = None
             ) -> Tuple[int, Optional[str]]:
    rng = np.random.default_rng([seed, i])
    # A third of the cases replace nothing: their calls succeed often enough that the checks
    # of results (and the deep paths behind them) run on every kind of valid input too.
    g = Gen(rng, 0.0 if rng.random() < 0.35 else bad)
    names = list(TARGETS)
    weights = np.array([TARGETS[n][0] for n in names])
    name = names[int(rng.choice(len(names), p=weights / weights.sum()))]
    start = time.perf_counter()
    calls = 1
    outcome = "ok"
    problem: Optional[str] = None
    try:
        calls = TARGETS[name][1](g)
    except Failure as f:
        outcome, problem = "FAILURE", f"{name}: {f}\n{traceback.format_exc()}"
    except BaseException as e:  # noqa: B902 -- every exception is judged
        if isinstance(e, KeyboardInterrupt):
            raise
        why = clean_error(e)
        outcome = type(e).__name__
        if messages is not None:
            messages[(name, outcome, str(e)[:70])] += 1
        if why is not None:
            outcome, problem = "FAILURE", f"{name}: {why}\n{traceback.format_exc()}"
    elapsed = time.perf_counter() - start
    if problem is None and elapsed > max_seconds:
        problem = f"{name}: took {elapsed:.1f} s (limit {max_seconds} s)"
    counters[name][outcome] += 1
    return calls, problem


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10000,
                        help="stop after this many fuzzed public calls (default 10000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every case (default 1)")
    parser.add_argument("--case", type=int, default=None, help="replay this one case only")
    parser.add_argument("--bad", type=float, default=0.15,
                        help="probability that an argument is replaced (default 0.15)")
    parser.add_argument("--max-call-seconds", type=float, default=20.0,
                        help="a case slower than this is a hang (default 20)")
    parser.add_argument("--verbose", action="store_true", help="print every case's outcome")
    parser.add_argument("--messages", action="store_true",
                        help="print every distinct exception message (first 70 characters)")
    args = parser.parse_args(argv)
    faulthandler.enable()  # a crash prints where it happened
    # A warning (numpy's about an overflow, a deprecation) raised by the package is a failure:
    # it becomes an exception that no target expects.
    warnings.simplefilter("error")
    counters: Dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    start = time.perf_counter()
    calls = cases = 0
    failures: List[Tuple[int, str]] = []
    messages: Optional[collections.Counter[Tuple[str, str, str]]] = (
        collections.Counter() if args.messages else None)
    first = args.case if args.case is not None else 0
    while True:
        i = first + cases
        if args.case is not None and cases == 1:
            break
        if args.case is None and calls >= args.calls:
            break
        if args.verbose:
            print(f"case {i}", flush=True)
        n, problem = run_case(args.seed, i, args.bad, args.max_call_seconds, counters,
                              messages)
        calls += n
        cases += 1
        if problem is not None:
            failures.append((i, problem))
            print(f"FAILED case {i} (replay: --seed {args.seed} --case {i}):\n{problem}",
                  file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - start
    print(f"orchmllm {orchmllm.__version__}: {calls} calls in {cases} cases, seed {args.seed}, "
          f"{elapsed:.1f} s, {len(failures)} failures")
    for name in sorted(counters):
        outcomes = ", ".join(f"{k} {v}" for k, v in counters[name].most_common())
        print(f"  {name}: {outcomes}")
    if messages is not None:
        for (name, kind, text), count in sorted(messages.items()):
            print(f"  {count:6d}  {name}: {kind}: {text}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
