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
gradient route); :class:`AsyncStepPlanner` plans step t + 1 on a background thread while step t
trains.

Importing this module imports torch; ``import orchmllm`` does not (torch is the optional
dependency ``orchmllm[torch]``). See docs/python.md.
"""

from __future__ import annotations

import concurrent.futures
import math
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from . import (AllToAll, EncoderView, InvalidArgumentError, LLMView, LocalBatch, Plan,
               StageDeclarations, StepMetadata, StepPlan, _int, _int64_vector,
               make_step_metadata, plan_step)

__all__ = ["AsyncStepPlanner", "Dispatcher", "StepDispatchers", "combine", "dispatch",
           "gather_lengths", "gather_step_metadata", "plan_step_dispatchers"]


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
    """The exchanges of one rank along one plan or route, built once and reused for every tensor.

    source: a :class:`~orchmllm.Plan` onto the same D ranks as ``group`` (every rank holds the
    same plan), or an :class:`~orchmllm.AllToAll` already computed for this rank (e.g. one
    transfer of a step, ``StepPlan.all_to_all(transfer, rank, k)``; its ``rows`` are built in).
    rank: this process's rank in ``group``. rows: with a Plan, int64[n], the rows
    (first-dimension entries) of every item by global id, the same on every rank; default one
    row per item (must be None with an AllToAll). group: the trainer's process group (default:
    the default group).

    Construction from a Plan calls :meth:`Plan.all_to_all` once (O(n log n), the GIL released)
    and keeps its split sizes and index orders; the index tensors are made once per device, on
    first use. Every :meth:`dispatch` / :meth:`combine` is then at most two index_select passes
    (none for an identity order) and one ``all_to_all_single`` over the tensor's bytes, so any
    dtype and trailing shape moves (the tensors are sent as uint8 rows): O(rows x row bytes).
    Deterministic: the same plan and rows give the same orders on every run.

    Dispatch and combine are collectives: every rank of the group calls the same sequence of
    them, and so does the backward pass. Keep every differentiable output in the loss's graph
    on every rank (also when it has 0 rows there, e.g. through one ``torch.cat``), or a rank
    skips a backward exchange the others run and the group hangs or aborts.

    Raises TypeError for a source that is neither; ValueError (InvalidArgumentError from the
    library for malformed ``rows`` or ``rank``) when the plan is not over the group's ranks,
    ``rank`` is not this process's rank in the group, ``rows`` does not have one entry >= 0 per
    item, or rows are given with an AllToAll. The checks against the group run when
    torch.distributed is initialised (at construction, else at the first exchange).
    """

    def __init__(self, source: Union[Plan, AllToAll], rank: int, rows: Any = None,
                 group: Optional[dist.ProcessGroup] = None) -> None:
        if isinstance(source, Plan):
            self.plan: Optional[Plan] = source
            self.num_ranks = int(source.num_ranks)
        elif isinstance(source, AllToAll):
            if rows is not None:
                raise ValueError("rows are given with an AllToAll, which has its rows built in")
            self.plan = None
            self.num_ranks = int(source.send_splits.shape[0])
        else:
            raise TypeError(
                f"plan must be an orchmllm.Plan or AllToAll, got {type(source).__name__}")
        self.rank = _int("rank", rank)
        self.group = group
        self._checked = False
        self._check()
        a = source.all_to_all(self.rank, rows) if isinstance(source, Plan) else source
        self.send_splits: List[int] = a.send_splits.tolist()
        self.recv_splits: List[int] = a.recv_splits.tolist()
        # An order that is the identity (the usual recv_order: balance() numbers a rank's new
        # slots by source) is skipped rather than copied through.
        self._orders = [None if _is_identity(o) else o for o in (a.send_order, a.recv_order)]
        #: Rows this rank holds before the plan (what :meth:`dispatch` takes).
        self.input_rows = int(sum(self.send_splits))
        #: Rows this rank holds after the plan (what :meth:`dispatch` returns).
        self.output_rows = int(sum(self.recv_splits))
        #: Global ids of the items this rank holds after the plan, in destination slot order
        #: (``plan.sources[plan.dst_offsets[rank]:plan.dst_offsets[rank + 1]]``): e.g.
        #: ``rows[d.output_items]`` splits :meth:`dispatch`'s result into items.
        self.output_items: np.ndarray = a.output_items
        self._indices: Dict[torch.device, List[Optional[torch.Tensor]]] = {}

    def _check(self) -> None:
        if not self._checked and dist.is_available() and dist.is_initialized():
            _check_group(self.num_ranks, self.rank, self.group)
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


def _all_gather_ragged(header: List[int], words: np.ndarray,
                       group: Optional[dist.ProcessGroup],
                       device: Optional[torch.device]) -> Tuple[np.ndarray, List[np.ndarray]]:
    """Every rank's (header, words): two all_gathers (the headers with the word counts, then
    the words padded to the largest count). Returns headers int64[D, len(header)] and every
    rank's words."""
    dev = _collective_device(group) if device is None else torch.device(device)
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
    _, parts = _all_gather_ragged([], local, group, device)
    counts = np.array([p.shape[0] for p in parts], np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return offsets, (np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64))


def gather_step_metadata(batch: LocalBatch, decl: StageDeclarations,
                         group: Optional[dist.ProcessGroup] = None,
                         device: Optional[torch.device] = None) -> StepMetadata:
    """The step's metadata all-gather: every rank's :class:`~orchmllm.LocalBatch`, on every rank.

    batch: what this rank sampled (text tokens per sample, its sub-items' six arrays); decl:
    the step's :class:`~orchmllm.StageDeclarations` (K, and its fingerprint, which every rank
    checks against every other's). Returns the :class:`~orchmllm.StepMetadata` of the group's
    ranks (rank r of ``group`` is rank r of the metadata), identical on every rank: two
    all_gathers (each rank's declarations fingerprint and sample and sub-item counts, then its
    1 + 6 words per sample and sub-item, padded to the largest), on ``device`` as
    :func:`gather_lengths`. A collective: every rank of the group calls it.

    Raises TypeError for a batch or decl of the wrong type; InvalidArgumentError, on every
    rank alike (all decide from the same gathered data, so no rank is left in a collective),
    naming the first rank whose declarations differ from rank 0's, else the first malformed
    rank's fault (negative counts, a modality outside [0, K), a parent that does not exist).
    """
    if not isinstance(batch, LocalBatch):
        raise TypeError(f"batch must be an orchmllm.LocalBatch, got {type(batch).__name__}")
    if not isinstance(decl, StageDeclarations):
        raise TypeError(f"decl must be an orchmllm.StageDeclarations, got {type(decl).__name__}")
    fp = int(np.array(decl.fingerprint, dtype=np.uint64).view(np.int64))
    heads, parts = _all_gather_ragged([fp, batch.num_samples, batch.num_sub_items],
                                      batch.words(), group, device)
    for r in range(1, heads.shape[0]):
        if heads[r, 0] != heads[0, 0]:
            raise InvalidArgumentError(
                f"rank {r} declared other stages than rank 0 (declarations fingerprint "
                f"{int(heads[r, 0]) & (2**64 - 1)} vs {int(heads[0, 0]) & (2**64 - 1)}: names, "
                "costs, policies, options, row widths or split options differ)")
    batches = [LocalBatch.from_words(parts[r], int(heads[r, 1]), int(heads[r, 2]))
               for r in range(heads.shape[0])]
    return make_step_metadata(batches, decl.num_encoders)


class StepDispatchers:
    """This rank's exchanges of every transfer of one planned step, and its views.

    Built by :func:`plan_step_dispatchers` and :meth:`AsyncStepPlanner.next` (or directly from a
    :class:`~orchmllm.StepPlan` planned with the group's ranks). Attributes:

    - ``step`` (StepPlan), ``meta`` (StepMetadata), ``rank``, ``group``;
    - ``encoder_inputs[k]``: a :class:`Dispatcher` moving encoder k's input rows (this rank's
      modality-k sub-items' rows, in LocalBatch order) to the encoder ranks; ``dispatch``
      returns the rows of ``encoder_views[k]``'s units, in that order;
    - ``text``: a Dispatcher moving this rank's samples' text rows (sample after sample) to
      the LLM ranks; ``dispatch`` returns the text rows of ``llm_view.samples``, in order;
    - ``encoder_outputs[k]``: a Dispatcher along the composed route: ``dispatch`` takes the
      encoder's output rows for ``encoder_views[k]``'s units (in that order) and returns them
      on the LLM ranks as ``llm_view`` lays them out; its backward (``combine`` of the
      gradient) is the gradient route, output rows back to where the encoder ran;
    - ``llm_view`` (:class:`~orchmllm.LLMView`) and ``encoder_views[k]``
      (:class:`~orchmllm.EncoderView`) of this rank.

    Construction is O(the rank's routes) (the arrays come from ``StepPlan.all_to_all``, built by
    plan_step for this rank); no communication. Raises ValueError when the step is not over
    the group's ranks or ``rank`` is not this process's rank in it.
    """

    def __init__(self, step: StepPlan, meta: StepMetadata, rank: int,
                 group: Optional[dist.ProcessGroup] = None) -> None:
        self.step = step
        self.meta = meta
        self.rank = _int("rank", rank)
        self.group = group
        k_count = int(step.num_encoders)
        self.encoder_inputs: List[Dispatcher] = [
            Dispatcher(step.all_to_all("encoder_input", self.rank, k), self.rank, group=group)
            for k in range(k_count)]
        self.text = Dispatcher(step.all_to_all("text", self.rank), self.rank, group=group)
        self.encoder_outputs: List[Dispatcher] = [
            Dispatcher(step.all_to_all("encoder_output", self.rank, k), self.rank, group=group)
            for k in range(k_count)]
        self.llm_view: LLMView = step.llm_view(self.rank)
        self.encoder_views: List[EncoderView] = [step.encoder_view(k, self.rank)
                                                 for k in range(k_count)]


def plan_step_dispatchers(decl: StageDeclarations, batch: LocalBatch,
                          group: Optional[dist.ProcessGroup] = None, gpus_per_node: int = 0, *,
                          node_of_rank: Any = None,
                          device: Optional[torch.device] = None) -> StepDispatchers:
    """One step's planning on this rank: metadata all-gather, plan_step, dispatchers.

    :func:`gather_step_metadata` of ``batch`` over ``group`` (two all_gathers), then
    :func:`orchmllm.plan_step` (decl, the metadata, gpus_per_node / node_of_rank, with this
    rank's routes; the GIL released), then :class:`StepDispatchers`. Every rank of the group
    gets the same plans. A collective: every rank calls it. Raises what those raise.
    """
    rank = dist.get_rank(group)
    meta = gather_step_metadata(batch, decl, group, device)
    step = plan_step(decl, meta, gpus_per_node, node_of_rank=node_of_rank, rank=rank)
    return StepDispatchers(step, meta, rank, group)


class AsyncStepPlanner:
    """Plans step t + 1 on a background thread while step t trains.

    ``submit(batch)`` runs the metadata all-gather on the calling thread (collectives stay in
    program order on every rank) and hands :func:`orchmllm.plan_step` to one worker thread,
    where the library plans with the GIL released; ``next()`` waits for the oldest submitted
    step and returns its :class:`StepDispatchers`, in submission order. The plans are those of
    synchronous planning (:func:`plan_step_dispatchers`), bit for bit: plan_step is a pure
    function of the declarations, the metadata and the topology.

    decl, group, gpus_per_node, node_of_rank, device: as :func:`plan_step_dispatchers`.
    max_pending: most steps submitted and not yet taken by ``next()``; ``submit`` beyond it
    raises RuntimeError (with one trainer thread, only its own ``next()`` frees a place).
    An error raised while planning a step is raised by the ``next()`` that takes that step (on
    every rank alike). Use as a context manager, or call ``close()``, to stop the worker.
    """

    def __init__(self, decl: StageDeclarations, group: Optional[dist.ProcessGroup] = None,
                 gpus_per_node: int = 0, *, node_of_rank: Any = None, max_pending: int = 2,
                 device: Optional[torch.device] = None) -> None:
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
        meta = gather_step_metadata(batch, self.decl, self.group, self.device)
        future = self._pool.submit(plan_step, self.decl, meta, self.gpus_per_node,
                                   node_of_rank=self.node_of_rank, rank=rank)
        self._pending.append((meta, future))
        return future

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
        return StepDispatchers(future.result(), meta, dist.get_rank(self.group), self.group)

    def close(self) -> None:
        """Waits for the worker's current planning and stops it (pending steps are dropped)."""
        self._pending.clear()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "AsyncStepPlanner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
