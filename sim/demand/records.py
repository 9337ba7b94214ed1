"""The two forms of recall demand: `Demand` (per source sequence, on the target model's shape) and
`BatchDemand` (per (step, layer) totals over a batch, what the engine and methods consume); the layer and
head maps of a transplant. The rules: sim/demand/__init__.py. Never imports torch."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.errors import SimInputError
from traces.catalogue import DENSE

__all__ = ["Demand", "BatchDemand", "DENSE_POLICY", "layer_map", "head_map", "RagShares"]

DENSE_POLICY = DENSE  # the runtime's dense-attention policy (traces.catalogue)


@dataclass(frozen=True)
class RagShares:
    """What a multi-context trace recorded of how its prompts were joined (traces.records.
    MultiContextRecord, mean over its sequences), as shares that scale to any prompt length:
    documents per request, document_share of the prompt's tokens in documents, sequence_ratio (share of
    the document tokens kept on the GPU, mean over layers) and recompute_ratio (L,) per target layer."""

    documents: float
    document_share: float
    sequence_ratio: float
    recompute_ratio: np.ndarray


@dataclass(frozen=True)
class Demand:
    """Per-sequence demand on the target shape (L = target layers, H = target KV heads).

    corrected[i]: (S_i, L, H) bool; fetch_ratio[i]: (S_i, L, H) float32 >= 0 (module docstring; at most 1
    for page-recall methods, FreeKV's missed / selected pages);
    similarity[i]: (S_i, L, H) float32 (NaN where undefined) or None for synthetic demand.
    evict_ratio[i]: (S_i, L, H) float32 >= 0, evicted tokens over the capacity; refactorised[i]: (S_i, L,
    H) bool; both None when nothing was recorded (synthetic demand: read as zeros).
    method: the runtime policy whose demand this is (None: synthetic, any method may replay it;
    DENSE_POLICY: dense attention, no recall demand, see `dense_attention`).
    retrieval_share: share of retrieval KV heads RazorAttention's probe found on the traced model (all
    layers); retrieval_share_per_layer (L,) float64: per target layer, the share of its source layer
    (module docstring, "probe"); both None when the trace records no probe.
    timings_s[i]: per step measured timings (list of dicts) or empty; timing_clock per trace metadata.
    skipped_steps[i]: the first steps of source sequence i that fit the trace's budget and were left out
    (step 0 of the demand is the trace's step skipped_steps[i]); empty for synthetic demand.
    """

    model: str
    corrected: tuple[np.ndarray, ...]
    fetch_ratio: tuple[np.ndarray, ...]
    similarity: tuple[np.ndarray, ...] | None
    source: str
    mapped_from: str | None = None
    synthetic: str | None = None
    source_tau: float | None = None
    timing_clock: str = "none"
    timings_s: tuple[tuple[dict[str, float], ...], ...] = field(default_factory=tuple)
    source_runtime: dict = field(default_factory=dict)
    skipped_steps: tuple[int, ...] = ()  # per sequence: leading trace steps within its budget, not kept
    recorded_context_tokens: int | None = None  # the longest context the trace recorded (None: synthetic)
    method: str | None = None
    evict_ratio: tuple[np.ndarray, ...] | None = None
    refactorised: tuple[np.ndarray, ...] | None = None
    retrieval_share: float | None = None
    retrieval_share_per_layer: np.ndarray | None = None
    rag: RagShares | None = None  # multi-context traces: how the prompts were joined

    @property
    def dense_attention(self) -> bool:
        """True for a trace of dense attention: it holds no selection or recall demand (module docstring);
        its policy as recorded is `source_runtime["method"]`."""
        return self.method == DENSE_POLICY

    @property
    def n_layers(self) -> int:
        return int(self.corrected[0].shape[1])

    @property
    def n_kv_heads(self) -> int:
        return int(self.corrected[0].shape[2])

    @property
    def n_steps(self) -> tuple[int, ...]:
        return tuple(int(c.shape[0]) for c in self.corrected)

    def label(self) -> str:
        if self.synthetic:
            return f"synthetic({self.synthetic})"
        if self.mapped_from:
            return f"{self.source} (mapped from {self.mapped_from} onto {self.model})"
        return self.source


@dataclass(frozen=True)
class BatchDemand:
    """Per (step, layer) totals over the batch and KV heads; S = cfg.output_tokens, L target layers.

    context_tokens: (S,) int64, tokens attended over at step s (input + s + 1).
    candidate_pages: (S,) int64 pages selection scores per (sequence, head): ceil(context / p) - sink
        pages - window pages, at least 0 (module docstring).
    over_budget: (S,) bool, the context no longer fits the budget (ceil(context / p) > budget pages):
        only these steps check, select and recall.
    selected_per_head: (S,) int64 pages selected per (sequence, head): selected_pages past the budget,
        0 within it.
    corrected_heads: (S, L) int64 corrected (sequence, head) pairs; any_corrected: (S, L) bool.
    selected_pages: (S, L) int64 selected (sequence, head, page) total.
    missed_sync: (S, L) int64 missed pages of corrected heads; missed_bg: of the other heads.
    fetched_sync_tokens / fetched_bg_tokens: (S, L) int64 tokens copied host -> GPU for corrected heads /
        the other heads (the fetch ratio times the target's capacity, budget - sink - window tokens).
    evicted_tokens: (S, L) int64 tokens the GPU caches gave up; refactorised_heads: (S, L) int64
        (sequence, head) pairs whose compressed state was rebuilt.
    dense_layer: (L,) bool, layers kept dense by the config (no demand there).
    method: the runtime policy whose demand this is (None: synthetic or no demand).
    """

    context_tokens: np.ndarray
    candidate_pages: np.ndarray
    over_budget: np.ndarray
    selected_per_head: np.ndarray
    corrected_heads: np.ndarray
    any_corrected: np.ndarray
    selected_pages: np.ndarray
    missed_sync: np.ndarray
    missed_bg: np.ndarray
    dense_layer: np.ndarray
    batch: int
    label: str
    fetched_sync_tokens: np.ndarray | None = None
    fetched_bg_tokens: np.ndarray | None = None
    evicted_tokens: np.ndarray | None = None
    refactorised_heads: np.ndarray | None = None
    method: str | None = None

    def __post_init__(self) -> None:  # hand-built demands (tests) get zeros for the movement fields
        zeros = np.zeros_like(np.asarray(self.missed_sync, dtype=np.int64))
        for name in ("fetched_sync_tokens", "fetched_bg_tokens", "evicted_tokens", "refactorised_heads"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, zeros.copy())

    @property
    def missed_total(self) -> np.ndarray:
        return self.missed_sync + self.missed_bg

    @property
    def fetched_tokens(self) -> np.ndarray:
        """(S, L) int64 tokens fetched, corrected and other heads together."""
        return self.fetched_sync_tokens + self.fetched_bg_tokens


def layer_map(n_target: int, n_source: int, source_dense: set[int] | None = None) -> np.ndarray:
    """(n_target,) source layer for each target layer: round(l * (Ls-1)/(Lt-1)), skipping dense ones."""
    if n_target == 1:
        base = np.zeros(1, dtype=np.int64)
    else:
        base = np.rint(np.arange(n_target) * (n_source - 1) / (n_target - 1)).astype(np.int64)
    dense = source_dense or set()
    usable = [s for s in range(n_source) if s not in dense]
    if not usable:
        raise SimInputError("the trace has no compressed (non-dense) layer to take demand from")
    return np.array([s if s not in dense else min(usable, key=lambda u: (abs(u - s), u)) for s in base])


def head_map(n_target: int, n_source: int) -> np.ndarray:
    """(n_target,) source KV head for each target KV head: floor(h * Hs / Ht)."""
    return (np.arange(n_target) * n_source) // n_target
