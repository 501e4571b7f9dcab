"""A multimodal training step: stage declarations, the step's metadata and :func:`plan_step`.

One step of a multimodal LLM has K + 1 stages: one encoder per modality (vision, audio, ...)
and the LLM. Every rank declares the same stages once (:class:`EncoderStage`,
:class:`LLMStage`, :class:`StageDeclarations`), describes what it sampled every step as a
:class:`LocalBatch` (numpy arrays: its samples' text tokens, its sub-items' modality, parent
sample, encoder length, input rows, LLM tokens, segments), and, after the metadata all-gather
(:func:`make_step_metadata` in one process, ``orchmllm.torch.gather_step_metadata`` over a
process group), calls :func:`plan_step`: every stage balanced with its own cost model and
mapped onto the cluster, and every transfer of the step (encoder inputs, text, encoder outputs
along the composed route, their gradients) as the arrays of ``all_to_all_single``. The C++
model is docs/orchestrator.md; the Python one docs/python.md.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Union, cast

import numpy as np

from . import _orchmllm
from ._orchmllm import InvalidArgumentError, LinearCost, QuadraticCost, StepMetadata, StepPlan

__all__ = [
    "EncoderStage",
    "LLMStage",
    "LocalBatch",
    "SplitOptions",
    "StageDeclarations",
    "make_step_metadata",
    "plan_step",
]

StageCost = Union[str, LinearCost, QuadraticCost]
CostArg = Union[str, LinearCost, QuadraticCost, Callable[[np.ndarray], Any]]

_INT64_MAX = np.iinfo(np.int64).max


def _vec(name: str, values: Any, size: Optional[int] = None) -> np.ndarray:
    from . import _int64_vector
    return _int64_vector(name, values, size)


def _is_callable(cost: Any) -> bool:
    """A Python cost callable (the cost objects are callable too, but the library's own)."""
    return callable(cost) and not isinstance(cost, (str, LinearCost, QuadraticCost))


def _fn(cost: CostArg) -> Callable[[np.ndarray], Any]:
    """``cost`` as the Python callable it is (after :func:`_is_callable`)."""
    return cast(Callable[[np.ndarray], Any], cost)


def _check_cost(stage: str, cost: Any) -> CostArg:
    if isinstance(cost, (str, LinearCost, QuadraticCost)) or callable(cost):
        return cost  # type: ignore[no-any-return]
    raise TypeError(
        f"stage '{stage}': cost must be a str ('linear', 'quadratic:A,B[,C]'), a LinearCost, a"
        f" QuadraticCost or a callable, got {type(cost).__name__}")


def _check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


class SplitOptions:
    """Splitting of segmented sub-items for one encoder stage (the C++ ``split_options``).

    A sub-item of S > 1 segments (video temporal groups, audio windows: parts its encoder
    processes independently) may be cut at segment boundaries into pieces encoded on
    different ranks. min_piece_segments: smallest piece; max_pieces: most pieces per sub-item
    (None: no limit); rounds, tolerance: the splitting search's rounds and stopping tolerance
    (docs/algorithms.md, "Splitting segmented items"). Plain values; validated by the library
    when the declarations are built (InvalidArgumentError).
    """

    def __init__(self, min_piece_segments: int = 1, max_pieces: Optional[int] = None,
                 rounds: int = 4, tolerance: float = 0.001) -> None:
        from . import _float, _int
        self.min_piece_segments = _int("min_piece_segments", min_piece_segments)
        self.max_pieces = _INT64_MAX if max_pieces is None else _int("max_pieces", max_pieces)
        self.rounds = _int("rounds", rounds)
        self.tolerance = _float("tolerance", tolerance)

    def __repr__(self) -> str:
        return (f"SplitOptions(min_piece_segments={self.min_piece_segments}, max_pieces="
                f"{self.max_pieces}, rounds={self.rounds}, tolerance={self.tolerance})")


class _Stage:
    """What an encoder stage and the LLM stage share: the arguments of :func:`~orchmllm.balance`
    (cost, policy, algorithm, pad_multiple, cap, cap_bytes, min_items, max_items) plus the
    mapping of the stage's bins onto ranks (one of ``orchmllm.MAPPINGS``)."""

    def __init__(self, name: str, cost: Any, policy: str, algorithm: str,
                 pad_multiple: Optional[int], cap: Optional[int], cap_bytes: Optional[int],
                 min_items: int, max_items: Optional[int], mapping: str,
                 gap_tolerance: float, micro_batches: Union[None, int, str],
                 max_tokens_per_micro_batch: Optional[int], micro_batch_multiple: int,
                 min_micro_batches: int, sync: Optional[str]) -> None:
        from . import _float, _int, _micro_batch_args, _optional_int
        self.name = _check_str("name", name)
        self.cost: CostArg = _check_cost(name, cost)
        self.policy = _check_str("policy", policy)
        self.algorithm = _check_str("algorithm", algorithm)
        self.pad_multiple = 1 if pad_multiple is None else _int("pad_multiple", pad_multiple)
        self.cap = _optional_int("cap", cap)
        self.cap_bytes = _optional_int("cap_bytes", cap_bytes)
        self.min_items = _int("min_items", min_items)
        self.max_items = _optional_int("max_items", max_items)
        self.mapping = _check_str("mapping", mapping)
        self.gap_tolerance = _float("gap_tolerance", gap_tolerance)
        self.micro_batches = micro_batches
        self.max_tokens_per_micro_batch = max_tokens_per_micro_batch
        self.micro_batch_multiple = micro_batch_multiple
        self.min_micro_batches = min_micro_batches
        self.sync = sync
        self._micro = _micro_batch_args(micro_batches, max_tokens_per_micro_batch,
                                        micro_batch_multiple, min_micro_batches, sync)

    def _common(self) -> Dict[str, Any]:
        # A callable's values depend on the step's lengths: plan_step evaluates it and passes
        # its table; the declarations hold cost(l) = l meanwhile (a placeholder).
        cost = "linear" if _is_callable(self.cost) else self.cost
        return dict(name=self.name, cost=cost, policy=self.policy,
                    pad_multiple=self.pad_multiple, algorithm=self.algorithm, cap=self.cap,
                    cap_bytes=self.cap_bytes, min_items=self.min_items,
                    max_items=self.max_items, mapping=self.mapping,
                    gap_tolerance=self.gap_tolerance, micro=self._micro)


class EncoderStage(_Stage):
    """One encoder stage (one modality; modality k is the k-th encoder of the declarations).

    name: unique, non-empty. cost / policy / algorithm / pad_multiple / cap / cap_bytes /
    min_items / max_items: as :func:`orchmllm.balance` takes them, for the stage's sub-items
    by encoder length (a callable is evaluated by :func:`plan_step`, once per step, on the
    step's distinct lengths, segment lengths and padded lengths). mapping: how the
    balanced bins become ranks (``orchmllm.MAPPINGS``, default "transport": fewest input bytes
    across nodes). input_row_bytes / output_row_bytes (>= 1): bytes of one input row (a patch,
    a mel frame) and one output row (one LLM token), for the mapping's byte counts (the
    routes are returned in rows). split: a :class:`SplitOptions` (or True for the defaults)
    to let segmented sub-items be cut into pieces encoded on several ranks. gap_tolerance
    (>= 0, default 0): the stage's "automatic" balancing stops within lower bound * (1 + it), as
    :func:`orchmllm.balance` takes it. micro_batches / max_tokens_per_micro_batch /
    micro_batch_multiple / min_micro_batches / sync: the stage's micro-batches, as
    :func:`orchmllm.balance` takes them (with any of them the stage's items go to cells (rank,
    micro-batch), each rank receiving its items grouped by micro-batch, in run order:
    :meth:`StepPlan.micro_batch`); needs a built-in algorithm and no split.

    Plain values checked for type here (TypeError); the library checks the values when
    :class:`StageDeclarations` is built (InvalidArgumentError).
    """

    def __init__(self, name: str, cost: Any = "linear", policy: str = "packed",
                 algorithm: str = "automatic", *, pad_multiple: Optional[int] = None,
                 cap: Optional[int] = None, cap_bytes: Optional[int] = None, min_items: int = 0,
                 max_items: Optional[int] = None, mapping: str = "transport",
                 input_row_bytes: int = 1, output_row_bytes: int = 1,
                 split: Union[None, bool, SplitOptions] = None,
                 gap_tolerance: float = 0.0, micro_batches: Union[None, int, str] = None,
                 max_tokens_per_micro_batch: Optional[int] = None, micro_batch_multiple: int = 1,
                 min_micro_batches: int = 1, sync: Optional[str] = None) -> None:
        from . import _int
        super().__init__(name, cost, policy, algorithm, pad_multiple, cap, cap_bytes, min_items,
                         max_items, mapping, gap_tolerance, micro_batches,
                         max_tokens_per_micro_batch, micro_batch_multiple, min_micro_batches, sync)
        self.input_row_bytes = _int("input_row_bytes", input_row_bytes)
        self.output_row_bytes = _int("output_row_bytes", output_row_bytes)
        if split is True:
            split = SplitOptions()
        if split is not None and split is not False and not isinstance(split, SplitOptions):
            raise TypeError(
                f"split must be a SplitOptions, True or None, got {type(split).__name__}")
        self.split: Optional[SplitOptions] = split if isinstance(split, SplitOptions) else None


class LLMStage(_Stage):
    """The LLM stage: whole samples, by sequence length (text tokens + the LLM tokens of its
    sub-items). Arguments as :class:`EncoderStage`'s (micro-batches included: a micro-batch's
    tokens are its samples' sequence lengths after the policy's padding); text_row_bytes (>= 1):
    bytes of one text row (e.g. 8 for an int32 id and an int32 label), for the mapping's byte
    counts."""

    def __init__(self, name: str = "llm", cost: Any = "linear", policy: str = "packed",
                 algorithm: str = "automatic", *, pad_multiple: Optional[int] = None,
                 cap: Optional[int] = None, cap_bytes: Optional[int] = None, min_items: int = 0,
                 max_items: Optional[int] = None, mapping: str = "transport",
                 text_row_bytes: int = 1, gap_tolerance: float = 0.0,
                 micro_batches: Union[None, int, str] = None,
                 max_tokens_per_micro_batch: Optional[int] = None, micro_batch_multiple: int = 1,
                 min_micro_batches: int = 1, sync: Optional[str] = None) -> None:
        from . import _int
        super().__init__(name, cost, policy, algorithm, pad_multiple, cap, cap_bytes, min_items,
                         max_items, mapping, gap_tolerance, micro_batches,
                         max_tokens_per_micro_batch, micro_batch_multiple, min_micro_batches, sync)
        self.text_row_bytes = _int("text_row_bytes", text_row_bytes)


class StageDeclarations:
    """The stages of a step, declared once and identical on every rank: ``encoders[k]`` is
    modality k's stage, ``llm`` the LLM's. Builds and validates the library's
    ``stage_declarations`` at construction, O(K). Raises TypeError for arguments of the wrong
    type; InvalidArgumentError for a malformed cost or policy text, an unknown algorithm or
    mapping, duplicate or empty names, row widths < 1, cap and cap_bytes both
    given, bad split options."""

    def __init__(self, encoders: Sequence[EncoderStage], llm: Optional[LLMStage] = None) -> None:
        self.encoders: List[EncoderStage] = list(encoders)
        self.llm = LLMStage() if llm is None else llm
        native = _orchmllm._Declarations()
        for e in self.encoders:
            if not isinstance(e, EncoderStage):
                raise TypeError(f"encoders must hold EncoderStage, got {type(e).__name__}")
            split = None if e.split is None else (e.split.min_piece_segments, e.split.max_pieces,
                                                  e.split.rounds, e.split.tolerance)
            native.add_encoder(**e._common(), input_row_bytes=e.input_row_bytes,
                               output_row_bytes=e.output_row_bytes, split=split)
        if not isinstance(self.llm, LLMStage):
            raise TypeError(f"llm must be an LLMStage, got {type(self.llm).__name__}")
        native.set_llm(**self.llm._common(), text_row_bytes=self.llm.text_row_bytes)
        native.validate()
        self._native = native
        # A callable cost enters the fingerprint by its values at the library's probe lengths.
        probes = np.array(_orchmllm._fingerprint_probe_lengths(), np.int64)
        self._probes = [
            i.to_bytes(2, "little") + np.asarray(_fn(s.cost)(probes.copy()), np.float64).tobytes()
            for i, s in enumerate([*self.encoders, self.llm]) if _is_callable(s.cost)]

    @property
    def num_encoders(self) -> int:
        """K."""
        return len(self.encoders)

    @property
    def fingerprint(self) -> int:
        """64-bit fingerprint of the declarations: the library's (``orchmllm::fingerprint``:
        names, costs, policies, options, row widths, split options), and for a stage whose cost
        is a callable, its values at the library's twelve probe lengths. Equal on every rank
        that declared the same stages. O(K)."""
        fp = int(self._native.fingerprint)
        if not self._probes:
            return fp
        h = hashlib.blake2b(fp.to_bytes(8, "little") + b"".join(self._probes), digest_size=8)
        return int.from_bytes(h.digest(), "little")


class LocalBatch:
    """What one rank sampled for a step (the C++ ``local_batch``), as int64 arrays.

    text_tokens: int64[samples], every sample's own text tokens (no placeholders). Sub-items
    (images, clips), in the order they appear in their samples: modality (encoder index k),
    parent (index of its sample on this rank), encoder_length (what the encoder's cost reads),
    input_rows (rows shipped to the encoder), llm_tokens (output rows it becomes in the
    sequence), segments (S >= 1 equal parts its encoder processes independently; default 1).
    All sub-item arrays have one entry per sub-item (any may be empty). loss_tokens:
    int64[samples], the tokens of every sample that carry a label (what a per-token-mean loss
    divides by: :attr:`StepPlan.loss_tokens`); None (the default): its text tokens. Raises
    TypeError / ValueError for arrays that are not 1-D integers of matching sizes; the values
    (negative counts, a parent that does not exist, ...) are checked by
    :func:`make_step_metadata`.
    """

    def __init__(self, text_tokens: Any, modality: Any = (), parent: Any = (),
                 encoder_length: Any = (), input_rows: Any = (), llm_tokens: Any = (),
                 segments: Any = None, loss_tokens: Any = None) -> None:
        self.text_tokens = _vec("text_tokens", text_tokens)
        self.modality = _vec("modality", modality)
        m = self.modality.shape[0]
        self.parent = _vec("parent", parent, m)
        self.encoder_length = _vec("encoder_length", encoder_length, m)
        self.input_rows = _vec("input_rows", input_rows, m)
        self.llm_tokens = _vec("llm_tokens", llm_tokens, m)
        self.segments = (np.ones(m, np.int64) if segments is None
                         else _vec("segments", segments, m))
        self.loss_tokens: Optional[np.ndarray] = (
            None if loss_tokens is None
            else _vec("loss_tokens", loss_tokens, self.text_tokens.shape[0]))

    @property
    def num_samples(self) -> int:
        """Samples of this rank."""
        return int(self.text_tokens.shape[0])

    @property
    def num_sub_items(self) -> int:
        """Sub-items of this rank."""
        return int(self.modality.shape[0])

    @property
    def num_loss_tokens(self) -> int:
        """Entries of loss_tokens: 0 (None) or the sample count."""
        return 0 if self.loss_tokens is None else int(self.loss_tokens.shape[0])

    def words(self) -> np.ndarray:
        """The batch as one int64 array (text tokens, the six sub-item arrays, then the loss
        tokens when given), what the metadata all-gather sends; :meth:`from_words` reads it
        back."""
        loss = [] if self.loss_tokens is None else [self.loss_tokens]
        return np.concatenate([self.text_tokens, self.modality, self.parent,
                               self.encoder_length, self.input_rows, self.llm_tokens,
                               self.segments, *loss]).astype(np.int64)

    @staticmethod
    def from_words(words: np.ndarray, samples: int, sub_items: int,
                   loss_tokens: int = 0) -> "LocalBatch":
        """The inverse of :meth:`words` (loss_tokens: :attr:`num_loss_tokens`, 0 or samples).
        Raises TypeError / ValueError when ``words`` is not a 1-D integer array of ``samples +
        6 * sub_items + loss_tokens`` entries or loss_tokens is neither."""
        from . import _int
        s, m = _int("samples", samples), _int("sub_items", sub_items)
        n = _int("loss_tokens", loss_tokens)
        words = _vec("words", words)
        if s < 0 or m < 0 or n not in (0, s) or words.shape[0] != s + 6 * m + n:
            raise ValueError(f"words has {words.shape[0]} entries; {s} samples, {m} sub-items"
                             f" and {n} loss-token counts (0 or samples) need samples + 6 *"
                             f" sub_items + loss_tokens = {s + 6 * m + n}")
        text, modality, parent, length, rows, tokens, segments, loss = np.split(
            words, np.cumsum([s] + [m] * 6))
        return LocalBatch(text, modality, parent, length, rows, tokens, segments,
                          loss_tokens=loss if n else None)


def make_step_metadata(batches: Sequence[LocalBatch], num_encoders: int) -> StepMetadata:
    """The step's global metadata from every rank's :class:`LocalBatch` (rank r = batches[r]),
    as the C++ ``make_step_metadata`` builds it (in one process: simulators, tests, and after
    ``orchmllm.torch.gather_step_metadata``'s all-gather). O(samples + sub-items);
    deterministic. Raises InvalidArgumentError naming the rank and the fault for a malformed
    batch (negative counts, a modality outside [0, num_encoders), a parent sample that does not
    exist, segments that do not divide the sizes), when ``batches`` is empty or num_encoders is
    outside [0, 1024]."""
    from . import _int
    k = _int("num_encoders", num_encoders)
    for b in batches:
        if not isinstance(b, LocalBatch):
            raise TypeError(f"batches must hold LocalBatch, got {type(b).__name__}")

    def cat(xs: List[np.ndarray]) -> np.ndarray:
        return (np.ascontiguousarray(np.concatenate(xs), dtype=np.int64) if xs
                else np.zeros(0, np.int64))

    return _orchmllm._make_step_metadata(
        np.array([b.num_samples for b in batches], np.int64), cat([b.text_tokens for b in batches]),
        np.array([b.num_sub_items for b in batches], np.int64),
        cat([b.modality for b in batches]), cat([b.parent for b in batches]),
        cat([b.encoder_length for b in batches]), cat([b.input_rows for b in batches]),
        cat([b.llm_tokens for b in batches]), cat([b.segments for b in batches]), k,
        np.array([b.num_loss_tokens for b in batches], np.int64),
        cat([b.loss_tokens for b in batches if b.loss_tokens is not None]))


def plan_step(decl: StageDeclarations, meta: StepMetadata, gpus_per_node: int = 0, *,
              node_of_rank: Any = None, rank: Optional[int] = None,
              parallel_stages: bool = True) -> StepPlan:
    """Plans one step: every stage balanced and mapped, and ``rank``'s routes of every transfer.

    decl: the :class:`StageDeclarations`; meta: the step's :class:`StepMetadata` (D ranks).
    gpus_per_node: nodes are consecutive blocks of that many ranks (0: one node); or
    node_of_rank: int64[D], every rank's node (numbered in order of first appearance).
    rank: the rank whose routes are built inside the planning call (None: none; others are
    built on demand by :meth:`StepPlan.all_to_all`, the same arrays). parallel_stages: plan the
    encoder stages on their own threads (the same plans either way).

    The library's ``plan_step`` (docs/orchestrator.md) with the direct schedule (one
    ``all_to_all_single`` per transfer), run with the GIL released: Π_M (LLM, samples by
    sequence length), Π_E_k per encoder (sub-items by encoder length, or pieces when the stage
    splits), the lifts L_k, the composed routes L_k ∘ Π_E_k⁻¹ (encoder outputs go straight to
    their sample's LLM rank) and their inverses (the gradients). Deterministic: the same
    inputs give the same plans and routes on every rank, as the C++ API does. Cost: each
    stage's balancer and mapper (milliseconds at thousands of ranks), plus O(n log n) for the
    routes of ``rank``.

    Raises TypeError for arguments of the wrong type; InvalidArgumentError when the metadata's
    modality count is not K, for a bad rank or topology, segmented sub-items on a padded
    stage; InfeasibleError naming the stage when its caps or counts cannot be met.
    """
    from . import _int, _optional_int
    if not isinstance(decl, StageDeclarations):
        raise TypeError(f"decl must be a StageDeclarations, got {type(decl).__name__}")
    if not isinstance(meta, StepMetadata):
        raise TypeError(f"meta must be a StepMetadata, got {type(meta).__name__}")
    nodes = None if node_of_rank is None else _vec("node_of_rank", node_of_rank)
    return _orchmllm._plan_step(decl._native, meta, _int("gpus_per_node", gpus_per_node), nodes,
                                _optional_int("rank", rank), bool(parallel_stages),
                                _cost_tables(decl, meta))


def _cost_tables(decl: StageDeclarations, meta: StepMetadata) -> List[Any]:
    """The values of the stages' cost callables on this step's lengths (K + 1 entries, None
    for a stage without one; an empty list when no stage has one). An encoder's lengths are
    its sub-items' encoder lengths and segment lengths, the LLM's the sequence lengths; each
    with its padded lengths. Checked as balance() checks a callable's values."""
    from . import _cost_table
    stages: List[_Stage] = [*decl.encoders, decl.llm]
    if not any(_is_callable(s.cost) for s in stages):
        return []
    if meta.num_encoders != decl.num_encoders:
        raise InvalidArgumentError(
            f"metadata has {meta.num_encoders} modalities, the declarations "
            f"{decl.num_encoders} encoder stages")
    tables: List[Any] = []
    for k, stage in enumerate(stages):
        if not _is_callable(stage.cost):
            tables.append(None)
            continue
        if k < decl.num_encoders:
            m = meta.modality(k)
            lengths = np.concatenate([m["encoder_length"], m["encoder_length"] // m["segments"]])
        else:
            lengths = meta.sequence_lengths()
        lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        tables.append(_cost_table(_fn(stage.cost), lengths, stage.policy, stage.pad_multiple))
    return tables
