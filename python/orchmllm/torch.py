"""Moving ragged tensors along an orchmllm plan with ``torch.distributed``.

A rank's payload for a stage is one tensor whose first dimension is the concatenation of its
local items' rows, in local slot order (e.g. the patches of its images, image after image).
:class:`Dispatcher` moves those rows along a :class:`~orchmllm.Plan` with one
``torch.distributed.all_to_all_single`` (gloo on CPU tensors, NCCL on CUDA tensors) and returns
the rows this rank receives, in destination-slot order; :meth:`Dispatcher.combine` is the inverse
(the rows of the items this rank holds after the plan, back to where they came from). Both are
autograd functions: the gradient of a dispatch is the combine of the output's gradient and vice
versa. :func:`gather_lengths` is the metadata all-gather every rank runs before planning.

A whole multimodal step: :func:`plan_step_dispatchers` all-gathers the ranks'
:class:`~orchmllm.LocalBatch` metadata (:func:`gather_step_metadata`), runs
:func:`orchmllm.plan_step` for this rank and returns the :class:`StepDispatchers` of every
transfer (encoder inputs, text, encoder outputs along the composed route, whose backward is the
gradient route); :meth:`StepDispatchers.llm_input` assembles the LLM ranks' sequences so that
every exchange stays in the loss's graph; :class:`AsyncStepPlanner` plans step t + 1 on a
background thread while step t trains. :class:`ContextParallelGroups` makes, once, the process
groups of every context-parallel group :func:`orchmllm.context_parallel` can choose.

Ranks that disagree fail together: before an exchange moves anything, the ranks agree (one
``all_reduce`` of five int64) that they run the same exchange (the route's fingerprint, the
direction, the tensor's dtype and trailing shape), that none of them has a fault (a tensor of
the wrong size, a plan for another rank) and whether gradients are recorded; otherwise every
rank raises the same :class:`orchmllm.CommunicationError`, naming the first rank at fault, and
nothing moves. Every wait for that agreement has a deadline (``ORCHMLLM_TIMEOUT_MS``, default
5 minutes). See docs/python.md.

Importing this module imports torch; ``import orchmllm`` does not (torch is the optional
dependency ``orchmllm[torch]``).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import math
import os
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from . import (AllToAll, CommunicationError, EncoderView, Error, InvalidArgumentError, LLMView,
               LocalBatch, Plan, StageDeclarations, StepMetadata, StepPlan, _int,
               _int64_vector, make_step_metadata, plan_step)

__all__ = ["AsyncStepPlanner", "ContextParallelGroups", "Dispatcher", "StepDispatchers", "combine",
           "context_parallel_blocks", "default_timeout", "dispatch", "gather_lengths",
           "gather_step_metadata", "plan_step_dispatchers"]

#: The environment variable of the agreement deadline, in milliseconds (0: none).
TIMEOUT_ENV = "ORCHMLLM_TIMEOUT_MS"
_DEFAULT_TIMEOUT_MS = 300_000
_MAX_TIMEOUT_MS = 365 * 24 * 3600 * 1000

Timeout = Union[None, float, datetime.timedelta]


def default_timeout() -> Optional[datetime.timedelta]:
    """The deadline of every agreement wait when none is passed, as the C++ communicators
    resolve theirs: ``ORCHMLLM_TIMEOUT_MS`` milliseconds when the variable is set and not empty
    (0: no deadline), else 5 minutes. Read at every call (each Dispatcher and gather reads it
    when made). Raises ValueError for a value that is not a decimal integer in [0, one year]
    (no sign, spaces or unit)."""
    text = os.environ.get(TIMEOUT_ENV, "")
    if not text:
        return datetime.timedelta(milliseconds=_DEFAULT_TIMEOUT_MS)
    if not (text.isascii() and text.isdigit()) or int(text) > _MAX_TIMEOUT_MS:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} is not an integer number of milliseconds in "
                         f"[0, {_MAX_TIMEOUT_MS}] (0 means no deadline)")
    ms = int(text)
    return datetime.timedelta(milliseconds=ms) if ms else None


def _deadline(timeout: Timeout) -> Optional[datetime.timedelta]:
    """``timeout`` (seconds or a timedelta; 0: none; None: :func:`default_timeout`)."""
    if timeout is None:
        return default_timeout()
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(f"timeout must be seconds or a timedelta, got {type(timeout).__name__}")
    if not math.isfinite(seconds) or seconds < 0 or seconds * 1000 > _MAX_TIMEOUT_MS:
        raise ValueError(f"timeout is {seconds} s, outside [0, one year] (0: no deadline)")
    return datetime.timedelta(seconds=seconds) if seconds else None


def _group_fault(num_ranks: int, rank: int, group: Optional[dist.ProcessGroup]) -> Optional[str]:
    """Why this process cannot run an exchange over D = num_ranks ranks as ``rank`` of
    ``group``, or None."""
    size = dist.get_world_size(group)
    if num_ranks != size:
        return f"the plan is over {num_ranks} ranks, the process group has {size}"
    own = dist.get_rank(group)
    if rank != own:
        return f"rank is {rank}, but this process is rank {own} of the process group"
    return None


def _collective_device(group: Optional[dist.ProcessGroup]) -> torch.device:
    """CUDA (the current device) for a group whose backend is NCCL only, else CPU."""
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and "gloo" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------------
# Agreement: what every collective of this module runs first.

# Labels of exchanges whose output required grad and was freed without its backward having run
# on this rank (the group's id, the label), most recent last: named in a disagreement's message,
# since a backward exchange skipped on one rank is the usual cause.
_missed_backward: Deque[Tuple[int, str]] = deque(maxlen=8)


class _Obligation:
    """Held by an exchange's autograd context: records the exchange as missed when the graph
    is freed before its backward ran."""

    __slots__ = ("group_id", "label", "done")

    def __init__(self, group_id: int, label: str) -> None:
        self.group_id, self.label, self.done = group_id, label, False

    def __del__(self) -> None:
        if not self.done:
            _missed_backward.append((self.group_id, self.label))


def _key(parts: Tuple[Any, ...]) -> int:
    """A 63-bit digest of ``parts`` (equal on every rank for equal parts)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


# Grad states a rank brings to a forward exchange: no autograd (grad mode off), autograd on but
# its tensor needs no gradient, its tensor requires grad. Other operations bring 1.
_NO_GRAD, _GRAD_MODE, _REQUIRES_GRAD = 0, 1, 2


def _agree(group: Optional[dist.ProcessGroup], device: torch.device,
           timeout: Optional[datetime.timedelta], what: str, parts: Tuple[Any, ...],
           fault: Optional[str], grad: int = _GRAD_MODE) -> int:
    """One all_reduce(MAX) of [fault, key, ~key, grad, -grad]: the ranks agree that none has a
    fault, that all run the operation of the same ``parts`` and whether gradients flow (some
    rank requires grad while another runs without autograd: a fault). Returns the largest grad
    state. Otherwise every rank all-gathers what each runs (all_gather_object) and raises the
    same CommunicationError naming the first rank at fault; nothing else moved. Past the
    deadline, raises CommunicationError naming ``what`` (the group is unusable after it)."""
    key = _key(parts)
    header = torch.tensor([1 if fault else 0, key, ~key, grad, -grad], dtype=torch.int64,
                          device=device)
    try:
        work = dist.all_reduce(header, op=dist.ReduceOp.MAX, group=group, async_op=True)
        if timeout is None:
            work.wait()
        else:
            work.wait(timeout)
    except RuntimeError as e:
        wait = "" if timeout is None else f" within {timeout.total_seconds():g} s"
        raise CommunicationError(
            f"rank {dist.get_rank(group)}: the other ranks did not join {what}{wait} (a rank "
            f"failed, returned early, or runs another collective, e.g. a backward that skipped "
            f"an exchange); the process group is unusable after this: {e}") from None
    h = header.tolist()
    if h[0] == 0 and h[1] == ~h[2] and not (h[3] == _REQUIRES_GRAD and -h[4] == _NO_GRAD):
        return int(h[3])
    me = dict(what=what, parts=parts, fault=fault, grad=grad,
              missed=[label for gid, label in _missed_backward if gid == id(group)])
    infos: List[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(infos, me, group=group)
    raise CommunicationError(_disagreement(infos))


_SKIPPED_BACKWARD = (
    "a rank whose loss does not depend on an exchange's output (e.g. it holds 0 rows of it and "
    "left it out of its sequences) skips that exchange's backward: keep every exchanged tensor "
    "in the loss on every rank, also with 0 rows (StepDispatchers.llm_input does)")


def _difference(a: Dict[str, Any], b: Dict[str, Any]) -> str:
    """Why two ranks' operations differ, in words (parts of an exchange: op, fingerprint,
    direction, phase, dtype, trailing shape)."""
    p, q = a["parts"], b["parts"]
    if a["what"] == b["what"] and p[0] == q[0] == "step":
        return "of another step (other routes: a stale step, other metadata or topology?)"
    if a["what"] != b["what"] or p[0] != "exchange" or q[0] != "exchange":
        if "backward" in a["what"] or "backward" in b["what"]:
            return "so their backward passes differ: " + _SKIPPED_BACKWARD
        return "so they run different collectives (every rank must run the same sequence)"
    if p[1] != q[1]:
        return (f"along another plan or route (fingerprint {p[1]} vs {q[1]}: a stale plan, "
                "other rows or another step?)")
    if p[4] != q[4]:
        return f"with a tensor of dtype {q[4]} where rank 0's is {p[4]}"
    return f"with a tensor of trailing shape {tuple(q[5])} where rank 0's is {tuple(p[5])}"


def _skipped(missed: List[str], other: str) -> Optional[str]:
    """Of the exchanges a rank never ran the backward of, the one another rank's backward
    ``other`` runs now ("the backward combine of 'x'" is the backward of "the dispatch of
    'x'"), else the most recent; None when there is none."""
    for forward, backward in (("dispatch", "combine"), ("combine", "dispatch")):
        prefix = f"the backward {backward} of "
        if other.startswith(prefix) and f"the {forward} of {other[len(prefix):]}" in missed:
            return f"the {forward} of {other[len(prefix):]}"
    return missed[-1] if missed else None


def _disagreement(infos: List[Dict[str, Any]]) -> str:
    """The message every rank raises for a failed agreement, from what every rank ran."""
    for r, info in enumerate(infos):
        if info["fault"]:
            return f"rank {r} cannot take part in {info['what']}: {info['fault']}"
    base = infos[0]
    for r, info in enumerate(infos):
        if info["parts"] != base["parts"]:
            text = (f"ranks run different operations: rank 0 runs {base['what']}, rank {r} runs "
                    f"{info['what']} {_difference(base, info)}")
            for q, other in ((0, info), (r, base)):
                skipped = _skipped(infos[q]["missed"], other["what"])
                if skipped:
                    text += (f"; rank {q} never ran the backward of {skipped} (its output was "
                             "freed without the loss depending on it)")
            return text
    off = next(r for r, i in enumerate(infos) if i["grad"] == _NO_GRAD)
    on = next(r for r, i in enumerate(infos) if i["grad"] == _REQUIRES_GRAD)
    return (f"rank {off} runs {infos[off]['what']} without autograd (torch.no_grad or inference "
            f"mode) while rank {on}'s tensor requires grad: the backward exchange would run on "
            "some ranks only")


def _gather_agreed(group: Optional[dist.ProcessGroup], device: torch.device,
                   timeout: Timeout, what: str, fault: Optional[str]) -> None:
    """The agreement a gather runs first (the same operation everywhere, no rank at fault)."""
    _agree(group, device, _deadline(timeout), what, ("gather", what), fault)


def _is_identity(order: np.ndarray) -> bool:
    return bool(np.array_equal(order, np.arange(order.shape[0])))


class Dispatcher:
    """The exchanges of one rank along one plan or route, built once and reused for every tensor.

    source: a :class:`~orchmllm.Plan` onto the same D ranks as ``group`` (every rank holds the
    same plan), or an :class:`~orchmllm.AllToAll` already computed for this rank (e.g. one
    transfer of a step, ``StepPlan.all_to_all(transfer, rank, k)``; its ``rows`` are built in).
    rank: this process's rank in ``group``. rows: with a Plan, int64[n], the rows
    (first-dimension entries) of every item by global id, the same on every rank; default one
    row per item (must be None with an AllToAll). group: the trainer's process group (default:
    the default group). name: how errors name this exchange (default "Dispatcher").
    verify: True (default): every exchange, forward and backward, first agrees with the other
    ranks (see below); False: only the first one does (a :class:`StepDispatchers` built with
    ``verify=False`` agreed on its whole step instead, so its dispatchers never do).
    timeout: the deadline of each agreement, in seconds or a timedelta (0: none; default
    :func:`default_timeout`, read here).

    Construction from a Plan calls :meth:`Plan.all_to_all` once (O(n log n), the GIL released)
    and keeps its split sizes and index orders; the index tensors are made once per device, on
    first use. Every :meth:`dispatch` / :meth:`combine` is then the agreement, at most two
    index_select passes (none for an identity order) and one ``all_to_all_single`` over the
    tensor's bytes, so any dtype and trailing shape moves (sent as uint8 rows): O(rows x row
    bytes). Deterministic: the same plan and rows give the same orders on every run.

    Dispatch and combine are collectives: every rank of the group calls the same sequence of
    them, and so does the backward pass. Before anything moves, the ranks agree in one
    ``all_reduce`` of five int64 that they run the same exchange (the route's ``fingerprint``,
    the direction, the phase, the tensor's dtype and trailing shape), that none of them has a
    fault (a tensor whose first dimension is not this rank's rows, a rank argument that is
    not this process's rank, a plan over another number of ranks, an AllToAll of another rank)
    and whether autograd records the exchange; otherwise every rank raises the same
    :class:`orchmllm.CommunicationError` naming the first rank at fault (and, when one rank
    skipped a backward exchange, which). When some rank's tensor requires grad, every rank's
    output does (a rank whose encoder returned a fresh tensor still runs the backward
    exchange); a rank without autograd then is a fault. Keep every output in the loss's graph
    on every rank, also when it has 0 rows there (one ``torch.cat``, or
    :meth:`StepDispatchers.llm_input`): a rank whose loss does not depend on it skips the
    backward exchange, and the ranks that run it raise a CommunicationError at that rank's
    next orchmllm collective or at the deadline.

    Raises TypeError for a source that is neither or a name that is not a str, ValueError for
    rows given with an AllToAll. What is wrong on this rank alone (``rows`` without one entry
    >= 0 per item, a ``rank`` outside [0, D) or not this process's, a plan over another
    number of ranks than the group's) is raised by the first exchange, on every rank.
    """

    def __init__(self, source: Union[Plan, AllToAll], rank: int, rows: Any = None,
                 group: Optional[dist.ProcessGroup] = None, *, name: str = "Dispatcher",
                 verify: bool = True, timeout: Timeout = None) -> None:
        if isinstance(source, Plan):
            num_ranks = int(source.num_ranks)
        elif isinstance(source, AllToAll):
            if rows is not None:
                raise ValueError("rows are given with an AllToAll, which has its rows built in")
            num_ranks = int(source.send_splits.shape[0])
        else:
            raise TypeError(
                f"plan must be an orchmllm.Plan or AllToAll, got {type(source).__name__}")
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        self.num_ranks = num_ranks
        self.rank = _int("rank", rank)
        self.group = group
        self.name = name
        self._timeout = _deadline(timeout)
        self._verify_each = bool(verify)
        self._agreed = False  # without verify: after the first exchange (or the step's agreement)
        self._fault: Optional[str] = None
        a: Optional[AllToAll] = source if isinstance(source, AllToAll) else None
        if a is None:
            try:
                a = source.all_to_all(self.rank, rows)  # type: ignore[union-attr]
            except (TypeError, ValueError, Error) as e:  # raised at the first exchange
                self._fault = str(e)
        elif int(a.rank) != self.rank:
            self._fault = (f"its AllToAll was built for rank {int(a.rank)}, but it exchanges as "
                           f"rank {self.rank}")
        empty = np.zeros(0, np.int64)
        #: The route's fingerprint: equal on every rank that holds the same exchange.
        self.fingerprint = 0 if a is None else int(a.fingerprint)
        self.send_splits: List[int] = [0] * num_ranks if a is None else a.send_splits.tolist()
        self.recv_splits: List[int] = [0] * num_ranks if a is None else a.recv_splits.tolist()
        # An order that is the identity (the usual recv_order: balance() numbers a rank's new
        # slots by source) is skipped rather than copied through. Copies: nothing here keeps a
        # library object alive (autograd contexts hold the Dispatcher).
        self._orders = [None if o is None or _is_identity(o) else np.array(o)
                        for o in ((None, None) if a is None else (a.send_order, a.recv_order))]
        #: Rows this rank holds before the plan (what :meth:`dispatch` takes).
        self.input_rows = int(sum(self.send_splits))
        #: Rows this rank holds after the plan (what :meth:`dispatch` returns).
        self.output_rows = int(sum(self.recv_splits))
        #: Global ids of the items this rank holds after the plan, in destination slot order
        #: (``plan.sources[plan.dst_offsets[rank]:plan.dst_offsets[rank + 1]]``): e.g.
        #: ``rows[d.output_items]`` splits :meth:`dispatch`'s result into items.
        self.output_items: np.ndarray = empty if a is None else np.array(a.output_items)
        self._indices: Dict[torch.device, List[Optional[torch.Tensor]]] = {}
        self._device: Optional[torch.device] = None

    def _index(self, device: torch.device) -> List[Optional[torch.Tensor]]:
        """[send_order, recv_order, their inverses] as int64 tensors on ``device`` (made once
        per device; None for an identity order). The inverses make combine a gather too
        (index_select is faster than the index_copy scatter it replaces)."""
        if device not in self._indices:
            orders = [None if o is None else torch.from_numpy(o).to(device)
                      for o in self._orders]
            inverses: List[Optional[torch.Tensor]] = []
            for o in orders:
                inverse = None
                if o is not None:
                    inverse = torch.empty_like(o)
                    inverse[o] = torch.arange(o.shape[0], device=device)
                inverses.append(inverse)
            self._indices[device] = orders + inverses
        return self._indices[device]

    def _label(self, inverse: bool, phase: str) -> str:
        what = "combine" if inverse else "dispatch"
        return f"the {phase} {what} of {self.name!r}"

    def _local_fault(self, x: Any, inverse: bool) -> Optional[str]:
        """Why this rank cannot run the exchange with ``x``, or None."""
        fault = self._fault or _group_fault(self.num_ranks, self.rank, self.group)
        if fault:
            return fault
        if not isinstance(x, torch.Tensor):
            return f"it passed a {type(x).__name__}, not a torch.Tensor"
        want = self.output_rows if inverse else self.input_rows
        if x.dim() == 0 or x.shape[0] != want:
            got = "a scalar" if x.dim() == 0 else f"{x.shape[0]} rows"
            return (f"its tensor has {got} in its first dimension, but the plan's items on rank "
                    f"{self.rank} have {want} rows")
        return None

    def _prepare(self, x: Any, inverse: bool, phase: str, grad: int) -> int:
        """The checks and (with verify, or for the first exchange) the agreement before an
        exchange; returns the group's largest grad state (``grad`` itself without one).
        Raises CommunicationError (every rank, or this rank alone without an agreement)."""
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(f"{self._label(inverse, phase)} needs torch.distributed to be "
                               "initialised")
        fault = self._local_fault(x, inverse)
        if not self._verify_each and self._agreed:
            if fault:
                raise CommunicationError(
                    f"rank {self.rank} cannot take part in {self._label(inverse, phase)}: "
                    f"{fault}")
            return grad
        if self._device is None:
            self._device = _collective_device(self.group)
        parts: Tuple[Any, ...] = ("exchange", self.fingerprint, inverse, phase)
        if fault is None:
            parts += (str(x.dtype), tuple(x.shape[1:]))
        state = _agree(self.group, self._device, self._timeout, self._label(inverse, phase),
                       parts, fault, grad)
        self._agreed = True
        return state

    def _apply(self, x: Any, inverse: bool) -> torch.Tensor:
        """A forward exchange: the agreement, then the autograd function. When some rank's
        tensor requires grad and this one's does not, an empty leaf that requires grad joins
        the function's inputs, so this rank's output requires grad too and its backward runs
        the exchange the others run."""
        grad = _NO_GRAD
        if torch.is_grad_enabled():
            grad = _REQUIRES_GRAD if isinstance(x, torch.Tensor) and x.requires_grad else \
                _GRAD_MODE
        state = self._prepare(x, inverse, "forward", grad)
        anchor = _NO_ANCHOR
        if state == _REQUIRES_GRAD and grad == _GRAD_MODE and (
                x.is_floating_point() or x.is_complex()):
            anchor = torch.zeros(0, dtype=x.dtype, device=x.device, requires_grad=True)
        return _Dispatch.apply(x, anchor, self, inverse)  # type: ignore[no-any-return]

    def dispatch(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's rows before the plan -> the rows of the items it holds after it.

        x: [input_rows, ...], the rows of this rank's items in local slot order (any dtype,
        any trailing shape, on the device the group's backend uses; the same dtype and
        trailing shape on every rank). Returns [output_rows, ...], the rows of the items the
        plan puts on this rank, in destination slot order, same dtype and device.
        Differentiable: the backward is :meth:`combine`. A collective (see the class).
        Raises CommunicationError on every rank when a rank's tensor does not have its
        input_rows or the ranks disagree (see the class); RuntimeError without
        torch.distributed.
        """
        return self._apply(x, False)

    def combine(self, y: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`dispatch`: [output_rows, ...] -> [input_rows, ...].

        y holds the rows of the items the plan puts on this rank, in destination slot order
        (e.g. an encoder's output for what dispatch delivered); each item's rows go back to
        the rank and slot it came from. Differentiable: the backward is :meth:`dispatch`.
        Raises as :meth:`dispatch` (a rank's tensor must have its output_rows).
        """
        return self._apply(y, True)

    def _move(self, x: torch.Tensor, inverse: bool) -> torch.Tensor:
        """The exchange itself (no autograd, no checks): forward or inverse route."""
        trailing = tuple(x.shape[1:])
        out_rows = self.input_rows if inverse else self.output_rows
        elements = math.prod(trailing)
        width = elements * x.element_size()
        if width == 0:  # nothing to move on any rank (the ranks agreed on the trailing shape)
            return x.new_empty((out_rows, *trailing))
        send_order, recv_order, send_inverse, recv_inverse = self._index(x.device)
        # The rows as bytes: one all_to_all_single moves any dtype, whatever the backend takes.
        # (An empty tensor may carry any strides, e.g. from numpy: make a fresh one.)
        flat = (x.contiguous().view(x.shape[0], elements) if x.shape[0]
                else x.new_empty((0, elements)))
        data = flat.view(torch.uint8)
        if inverse:  # the same exchange transposed: splits swapped, orders inverted
            send_order, recv_order = recv_inverse, send_inverse
            send_splits, recv_splits = self.recv_splits, self.send_splits
        else:
            send_splits, recv_splits = self.send_splits, self.recv_splits
        send = data if send_order is None else data.index_select(0, send_order)
        received = data.new_empty((out_rows, width))
        dist.all_to_all_single(received, send, recv_splits, send_splits, group=self.group)
        moved = received if recv_order is None else received.index_select(0, recv_order)
        return moved.view(x.dtype).view(out_rows, *trailing)


# The anchor when none is needed: an empty tensor that does not require grad.
_NO_ANCHOR = torch.zeros(0)


class _Dispatch(torch.autograd.Function):
    """dispatch / combine as an autograd function; the backward runs the other direction, after
    its own agreement. ``anchor``: an empty leaf that requires grad when the group records
    gradients and ``x`` does not (see Dispatcher._apply)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, anchor: torch.Tensor, d: Dispatcher,
                inverse: bool) -> torch.Tensor:
        ctx.dispatcher = d
        ctx.inverse = inverse
        if any(ctx.needs_input_grad[:2]):  # a backward exchange is expected of this rank
            ctx.obligation = _Obligation(
                id(d.group), f"the {'combine' if inverse else 'dispatch'} of {d.name!r}")
        return d._move(x, inverse)

    @staticmethod
    @once_differentiable  # double backward raises rather than silently giving zeros
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor],
                                                        Optional[torch.Tensor], None, None]:
        if hasattr(ctx, "obligation"):
            ctx.obligation.done = True
        d: Dispatcher = ctx.dispatcher
        d._prepare(grad, not ctx.inverse, "backward", _GRAD_MODE)
        moved = d._move(grad, not ctx.inverse)
        anchor = grad.new_zeros(0) if ctx.needs_input_grad[1] else None
        return (moved if ctx.needs_input_grad[0] else None), anchor, None, None


def dispatch(x: torch.Tensor, plan: Plan, rank: int, rows: Any = None,
             group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """``Dispatcher(plan, rank, rows, group).dispatch(x)``: one-off; build a
    :class:`Dispatcher` to move several tensors along the same plan."""
    return Dispatcher(plan, rank, rows, group).dispatch(x)


def combine(y: torch.Tensor, plan: Plan, rank: int, rows: Any = None,
            group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """``Dispatcher(plan, rank, rows, group).combine(y)``: the inverse of :func:`dispatch`."""
    return Dispatcher(plan, rank, rows, group).combine(y)


def _all_gather_ragged(header: List[int], words: np.ndarray, group: Optional[dist.ProcessGroup],
                       dev: torch.device) -> Tuple[np.ndarray, List[np.ndarray]]:
    """Every rank's (header, words): two all_gathers (the headers with the word counts, then
    the words padded to the largest count). Returns headers int64[D, len(header)] and every
    rank's words."""
    world = dist.get_world_size(group)
    head = torch.tensor(header + [words.shape[0]], dtype=torch.int64, device=dev)
    heads_t = [torch.empty_like(head) for _ in range(world)]
    dist.all_gather(heads_t, head, group=group)
    heads = torch.stack(heads_t).cpu().numpy()
    counts = heads[:, -1]
    widest = int(counts.max()) if world else 0
    if widest == 0:
        return heads[:, :-1], [np.zeros(0, np.int64) for _ in range(world)]
    padded = torch.zeros(widest, dtype=torch.int64, device=dev)
    padded[:words.shape[0]] = torch.from_numpy(words).to(dev)
    values = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(values, padded, group=group)
    gathered = torch.stack(values).cpu().numpy()
    return heads[:, :-1], [gathered[r, :counts[r]].astype(np.int64) for r in range(world)]


def _device_of(group: Optional[dist.ProcessGroup], device: Optional[torch.device]) -> torch.device:
    return _collective_device(group) if device is None else torch.device(device)


def gather_lengths(local_lengths: Any, group: Optional[dist.ProcessGroup] = None,
                   device: Optional[torch.device] = None, *,
                   timeout: Timeout = None) -> Tuple[np.ndarray, np.ndarray]:
    """The metadata all-gather before planning: every rank's item lengths, on every rank.

    local_lengths: int64[k], the lengths of this rank's items in slot order (k may differ
    between ranks, 0 included). Returns (offsets int64[D+1], lengths int64[n]), the CSR layout
    :func:`orchmllm.balance` takes, identical on every rank of ``group``. The agreement (every
    rank runs this gather, none has a fault; deadline ``timeout`` as :class:`Dispatcher`'s),
    then two all_gathers (the counts, then the lengths padded to the largest count), on
    ``device`` (default: the current CUDA device for an NCCL group, else CPU). A collective:
    every rank of the group calls it. Raises CommunicationError on every rank when a rank's
    lengths are not a 1-D integer array (the message names it and why) or the ranks run other
    collectives.
    """
    dev = _device_of(group, device)
    local: Optional[np.ndarray] = None
    fault = None
    try:
        local = _int64_vector("local_lengths", local_lengths)
    except (TypeError, ValueError) as e:
        fault = str(e)
    _gather_agreed(group, dev, timeout, "gather_lengths", fault)
    assert local is not None
    _, parts = _all_gather_ragged([], local, group, dev)
    counts = np.array([p.shape[0] for p in parts], np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return offsets, (np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64))


def gather_step_metadata(batch: LocalBatch, decl: StageDeclarations,
                         group: Optional[dist.ProcessGroup] = None,
                         device: Optional[torch.device] = None, *,
                         timeout: Timeout = None) -> StepMetadata:
    """The step's metadata all-gather: every rank's :class:`~orchmllm.LocalBatch`, on every rank.

    batch: what this rank sampled (text tokens per sample, its sub-items' six arrays); decl:
    the step's :class:`~orchmllm.StageDeclarations` (K, and its fingerprint, which every rank
    checks against every other's). Returns the :class:`~orchmllm.StepMetadata` of the group's
    ranks (rank r of ``group`` is rank r of the metadata), identical on every rank: the
    agreement (as :func:`gather_lengths`), then two all_gathers (each rank's declarations
    fingerprint and sample, sub-item and loss-token counts, then its words: 1 per sample, 6 per
    sub-item and 1 per loss-token count, padded to the largest), on ``device`` as
    :func:`gather_lengths`. A collective: every rank
    of the group calls it.

    Raises CommunicationError on every rank when a rank's batch or decl is not a LocalBatch /
    StageDeclarations; InvalidArgumentError, on every rank alike (all decide from the same
    gathered data, so no rank is left in a collective), naming the first rank whose
    declarations differ from rank 0's, else the first malformed rank's fault (negative counts,
    a modality outside [0, K), a parent that does not exist).
    """
    dev = _device_of(group, device)
    fault = None
    if not isinstance(batch, LocalBatch):
        fault = f"batch must be an orchmllm.LocalBatch, got {type(batch).__name__}"
    elif not isinstance(decl, StageDeclarations):
        fault = f"decl must be an orchmllm.StageDeclarations, got {type(decl).__name__}"
    _gather_agreed(group, dev, timeout, "gather_step_metadata", fault)
    fp = int(np.array(decl.fingerprint, dtype=np.uint64).view(np.int64))
    heads, parts = _all_gather_ragged(
        [fp, batch.num_samples, batch.num_sub_items, batch.num_loss_tokens], batch.words(),
        group, dev)
    for r in range(1, heads.shape[0]):
        if heads[r, 0] != heads[0, 0]:
            raise InvalidArgumentError(
                f"rank {r} declared other stages than rank 0 (declarations fingerprint "
                f"{int(heads[r, 0]) & (2**64 - 1)} vs {int(heads[0, 0]) & (2**64 - 1)}: names, "
                "costs, policies, options, row widths or split options differ)")
    batches = [LocalBatch.from_words(parts[r], int(heads[r, 1]), int(heads[r, 2]),
                                     int(heads[r, 3]))
               for r in range(heads.shape[0])]
    return make_step_metadata(batches, decl.num_encoders)


class StepDispatchers:
    """This rank's exchanges of every transfer of one planned step, and its views.

    Built by :func:`plan_step_dispatchers` and :meth:`AsyncStepPlanner.next` (or directly from a
    :class:`~orchmllm.StepPlan` planned with the group's ranks). Attributes:

    - ``step`` (StepPlan), ``meta`` (StepMetadata), ``rank``, ``group``;
    - ``encoder_inputs[k]``: a :class:`Dispatcher` (named "encoder_input[k]") moving encoder
      k's input rows (this rank's modality-k sub-items' rows, in LocalBatch order) to the
      encoder ranks; ``dispatch`` returns the rows of ``encoder_views[k]``'s units, in that
      order;
    - ``text``: a Dispatcher moving this rank's samples' text rows (sample after sample) to
      the LLM ranks; ``dispatch`` returns the text rows of ``llm_view.samples``, in order;
    - ``encoder_outputs[k]``: a Dispatcher along the composed route: ``dispatch`` takes the
      encoder's output rows for ``encoder_views[k]``'s units (in that order) and returns them
      on the LLM ranks as ``llm_view`` lays them out; its backward (``combine`` of the
      gradient) is the gradient route, output rows back to where the encoder ran;
    - ``llm_view`` (:class:`~orchmllm.LLMView`) and ``encoder_views[k]``
      (:class:`~orchmllm.EncoderView`) of this rank;
    - :meth:`llm_input`: the LLM rank's sequences from the received rows, every exchange kept
      in the loss's graph.

    verify: True (default): every exchange of the step agrees first (one small all_reduce, see
    :class:`Dispatcher`). False: construction agrees once on the whole step (every rank holds
    the same step's routes, each for its own rank: one all_reduce, so construction is then a
    collective) and the exchanges move without agreeing; every rank must then pass tensors of
    the same dtype and trailing shape, all requiring grad or none, and a tensor of the wrong
    size raises on its rank alone. timeout: as :class:`Dispatcher`'s.

    Construction is O(the rank's routes) (the arrays come from ``StepPlan.all_to_all``, built by
    plan_step for this rank). Raises CommunicationError (with verify, at the first exchange;
    without, here, on every rank) when the step is not over the group's ranks, ``rank`` is not
    this process's rank in it, or the ranks hold different steps.
    """

    def __init__(self, step: StepPlan, meta: StepMetadata, rank: int,
                 group: Optional[dist.ProcessGroup] = None, *, verify: bool = True,
                 timeout: Timeout = None) -> None:
        self.step = step
        self.meta = meta
        self.rank = _int("rank", rank)
        self.group = group
        k_count = int(step.num_encoders)

        def made(transfer: str, k: int) -> Dispatcher:
            name = transfer if transfer == "text" else f"{transfer}[{k}]"
            return Dispatcher(step.all_to_all(transfer, self.rank, k), self.rank, group=group,
                              name=name, verify=verify, timeout=timeout)

        self.encoder_inputs: List[Dispatcher] = [made("encoder_input", k) for k in range(k_count)]
        self.text = made("text", 0)
        self.encoder_outputs: List[Dispatcher] = [made("encoder_output", k)
                                                  for k in range(k_count)]
        self.llm_view: LLMView = step.llm_view(self.rank)
        self.encoder_views: List[EncoderView] = [step.encoder_view(k, self.rank)
                                                 for k in range(k_count)]
        self._llm_index: Dict[bool, Tuple[torch.Tensor, np.ndarray]] = {}
        if not verify:
            self._agree_on_step(_deadline(timeout))

    def _dispatchers(self) -> List[Dispatcher]:
        return [*self.encoder_inputs, self.text, *self.encoder_outputs]

    def _agree_on_step(self, timeout: Optional[datetime.timedelta]) -> None:
        """One agreement for the whole step: every rank holds the routes of the same step
        (every transfer's fingerprint, in order) for its own rank of the group."""
        ds = self._dispatchers()
        fault = next((f for f in (d._fault for d in ds) if f), None) or _group_fault(
            ds[0].num_ranks, self.rank, self.group)
        parts = ("step", tuple(d.fingerprint for d in ds))
        _agree(self.group, _collective_device(self.group), timeout, "the agreement on the step",
               parts, fault)
        for d in ds:
            d._agreed = True

    def llm_input(self, encoder_outputs: Sequence[torch.Tensor], text: torch.Tensor, *,
                  text_first: bool = True) -> Tuple[torch.Tensor, np.ndarray]:
        """This LLM rank's sequences, packed: (rows [T, ...], cu_seqlens int64[S + 1]).

        encoder_outputs[k]: what ``encoder_outputs[k].dispatch`` returned (modality k's output
        rows as ``llm_view`` lays them out); text: what ``text.dispatch`` returned. Sample
        ``llm_view.samples[s]`` is rows ``cu_seqlens[s]:cu_seqlens[s + 1]``: its text rows, then
        its sub-items' output rows in their original order (``text_first=False``: the
        sub-items first). All must share dtype, device and trailing shape.

        One ``torch.cat`` of the text and every output, then one ``index_select``: every
        exchange's output is in the graph of whatever is computed from the result, on every
        rank, also when it contributes no rows here (a rank without images still runs the
        backward of the vision transfer, which the others wait for). Trainers that place the
        outputs elsewhere (at their placeholder positions) keep that property by taking all
        of them through one cat the same way. O(T); the index is made once per order.
        Raises ValueError when the counts of tensors or rows are not the step's.
        """
        k_count = len(self.encoder_outputs)
        if len(encoder_outputs) != k_count:
            raise ValueError(f"llm_input takes {k_count} encoder outputs, got "
                             f"{len(encoder_outputs)}")
        parts = [text, *encoder_outputs]
        want = [self.text.output_rows, *(d.output_rows for d in self.encoder_outputs)]
        for i, (t, n) in enumerate(zip(parts, want)):
            if t.dim() == 0 or t.shape[0] != n:
                what = "text" if i == 0 else f"encoder_outputs[{i - 1}]"
                raise ValueError(f"llm_input: {what} has {t.shape[0] if t.dim() else 0} rows, "
                                 f"the step delivers {n} to rank {self.rank}")
        if text_first not in self._llm_index:
            self._llm_index[text_first] = self._index_of(want, text_first)
        index, cu = self._llm_index[text_first]
        if index.device != text.device:
            index = index.to(text.device)
            self._llm_index[text_first] = (index, cu)
        return torch.cat(parts).index_select(0, index), cu

    def llm_micro_batches(self, rows: torch.Tensor, cu_seqlens: np.ndarray
                          ) -> List[Tuple[torch.Tensor, np.ndarray]]:
        """This LLM rank's micro-batches of what :meth:`llm_input` returned, in run order.

        Per micro-batch m: (rows [T_m, ...], cu_seqlens int64[S_m + 1] from 0), ``rows`` a view
        of the input's rows (no copy; gradients flow back into the input); its samples are
        ``llm_view.samples[first:last]`` for ``(first, last) = step.micro_batch(K, rank, m)``.
        The LLM stage's micro-batches (``LLMStage(micro_batches=..., ...)``); without them one,
        the whole input. Scale each micro-batch's summed token loss by
        ``step.loss_scale(...)`` before its backward for the gradients of the step's
        per-token mean. O(M). Raises ValueError when cu_seqlens does not describe ``rows`` and
        this rank's samples.
        """
        return self._micro_batch_views(self.step.num_encoders, rows, cu_seqlens)

    def encoder_micro_batches(self, k: int, rows: torch.Tensor
                              ) -> List[Tuple[torch.Tensor, List[int]]]:
        """Encoder k's micro-batches on this rank of what ``encoder_inputs[k].dispatch``
        returned, in run order: per micro-batch (rows, the input rows of each of its units),
        ``rows`` a view of the received rows (no copy). Concatenate the encoder's outputs of
        the micro-batches, in order, for ``encoder_outputs[k].dispatch``. The stage's
        micro-batches (``EncoderStage(micro_batches=..., ...)``); without them one, every unit.
        O(units). Raises ValueError when ``rows`` is not what this rank receives."""
        units = self.encoder_views[_int("k", k)].input_rows
        cu = np.concatenate([[0], np.cumsum(units)]).astype(np.int64)
        return [(x, np.diff(cu_m).tolist()) for x, cu_m in self._micro_batch_views(k, rows, cu,
                                                                                  "rows")]

    def _slots(self, stage: int, items: int) -> List[Tuple[int, int]]:
        """The slot range of every micro-batch of ``stage`` on this rank (one, all, without)."""
        count = int(self.step.micro_batches(stage))
        if count == 0:
            return [(0, items)]
        return [self.step.micro_batch(stage, self.rank, m) for m in range(count)]

    def _micro_batch_views(self, stage: int, rows: torch.Tensor, cu: np.ndarray,
                           what: str = "cu_seqlens") -> List[Tuple[torch.Tensor, np.ndarray]]:
        cu = np.asarray(cu, dtype=np.int64).reshape(-1)
        if cu.shape[0] == 0:
            raise ValueError(f"{what} is empty; it holds one offset more than the items")
        items = cu.shape[0] - 1
        slots = self._slots(stage, items)
        if slots[-1][1] != items or rows.dim() == 0 or rows.shape[0] != cu[-1]:
            raise ValueError(f"{what} describes {items} items and {int(cu[-1])} rows, rows has "
                             f"{rows.shape[0] if rows.dim() else 0}; rank {self.rank} receives "
                             f"{slots[-1][1]} items in stage {stage}")
        return [(rows[int(cu[a]):int(cu[b])], cu[a:b + 1] - cu[a]) for a, b in slots]

    def _index_of(self, rows: List[int], text_first: bool) -> Tuple[torch.Tensor, np.ndarray]:
        """The row index of every sequence into cat([text, *outputs]), and cu_seqlens."""
        v = self.llm_view
        base = np.cumsum([0, *rows])
        text_at = base[0] + np.concatenate([[0], np.cumsum(self.meta.text_tokens[v.samples])])
        pieces: List[np.ndarray] = [np.zeros(0, np.int64)]
        lengths = np.zeros(len(v.samples), np.int64)
        for s in range(len(v.samples)):
            items = [base[1 + k] + np.arange(v.row_offsets[k][j], v.row_offsets[k][j + 1])
                     for k, j in zip(v.sub_item_modality[v.sub_item_offsets[s]:
                                                         v.sub_item_offsets[s + 1]],
                                     v.sub_item_index[v.sub_item_offsets[s]:
                                                      v.sub_item_offsets[s + 1]])]
            own = [np.arange(text_at[s], text_at[s + 1])]
            seq = own + items if text_first else items + own
            pieces.extend(seq)
            lengths[s] = sum(p.shape[0] for p in seq)
        index = torch.from_numpy(np.concatenate(pieces).astype(np.int64))
        return index, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def plan_step_dispatchers(decl: StageDeclarations, batch: LocalBatch,
                          group: Optional[dist.ProcessGroup] = None, gpus_per_node: int = 0, *,
                          node_of_rank: Any = None, device: Optional[torch.device] = None,
                          verify: bool = True, timeout: Timeout = None) -> StepDispatchers:
    """One step's planning on this rank: metadata all-gather, plan_step, dispatchers.

    :func:`gather_step_metadata` of ``batch`` over ``group`` (the agreement and two
    all_gathers), then :func:`orchmllm.plan_step` (decl, the metadata, gpus_per_node /
    node_of_rank, with this rank's routes; the GIL released), then :class:`StepDispatchers`
    (verify, timeout: as it takes them). Every rank of the group gets the same plans. A
    collective: every rank calls it. Raises what those raise.
    """
    rank = dist.get_rank(group)
    meta = gather_step_metadata(batch, decl, group, device, timeout=timeout)
    step = plan_step(decl, meta, gpus_per_node, node_of_rank=node_of_rank, rank=rank)
    return StepDispatchers(step, meta, rank, group, verify=verify, timeout=timeout)


class AsyncStepPlanner:
    """Plans step t + 1 on a background thread while step t trains.

    ``submit(batch)`` runs the metadata all-gather on the calling thread (collectives stay in
    program order on every rank) and hands :func:`orchmllm.plan_step` to one worker thread,
    where the library plans with the GIL released; ``next()`` waits for the oldest submitted
    step and returns its :class:`StepDispatchers`, in submission order. The plans are those of
    synchronous planning (:func:`plan_step_dispatchers`), bit for bit: plan_step is a pure
    function of the declarations, the metadata and the topology.

    decl, group, gpus_per_node, node_of_rank, device, verify, timeout: as
    :func:`plan_step_dispatchers`. max_pending: most steps submitted and not yet taken by
    ``next()``; ``submit`` beyond it raises RuntimeError (with one trainer thread, only its own
    ``next()`` frees a place). An error raised while planning a step is raised by the
    ``next()`` that takes that step (on every rank alike). Use as a context manager, or call
    ``close()``, to stop the worker.
    """

    def __init__(self, decl: StageDeclarations, group: Optional[dist.ProcessGroup] = None,
                 gpus_per_node: int = 0, *, node_of_rank: Any = None, max_pending: int = 2,
                 device: Optional[torch.device] = None, verify: bool = True,
                 timeout: Timeout = None) -> None:
        if not isinstance(decl, StageDeclarations):
            raise TypeError(f"decl must be a StageDeclarations, got {type(decl).__name__}")
        self.decl = decl
        self.group = group
        self.gpus_per_node = _int("gpus_per_node", gpus_per_node)
        self.node_of_rank = node_of_rank
        self.max_pending = _int("max_pending", max_pending)
        if self.max_pending < 1:
            raise ValueError(f"max_pending is {self.max_pending}, must be >= 1")
        self.device = device
        self.verify = bool(verify)
        self.timeout = _deadline(timeout)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="orchmllm-planner")
        self._pending: Deque[Tuple[StepMetadata, "concurrent.futures.Future[StepPlan]"]] = deque()

    def submit(self, batch: LocalBatch) -> "concurrent.futures.Future[StepPlan]":
        """Gathers the step's metadata (a collective, here) and starts planning it on the
        worker; returns the future of its StepPlan. Raises RuntimeError when max_pending steps
        are already pending, and what :func:`gather_step_metadata` raises."""
        if len(self._pending) >= self.max_pending:
            raise RuntimeError(
                f"{len(self._pending)} steps are already pending (max_pending "
                f"{self.max_pending}); take one with next() first")
        rank = dist.get_rank(self.group)
        meta = gather_step_metadata(batch, self.decl, self.group, self.device,
                                    timeout=self._timeout_arg())
        future = self._pool.submit(plan_step, self.decl, meta, self.gpus_per_node,
                                   node_of_rank=self.node_of_rank, rank=rank)
        self._pending.append((meta, future))
        return future

    def _timeout_arg(self) -> Timeout:
        return self.timeout if self.timeout is not None else 0

    @property
    def pending(self) -> int:
        """Steps submitted and not yet taken by next()."""
        return len(self._pending)

    def next(self) -> StepDispatchers:
        """The oldest submitted step's StepDispatchers (waits for its planning). Raises
        RuntimeError when nothing is pending, and what plan_step raised for that step."""
        if not self._pending:
            raise RuntimeError("no step is pending: submit() one first")
        meta, future = self._pending.popleft()
        return StepDispatchers(future.result(), meta, dist.get_rank(self.group), self.group,
                               verify=self.verify, timeout=self._timeout_arg())

    def close(self) -> None:
        """Waits for the worker's current planning and stops it (pending steps are dropped)."""
        self._pending.clear()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "AsyncStepPlanner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def context_parallel_blocks(sizes: Sequence[int], num_ranks: int, gpus_per_node: int = 0, *,
                            node_of_rank: Any = None,
                            within_node: bool = True) -> List[Tuple[int, ...]]:
    """Every group of ranks :func:`orchmllm.context_parallel` can give a sample, for the sizes
    ``sizes`` ≥ 2, in a fixed order (sizes ascending, then by first rank): aligned blocks of c
    ranks inside one node (local indices [j·c, j·c + c) of a node, its ranks ascending; nodes
    consecutive blocks of ``gpus_per_node`` ranks, 0 for one node, or ``node_of_rank``'s ids),
    or aligned blocks of global ranks when ``within_node`` is False. The library's own rule
    (balance/context_parallel.hpp), so the plan's groups are among these."""
    if node_of_rank is not None:
        ids = [int(x) for x in _int64_vector("node_of_rank", node_of_rank, num_ranks)]
    else:
        g = _int("gpus_per_node", gpus_per_node)
        ids = [r // g if g > 0 else 0 for r in range(num_ranks)]
    order: Dict[int, List[int]] = {}
    for r, m in enumerate(ids):
        order.setdefault(m, []).append(r)
    nodes = list(order.values())
    blocks: List[Tuple[int, ...]] = []
    for c in sorted({int(c) for c in sizes}):
        if c < 2:
            continue
        if within_node:
            for members in nodes:
                blocks += [tuple(members[j:j + c]) for j in range(0, len(members) - c + 1, c)]
        else:
            blocks += [tuple(range(j, j + c)) for j in range(0, num_ranks - c + 1, c)]
    return blocks


class ContextParallelGroups:
    """A process group for every group of ranks :func:`orchmllm.context_parallel` can choose
    (:func:`context_parallel_blocks`), made once, before the first step: creating groups is a
    collective of every rank, too slow to repeat per step, and the plan's groups are aligned
    blocks, so a few groups per size cover every plan. :meth:`group` finds a shard's group.

    Every rank must construct it with the same arguments at the same point (it calls
    ``torch.distributed.new_group`` for every block, in the same order everywhere). ``backend``
    is passed to ``new_group`` (None: the default group's)."""

    def __init__(self, sizes: Sequence[int], gpus_per_node: int = 0, *, node_of_rank: Any = None,
                 within_node: bool = True, backend: Optional[str] = None) -> None:
        self._blocks = context_parallel_blocks(sizes, dist.get_world_size(), gpus_per_node,
                                               node_of_rank=node_of_rank,
                                               within_node=within_node)
        self._groups: Dict[Tuple[int, ...], dist.ProcessGroup] = {}
        for b in self._blocks:
            made = dist.new_group(list(b), backend=backend)
            # new_group gives every rank a handle; a rank outside the block gets a placeholder.
            if isinstance(made, dist.ProcessGroup):
                self._groups[b] = made

    @property
    def blocks(self) -> List[Tuple[int, ...]]:
        """The groups' ranks, in creation order."""
        return list(self._blocks)

    def group(self, ranks: Sequence[int]) -> dist.ProcessGroup:
        """The process group of ``ranks`` (a shard's ``group``). Raises ValueError for ranks
        that are not one of the blocks (a plan made with other sizes or nodes)."""
        key = tuple(int(r) for r in ranks)
        if key not in set(self._blocks):
            raise ValueError(f"ranks {list(key)} are not a context-parallel group of these sizes "
                             f"and nodes (a plan made with other sizes, nodes or within_node?)")
        if key not in self._groups:
            raise ValueError(f"this rank is not in the group of ranks {list(key)}")
        return self._groups[key]
