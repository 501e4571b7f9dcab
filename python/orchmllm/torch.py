"""Moving ragged tensors along an orchmllm plan with ``torch.distributed``.

A rank's payload for a stage is one tensor whose first dimension is the concatenation of its
local items' rows, in local slot order (e.g. the patches of its images, image after image).
:class:`Dispatcher` moves those rows along a :class:`~orchmllm.Plan` with one
``torch.distributed.all_to_all_single`` (gloo on CPU tensors, NCCL on CUDA tensors) and returns
the rows this rank receives, in destination-slot order; :meth:`Dispatcher.combine` is the inverse
(the rows of the items this rank holds after the plan, back to where they came from). Both are
autograd functions: the gradient of a dispatch is the combine of the output's gradient and vice
versa. :func:`gather_lengths` is the metadata all-gather every rank runs before planning.

Importing this module imports torch; ``import orchmllm`` does not (torch is the optional
dependency ``orchmllm[torch]``). See docs/python.md.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from . import Plan, _int, _int64_vector

__all__ = ["Dispatcher", "combine", "dispatch", "gather_lengths"]


def _check_group(num_ranks: int, rank: int, group: Optional[dist.ProcessGroup]) -> None:
    """ValueError unless the plan's ranks are the group's and ``rank`` is this process's."""
    size = dist.get_world_size(group)
    if num_ranks != size:
        raise ValueError(
            f"the plan is over {num_ranks} ranks, the process group has {size}")
    own = dist.get_rank(group)
    if rank != own:
        raise ValueError(
            f"rank is {rank}, but this process is rank {own} of the process group")


def _is_identity(order: np.ndarray) -> bool:
    return bool(np.array_equal(order, np.arange(order.shape[0])))


class Dispatcher:
    """The exchanges of one rank along one plan, built once and reused for every tensor.

    plan: a :class:`~orchmllm.Plan` onto the same D ranks as ``group`` (every rank holds the
    same plan). rank: this process's rank in ``group``. rows: int64[n], the rows (first-dimension
    entries) of every item by global id, the same on every rank; default one row per item.
    group: the trainer's process group (default: the default group).

    Construction calls :meth:`Plan.all_to_all` once (O(n log n), the GIL released) and keeps its
    split sizes and index orders; the index tensors are made once per device, on first use. Every
    :meth:`dispatch` / :meth:`combine` is then at most two index_select passes
    (none for an identity order) and one ``all_to_all_single`` over the tensor's bytes, so any
    dtype and trailing shape moves (the tensors are sent as uint8 rows): O(rows x row bytes).
    Deterministic: the same plan and rows give the same orders on every run.

    Dispatch and combine are collectives: every rank of the group calls the same sequence of
    them, and so does the backward pass. Keep every differentiable output in the loss's graph
    on every rank (also when it has 0 rows there, e.g. through one ``torch.cat``), or a rank
    skips a backward exchange the others run and the group hangs or aborts.

    Raises ValueError (InvalidArgumentError from the library for malformed ``rows`` or ``rank``)
    when the plan is not over the group's ranks, ``rank`` is not this process's rank in the
    group, or ``rows`` does not have one entry >= 0 per item. The checks against the group run
    when torch.distributed is initialised (at construction, else at the first exchange).
    """

    def __init__(self, plan: Plan, rank: int, rows: Any = None,
                 group: Optional[dist.ProcessGroup] = None) -> None:
        if not isinstance(plan, Plan):
            raise TypeError(f"plan must be an orchmllm.Plan, got {type(plan).__name__}")
        self.plan = plan
        self.rank = _int("rank", rank)
        self.group = group
        self._checked = False
        self._check()
        a = plan.all_to_all(self.rank, rows)
        self.send_splits: List[int] = a.send_splits.tolist()
        self.recv_splits: List[int] = a.recv_splits.tolist()
        # An order that is the identity (the usual recv_order: balance() numbers a rank's new
        # slots by source) is skipped rather than copied through.
        self._orders = [None if _is_identity(o) else o for o in (a.send_order, a.recv_order)]
        #: Rows this rank holds before the plan (what :meth:`dispatch` takes).
        self.input_rows = int(sum(self.send_splits))
        #: Rows this rank holds after the plan (what :meth:`dispatch` returns).
        self.output_rows = int(sum(self.recv_splits))
        start, stop = plan.dst_offsets[self.rank:self.rank + 2]
        #: Global ids of the items this rank holds after the plan, in destination slot order
        #: (``plan.sources[plan.dst_offsets[rank]:plan.dst_offsets[rank + 1]]``): e.g.
        #: ``rows[d.output_items]`` splits :meth:`dispatch`'s result into items.
        self.output_items: np.ndarray = plan.sources[start:stop]
        self._indices: Dict[torch.device, List[Optional[torch.Tensor]]] = {}

    def _check(self) -> None:
        if not self._checked and dist.is_available() and dist.is_initialized():
            _check_group(self.plan.num_ranks, self.rank, self.group)
            self._checked = True

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

    def dispatch(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's rows before the plan -> the rows of the items it holds after it.

        x: [input_rows, ...], the rows of this rank's items in local slot order (any dtype,
        any trailing shape, on the device the group's backend uses). Returns
        [output_rows, ...], the rows of the items the plan puts on this rank, in destination
        slot order, same dtype and device. Differentiable: the backward is :meth:`combine`.
        Raises ValueError when x's first dimension is not input_rows.
        """
        return _Dispatch.apply(x, self, False)  # type: ignore[no-any-return]

    def combine(self, y: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`dispatch`: [output_rows, ...] -> [input_rows, ...].

        y holds the rows of the items the plan puts on this rank, in destination slot order
        (e.g. an encoder's output for what dispatch delivered); each item's rows go back to
        the rank and slot it came from. Differentiable: the backward is :meth:`dispatch`.
        Raises ValueError when y's first dimension is not output_rows.
        """
        return _Dispatch.apply(y, self, True)  # type: ignore[no-any-return]

    def _move(self, x: torch.Tensor, inverse: bool) -> torch.Tensor:
        """The exchange itself (no autograd): forward or inverse route."""
        want = self.output_rows if inverse else self.input_rows
        name = "combine" if inverse else "dispatch"
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} takes a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[0] != want:
            got = "a scalar" if x.dim() == 0 else f"{x.shape[0]} rows"
            raise ValueError(
                f"{name}: the tensor has {got} in its first dimension, but the plan's items on "
                f"rank {self.rank} have {want} rows")
        self._check()
        if not self._checked:
            raise RuntimeError(f"{name} needs torch.distributed to be initialised")
        trailing = tuple(x.shape[1:])
        out_rows = self.input_rows if inverse else self.output_rows
        elements = math.prod(trailing)
        width = elements * x.element_size()
        if width == 0:  # nothing to move on any rank (trailing shapes agree across ranks)
            return x.new_empty((out_rows, *trailing))
        send_order, recv_order, send_inverse, recv_inverse = self._index(x.device)
        # The rows as bytes: one all_to_all_single moves any dtype, whatever the backend takes.
        data = x.contiguous().view(x.shape[0], elements).view(torch.uint8)
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


class _Dispatch(torch.autograd.Function):
    """dispatch / combine as an autograd function; the backward runs the other direction."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, d: Dispatcher,
                inverse: bool) -> torch.Tensor:
        ctx.dispatcher = d
        ctx.inverse = inverse
        return d._move(x, inverse)

    @staticmethod
    @once_differentiable  # double backward raises rather than silently giving zeros
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
        return ctx.dispatcher._move(grad, not ctx.inverse), None, None


def dispatch(x: torch.Tensor, plan: Plan, rank: int, rows: Any = None,
             group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """``Dispatcher(plan, rank, rows, group).dispatch(x)``: one-off; build a
    :class:`Dispatcher` to move several tensors along the same plan."""
    return Dispatcher(plan, rank, rows, group).dispatch(x)


def combine(y: torch.Tensor, plan: Plan, rank: int, rows: Any = None,
            group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """``Dispatcher(plan, rank, rows, group).combine(y)``: the inverse of :func:`dispatch`."""
    return Dispatcher(plan, rank, rows, group).combine(y)


def _collective_device(group: Optional[dist.ProcessGroup]) -> torch.device:
    """CUDA (the current device) for a group whose backend is NCCL only, else CPU."""
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and "gloo" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_lengths(local_lengths: Any, group: Optional[dist.ProcessGroup] = None,
                   device: Optional[torch.device] = None) -> Tuple[np.ndarray, np.ndarray]:
    """The metadata all-gather before planning: every rank's item lengths, on every rank.

    local_lengths: int64[k], the lengths of this rank's items in slot order (k may differ
    between ranks, 0 included). Returns (offsets int64[D+1], lengths int64[n]), the CSR layout
    :func:`orchmllm.balance` takes, identical on every rank of ``group``. Two all_gathers (the
    counts, then the lengths padded to the largest count) on ``device`` (default: the current
    CUDA device for an NCCL group, else CPU). A collective: every rank of the group calls it.
    Raises TypeError / ValueError for lengths that are not a 1-D integer array.
    """
    local = _int64_vector("local_lengths", local_lengths)
    dev = _collective_device(group) if device is None else torch.device(device)
    world = dist.get_world_size(group)
    count = torch.tensor([local.shape[0]], dtype=torch.int64, device=dev)
    counts_t = [torch.empty_like(count) for _ in range(world)]
    dist.all_gather(counts_t, count, group=group)
    counts = torch.cat(counts_t).cpu().numpy()
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    widest = int(counts.max()) if world else 0
    if widest == 0:
        return offsets, np.zeros(0, np.int64)
    padded = torch.zeros(widest, dtype=torch.int64, device=dev)
    padded[:local.shape[0]] = torch.from_numpy(local).to(dev)
    values = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(values, padded, group=group)
    gathered = torch.stack(values).cpu().numpy()
    lengths = np.concatenate([gathered[r, :counts[r]] for r in range(world)]).astype(np.int64)
    return offsets, lengths
