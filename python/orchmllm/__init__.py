"""OrchMLLM: batch post-balancing for multimodal-LLM training.

Every data-parallel rank publishes the lengths of what it sampled; every rank then calls
:func:`balance` on the same global view and gets the same plan: where every item goes. The plan
gives what ``torch.distributed.all_to_all_single`` needs to move the items there
(:meth:`Plan.all_to_all`). Arrays in and out are numpy arrays; nothing is a Python object per
item. See docs/python.md.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from . import _orchmllm
from ._orchmllm import (
    AllToAll,
    CalibrationResult,
    CommunicationError,
    Error,
    InfeasibleError,
    InvalidArgumentError,
    LinearCost,
    ParseError,
    EncoderView,
    LLMView,
    Plan,
    QuadraticCost,
    Rearrangement,
    StepMetadata,
    StepPlan,
)

#: The package's version: CMakeLists.txt's project() VERSION, which pyproject.toml's metadata
#: reads too; the build passes it to the native module.
__version__: str = _orchmllm._version

__all__ = [
    "ALGORITHMS",
    "MAPPINGS",
    "AllToAll",
    "CalibrationResult",
    "CostCalibration",
    "CommunicationError",
    "Error",
    "InfeasibleError",
    "InvalidArgumentError",
    "LinearCost",
    "ParseError",
    "Plan",
    "QuadraticCost",
    "balance",
    "fit_quadratic_cost",
    "map_bins",
    # The step (orchmllm/step.py).
    "EncoderStage",
    "EncoderView",
    "LLMStage",
    "LLMView",
    "LocalBatch",
    "Rearrangement",
    "SplitOptions",
    "StageDeclarations",
    "StepMetadata",
    "StepPlan",
    "make_step_metadata",
    "plan_step",
    # Context parallelism (orchmllm/context_parallel.py).
    "ContextParallelPlan",
    "CpCost",
    "Shard",
    "context_parallel",
]

#: The mappers :func:`map_bins` and the stages take by name: the library's built-in mappers
#: (``orchmllm::mappers``), the values of ``orchmllm-bench plan --mapping``.
MAPPINGS = tuple(_orchmllm._mapper_names())

#: The balancers :func:`balance` and the stages take by name: the library's built-in balancers
#: (``orchmllm::balancers``), the values of ``orchmllm-bench plan --algorithm``.
ALGORITHMS = tuple(_orchmllm._balancer_names())

CostArg = Union[str, LinearCost, QuadraticCost, Callable[[np.ndarray], Any]]

_INT64_MAX = np.iinfo(np.int64).max


def _int64_vector(name: str, values: Any, size: Optional[int] = None) -> np.ndarray:
    """``values`` as a 1-D C-contiguous int64 array; TypeError / ValueError naming ``name``."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0 and arr.dtype == np.float64:
        arr = arr.astype(np.int64)  # np.asarray([]) is float64: an empty list is fine
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > _INT64_MAX:
        raise ValueError(f"{name} holds {int(arr.max())}, above 2^63 - 1")
    if size is not None and arr.shape[0] != size:
        raise ValueError(f"{name} has {arr.shape[0]} entries, expected {size}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _optional_int(name: str, value: Any) -> Optional[int]:
    """``value`` as an int, or None; TypeError naming ``name`` for anything else."""
    if value is None:
        return None
    return _int(name, value)


def _int(name: str, value: Any) -> int:
    """``value`` as an int; TypeError naming ``name`` for anything else (bools included),
    ValueError for an int outside the int64 range (every integer argument is one)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    v = int(value)
    if not -_INT64_MAX - 1 <= v <= _INT64_MAX:
        raise ValueError(f"{name} is {v}, outside the int64 range [-2^63, 2^63 - 1]")
    return v


def _float(name: str, value: Any) -> float:
    """``value`` as a float; TypeError naming ``name`` for anything but a real number (bools
    and strings included)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    return float(value)


def _cost_table(cost: Callable[[np.ndarray], Any], lengths: np.ndarray, policy: str,
                pad_multiple: int) -> Any:
    """Evaluates a cost callable once, on the distinct lengths (and padded lengths)."""
    at = _orchmllm._cost_lengths(lengths, policy, pad_multiple)
    values = np.asarray(cost(at.copy()), dtype=np.float64)
    if values.shape != at.shape:
        raise ValueError(
            f"the cost callable returned shape {values.shape} for {at.shape[0]} distinct lengths;"
            " it must return one cost per length (vectorised over a numpy array)")
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"the cost callable returned {values[i]} for length {at[i]}; costs must be finite"
            " and >= 0")
    drops = np.flatnonzero(np.diff(values) < 0)
    if drops.size:
        i = int(drops[0])
        raise ValueError(
            f"the cost callable must be non-decreasing in the length: cost({at[i]}) = "
            f"{values[i]} > cost({at[i + 1]}) = {values[i + 1]}")
    return _orchmllm._CostTable(at, np.ascontiguousarray(values))


def balance(offsets: Any, lengths: Any, cost: CostArg = "linear", policy: str = "packed",
            algorithm: str = "automatic", *, bytes: Any = None, pad_multiple: Optional[int] = None,
            cap: Optional[int] = None, cap_bytes: Optional[int] = None, min_items: int = 0,
            max_items: Optional[int] = None, gpus_per_node: int = 0,
            locality_tolerance: float = 0.001, gap_tolerance: float = 0.0,
            micro_batches: Union[None, int, str] = None,
            max_tokens_per_micro_batch: Optional[int] = None, micro_batch_multiple: int = 1,
            min_micro_batches: int = 1, sync: Optional[str] = None) -> Plan:
    """Balances the items of D ranks over the same D ranks.

    offsets: int64[D+1], the CSR offsets of the ranks' items (rank r holds global ids
        offsets[r] .. offsets[r+1]-1); lengths: int64[n], every item's length (tokens).
    cost: "linear" | "quadratic:A,B[,C]" (the ``orchmllm-bench --cost`` forms), a
        :class:`LinearCost` or :class:`QuadraticCost`, or a callable evaluated once on a numpy
        array of the distinct lengths (and padded lengths) returning their costs (finite,
        >= 0, non-decreasing in the length).
    policy: "packed" | "padded" | "bucketed:B1,B2,..."; pad_multiple: with "padded", lengths
        round up to a multiple of it.
    algorithm: one of :data:`ALGORITHMS`.
    bytes: int64[n], every item's payload bytes (default: its length), for ``cap_bytes`` and
        the moved-bytes figures. cap / cap_bytes: per-rank cap in tokens / bytes (at most one).
    min_items / max_items: items per destination rank.
    gpus_per_node: with "locality", nodes are consecutive blocks of that many ranks (0: one
        node). locality_tolerance: "locality"'s makespan slack over "automatic"'s.
    gap_tolerance: "automatic" (and "locality"'s base run) stops once its plan is within
        lower bound * (1 + gap_tolerance); the plan is then within that target or exactly the
        plan of 0 (the default: stop only at the bound). For very large inputs.
    micro_batches, max_tokens_per_micro_batch, micro_batch_multiple, min_micro_batches, sync:
        with any of them, the items go to cells (rank, micro-batch) as the C++
        ``balance_micro_batches`` plans them (``orchmllm-bench plan --micro-batches ...``):
        micro_batches "auto" (the default then: the smallest count that fits) or M >= 1, the
        same on every rank; max_tokens_per_micro_batch: physical tokens of one micro-batch after
        the policy's padding, never exceeded; M a multiple of micro_batch_multiple and at least
        min_micro_batches; sync "micro-batch" (FSDP, ZeRO-3, tensor or pipeline parallelism: the
        default) or "step" (DDP with no_sync). The plan's ``micro_batches``, ``dst_micro_batch``
        and ``micro_batch(rank, m)`` give the cells, ``statistics()`` the objective figures.

    Returns the :class:`Plan` (the same as ``orchmllm-bench plan`` without --gpus-per-node).
    Raises TypeError / ValueError for malformed arguments (InvalidArgumentError, a ValueError,
    carries the library's message: zero ranks, i.e. offsets [0], as map_bins and
    make_step_metadata refuse them; sums of lengths, bytes or costs past 2^63 - 1, named as an
    overflow), InfeasibleError when no plan meets the caps and counts.
    The GIL is released while the library balances.
    """
    offsets = _int64_vector("offsets", offsets)
    lengths = _int64_vector("lengths", lengths)
    if bytes is not None:
        bytes = _int64_vector("bytes", bytes, lengths.shape[0])
    for name, value in (("policy", policy), ("algorithm", algorithm)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    multiple = 1 if pad_multiple is None else _int("pad_multiple", pad_multiple)
    if isinstance(cost, (str, LinearCost, QuadraticCost)):
        cost_arg: Any = cost
    elif callable(cost):
        cost_arg = _cost_table(cost, lengths, policy, multiple)
    else:
        raise TypeError(
            "cost must be a str ('linear', 'quadratic:A,B[,C]'), a LinearCost, a QuadraticCost or a"
            f" callable, got {type(cost).__name__}")
    return _orchmllm._balance(
        offsets, lengths, bytes, cost_arg, policy, multiple, algorithm,
        _optional_int("cap", cap), _optional_int("cap_bytes", cap_bytes),
        _int("min_items", min_items), _optional_int("max_items", max_items),
        _int("gpus_per_node", gpus_per_node), _float("locality_tolerance", locality_tolerance),
        _float("gap_tolerance", gap_tolerance),
        *_micro_batch_args(micro_batches, max_tokens_per_micro_batch, micro_batch_multiple,
                           min_micro_batches, sync))


def _micro_batch_args(micro_batches: Union[None, int, str],
                      max_tokens_per_micro_batch: Optional[int], micro_batch_multiple: int,
                      min_micro_batches: int, sync: Optional[str]
                      ) -> Tuple[Optional[int], Optional[int], int, int, Optional[str]]:
    """The micro-batch arguments of :func:`balance` and of a stage, checked for type, as the
    native calls take them (count None: not given; 0: "auto")."""
    if micro_batches is None or micro_batches == "auto":
        count = None if micro_batches is None else 0
    elif isinstance(micro_batches, str):
        raise ValueError(f"micro_batches must be 'auto' or an int >= 1, got {micro_batches!r}")
    else:
        count = _int("micro_batches", micro_batches)
        if count < 1:
            raise ValueError(f"micro_batches must be 'auto' or an int >= 1, got {count}")
    if sync is not None and not isinstance(sync, str):
        raise TypeError(f"sync must be a str, got {type(sync).__name__}")
    return (count, _optional_int("max_tokens_per_micro_batch", max_tokens_per_micro_batch),
            _int("micro_batch_multiple", micro_batch_multiple),
            _int("min_micro_batches", min_micro_batches), sync)


def map_bins(plan: Plan, gpus_per_node: int = 0, method: str = "transport", *,
             node_of_rank: Any = None, bytes: Any = None) -> Plan:
    """Maps a balanced plan's bins onto the ranks of a cluster so that fewer bytes cross nodes.

    A balancer decides which items share a bin (destination rank k of ``balance``'s plan is
    bin k); any bijection bins -> ranks keeps the balance. This picks the one that keeps the
    most bytes on their node (the library's ``orchmllm::map_bins``, what
    ``orchmllm-bench plan --gpus-per-node G --mapping M`` does), and returns a new
    :class:`Plan`: the same bins on other ranks (``dst_rank``/``dst_slot``/``all_to_all``
    follow the mapping; makespan and loads are those of the balanced plan, permuted), with
    ``plan.mapping`` holding the figures (moved_bytes, inter_node_bytes and its lower bound,
    worst node egress/ingress, rank_of_bin, node_of_rank). The input plan is not changed.

    plan: a :class:`Plan` from :func:`balance` (or from map_bins: its bins are then its ranks).
    gpus_per_node: nodes are consecutive blocks of that many ranks (0: one node, where every
        mapping keeps all bytes on the node and ``transport`` minimises moved bytes within it).
    method: one of :data:`MAPPINGS`: ``identity`` (bin k -> rank k), ``transport`` (minimum
        inter-node bytes, exact), ``bottleneck`` (smallest worst node, local search from
        transport), ``auction`` (transport to within 1 % of the keepable bytes, for very large
        clusters).
    node_of_rank: int64[D] instead of gpus_per_node for uneven nodes: every rank's node,
        numbered in order of first appearance (rank 0 on node 0).
    bytes: int64[n], every item's payload bytes; default the plan's (``balance``'s ``bytes``,
        else the lengths).

    O(n + d log d) plus the solver (docs/algorithms.md); deterministic (integer arithmetic,
    fixed tie-breaks: every rank gets the same mapping). The GIL is released while it maps.
    Raises TypeError for arguments of the wrong type; InvalidArgumentError for an unknown
    method, a negative gpus_per_node, both gpus_per_node and node_of_rank, a node_of_rank of
    another size or numbering, or bytes of another size or negative.
    """
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be an orchmllm.Plan, got {type(plan).__name__}")
    if not isinstance(method, str):
        raise TypeError(f"method must be a str, got {type(method).__name__}")
    nodes = None if node_of_rank is None else _int64_vector("node_of_rank", node_of_rank)
    if bytes is not None:
        bytes = _int64_vector("bytes", bytes, plan.num_items)
        if bytes.size and int(bytes.min()) < 0:
            raise InvalidArgumentError(f"bytes holds {int(bytes.min())}, must be >= 0")
    return _orchmllm._map_bins(plan, method, _int("gpus_per_node", gpus_per_node), nodes, bytes)


def _float64_vector(name: str, values: Any, size: Optional[int] = None) -> np.ndarray:
    """``values`` as a 1-D C-contiguous float64 array; TypeError / ValueError naming ``name``."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.dtype == np.bool_ or not (np.issubdtype(arr.dtype, np.integer) or
                                     np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    if size is not None and arr.shape[0] != size:
        raise ValueError(f"{name} has {arr.shape[0]} entries, expected {size}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def fit_quadratic_cost(lengths: Any, seconds: Any, degree: int = 2) -> QuadraticCost:
    """Non-negative least-squares fit of a :class:`QuadraticCost` to profiled items.

    lengths: int64[k], seconds: float[k], one pair per profiled item. degree 1 fits
    constant + linear * l, 2 adds quadratic * l**2. Raises InvalidArgumentError for fewer than
    degree + 1 distinct lengths, a negative length, or a time that is negative or not finite.
    """
    lengths = _int64_vector("lengths", lengths)
    seconds = _float64_vector("seconds", seconds, lengths.shape[0])
    return _orchmllm._fit_quadratic_cost(lengths, seconds, _int("degree", degree))


class CostCalibration:
    """Fits a stage's cost model from the per-rank stage times of warmup steps.

    A trainer measures, for every rank, the wall time of a stage (e.g. the vision encoder) and
    knows the lengths of the items that rank processed; it does not need per-item timings. With
    policy "packed" a rank's time is modelled as ``overhead + sum(a + b*l + c*l**2)`` over its
    items, with a padded policy as ``overhead + n * (a + b*p + c*p**2)`` (p: the padded longest
    length); :meth:`fit` solves the non-negative least-squares problem over all observations,
    so the model is non-decreasing and valid under every policy. The overhead shifts every rank
    alike (balancing ignores it) but keeps launch and synchronisation time out of ``a``.

    policy / pad_multiple: as :func:`balance` takes them. degree: 1 (a + b*l) or 2.
    fit_overhead: fit the per-rank constant too (default). Raises InvalidArgumentError for a
    bad policy or degree.

    Example (every rank runs this on the all-gathered figures, and gets the same model)::

        calib = orchmllm.CostCalibration()
        for offsets, lengths, seconds in warmup_steps:   # the layout each rank processed
            calib.add_step(offsets, lengths, seconds)    # seconds: float[D], one per rank
        vision = calib.fit().cost                        # a QuadraticCost for balance()
    """

    def __init__(self, policy: str = "packed", degree: int = 2, fit_overhead: bool = True, *,
                 pad_multiple: Optional[int] = None) -> None:
        if not isinstance(policy, str):
            raise TypeError(f"policy must be a str, got {type(policy).__name__}")
        if not isinstance(fit_overhead, (bool, np.bool_)):
            raise TypeError(f"fit_overhead must be a bool, got {type(fit_overhead).__name__}")
        multiple = 1 if pad_multiple is None else _int("pad_multiple", pad_multiple)
        self._native = _orchmllm._CostCalibration(policy, multiple, _int("degree", degree),
                                                  bool(fit_overhead))

    def add_rank(self, lengths: Any, seconds: float) -> None:
        """One observation: a rank processed items of these lengths in ``seconds``."""
        self._native.add_rank(_int64_vector("lengths", lengths), _float("seconds", seconds))

    def add_step(self, offsets: Any, lengths: Any, seconds: Any) -> None:
        """One step: rank r processed items offsets[r] .. offsets[r+1]-1 of ``lengths`` (the
        stage's arrangement after balancing) in ``seconds[r]``."""
        offsets = _int64_vector("offsets", offsets)
        lengths = _int64_vector("lengths", lengths)
        if offsets.shape[0] == 0:
            raise ValueError("offsets must have D + 1 entries, got none")
        seconds = _float64_vector("seconds", seconds, offsets.shape[0] - 1)
        self._native.add_step(offsets, lengths, seconds)

    @property
    def observations(self) -> int:
        """Rank times added so far."""
        return int(self._native.observations)

    def fit(self) -> CalibrationResult:
        """The model: ``.cost`` (QuadraticCost), ``.overhead_seconds``, ``.rms_seconds``,
        ``.observations``. Raises InvalidArgumentError with fewer observations than unknowns."""
        return self._native.fit()


# The step API uses the helpers above, so it comes last.
from .step import (  # noqa: E402
    EncoderStage,
    LLMStage,
    LocalBatch,
    SplitOptions,
    StageDeclarations,
    make_step_metadata,
    plan_step,
)
from .context_parallel import (  # noqa: E402
    ContextParallelPlan,
    CpCost,
    Shard,
    context_parallel,
)
