"""VeOmni's encoder data balance planned and moved by orchmllm: a VeOmni trainer changes one import.

    from orchmllm.compat.veomni import Qwen3VLEncoderDataBalance

VeOmni (ByteDance-Seed/VeOmni, ``veomni/utils/data_balance/``) balances the vision encoder's
inputs over the data-parallel group before the vision tower (``balance_data``: every rank's
images' patch counts gathered, a greedy assignment on Σ patches², pixel rows and grids moved by
all-to-all) and returns the tower's outputs to their home ranks afterwards (``data_bridge``,
differentiable). This module keeps that interface, the constructor's arguments and the sorting
functions' registry (``SORTING_ALGO_FUNC``); the assignment is :func:`orchmllm.balance`'s on
the same objective unless a cost is given ("locality" with no slack: the largest load of
"automatic", never above the greedy one's, and of the plans with that load one that leaves the
most patch rows on their home rank) and the exchanges are :class:`orchmllm.torch.Dispatcher`'s
(one ``all_to_all_single`` per tensor; the way back is the same route inverted, an autograd
function).

Differences from VeOmni (docs/python.md, "Coming from VeOmni"): a rank may end up with no
image (VeOmni fails an assertion when the group holds fewer images than ranks); a patch count not
divisible by ``spatial_merge_unit`` raises ``ValueError``; the data-parallel group can be passed
(``dp_group``; default: VeOmni's parallel state's when VeOmni is installed, else the default
group); ``cost`` takes any orchmllm cost (e.g. a fitted :class:`orchmllm.QuadraticCost`).

Importing this module imports torch (and not VeOmni).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

from .. import ALGORITHMS, Plan, balance
from ..torch import Dispatcher, gather_lengths
from ._common import one_source, parts_of

__all__ = ["Qwen3VLEncoderDataBalance", "SORTING_ALGO_FUNC", "balanced_rank_table"]

#: VeOmni's objective for an image of l patch rows: l² (its sorting functions' load).
PATCHES_SQUARED = "quadratic:0,1"


@torch.no_grad()
def balanced_rank_table(all_data_lengths: torch.Tensor, num_replicas: int,
                        dim: int) -> List[List[torch.Tensor]]:
    """VeOmni's sorting-function interface: the rows of ``all_data_lengths`` (one per image;
    column ``dim`` its patch count) dealt to ``num_replicas`` ranks so that the largest Σ l²
    is as small as orchmllm's ``automatic`` finds (at worst LPT's, VeOmni's greedy order).

    Returns num_replicas lists of rows (tensors of all_data_lengths, ascending row order); a
    list is empty only when there are fewer rows than ranks. Deterministic. Raises ValueError
    for a negative length or num_replicas < 1.
    """
    k = int(num_replicas)
    if k < 1:
        raise ValueError(f"num_replicas must be at least 1, got {k}")
    lengths = all_data_lengths[:, dim].cpu().numpy().astype(np.int64)
    n = lengths.shape[0]
    plan = balance(one_source(n, k), lengths, PATCHES_SQUARED, min_items=1 if n >= k else 0)
    return [[all_data_lengths[i] for i in part] for part in parts_of(plan.dst_rank, k)]


#: VeOmni's registry of sorting functions by the names its configs use, each orchmllm's.
SORTING_ALGO_FUNC: Dict[str, Callable[[torch.Tensor, int, int], List[List[torch.Tensor]]]] = {
    "post_mbs_balancing_greedy_without_pad": balanced_rank_table,
}


def _default_dp_group() -> Optional[dist.ProcessGroup]:
    """VeOmni's data-parallel group when VeOmni is installed and its parallel state is set up,
    else None (the default group)."""
    try:
        state = importlib.import_module("veomni.distributed.parallel_state")
    except ImportError:
        return None
    group: Optional[dist.ProcessGroup] = state.get_parallel_state().dp_group
    return group


class Qwen3VLEncoderDataBalance:
    """Balances a Qwen-VL vision tower's inputs over the data-parallel group and brings its
    outputs home: VeOmni's class of the same name on orchmllm's planner and dispatch.

    spatial_merge_unit: the tower's ``spatial_merge_unit`` (output rows = patch rows / it).
    sorting_algo_name: VeOmni's name ("post_mbs_balancing_greedy_without_pad": orchmllm's
    "locality" with no slack on Σ patches², the same objective: the largest load of
    "automatic", and fewer images moved) or an orchmllm balancer (:data:`orchmllm.ALGORITHMS`).
    dp_group: the group to balance over (default: VeOmni's parallel state's data-parallel group
    when VeOmni is installed, looked up at each balance_data, so the parallel state may be set
    up after construction; else the default group). cost: the vision tower's cost of an image of
    l patch rows, any :func:`orchmllm.balance` cost (default l²). verify: every exchange first agrees with the other ranks
    (:class:`orchmllm.torch.Dispatcher`); False agrees once per route.

    Per ``balance_data`` call: the patch counts' all-gather, one plan (every rank computes the
    same), one ``all_to_all_single`` for the pixel rows and one for the grids; per output
    brought home one more. Raises ValueError for an unknown sorting_algo_name.
    """

    def __init__(self, spatial_merge_unit: int,
                 sorting_algo_name: str = "post_mbs_balancing_greedy_without_pad", *,
                 dp_group: Optional[dist.ProcessGroup] = None, cost: Any = PATCHES_SQUARED,
                 verify: bool = True) -> None:
        #: The orchmllm.balance arguments of the plan (besides the cost).
        self.balance_args: Dict[str, Any]
        if sorting_algo_name in SORTING_ALGO_FUNC:
            self.balance_args = {"algorithm": "locality", "locality_tolerance": 0.0}
        elif sorting_algo_name in ALGORITHMS:
            self.balance_args = {"algorithm": sorting_algo_name}
        else:
            raise ValueError(
                f"encoder data balance sorting algorithm name '{sorting_algo_name}' is not "
                f"known: {sorted(SORTING_ALGO_FUNC) + list(ALGORITHMS)}")
        self.merge_down_ratio = int(spatial_merge_unit)
        if self.merge_down_ratio < 1:
            raise ValueError(f"spatial_merge_unit must be at least 1, got {spatial_merge_unit}")
        #: The group given (None: VeOmni's data-parallel group, or the default group).
        self.dp_group = dp_group
        self.cost = cost
        self.verify = bool(verify)
        #: Per data type, the route of the tower's outputs (what :meth:`data_bridge` inverts).
        self.state_buffer: Dict[str, Dispatcher] = {}
        #: Per data type, the last plan (its statistics: makespan, lower bound, moved items).
        self.plans: Dict[str, Plan] = {}

    def plan(self, offsets: Any, patches: Any) -> Plan:
        """The plan of :meth:`balance_data` for the gathered patch counts (CSR ``offsets`` over
        the group's ranks, every image's ``patches``): an :class:`orchmllm.Plan`, the same on
        every rank. Local; O(n log n) for the usual sizes."""
        return balance(offsets, patches, self.cost, **self.balance_args)

    def balance_data(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor,
                     data_type: str = "image") -> Tuple[torch.Tensor, torch.Tensor]:
        """This rank's share of the group's images: (pixel rows, grids) in the same image order.

        pixel_values: the patch rows of this rank's images, concatenated; grid_thw: int[k, 3],
        one (t, h, w) per image (its t·h·w patch rows). A collective over the group: every rank
        calls it, with 0 images too. Raises ValueError when the rows do not match the grids or a
        patch count is not a multiple of spatial_merge_unit."""
        grid_thw = grid_thw.long()
        lengths = (grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]).cpu().numpy()
        if int(lengths.sum()) != pixel_values.shape[0]:
            raise ValueError(f"pixel_values has {pixel_values.shape[0]} rows, the grids "
                             f"{int(lengths.sum())} patches")
        if (lengths % self.merge_down_ratio != 0).any():
            raise ValueError(f"a patch count is not a multiple of spatial_merge_unit "
                             f"{self.merge_down_ratio}: {lengths.tolist()}")
        group = self.dp_group if self.dp_group is not None else _default_dp_group()
        offsets, all_lengths = gather_lengths(lengths, group)
        plan = self.plan(offsets, all_lengths)
        rank = dist.get_rank(group)

        def route(rows: Optional[np.ndarray], what: str) -> Dispatcher:
            return Dispatcher(plan, rank, rows, group, name=f"{data_type} {what}",
                              verify=self.verify)

        self.plans[data_type] = plan
        self.state_buffer[data_type] = route(all_lengths // self.merge_down_ratio, "outputs")
        return (route(all_lengths, "pixel_values").dispatch(pixel_values),
                route(None, "grid_thw").dispatch(grid_thw))

    def data_bridge(self, hidden_state: torch.Tensor,
                    deepstack_feature_lists: Optional[List[torch.Tensor]],
                    require_grad: bool = True,
                    data_type: str = "image") -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """The tower's outputs of this rank's balanced images back on their home ranks, in the
        home rank's image order: (hidden_state, deepstack features). Differentiable (the
        backward moves the gradients the other way) unless require_grad is False. A collective
        over the group; raises RuntimeError when balance_data has not run for data_type."""
        route = self.state_buffer.get(data_type)
        if route is None:
            raise RuntimeError(f"data_bridge({data_type!r}) before balance_data({data_type!r})")
        with torch.set_grad_enabled(require_grad and torch.is_grad_enabled()):
            home = route.combine(hidden_state)
            features = [route.combine(f) for f in deepstack_feature_lists or []]
        return home, features
