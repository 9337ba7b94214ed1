"""Trace records: what the runtime observed, per sequence, decode step, layer and KV head.

These frozen records are the in-memory contract between `freekv_runtime` (producer) and `sim`/`dse`
(consumers). The on-disk encoding lives in `traces/format.py`; see README "Trace format".

Shapes use L = n_layers and H = n_kv_heads of the traced model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from traces.models import ModelSpec

__all__ = [
    "FORMAT_VERSION", "RunMetadata", "PrefillRecord", "StepRecord", "TimingClock", "movement_from_missed",
    "MultiContextRecord",
]


def _same_array(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Bit-exact equality (dtype, shape and bytes; NaNs compare by their bits)."""
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _same_nested(a: tuple[tuple[np.ndarray, ...], ...], b: tuple[tuple[np.ndarray, ...], ...]) -> bool:
    return len(a) == len(b) and all(
        len(la) == len(lb) and all(_same_array(x, y) for x, y in zip(la, lb, strict=True))
        for la, lb in zip(a, b, strict=True)
    )

# 2: STEP records also store fetched_tokens, evicted_tokens, refactorised (docs/trace_format.md)
# 3: PREFILL records may carry a multi-context record (documents, kept and recomputed tokens per layer)
FORMAT_VERSION = 3

TimingClock = Literal["cuda_event", "wall", "none"]


@dataclass(frozen=True)
class RunMetadata:
    """Everything needed to interpret (and reproduce) a trace.

    runtime: the configuration, keys `method` (a catalogue name, traces.catalogue; "full" in traces
        written before dense attention was named "dense"), `page_size`, `budget_tokens` (counts sink and
        window, see README), `sink_tokens`, `window_tokens`, `dense_layers` (the retrieval knobs,
        traces.retrieval_knobs), `knobs` (the method's own knobs its runtime reads; older traces hold
        `tau`, `group_pooling`, `page_summary` and `extra` instead), `measure_attention_mass`, `dtype`,
        `batch_size`. Read them with `method`, `retrieval` and `method_knobs`.
    task: task name and parameters (e.g. {"name": "passkey", "context_tokens": 4096, ...}).
    seeds: every seed used (e.g. {"task": 0, "sampling": 0}).
    device: e.g. "cpu" or "cuda:0 (NVIDIA A100-SXM4-40GB)".
    library_versions: e.g. {"torch": "2.13.0", "transformers": "5.23.0", "triton": "3.9.0"}.
    timing_clock: how `timings_s` in the records were measured ("cuda_event" on GPU, "wall" on CPU).
    """

    model: ModelSpec
    runtime: dict[str, Any]
    task: dict[str, Any]
    seeds: dict[str, int]
    device: str
    library_versions: dict[str, str]
    timing_clock: TimingClock
    created_utc: str
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def method(self) -> str:
        """The run's method by its current catalogue name (traces.catalogue.runtime_method)."""
        from traces.catalogue import runtime_method

        return runtime_method(self.runtime)

    @property
    def method_knobs(self) -> dict[str, Any]:
        """The method's own knobs the run used (traces.catalogue.runtime_knobs)."""
        from traces.catalogue import runtime_knobs

        return runtime_knobs(self.runtime)

    @property
    def retrieval(self) -> Any:
        """The run's retrieval knobs (traces.retrieval_knobs.RetrievalKnobs), or None where the metadata
        lacks one or they break the budget convention."""
        from traces.retrieval_knobs import RetrievalKnobs

        return RetrievalKnobs.from_runtime(self.runtime)


@dataclass(frozen=True)
class MultiContextRecord:
    """How a multi-context prompt was assembled from document KV caches (format 3).

    The prompt is prefix_tokens (a shared instruction, cached at its own positions), the documents
    (document_tokens[i] each, prefilled independently as a document cache stores them, then joined) and
    query_tokens (the user query, always computed). Per layer l: kept_tokens[l] document tokens loaded
    to the GPU and attended (the rest never leave the document cache), recomputed_tokens[l] document
    tokens whose K/V were recomputed over the joined context.
    """

    document_tokens: tuple[int, ...]
    prefix_tokens: int
    query_tokens: int
    kept_tokens: tuple[int, ...]
    recomputed_tokens: tuple[int, ...]

    def __post_init__(self) -> None:
        n_doc = sum(self.document_tokens)
        if not self.document_tokens or min(self.document_tokens) < 1:
            raise ValueError(f"document_tokens must be positive counts, got {self.document_tokens}")
        if self.prefix_tokens < 0 or self.query_tokens < 1:
            raise ValueError(f"prefix_tokens must be >= 0 and query_tokens >= 1, got {self.prefix_tokens}, "
                             f"{self.query_tokens}")
        if len(self.kept_tokens) != len(self.recomputed_tokens) or not self.kept_tokens:
            raise ValueError("kept_tokens and recomputed_tokens need one count per layer each")
        for name in ("kept_tokens", "recomputed_tokens"):
            values = getattr(self, name)
            if min(values) < 0 or max(values) > n_doc:
                raise ValueError(f"{name} must be within 0..{n_doc} (the document tokens), got {values}")

    @property
    def total_document_tokens(self) -> int:
        return sum(self.document_tokens)

    @property
    def sequence_ratio(self) -> float:
        """Share of the documents' KV loaded to the GPU, mean over layers (SamKV's 'sequence ratio')."""
        return float(np.mean(self.kept_tokens)) / self.total_document_tokens

    @property
    def recompute_ratios(self) -> np.ndarray:
        """(L,) share of the document tokens recomputed at each layer."""
        return np.asarray(self.recomputed_tokens, dtype=np.float64) / self.total_document_tokens

    def to_dict(self) -> dict[str, Any]:
        return {"document_tokens": list(self.document_tokens), "prefix_tokens": self.prefix_tokens,
                "query_tokens": self.query_tokens, "kept_tokens": list(self.kept_tokens),
                "recomputed_tokens": list(self.recomputed_tokens)}

    @classmethod
    def from_dict(cls, doc: Any) -> MultiContextRecord:
        """ValueError naming the field when `doc` is not a multi-context record."""
        if not isinstance(doc, dict):
            raise ValueError(f"multi-context record must be a JSON object, got {type(doc).__name__}")
        ints = {}
        for name in ("document_tokens", "kept_tokens", "recomputed_tokens"):
            value = doc.get(name)
            if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                                      for x in value):
                raise ValueError(f"multi-context record field {name!r} must be a list of integers")
            ints[name] = tuple(value)
        for name in ("prefix_tokens", "query_tokens"):
            value = doc.get(name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"multi-context record field {name!r} must be an integer")
            ints[name] = value
        return cls(**ints)


@dataclass(frozen=True)
class PrefillRecord:
    """One prompt of one sequence was prefilled.

    initial_selected[l][h]: page ids the GPU cache holds after prefill (top pages for the last prompt
        query, sink and window pages excluded); empty for dense layers.
    timings_s: measured per-operation time of the prefill ("prefill_total", ...), clock per metadata.
    multi_context: how the prompt was joined from document caches (format 3; None: a single context).
    """

    sequence: int
    prompt_tokens: int
    initial_selected: tuple[tuple[np.ndarray, ...], ...]
    timings_s: dict[str, float] = field(default_factory=dict)
    multi_context: MultiContextRecord | None = None

    def identical(self, other: PrefillRecord) -> bool:
        """Bit-exact equality of every field (arrays by dtype, shape and bytes)."""
        return (
            (self.sequence, self.prompt_tokens, self.timings_s, self.multi_context)
            == (other.sequence, other.prompt_tokens, other.timings_s, other.multi_context)
            and _same_nested(self.initial_selected, other.initial_selected)
        )


@dataclass(frozen=True)
class StepRecord:
    """One decode step of one sequence.

    step: 0 for the first generated token of the sequence.
    context_tokens: tokens in the KV cache when this step attends (prompt + generated so far, including
        the token being decoded).
    similarity: (L, H) float32, mean over the group's query heads of cos(q_t, q_{t-1}) (same layer,
        post-RoPE); NaN where undefined (dense layers; step 0 uses the last prompt query as q_{t-1}).
    corrected: (L, H) bool, the head was corrected at this step (selection and recall with q_t ran
        synchronously before attention). Always False for dense layers.
    selected[l][h]: int32 sorted page ids chosen by this step's selection with q_t (sink and window
        pages excluded). Corrected heads attend them at this step; the others at the next step.
        Empty for dense layers.
    missed[l][h]: int32 sorted page ids of `selected[l][h]` not resident in the GPU cache, i.e. the pages
        recalled over the host link (synchronously if corrected, in the background otherwise).
    attended_tokens: (L, H) int32, tokens attended at this step (sink + pages + window, or the whole
        context for dense layers).
    timings_s: measured per-operation time of this step, summed over layers (keys such as "qkv",
        "correction_check", "select", "recall_sync", "recall_background", "attention", "ffn",
        "lm_head", "step_total"), clock per metadata.
    attention_mass: optional (L, H) float32, share of the dense attention probability mass (mean over
        the group's query heads) that falls on the attended tokens; only when measured.
    fetched_tokens: (L, H) int32 (format 2), tokens this step copied host -> GPU for that head (recalled
        or prefetched; synchronously where `corrected`, in the background elsewhere). Format-1 traces
        read as missed pages x meta.runtime["page_size"] (what FreeKV's page recall moves), or None if
        that metadata has no page_size.
    evicted_tokens: (L, H) int32 (format 2), tokens the head's GPU cache gave up at this step (dropped
        for good by a dropping method, replaced in a retrieval method's cache). Format 1: zeros.
    refactorised: (L, H) bool (format 2), the head's compressed state was rebuilt at this step
        (ShadowKV's re-factorisation). Format 1: False.
    The three are optional: a record written with None reads back None (format 2 stores which are
    present); `movement(page_size)` gives the recorded values or, for None, the format-1 derivation.
    """

    sequence: int
    step: int
    context_tokens: int
    similarity: np.ndarray
    corrected: np.ndarray
    selected: tuple[tuple[np.ndarray, ...], ...]
    missed: tuple[tuple[np.ndarray, ...], ...]
    attended_tokens: np.ndarray
    timings_s: dict[str, float] = field(default_factory=dict)
    attention_mass: np.ndarray | None = None
    fetched_tokens: np.ndarray | None = None
    evicted_tokens: np.ndarray | None = None
    refactorised: np.ndarray | None = None

    @property
    def n_layers(self) -> int:
        return int(self.similarity.shape[0])

    @property
    def n_kv_heads(self) -> int:
        return int(self.similarity.shape[1])

    def selected_counts(self) -> np.ndarray:
        """(L, H) int32: number of selected pages."""
        return np.array([[len(h) for h in layer] for layer in self.selected], dtype=np.int32)

    def missed_counts(self) -> np.ndarray:
        """(L, H) int32: number of recalled (missed) pages."""
        return np.array([[len(h) for h in layer] for layer in self.missed], dtype=np.int32)

    def movement(self, page_size: int | None) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
        """(fetched_tokens, evicted_tokens, refactorised), each (L, H): the recorded arrays, or where a
        field is None, `movement_from_missed` (FreeKV's page recall: missed pages x page_size, nothing
        evicted, nothing rebuilt); fetched stays None if it is None and page_size is None."""
        fetched, evicted, rebuilt = movement_from_missed(self.missed_counts(), page_size)
        return (
            fetched if self.fetched_tokens is None else self.fetched_tokens,
            evicted if self.evicted_tokens is None else self.evicted_tokens,
            rebuilt if self.refactorised is None else self.refactorised,
        )

    def identical(self, other: StepRecord) -> bool:
        """Bit-exact equality of every field (arrays by dtype, shape and bytes; NaN bits included)."""
        return (
            (self.sequence, self.step, self.context_tokens, self.timings_s)
            == (other.sequence, other.step, other.context_tokens, other.timings_s)
            and all(
                _same_array(getattr(self, n), getattr(other, n))
                for n in ("similarity", "corrected", "attended_tokens", "attention_mass", "fetched_tokens",
                          "evicted_tokens", "refactorised")
            )
            and _same_nested(self.selected, other.selected)
            and _same_nested(self.missed, other.missed)
        )


def movement_from_missed(
    missed_counts: np.ndarray, page_size: int | None
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """What a record without movement fields (format 1, or format 2 written with None) is taken to have
    moved: fetched = missed pages x page_size int32 (None if page_size is None), evicted zeros int32,
    refactorised all False; each shaped like `missed_counts` (L, H). ValueError if a product leaves int32."""
    counts = np.asarray(missed_counts, dtype=np.int64)
    fetched = None
    if page_size is not None:
        tokens = counts * int(page_size)
        if tokens.size and not 0 <= tokens.min() <= tokens.max() < 1 << 31:
            raise ValueError(
                f"missed pages x page_size {page_size} = {tokens.max()} tokens does not fit int32 "
                "fetched_tokens"
            )
        fetched = tokens.astype(np.int32)
    return fetched, np.zeros(counts.shape, np.int32), np.zeros(counts.shape, bool)
