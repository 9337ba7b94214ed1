"""A trace read into a `Demand` on the target model (the rules: sim/demand/__init__.py). Never imports
torch."""

from __future__ import annotations

from os import PathLike
from typing import TYPE_CHECKING

import numpy as np

from sim.demand.records import DENSE_POLICY, Demand, RagShares, head_map, layer_map
from sim.errors import SimInputError
from traces.models import ModelSpec, get_model
from traces.probe import retrieval_heads_of
from traces.retrieval_knobs import budget_fit_tokens

if TYPE_CHECKING:
    from traces import RunMetadata, TraceReader

__all__ = ["demand_from_trace"]


def demand_from_trace(trace: str | PathLike[str] | TraceReader, target_model: str | None = None) -> Demand:
    """Read a trace (directory or open reader) into a Demand on `target_model`'s shape.

    target_model None or equal to the trace's model: no transplant. Otherwise layers and heads are
    mapped (module docstring) and the Demand says `mapped_from=<trace model>`. A trace of dense
    attention gives a Demand with `dense_attention` True and no recall demand (module docstring).
    """
    from traces import open_trace

    reader = trace if hasattr(trace, "steps") and hasattr(trace, "meta") else open_trace(trace)
    meta, where = reader.meta, str(getattr(reader, "path", trace))
    src: ModelSpec = meta.model
    tgt = get_model(target_model) if target_model else src
    dense = {int(x) for x in meta.runtime.get("dense_layers", ())}
    if meta.method == DENSE_POLICY or set(range(src.n_layers)) <= dense:
        return _dense_attention_demand(reader, src, tgt, where)
    fit_tokens = budget_fit_tokens(meta.runtime.get("page_size"), meta.runtime.get("budget_tokens"))
    per_seq, longest = _collect(reader, fit_tokens, meta.runtime.get("page_size"))
    if not per_seq:
        raise SimInputError(f"trace {where} has no decode steps to replay")
    per_seq, skipped = _past_budget(per_seq)
    capacity = _capacity_tokens(meta.runtime)
    arrays = _mapped(per_seq, layer_map(tgt.n_layers, src.n_layers, dense),
                     head_map(tgt.n_kv_heads, src.n_kv_heads), capacity)
    share, share_per_layer = _probe_shares(meta, tgt, where)
    return Demand(
        model=tgt.name,
        corrected=arrays["corrected"],
        fetch_ratio=arrays["fetch_ratio"],
        similarity=arrays["similarity"],
        source=where,
        mapped_from=src.name if tgt.name != src.name else None,
        source_tau=meta.method_knobs.get("tau"),
        timing_clock=meta.timing_clock,
        timings_s=arrays["timings_s"],
        source_runtime=dict(meta.runtime),
        skipped_steps=tuple(skipped[seq] for seq in sorted(per_seq)),
        recorded_context_tokens=longest,
        method=meta.method,
        evict_ratio=arrays["evict_ratio"] if capacity is not None else None,
        refactorised=arrays["refactorised"],
        retrieval_share=share,
        retrieval_share_per_layer=share_per_layer,
        rag=_rag_shares(reader, tgt.n_layers),
    )


def _rag_shares(reader: TraceReader, n_layers: int) -> RagShares | None:
    """The multi-context records of the trace's prefills as shares (RagShares), per-layer recompute ratios
    mapped onto `n_layers` target layers by relative depth; None for a single-context trace."""
    records = [p.multi_context for p in reader.prefills() if p.multi_context is not None]
    if not records:
        return None
    ratios = np.mean([r.recompute_ratios for r in records], axis=0)  # (L_src,)
    src = np.minimum((np.arange(n_layers) * len(ratios)) // n_layers, len(ratios) - 1)
    prompt = [r.prefix_tokens + r.total_document_tokens + r.query_tokens for r in records]
    return RagShares(
        documents=float(np.mean([len(r.document_tokens) for r in records])),
        document_share=float(np.mean([r.total_document_tokens / p
                                      for r, p in zip(records, prompt, strict=True)])),
        sequence_ratio=float(np.mean([r.sequence_ratio for r in records])),
        recompute_ratio=ratios[src].astype(np.float64),
    )


_COLUMNS = ("corr", "sim", "sel", "miss", "fetch", "evict", "refac", "t", "over")


def _collect(reader: TraceReader, fit_tokens: int | None,
             page: object) -> tuple[dict[int, dict[str, list]], int]:
    """Per source sequence, per step: corrected, similarity, selected and missed counts, fetched and
    evicted tokens, re-factorised flags (each (L, H) on the trace's shape), timings, and whether the
    context was past the run's budget; and the longest context recorded."""
    per_seq: dict[int, dict[str, list]] = {}
    longest = 0
    for rec in reader.steps():
        longest = max(longest, int(rec.context_tokens))
        acc = per_seq.setdefault(rec.sequence, {k: [] for k in _COLUMNS})
        acc["corr"].append(np.asarray(rec.corrected, dtype=bool))
        acc["sim"].append(np.asarray(rec.similarity, dtype=np.float32))
        acc["sel"].append(rec.selected_counts())
        acc["miss"].append(rec.missed_counts())
        acc["fetch"].append(_moved(getattr(rec, "fetched_tokens", None), rec, page))
        acc["evict"].append(_moved(getattr(rec, "evicted_tokens", None), rec, None))
        refac = getattr(rec, "refactorised", None)
        acc["refac"].append(np.zeros(rec.corrected.shape, bool) if refac is None else np.asarray(refac, bool))
        acc["t"].append(dict(rec.timings_s))
        acc["over"].append(fit_tokens is None or rec.context_tokens > fit_tokens)
    return per_seq, longest


def _past_budget(per_seq: dict[int, dict[str, list]]) -> tuple[dict[int, dict[str, list]], dict[int, int]]:
    """Only the steps past the run's budget checked, selected and recalled (module docstring): those kept,
    and per sequence how many leading steps were left out. A trace with none past it is replayed as
    recorded (its steps hold no corrections or misses then)."""
    if not any(any(acc["over"]) for acc in per_seq.values()):
        return per_seq, {seq: 0 for seq in per_seq}
    skipped = {seq: len(acc["over"]) - sum(acc["over"]) for seq, acc in per_seq.items()}
    kept = {seq: {k: [x for x, o in zip(v, acc["over"], strict=True) if o] for k, v in acc.items()}
            for seq, acc in per_seq.items() if any(acc["over"])}
    return kept, skipped


def _mapped(per_seq: dict[int, dict[str, list]], lmap: np.ndarray, hmap: np.ndarray,
            capacity: int | None) -> dict[str, tuple]:
    """Per sequence in order, on the target's layers and heads: corrected, similarity, fetch ratio (missed /
    selected where no capacity is recorded), eviction ratio (none without a capacity), re-factorised flags,
    timings."""
    out: dict[str, list] = {k: [] for k in ("corrected", "similarity", "fetch_ratio", "evict_ratio",
                                            "refactorised", "timings_s")}

    def mapped(acc: dict[str, list], key: str, dtype: type = np.float64) -> np.ndarray:
        return np.stack(acc[key]).astype(dtype)[:, lmap][:, :, hmap]

    for seq in sorted(per_seq):
        acc = per_seq[seq]
        out["corrected"].append(mapped(acc, "corr", bool))
        out["similarity"].append(mapped(acc, "sim", np.float32))
        if capacity is None:  # no capacity recorded: the page-recall ratio missed / selected
            out["fetch_ratio"].append(_miss_ratio(mapped(acc, "sel"), mapped(acc, "miss")))
        else:
            out["fetch_ratio"].append(_token_ratio(mapped(acc, "fetch"), capacity))
            out["evict_ratio"].append(_token_ratio(mapped(acc, "evict"), capacity))
        out["refactorised"].append(mapped(acc, "refac", bool))
        out["timings_s"].append(tuple(acc["t"]))
    return {k: tuple(v) for k, v in out.items()}


def _dense_attention_demand(reader: TraceReader, src: ModelSpec, tgt: ModelSpec, source: str) -> Demand:
    """A trace of dense attention as a Demand with no recall demand: zeros (similarity NaN) of the target's
    shape on every recorded step, its timings kept (module docstring)."""
    steps: dict[int, list[dict[str, float]]] = {}
    longest = 0
    for rec in reader.steps():
        longest = max(longest, int(rec.context_tokens))
        steps.setdefault(rec.sequence, []).append(dict(rec.timings_s))
    if not steps:
        raise SimInputError(f"trace {source} has no decode steps to replay")
    shapes = [(len(steps[seq]), tgt.n_layers, tgt.n_kv_heads) for seq in sorted(steps)]
    meta = reader.meta
    return Demand(
        model=tgt.name,
        corrected=tuple(np.zeros(s, dtype=bool) for s in shapes),
        fetch_ratio=tuple(np.zeros(s, dtype=np.float32) for s in shapes),
        similarity=tuple(np.full(s, np.nan, dtype=np.float32) for s in shapes),
        source=source,
        mapped_from=src.name if tgt.name != src.name else None,
        source_tau=meta.method_knobs.get("tau"),
        timing_clock=meta.timing_clock,
        timings_s=tuple(tuple(steps[seq]) for seq in sorted(steps)),
        source_runtime=dict(meta.runtime),
        skipped_steps=tuple(0 for _ in shapes),
        recorded_context_tokens=longest,
        method=DENSE_POLICY,
        evict_ratio=tuple(np.zeros(s, dtype=np.float32) for s in shapes),
        refactorised=tuple(np.zeros(s, dtype=bool) for s in shapes),
    )


def _probe_shares(meta: RunMetadata, target: ModelSpec, where: str) -> tuple[float | None, np.ndarray | None]:
    """(share of retrieval KV heads on the traced model, (L_target,) share per target layer) from
    RazorAttention's probe in the trace metadata, or (None, None) (module docstring, "probe")."""
    heads = retrieval_heads_of(meta, where)  # (Ls, Hs) bool
    if heads is None:
        return None, None
    per_source_layer = heads.mean(axis=1)
    return float(heads.mean()), per_source_layer[layer_map(target.n_layers, meta.model.n_layers)]


def _capacity_tokens(runtime: dict) -> int | None:
    """The trace's selection capacity in tokens per head (budget - sink - window), or None if unknown."""
    keys = ("page_size", "budget_tokens", "sink_tokens", "window_tokens")
    values = [runtime.get(k) for k in keys]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in values):
        return None
    cap = values[1] - values[2] - values[3]
    return cap if cap > 0 and values[0] > 0 else None


def _moved(tokens: np.ndarray | None, rec: object, page_size: object) -> np.ndarray:
    """(L, H) tokens a record says were moved; None: missed pages x page size when `page_size` is given
    (format-1 traces: FreeKV's page recall), else zeros."""
    if tokens is not None:
        return np.asarray(tokens, dtype=np.int64)
    if isinstance(page_size, int) and page_size > 0:
        return rec.missed_counts().astype(np.int64) * page_size  # type: ignore[attr-defined]
    return np.zeros(np.shape(rec.corrected), dtype=np.int64)  # type: ignore[attr-defined]


def _token_ratio(tokens: np.ndarray, capacity_tokens: int) -> np.ndarray:
    """(S, L, H) tokens moved over the capacity in tokens, float32 >= 0."""
    return np.maximum(tokens / float(capacity_tokens), 0.0).astype(np.float32)


def _miss_ratio(sel: np.ndarray, miss: np.ndarray) -> np.ndarray:
    """(S, L, H) missed / selected; where nothing was selected, the mean over steps of that head."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(sel > 0, miss / np.maximum(sel, 1), np.nan)
    head_mean = np.nanmean(np.where(np.isnan(ratio).all(axis=0, keepdims=True), 0.0, ratio), axis=0)
    head_mean = np.nan_to_num(head_mean, nan=0.0)
    ratio = np.where(np.isnan(ratio), head_mean[None], ratio)
    return np.clip(ratio, 0.0, 1.0).astype(np.float32)
