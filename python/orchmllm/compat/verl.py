"""``verl.utils.seqlen_balancing`` planned by orchmllm: a verl trainer changes one import.

    from orchmllm.compat.verl import get_seqlen_balanced_partitions, rearrange_micro_batches

The functions verl's trainers and workers import from ``verl/utils/seqlen_balancing.py``
(volcengine/verl) keep their names, signatures, argument meanings and return shapes; the
partitions come from :func:`orchmllm.balance` in native code with the GIL released: its search
("automatic", stopped within 0.01 % of its lower bound) or the largest differencing verl itself
runs, whichever is better, so a partition is never worse than verl's.

Deliberate differences from verl (docs/python.md, "Coming from verl"):

* :func:`rearrange_micro_batches` keeps ``max_token_len``: verl cuts a rank's batch into
  ``ceil(tokens / max_token_len)`` parts balanced on workload and lets a part exceed the budget;
  here no micro-batch holds more than ``max_token_len`` tokens, so the count is the smallest one
  at or above verl's for which such parts are found (almost always verl's own). The budget must
  hold the longest sequence's tokens (verl asks it to hold the padded width).
* A rank with fewer sequences than the count its data-parallel group agrees on
  (``same_micro_num_in_dp``, ``min_num_micro_batch``, ``num_batches_divided_by``) gets empty
  micro-batches where verl fails an assertion: every rank then runs as many forward and backward
  passes as the others, which FSDP's per-micro-batch collectives need.
* :func:`get_group_balanced_partitions` takes any number of groups g >= k: each partition gets
  floor(g/k) or ceil(g/k) groups (verl asks g to be a multiple of k).
* Malformed arguments raise ``ValueError`` (verl: ``AssertionError``).

Importing this module imports torch. Determinism: the same arguments give the same partitions
on every rank and run.
"""

from __future__ import annotations

import copy
from itertools import chain
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from .. import InfeasibleError, balance
from ..torch import _collective_device
from ._common import one_source, parts_of

__all__ = [
    "calculate_workload",
    "ceildiv",
    "get_group_balanced_partitions",
    "get_reverse_idx",
    "get_seqlen_balanced_partitions",
    "log_seqlen_unbalance",
    "prepare_dynamic_batch",
    "rearrange_micro_batches",
    "restore_dynamic_batch",
    "roundup_divisible",
]

#: verl's workload of a sequence of l tokens, 24576·l + l² (a 7B dense transformer's FLOPs up to a
#: constant), as an orchmllm cost: the objective of :func:`rearrange_micro_batches`.
WORKLOAD_COST = "quadratic:24576,1"

#: The data-parallel partitions stop searching once their largest sum is within this fraction of
#: orchmllm's lower bound (0.01 %): beyond it the search costs more than verl's whole call and buys
#: less than 10^-4 of a step.
GAP_TOLERANCE = 1e-4


def calculate_workload(seqlen_list: Any) -> Any:
    """verl's relative workload of sequences: 24576·l + l² for every length l (a tensor or numpy
    array in, the same kind out)."""
    return 24576 * seqlen_list + seqlen_list**2


def ceildiv(a: int, b: int) -> int:
    """ceil(a / b) for integers."""
    return -(a // -b)


def roundup_divisible(a: int, b: int) -> int:
    """The smallest multiple of b that is >= a."""
    return ((a + b - 1) // b) * b


def _values_as_lengths(seqlen_list: Any) -> Tuple[np.ndarray, Any]:
    """The values to partition as (int64 lengths, cost) for orchmllm.balance: integers as
    themselves under a linear cost; other reals as their rank among the distinct values under a
    cost that looks the value up (so any finite non-negative reals balance exactly)."""
    values = np.asarray(seqlen_list.tolist() if isinstance(seqlen_list, torch.Tensor)
                        else seqlen_list)
    if values.ndim != 1:
        raise ValueError(f"seqlen_list must be one-dimensional, got shape {values.shape}")
    if values.size == 0 or values.dtype.kind in "iub":
        return values.astype(np.int64), "linear"
    if values.dtype.kind != "f":
        raise ValueError(f"seqlen_list must hold numbers, got dtype {values.dtype}")
    if not np.isfinite(values).all():
        raise ValueError("seqlen_list holds a value that is not finite")
    if (values == np.round(values)).all() and np.abs(values).max() < 2.0**53:
        return values.astype(np.int64), "linear"
    distinct = np.unique(values)
    return np.searchsorted(distinct, values).astype(np.int64), lambda ids: distinct[ids]


def _partition(lengths: np.ndarray, cost: Any, k: int, min_items: int,
               max_items: Optional[int]) -> List[List[int]]:
    """The items of one list in k balanced lists: orchmllm's search stopped once within
    :data:`GAP_TOLERANCE` of its lower bound, or the differencing verl runs (largest differencing
    with equal counts, complete otherwise) where that is better, so never worse than verl's."""
    n = lengths.shape[0]
    offsets = one_source(n, k)
    plan = balance(offsets, lengths, cost, min_items=min_items, max_items=max_items,
                   gap_tolerance=GAP_TOLERANCE)
    if plan.makespan > plan.lower_bound:
        equal = min_items == max_items
        kk = balance(offsets, lengths, cost, min_items=min_items, max_items=max_items,
                     algorithm="karmarkar_karp_equal" if equal else "karmarkar_karp")
        if kk.makespan < plan.makespan:
            plan = kk
    return parts_of(plan.dst_rank, k)


def get_seqlen_balanced_partitions(seqlen_list: Sequence[int], k_partitions: int,
                                   equal_size: bool) -> List[List[int]]:
    """Partitions the indices of ``seqlen_list`` into ``k_partitions`` lists whose sums of values
    are balanced (the largest sum as small as the planner can prove or find).

    seqlen_list: the values (sequence lengths or workloads: non-negative numbers).
    equal_size: every partition gets len(seqlen_list) / k_partitions indices (which must be an
    integer); otherwise every partition gets at least one.

    Returns k_partitions lists of indices, each ascending, together every index once.
    Raises ValueError when there are fewer values than partitions, equal sizes are impossible or
    a value is negative. O(n log n) for the usual sizes (orchmllm.balance, "automatic").
    """
    k = int(k_partitions)
    lengths, cost = _values_as_lengths(seqlen_list)
    n = lengths.shape[0]
    if k < 1:
        raise ValueError(f"k_partitions must be at least 1, got {k}")
    if n < k:
        raise ValueError(f"number of items [{n}] < k_partitions [{k}]")
    if equal_size and n % k != 0:
        raise ValueError(f"equal_size needs the number of items to be a multiple of "
                         f"k_partitions: {n} % {k} != 0")
    size = n // k
    return _partition(lengths, cost, k, size if equal_size else 1, size if equal_size else None)


def log_seqlen_unbalance(seqlen_list: Sequence[int], partitions: List[List[int]],
                         prefix: str) -> Dict[str, float]:
    """verl's imbalance metrics: the min / max / spread of the sums of consecutive chunks of
    len(seqlen_list) / k values (the batch as it arrived, k = len(partitions)), the min / max of
    the partitions' sums, and the mean sum per partition."""
    k = len(partitions)
    chunk = len(seqlen_list) // k
    sums = [sum(seqlen_list[i:i + chunk]) for i in range(0, len(seqlen_list), chunk)]
    balanced = [sum(seqlen_list[i] for i in part) for part in partitions]
    return {
        f"{prefix}/min": min(sums),
        f"{prefix}/max": max(sums),
        f"{prefix}/minmax_diff": max(sums) - min(sums),
        f"{prefix}/balanced_min": min(balanced),
        f"{prefix}/balanced_max": max(balanced),
        f"{prefix}/mean": sum(sums) / k,
    }


def get_group_balanced_partitions(seqlen_list: Sequence[int], uid_list: Sequence[Any],
                                  k_partitions: int) -> List[List[int]]:
    """Partitions samples into k lists whose workloads are balanced, keeping every run of
    consecutive samples with the same uid (a prompt's rollouts) in one list.

    A group's workload is the sum of its samples' :func:`calculate_workload`; every partition
    gets floor(g/k) or ceil(g/k) of the g groups. Returns k ascending lists of sample indices.
    Raises ValueError when the lists differ in length or there are fewer groups than k.
    """
    if len(seqlen_list) != len(uid_list):
        raise ValueError(f"seqlen_list and uid_list must have the same length, got "
                         f"{len(seqlen_list)} and {len(uid_list)}")
    lengths = np.asarray(seqlen_list, dtype=np.int64)
    starts = [i for i in range(len(uid_list)) if i == 0 or uid_list[i] != uid_list[i - 1]]
    g, k = len(starts), int(k_partitions)
    if k < 1 or g < k:
        raise ValueError(f"number of uid groups ({g}) must be >= k_partitions ({k}) >= 1")
    bounds = np.asarray(starts + [len(uid_list)])
    workloads = np.add.reduceat(calculate_workload(lengths), bounds[:-1])
    return [list(chain.from_iterable(range(bounds[j], bounds[j + 1]) for j in part))
            for part in _partition(workloads, "linear", k, g // k, ceildiv(g, k))]


def _effective_lengths(batch: Any) -> torch.Tensor:
    """Every sequence's tokens: a nested ``input_ids``'s row lengths, else the row sums of
    ``attention_mask`` (verl's two layouts)."""
    input_ids = batch["input_ids"] if "input_ids" in batch.keys() else None
    if input_ids is not None and input_ids.is_nested:
        offsets: torch.Tensor = getattr(input_ids, "offsets")()
        return offsets.diff()
    sums: torch.Tensor = batch["attention_mask"].sum(dim=1)
    return sums


def _select_rows(value: torch.Tensor, rows: torch.Tensor, indices: List[int]) -> torch.Tensor:
    """The rows ``indices`` of a nested tensor: for a jagged tensor ragged in dimension 1, one
    gather of its packed values (no Python loop over rows); otherwise unbound and re-nested in
    its layout."""
    if value.layout == torch.jagged and getattr(value, "_ragged_idx", 1) == 1:
        offsets: torch.Tensor = getattr(value, "offsets")()
        rows = rows.to(offsets.device)
        starts, counts = offsets[rows], offsets[rows + 1] - offsets[rows]
        new_offsets = torch.zeros(len(indices) + 1, dtype=offsets.dtype, device=offsets.device)
        torch.cumsum(counts, 0, out=new_offsets[1:])
        within = torch.arange(int(new_offsets[-1]), device=offsets.device) - \
            torch.repeat_interleave(new_offsets[:-1], counts)
        gather = torch.repeat_interleave(starts, counts) + within
        return torch.nested.nested_tensor_from_jagged(value.values().index_select(0, gather),
                                                      new_offsets)
    parts = value.unbind()
    return torch.nested.nested_tensor([parts[i] for i in indices], layout=value.layout,
                                      dtype=value.dtype, device=value.device)


def _index_select(batch: Any, indices: List[int]) -> Any:
    """The rows ``indices`` of every field of a TensorDict (or a dict of tensors): tensors
    indexed, nested tensors re-nested, indexable non-tensor fields indexed, scalars kept."""
    rows = torch.tensor(indices, dtype=torch.long)
    selected: Dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.is_nested:
            selected[key] = _select_rows(value, rows, indices)
        elif isinstance(value, torch.Tensor):
            selected[key] = value[rows.to(value.device)]
        elif getattr(value, "shape", None):
            selected[key] = value[rows] if not isinstance(value, np.ndarray) else value[indices]
        else:
            selected[key] = value
    if isinstance(batch, dict):
        return selected
    return type(batch)(selected, batch_size=[len(indices)])


def _capped_parts(lengths: np.ndarray, count: int, cap: int) -> Optional[List[List[int]]]:
    """``count`` lists of the sequences, each holding at most ``cap`` tokens, whose workloads are
    balanced; None when the planner finds none (at least one non-empty list each while count <=
    n)."""
    n = lengths.shape[0]
    if n == 0:
        return [[] for _ in range(count)]
    try:
        plan = balance(one_source(n, count), lengths, WORKLOAD_COST, cap=cap,
                       min_items=1 if count <= n else 0)
    except InfeasibleError:
        if count < n:
            return None
        return [[i] for i in range(n)] + [[] for _ in range(count - n)]
    return parts_of(plan.dst_rank, count)


def _split_to(parts: List[List[int]], count: int) -> List[List[int]]:
    """``parts`` grown to ``count`` lists by moving one index at a time out of the fullest list
    into a new one (subsets keep every budget), then empty lists."""
    parts = [list(p) for p in parts]
    while len(parts) < count:
        fullest = max(range(len(parts)), key=lambda j: (len(parts[j]), -j))
        parts.append([parts[fullest].pop()] if len(parts[fullest]) > 1 else [])
    return parts


def rearrange_micro_batches(batch: Any, max_token_len: int, dp_group: Any = None,
                            num_batches_divided_by: Optional[int] = None,
                            same_micro_num_in_dp: bool = True,
                            min_num_micro_batch: Optional[int] = None,
                            use_dynamic_bsz_balance: bool = True) -> Tuple[List[Any], List[List[int]]]:
    """Cuts a rank's batch into micro-batches of at most ``max_token_len`` tokens with balanced
    workloads (:func:`calculate_workload`).

    batch: a TensorDict (or dict of tensors) with ``attention_mask`` (B x S: a row's tokens are its
    sum) or a nested ``input_ids`` (its rows' lengths); every field is cut along dimension 0.
    The count M: the smallest count at or above min(B, ceil(tokens / max_token_len)) (and
    ``min_num_micro_batch``, and the number of sequences over half the budget) whose
    micro-batches all fit; with ``same_micro_num_in_dp`` and
    torch.distributed initialised, the largest M over ``dp_group`` (one all-reduce); then rounded
    up to a multiple of ``num_batches_divided_by``. Ranks with fewer sequences than M get empty
    micro-batches. use_dynamic_bsz_balance: order the micro-batches heaviest in the middle,
    lightest at both ends (fewer exposed pipeline bubbles), as verl does.

    Returns (micro_batches, index lists): micro-batch m holds the rows index_lists[m] of batch.
    Raises ValueError when a sequence alone exceeds max_token_len.
    """
    lengths = _effective_lengths(batch).cpu().numpy().astype(np.int64)
    n, cap = lengths.shape[0], int(max_token_len)
    longest = int(lengths.max()) if n else 0
    if cap < max(longest, 1):
        raise ValueError(f"max_token_len must hold the longest sequence: got max_token_len={cap}, "
                         f"longest sequence {longest} tokens")
    count = min(n, max(1, ceildiv(int(lengths.sum()), cap)))
    # No two sequences over half the budget share a micro-batch: a bound on the count that
    # spares the search below one plan per count where many are that long.
    count = max(count, int((2 * lengths > cap).sum()))
    if min_num_micro_batch is not None:
        count = max(int(min_num_micro_batch), count)
    parts = _capped_parts(lengths, count, cap)
    while parts is None:
        count += 1
        parts = _capped_parts(lengths, count, cap)
    if same_micro_num_in_dp and dist.is_available() and dist.is_initialized():
        agreed = torch.tensor([count], dtype=torch.int64, device=_collective_device(dp_group))
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=dp_group)
        count = int(agreed.item())
    if num_batches_divided_by is not None:
        count = roundup_divisible(count, int(num_batches_divided_by))
    if count > len(parts):
        parts = _capped_parts(lengths, count, cap) or _split_to(parts, count)
    if use_dynamic_bsz_balance:
        workloads = calculate_workload(lengths)
        parts.sort(key=lambda p: (int(workloads[p].sum()), p[0] if p else 0), reverse=True)
        parts = parts[::2][::-1] + parts[1::2]
    return [_index_select(batch, p) for p in parts], parts


def get_reverse_idx(idx_map: Any) -> Any:
    """The inverse of a permutation: out[idx_map[i]] = i (the same container type)."""
    reverse = copy.deepcopy(idx_map)
    for i, idx in enumerate(idx_map):
        reverse[idx] = i
    return reverse


def prepare_dynamic_batch(data: Any, max_token_len: int, dp_group: Any = None,
                          num_batches_divided_by: Optional[int] = None,
                          same_micro_num_in_dp: bool = True,
                          min_num_micro_batch: Optional[int] = None,
                          use_dynamic_bsz_balance: bool = True) -> Tuple[List[Any], List[List[int]]]:
    """:func:`rearrange_micro_batches` on a verl ``DataProto``: its ``batch`` cut into
    micro-batches, its ``non_tensor_batch`` cut the same way, its ``meta_info`` copied; returns
    (micro-batch DataProtos, index lists)."""
    batches, parts = rearrange_micro_batches(
        data.batch, max_token_len=max_token_len, dp_group=dp_group,
        num_batches_divided_by=num_batches_divided_by, same_micro_num_in_dp=same_micro_num_in_dp,
        min_num_micro_batch=min_num_micro_batch, use_dynamic_bsz_balance=use_dynamic_bsz_balance)
    micro_batches = []
    for micro, part in zip(batches, parts):
        non_tensors = {key: value[part] for key, value in data.non_tensor_batch.items()}
        micro_batches.append(type(data).from_dict(dict(micro), non_tensors,
                                                  meta_info=copy.deepcopy(data.meta_info)))
    return micro_batches, parts


def restore_dynamic_batch(data: torch.Tensor, batch_idx_list: List[List[int]]) -> torch.Tensor:
    """The rows of the concatenated micro-batches' output ``data`` put back in the batch's order
    (``batch_idx_list`` as :func:`prepare_dynamic_batch` returned it); nested tensors too."""
    indices = list(chain.from_iterable(batch_idx_list))
    if len(indices) != data.shape[0]:
        raise ValueError(f"the index lists cover {len(indices)} rows, data has {data.shape[0]}")
    revert = torch.tensor(get_reverse_idx(indices), dtype=torch.long)
    if data.is_nested:
        rows = data.unbind()
        return torch.nested.as_nested_tensor([rows[i] for i in revert], layout=torch.jagged)
    return data[revert.to(data.device)]
