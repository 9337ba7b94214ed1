"""Trace statistics (numpy only), each computed in one streaming pass over the records.

Conventions. A *check* is one (step, layer, KV head) entry of a sparse layer (a layer not in
meta.runtime["dense_layers"]) whose pooled similarity is finite, at a step whose context exceeds the run's
budget; dense layers and NaN similarities are left out of every correction and similarity statistic. A
*(step, layer) check* is a step and sparse layer with at least one such head. Per-layer and per-head
values are NaN (None in JSON) where there was nothing to count.

Within the budget. While the context still fits the budget (ceil(context_tokens / page_size) <=
budget_tokens // page_size, the budget counting sink and window) FreeKV makes no check, no selection and
no recall (the official runtime's `kvc.n_pages > budget`, rooikeee/FreeKV
source/freekv/adapter/modeling.py:210). Such steps count for no correction, similarity or hit statistic,
also in traces written before the runtime followed that rule (they recorded checks there); the per-step
page figures of `trace_summary` still count every step (what the run held and recalled). Traces whose
metadata lacks an integer page_size and budget_tokens have no such phase.

- correction_rate: share of checks whose head was corrected: the recorded flags (tau=None), or
  recomputed as similarity < tau (the runtime's rule, so tau = the run's tau reproduces the flags).
- hit_rate: share of selected pages that were already resident on the GPU = 1 - missed / selected.
- mean_similarity: (L, H) mean, min, max and standard deviation of the pooled query similarity.
- movement: what the method moved per step (every step counts, also within the budget): fetched tokens
  (host -> GPU, recalled or prefetched; the synchronous share is that of corrected heads), evicted
  tokens, re-factorised heads, per step and per layer. Records without the fields (format 1, or format 2
  written with None) count as FreeKV's page recall: missed pages x page_size, nothing evicted or rebuilt
  (StepRecord.movement); `derived_steps` says how many.
- trace_summary: all of the above and demand figures for the simulator, as a JSON-able dict.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from traces.errors import TraceError
from traces.moved_bytes import token_bytes as moved_token_bytes
from traces.moved_bytes import token_bytes_basis
from traces.probe import policy_probe
from traces.reader import TraceReader
from traces.record_totals import RecordTotals
from traces.records import PrefillRecord, StepRecord
from traces.retrieval_knobs import budget_fit_tokens
from traces.stat_results import CorrectionRate, HitRate, Movement, SimilarityStats, json_ready, ratio

__all__ = [
    "CorrectionRate",
    "HitRate",
    "SimilarityStats",
    "Movement",
    "correction_rate",
    "hit_rate",
    "mean_similarity",
    "movement",
    "trace_summary",
]


class _Pass:
    """Accumulators fed one StepRecord at a time (constant memory)."""

    def __init__(self, reader: TraceReader, tau: float | None) -> None:
        n_layers, n_kv_heads = reader.n_layers, reader.n_kv_heads
        shape = (n_layers, n_kv_heads)
        self.tau = tau
        self.sparse = np.ones(n_layers, dtype=bool)
        self.sparse[[x for x in reader.dense_layers if 0 <= x < n_layers]] = False
        runtime = reader.meta.runtime  # the longest context that fits the run's budget (None: not recorded)
        self.fit_tokens = budget_fit_tokens(runtime.get("page_size"), runtime.get("budget_tokens"))
        self.steps_within_budget = 0
        self.checks = np.zeros(shape, np.int64)
        self.corrected = np.zeros(shape, np.int64)
        self.recorded_corrected = np.zeros(shape, np.int64)
        self.layer_checks = np.zeros(n_layers, np.int64)
        self.layer_corrected = np.zeros(n_layers, np.int64)
        self.layer_recorded_corrected = np.zeros(n_layers, np.int64)
        self.sim_sum = np.zeros(shape)
        self.sim_sq = np.zeros(shape)
        self.sim_min = np.full(shape, np.nan)
        self.sim_max = np.full(shape, np.nan)
        self.selected = np.zeros(shape, np.int64)
        self.missed = np.zeros(shape, np.int64)
        self.missed_corrected = 0  # these three over every step, the arrays above over checked ones
        self.all_selected = 0
        self.all_missed = 0
        self.attended_sparse = 0
        self.n_steps = 0
        page_size = reader.meta.runtime.get("page_size")
        self.page_size = page_size if isinstance(page_size, int) and not isinstance(page_size, bool) else None
        self.v1 = reader.meta.format_version == 1
        self.path = reader.path
        self.fetched = np.zeros(n_layers, np.int64)  # movement: over every step
        self.fetched_sync = 0
        self.fetched_steps = 0
        self.evicted = np.zeros(n_layers, np.int64)
        self.refactorised = np.zeros(n_layers, np.int64)
        self.derived_steps = 0

    def add(self, rec: StepRecord) -> None:
        self.n_steps += 1
        self.attended_sparse += int(np.asarray(rec.attended_tokens)[self.sparse].sum())
        missed = rec.missed_counts()
        self.all_selected += int(rec.selected_counts().sum())
        self.all_missed += int(missed.sum())
        self.missed_corrected += int(missed[np.asarray(rec.corrected, dtype=bool)].sum())
        self._add_movement(rec)
        if self.fit_tokens is not None and rec.context_tokens <= self.fit_tokens:
            self.steps_within_budget += 1  # no check, no selection, no recall (module docstring)
            return
        sim = np.asarray(rec.similarity, dtype=np.float64)
        valid = self.sparse[:, None] & np.isfinite(sim)
        recorded = np.asarray(rec.corrected, dtype=bool) & valid
        corrected = recorded if self.tau is None else (sim < self.tau) & valid
        self.checks += valid
        self.corrected += corrected
        self.recorded_corrected += recorded
        layer_checked = valid.any(axis=1)
        self.layer_checks += layer_checked
        self.layer_corrected += corrected.any(axis=1)
        self.layer_recorded_corrected += recorded.any(axis=1)
        finite = np.where(valid, sim, 0.0)
        self.sim_sum += finite
        self.sim_sq += finite * finite
        masked = np.where(valid, sim, np.nan)
        self.sim_min = np.fmin(self.sim_min, masked)
        self.sim_max = np.fmax(self.sim_max, masked)
        self.selected += rec.selected_counts()
        self.missed += missed

    def _add_movement(self, rec: StepRecord) -> None:
        try:
            fetched, evicted, rebuilt = rec.movement(self.page_size)
        except ValueError as exc:
            raise TraceError(f"{self.path}: step {rec.step} of sequence {rec.sequence}: {exc}") from None
        recorded = (rec.fetched_tokens, rec.evicted_tokens, rec.refactorised)
        self.derived_steps += self.v1 or any(x is None for x in recorded)
        if fetched is not None:
            fetched = np.asarray(fetched, dtype=np.int64)
            self.fetched_steps += 1
            self.fetched += fetched.sum(axis=1)
            self.fetched_sync += int(fetched[np.asarray(rec.corrected, dtype=bool)].sum())
        self.evicted += np.asarray(evicted, dtype=np.int64).sum(axis=1)
        self.refactorised += np.asarray(rebuilt, dtype=bool).sum(axis=1)

    def movement(self) -> Movement:
        n, known = max(self.n_steps, 1), self.fetched_steps
        return Movement(
            fetched_tokens_per_step=float(self.fetched.sum() / known) if known else None,
            fetched_tokens_per_step_per_layer=ratio(self.fetched, known),
            fetched_tokens_per_step_sync=self.fetched_sync / known if known else None,
            evicted_tokens_per_step=float(self.evicted.sum() / n),
            evicted_tokens_per_step_per_layer=self.evicted / n,
            refactorised_heads_per_step=float(self.refactorised.sum() / n),
            refactorised_heads_per_step_per_layer=self.refactorised / n,
            fetched_tokens=int(self.fetched.sum()),
            evicted_tokens=int(self.evicted.sum()),
            fetched_steps=known,
            derived_steps=self.derived_steps,
            n_steps=self.n_steps,
        )

    def correction(self) -> CorrectionRate:
        return CorrectionRate(
            tau=self.tau,
            overall=float(ratio(self.corrected.sum(), self.checks.sum())),
            per_layer=ratio(self.corrected.sum(axis=1), self.checks.sum(axis=1)),
            per_head=ratio(self.corrected, self.checks),
            check_share=float(ratio(self.layer_corrected.sum(), self.layer_checks.sum())),
            check_share_per_layer=ratio(self.layer_corrected, self.layer_checks),
            n_checks=int(self.checks.sum()),
        )

    def hits(self) -> HitRate:
        return HitRate(
            overall=float(1.0 - ratio(self.missed.sum(), self.selected.sum())),
            per_layer=1.0 - ratio(self.missed.sum(axis=1), self.selected.sum(axis=1)),
            corrected_check_share=float(
                ratio(self.layer_recorded_corrected.sum(), self.layer_checks.sum())
            ),
            selected_pages=int(self.selected.sum()),
            missed_pages=int(self.missed.sum()),
        )

    def similarity(self) -> SimilarityStats:
        mean = ratio(self.sim_sum, self.checks)
        var = np.maximum(ratio(self.sim_sq, self.checks) - mean * mean, 0.0)
        return SimilarityStats(
            mean, self.sim_min.copy(), self.sim_max.copy(), np.sqrt(var), self.checks.copy()
        )


def _run(reader: TraceReader, tau: float | None) -> _Pass:
    acc = _Pass(reader, _check_tau(tau))
    for rec in reader.steps():
        acc.add(rec)
    return acc


def _check_tau(tau: float | None) -> float | None:
    if tau is None:
        return None
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not -1.0 <= tau <= 1.0:
        raise TraceError(
            f"tau must be None (use the recorded flags) or a cosine threshold in [-1, 1], got {tau!r}"
        )
    return float(tau)


def correction_rate(reader: TraceReader, tau: float | None = None) -> CorrectionRate:
    """Share of checks corrected: recorded flags (tau=None) or recomputed as similarity < tau."""
    return _run(reader, tau).correction()


def hit_rate(reader: TraceReader) -> HitRate:
    """Share of selected pages already resident (1 - missed / selected), overall and per layer."""
    return _run(reader, None).hits()


def mean_similarity(reader: TraceReader) -> SimilarityStats:
    """(L, H) mean, min, max and std of the pooled query similarity (the FreeKV observation)."""
    return _run(reader, None).similarity()


def movement(reader: TraceReader) -> Movement:
    """Tokens fetched, evicted and re-factorised heads per step and per layer (module docstring)."""
    return _run(reader, None).movement()


def _summary_pass(reader: TraceReader, tau: float | None) -> tuple[_Pass, RecordTotals]:
    """One pass over every record: the statistics and the totals."""
    acc = _Pass(reader, _check_tau(tau))
    totals = RecordTotals()
    for rec in reader.records():
        totals.sequences.add(rec.sequence)
        if isinstance(rec, PrefillRecord):
            totals.add_prefill(rec)
            continue
        acc.add(rec)
        totals.add_step(rec)
    return acc, totals


def _run_fields(reader: TraceReader, acc: _Pass, totals: RecordTotals, tau: float | None) -> dict[str, Any]:
    """What the trace is: its run, its shape, how many sequences, steps and prefills."""
    meta, model = reader.meta, reader.meta.model
    return {
        "trace": str(reader.path),
        "format_version": meta.format_version,
        "model": model.name,
        "complete": reader.complete,
        "truncated": reader.truncated,
        "n_sequences": len(totals.sequences),
        "steps": acc.n_steps,
        "steps_within_budget": acc.steps_within_budget,
        "prefills": reader.n_prefills,
        "layers": model.n_layers,
        "kv_heads": model.n_kv_heads,
        "dense_layers": list(reader.dense_layers),
        "run_tau": meta.method_knobs.get("tau"),
        "tau": tau,
    }


def _rate_fields(acc: _Pass) -> dict[str, Any]:
    """Correction and hit rates and the similarity statistics."""
    corr, hits, sim = acc.correction(), acc.hits(), acc.similarity()
    return {
        "correction_rate": corr.overall,
        "correction_rate_per_layer": corr.per_layer,
        "corrected_check_share": corr.check_share,
        "corrected_check_share_per_layer": corr.check_share_per_layer,
        "hit_rate": hits.overall,
        "hit_rate_per_layer": hits.per_layer,
        "mean_similarity": sim.mean,
        "similarity_overall": {
            "mean": float(ratio(acc.sim_sum.sum(), acc.checks.sum())),
            "min": float(np.nanmin(sim.min)) if np.isfinite(sim.min).any() else math.nan,
            "max": float(np.nanmax(sim.max)) if np.isfinite(sim.max).any() else math.nan,
        },
    }


def _token_bytes(reader: TraceReader, kv_dtype_bytes: int) -> tuple[int, str]:
    """(bytes the trace's method moves of one token of one KV head, how they are counted)."""
    method, head_dim = reader.meta.method, reader.meta.model.head_dim
    basis = token_bytes_basis(method, head_dim, kv_dtype_bytes)
    return moved_token_bytes(method, head_dim, kv_dtype_bytes), basis


def _page_fields(
    reader: TraceReader, acc: _Pass, totals: RecordTotals, kv_dtype_bytes: int
) -> dict[str, Any]:
    """Context, pages selected and missed per step and per head-step, and the recall bytes they make."""
    model, n = reader.meta.model, max(acc.n_steps, 1)
    page_size = reader.meta.runtime.get("page_size")
    token_bytes, bytes_basis = _token_bytes(reader, kv_dtype_bytes)
    page_bytes = page_size * token_bytes if isinstance(page_size, int) else None
    missed_per_step = acc.all_missed / n
    n_sparse_heads = int(acc.sparse.sum()) * model.n_kv_heads
    context = {"min": totals.context_min, "max": totals.context_max, "mean": totals.context_sum / n}
    return {
        "context_tokens": context if acc.n_steps else None,
        "selected_pages_per_step": acc.all_selected / n,
        "missed_pages_per_step": missed_per_step,
        "missed_pages_per_step_corrected_heads": acc.missed_corrected / n,
        "selected_pages_per_head_step": ratio(acc.all_selected, n * n_sparse_heads),
        "missed_pages_per_head_step": ratio(acc.all_missed, n * n_sparse_heads),
        "attended_tokens_per_sparse_head_step": ratio(acc.attended_sparse, n * n_sparse_heads),
        "recall_bytes_per_step": missed_per_step * page_bytes if page_bytes is not None else None,
        "recall_bytes_basis": f"missed head-pages x page_size {page_size} x {bytes_basis}",
    }


def _movement_fields(reader: TraceReader, acc: _Pass, kv_dtype_bytes: int) -> dict[str, Any]:
    """Tokens fetched and evicted and heads re-factorised per step, and the bytes they make."""
    moved = acc.movement()
    token_bytes, bytes_basis = _token_bytes(reader, kv_dtype_bytes)
    fetched_step = moved.fetched_tokens_per_step
    return {
        "fetched_tokens_per_step": fetched_step,
        "fetched_tokens_per_step_per_layer": moved.fetched_tokens_per_step_per_layer,
        "fetched_tokens_per_step_sync": moved.fetched_tokens_per_step_sync,
        "evicted_tokens_per_step": moved.evicted_tokens_per_step,
        "evicted_tokens_per_step_per_layer": moved.evicted_tokens_per_step_per_layer,
        "refactorised_heads_per_step": moved.refactorised_heads_per_step,
        "refactorised_heads_per_step_per_layer": moved.refactorised_heads_per_step_per_layer,
        "fetched_bytes_per_step": None if fetched_step is None else fetched_step * token_bytes,
        "fetched_bytes_total": moved.fetched_tokens * token_bytes if moved.fetched_steps else None,
        "evicted_bytes_total": moved.evicted_tokens * token_bytes,
        "movement_basis": _movement_basis(moved, reader.meta.runtime.get("page_size")),
        "movement_bytes_basis": f"head-tokens x {bytes_basis}",
    }


def trace_summary(
    reader: TraceReader, tau: float | None = None, *, kv_dtype_bytes: int = 2
) -> dict[str, Any]:
    """Everything a study report or the simulator needs from a trace, as a JSON-able dict (one pass).

    tau recomputes only the correction statistics; hits and recalls are what the run did. Recall bytes
    count what the trace's method moves of each missed head-page: page_size * head_dim * parts *
    kv_dtype_bytes, parts = 2 (K and V), or 1 for ShadowKV (values only; traces.moved_bytes), and
    kv_dtype_bytes default 2 (a 16-bit KV cache as served on GPU, whatever dtype the traced run computed
    in). Fetched and evicted bytes count each head-token the same way: head_dim * parts * kv_dtype_bytes.
    `policy_probe` is what the policy's prepare found (traces.probe), None when the trace records none.
    """
    acc, totals = _summary_pass(reader, tau)
    return json_ready({
        **_run_fields(reader, acc, totals, tau),
        **_rate_fields(acc),
        **_page_fields(reader, acc, totals, kv_dtype_bytes),
        **_movement_fields(reader, acc, kv_dtype_bytes),
        "policy_probe": policy_probe(reader.meta) or None,
        "timings_s": totals.timings(reader.meta.timing_clock),
    })


def _movement_basis(moved: Movement, page_size: object) -> str:
    """Where the movement figures come from, in words (recorded by the method, or derived)."""
    derived = f"missed pages x page_size {page_size}, nothing evicted or re-factorised (FreeKV's page recall)"
    if moved.n_steps == 0 or moved.derived_steps == 0:
        return "recorded by the method (trace format 2)"
    if moved.fetched_steps < moved.n_steps:
        derived = "unknown fetched tokens (no page_size in the metadata), nothing evicted or re-factorised"
    if moved.derived_steps == moved.n_steps:
        return f"derived for every step: {derived}"
    recorded = moved.n_steps - moved.derived_steps
    return f"recorded for {recorded} steps, derived for {moved.derived_steps}: {derived}"
