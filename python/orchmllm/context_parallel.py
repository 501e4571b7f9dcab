"""Context parallelism chosen per sample: over-long sequences sharded over groups of ranks.

:func:`context_parallel` is the library's ``balance_context_parallel`` (what ``orchmllm-bench
plan --cp-sizes`` runs): every sample of a packed stage (the LLM) either stays whole on one
rank or is sharded over an aligned group of c ranks inside one node, c chosen per sample from
``sizes``; position i of a group holds token chunks i and 2c - 1 - i of the sample's 2c
(head-tail, so causal attention is equal across the group). The result says, per rank, which
shards it holds (:meth:`ContextParallelPlan.shards`) and where their token rows arrive, and its
``chunks`` :class:`~orchmllm.Plan` moves the rows with ``all_to_all_single`` as any plan does
(:class:`orchmllm.torch.Dispatcher` with ``rows=plan.chunk_rows``). The model, the lower bound
and the algorithm: docs/algorithms.md, "Context parallelism"; the trainer's side:
docs/python.md, "Context parallelism".
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import _orchmllm
from ._orchmllm import CpCost, Plan

__all__ = ["ContextParallelPlan", "CpCost", "Shard", "context_parallel"]


class Shard(NamedTuple):
    """One rank's part of one sample."""

    #: The sample's global id in the input (offsets / lengths order).
    item: int
    #: c, the size of the sample's group (1: the sample is whole on this rank).
    group_size: int
    #: This rank's index in the group, 0 .. c - 1.
    position: int
    #: Its token ranges [begin, end) in the sample, head then tail (c = 1: the whole sample,
    #: then an empty range).
    ranges: Tuple[Tuple[int, int], Tuple[int, int]]
    #: The group's ranks in position order (c = 1: this rank).
    group: Tuple[int, ...]
    #: Where its rows start and end among the rows this rank receives (the chunks' Plan, in
    #: destination-slot order): the head's rows, then the tail's.
    rows: Tuple[int, int]
    #: The micro-batch it runs in (every shard of the sample runs in the same one).
    micro_batch: int = 0

    @property
    def tokens(self) -> int:
        """How many tokens of the sample this rank holds."""
        return (self.ranges[0][1] - self.ranges[0][0]) + (self.ranges[1][1] - self.ranges[1][0])

    def positions(self) -> np.ndarray:
        """int64 positions of this rank's tokens in the sample, in row order (head then tail):
        what rotary embeddings and the causal mask need."""
        (a, b), (c, d) = self.ranges
        return np.concatenate([np.arange(a, b, dtype=np.int64), np.arange(c, d, dtype=np.int64)])


class ContextParallelPlan:
    """What :func:`context_parallel` returns. Immutable; identical on every rank for the same
    input."""

    def __init__(self, native: _orchmllm._CpPlan, num_ranks: int) -> None:
        self._native = native
        self._num_ranks = num_ranks
        self._dst_offsets: Optional[np.ndarray] = None
        self._row_offsets: Optional[np.ndarray] = None

    @property
    def chunks(self) -> Plan:
        """The chunks' plan: chunk k of sample g (ids ``chunk_offsets[g] ..``) goes to
        ``chunks.dst_rank[k]``; a rank receives its chunks in chunk-id order, so a shard's head
        and tail arrive next to each other. ``chunks.all_to_all(rank, rows=chunk_rows)``."""
        return self._native.chunks

    @property
    def num_ranks(self) -> int:
        return self._num_ranks

    @property
    def group_size(self) -> np.ndarray:
        """int64[n]: every sample's c."""
        return self._native.group_size

    @property
    def chunk_offsets(self) -> np.ndarray:
        """int64[n + 1]: the chunk ids of every sample (1 when whole, 2c when sharded)."""
        return self._native.chunk_offsets

    @property
    def chunk_begin(self) -> np.ndarray:
        """int64[m]: every chunk's first token in its sample."""
        return self._native.chunk_begin

    @property
    def chunk_end(self) -> np.ndarray:
        """int64[m]: one past every chunk's last token."""
        return self._native.chunk_end

    @property
    def chunk_rows(self) -> np.ndarray:
        """int64[m]: every chunk's token count (the ``rows`` of its all_to_all: one row per
        token)."""
        rows: np.ndarray = self.chunk_end - self.chunk_begin
        return rows

    @property
    def loads(self) -> np.ndarray:
        """float64[D]: every rank's time under the cost (seconds)."""
        return self._native.loads

    @property
    def tokens(self) -> np.ndarray:
        """int64[D]: every rank's tokens."""
        return self._native.tokens

    @property
    def makespan(self) -> float:
        return float(self._native.makespan)

    @property
    def lower_bound(self) -> float:
        """No plan with these sizes, groups and cap has a smaller makespan."""
        return float(self._native.lower_bound)

    @property
    def sharded(self) -> int:
        """Samples over two or more ranks."""
        return int(self._native.sharded)

    @property
    def plan_seconds(self) -> float:
        return float(self._native.plan_seconds)

    @property
    def micro_batches(self) -> int:
        """M, the micro-batches every rank runs."""
        return int(self._native.micro_batches)

    @property
    def micro_batch(self) -> np.ndarray:
        """int64[n]: every sample's micro-batch (its group computes together)."""
        return self._native.micro_batch

    @property
    def cell_offsets(self) -> np.ndarray:
        """int64[D·M + 1]: cell (r, m) is the chunks' destination ids [cell_offsets[r·M + m],
        cell_offsets[r·M + m + 1]); a rank receives its rows by micro-batch."""
        return self._native.cell_offsets

    @property
    def objective(self) -> float:
        """Σ_m max_r load(r, m): the step when every micro-batch synchronises."""
        return float(self._native.objective)

    def group_ranks(self, item: int) -> Tuple[int, ...]:
        """The ranks of sample ``item``'s group in position order (one rank when whole)."""
        first = int(self.chunk_offsets[item])
        c = int(self.group_size[item])
        dst = self.chunks.dst_rank
        return tuple(int(dst[first + i]) for i in range(c))

    def shards(self, rank: int) -> List[Shard]:
        """The shards ``rank`` holds, in the order its rows arrive (samples by id: every rank
        of a group meets the group's samples in the same order, so per-sample collectives
        within groups cannot cross). O(chunks of the rank · log n)."""
        if self._row_offsets is None:
            rows = self.chunk_rows
            sources = self.chunks.sources
            # Rows before every destination id, per rank: the receive layout.
            self._dst_offsets = self.chunks.dst_offsets
            per_dst = rows[sources]
            self._row_offsets = np.concatenate([[0], np.cumsum(per_dst)]).astype(np.int64)
        assert self._dst_offsets is not None
        first_row = int(self._row_offsets[self._dst_offsets[rank]])
        out = []
        for item, c, pos, hb, he, tb, te, h in self._native.shards(rank):
            start = int(self._row_offsets[h]) - first_row
            end = int(self._row_offsets[h + (2 if c > 1 else 1)]) - first_row
            out.append(Shard(item, c, pos, ((hb, he), (tb, te)), self.group_ranks(item),
                             (start, end), int(self.micro_batch[item])))
        return out


def _sizes(sizes: Sequence[int]) -> List[int]:
    values = list(sizes)
    if any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) for c in values):
        raise TypeError(f"sizes must be integers, got {values!r}")
    return [int(c) for c in values]


def context_parallel(offsets: Any, lengths: Any, cost: CpCost, *,
                     sizes: Sequence[int] = (1, 2, 4, 8), gpus_per_node: int = 0,
                     node_of_rank: Any = None, within_node: bool = True,
                     token_cap: Optional[int] = None, min_shard_tokens: int = 0,
                     micro_batches: int = 1, max_tokens_per_micro_batch: Optional[int] = None,
                     bytes: Any = None, targets: int = 8) -> ContextParallelPlan:
    """Shards and places the samples of a packed stage (lengths in tokens) over the ranks.

    offsets: int64[D + 1], rank r holds samples offsets[r] .. offsets[r + 1] - 1.
    lengths: int64[n], tokens per sample. cost: a :class:`CpCost` (seconds).
    sizes: the allowed group sizes, strictly increasing (1: whole; ``(c,)``: static CP).
    gpus_per_node / node_of_rank: the nodes (consecutive blocks of that many ranks, 0 for one
        node; or every rank's node id); groups are aligned blocks inside one node unless
        ``within_node`` is False (aligned blocks of global ranks).
    token_cap: most tokens a rank holds, its shards counted. min_shard_tokens: a sample is
        sharded over c ranks only with at least c times this many tokens.
    micro_batches: M, the micro-batches every rank runs; a sample's shards all run in the same
        one, chosen so that Σ_m max_r load stays small; max_tokens_per_micro_batch caps a
        rank's tokens in one micro-batch.
    bytes: int64[n] payload bytes per sample (apportioned to the chunks by tokens).
    targets: placements tried (the groups-first one, then targets from the lower bound up).

    Deterministic; the GIL is released while it plans. Raises TypeError / ValueError for
    arguments of the wrong type or shape, InvalidArgumentError for bad sizes, nodes or costs,
    InfeasibleError when the cap leaves a sample no room (the message names it).
    """
    from . import _int, _int64_vector, _optional_int  # the package's argument helpers

    if not isinstance(cost, CpCost):
        raise TypeError(f"cost must be an orchmllm.CpCost, got {type(cost).__name__}")
    off = _int64_vector("offsets", offsets)
    lens = _int64_vector("lengths", lengths)
    b = None if bytes is None else _int64_vector("bytes", bytes, lens.size)
    nodes = None if node_of_rank is None else _int64_vector("node_of_rank", node_of_rank)
    native = _orchmllm._context_parallel(off, lens, b, cost, _sizes(sizes),
                                         _int("gpus_per_node", gpus_per_node), nodes,
                                         bool(within_node), _optional_int("token_cap", token_cap),
                                         _int("min_shard_tokens", min_shard_tokens),
                                         _int("micro_batches", micro_batches),
                                         _optional_int("max_tokens_per_micro_batch",
                                                       max_tokens_per_micro_batch),
                                         _int("targets", targets))
    return ContextParallelPlan(native, int(off.size) - 1)
