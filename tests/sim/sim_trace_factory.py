"""Small real traces (written with traces.TraceWriter) for the simulator tests.

Model smollm2-135m (30 layers, 3 KV heads, in the registry, so the simulator can target it); selection
and misses drawn from an explicit numpy Generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traces import ModelSpec, PrefillRecord, RunMetadata, StepRecord, TraceWriter, get_model


def make_trace(
    path: Path,
    *,
    n_steps: int = 24,
    n_sequences: int = 1,
    seed: int = 0,
    prompt_tokens: int = 1200,
    page_size: int = 32,
    budget_tokens: int = 512,
    sink_tokens: int = 64,
    window_tokens: int = 64,
    tau: float = 0.9,
    dense_layers: tuple[int, ...] = (0,),
    clock: str = "wall",
    timings: bool = False,
    method: str = "freekv",
    extra: dict | None = None,
) -> Path:
    """Write a FreeKV trace: per step, layer and head a similarity, corrected = similarity < tau, the
    selected pages (the budget's worth) and a random subset of them as missed. `method`: the runtime
    policy the metadata names (meta.runtime["method"]); `extra`: meta.extra (e.g. a policy probe)."""
    rng = np.random.default_rng(seed)
    model = get_model("smollm2-135m")
    n_sel = (budget_tokens - sink_tokens - window_tokens) // page_size
    runtime = {
        "method": method,
        "page_size": page_size,
        "budget_tokens": budget_tokens,
        "sink_tokens": sink_tokens,
        "window_tokens": window_tokens,
        "tau": tau,
        "dense_layers": list(dense_layers),
        "dtype": "float32",
        "batch_size": 1,
    }
    meta = _metadata(model, runtime, prompt_tokens, n_sequences, seed, clock, extra)
    layout = _Layout(model.n_layers, model.n_kv_heads, n_sel, dense_layers, tau, budget_tokens, timings)
    with TraceWriter.create(path, meta) as w:
        for s in range(n_sequences):
            w.append_prefill(_prefill(layout, s, prompt_tokens))
        for step in range(n_steps):
            for s in range(n_sequences):
                ctx = prompt_tokens + step + 1
                n_pages = (ctx - sink_tokens - window_tokens) // page_size
                w.append_step(_step(rng, layout, s, step, ctx, n_pages))
    return path


@dataclass(frozen=True)
class _Layout:
    """What the records of one trace share: layers and KV heads, pages selected per head of a sparse layer,
    the dense layers, tau, the tokens attended per head, and whether steps carry timings."""

    n_layers: int
    n_heads: int
    n_sel: int
    dense_layers: tuple[int, ...]
    tau: float
    budget_tokens: int
    timings: bool


def _metadata(
    model: ModelSpec, runtime: dict, prompt_tokens: int, n_sequences: int, seed: int, clock: str,
    extra: dict | None,
) -> RunMetadata:
    return RunMetadata(
        model=model,
        runtime=runtime,
        task={"name": "passkey", "context_tokens": prompt_tokens, "n_samples": n_sequences},
        seeds={"task": seed},
        device="cpu",
        library_versions={"numpy": np.__version__},
        timing_clock=clock,  # type: ignore[arg-type]
        created_utc="2026-11-22T00:00:00+00:00",
        extra=dict(extra or {}),
    )


def _prefill(layout: _Layout, s: int, prompt_tokens: int) -> PrefillRecord:
    """Sequence s's prefill: the first n_sel pages selected per head of every sparse layer."""
    empty = np.zeros(0, np.int32)
    init = tuple(
        tuple(
            empty if layer in layout.dense_layers else np.arange(layout.n_sel, dtype=np.int32)
            for _ in range(layout.n_heads)
        )
        for layer in range(layout.n_layers)
    )
    return PrefillRecord(s, prompt_tokens, init)


def _step(rng: np.random.Generator, layout: _Layout, s: int, step: int, ctx: int, n_pages: int) -> StepRecord:
    """Sequence s's record of one step with n_pages candidate pages (dense layers: nothing selected)."""
    L, H = layout.n_layers, layout.n_heads
    empty = np.zeros(0, np.int32)
    sim = rng.uniform(0.75, 1.0, (L, H)).astype(np.float32)
    sel, mis = [], []
    for layer in range(L):
        if layer in layout.dense_layers:
            sel.append(tuple(empty for _ in range(H)))
            mis.append(tuple(empty for _ in range(H)))
            continue
        selected, missed = _layer_pages(rng, layout.n_sel, n_pages, H)
        sel.append(selected)
        mis.append(missed)
    for layer in layout.dense_layers:
        sim[layer] = np.nan
    corrected = np.nan_to_num(sim, nan=1.0) < layout.tau
    attended = np.full((L, H), layout.budget_tokens, np.int32)
    t = {"step_total": float(rng.uniform(0.01, 0.02))} if layout.timings else {}
    return StepRecord(s, step, ctx, sim, corrected, tuple(sel), tuple(mis), attended, t)


def _layer_pages(
    rng: np.random.Generator, n_sel: int, n_pages: int, n_heads: int
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """One sparse layer: per head, the selected pages (sorted) and a random subset of them as missed."""
    sl, ml = [], []
    for _ in range(n_heads):
        # within the budget (an older runtime's trace) fewer candidates than n_sel
        n_take = min(n_sel, max(n_pages, 0))
        pages = np.sort(rng.choice(n_pages, n_take, replace=False)).astype(np.int32)
        k = int(rng.integers(0, n_take // 2 + 1))
        sl.append(pages)
        ml.append(np.sort(rng.choice(pages, k, replace=False)).astype(np.int32))
    return tuple(sl), tuple(ml)
