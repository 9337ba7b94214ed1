"""Small real traces (written with traces.TraceWriter) for the simulator tests.

Model smollm2-135m (30 layers, 3 KV heads, in the registry, so the simulator can target it); selection
and misses drawn from an explicit numpy Generator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from traces import PrefillRecord, RunMetadata, StepRecord, TraceWriter, get_model


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
    L, H = model.n_layers, model.n_kv_heads
    n_sel = (budget_tokens - sink_tokens - window_tokens) // page_size
    meta = RunMetadata(
        model=model,
        runtime={
            "method": method,
            "page_size": page_size,
            "budget_tokens": budget_tokens,
            "sink_tokens": sink_tokens,
            "window_tokens": window_tokens,
            "tau": tau,
            "dense_layers": list(dense_layers),
            "dtype": "float32",
            "batch_size": 1,
        },
        task={"name": "passkey", "context_tokens": prompt_tokens, "n_samples": n_sequences},
        seeds={"task": seed},
        device="cpu",
        library_versions={"numpy": np.__version__},
        timing_clock=clock,  # type: ignore[arg-type]
        created_utc="2026-11-22T00:00:00+00:00",
        extra=dict(extra or {}),
    )
    empty = np.zeros(0, np.int32)
    with TraceWriter.create(path, meta) as w:
        for s in range(n_sequences):
            init = tuple(
                tuple(empty if layer in dense_layers else np.arange(n_sel, dtype=np.int32) for _ in range(H))
                for layer in range(L)
            )
            w.append_prefill(PrefillRecord(s, prompt_tokens, init))
        for step in range(n_steps):
            for s in range(n_sequences):
                ctx = prompt_tokens + step + 1
                n_pages = (ctx - sink_tokens - window_tokens) // page_size
                sim = rng.uniform(0.75, 1.0, (L, H)).astype(np.float32)
                sel, mis = [], []
                for layer in range(L):
                    if layer in dense_layers:
                        sel.append(tuple(empty for _ in range(H)))
                        mis.append(tuple(empty for _ in range(H)))
                        continue
                    sl, ml = [], []
                    for _ in range(H):
                        # within the budget (an older runtime's trace) fewer candidates than n_sel
                        n_take = min(n_sel, max(n_pages, 0))
                        pages = np.sort(rng.choice(n_pages, n_take, replace=False)).astype(np.int32)
                        k = int(rng.integers(0, n_take // 2 + 1))
                        sl.append(pages)
                        ml.append(np.sort(rng.choice(pages, k, replace=False)).astype(np.int32))
                    sel.append(tuple(sl))
                    mis.append(tuple(ml))
                for layer in dense_layers:
                    sim[layer] = np.nan
                corrected = np.nan_to_num(sim, nan=1.0) < tau
                attended = np.full((L, H), budget_tokens, np.int32)
                t = {"step_total": float(rng.uniform(0.01, 0.02))} if timings else {}
                w.append_step(StepRecord(s, step, ctx, sim, corrected, tuple(sel), tuple(mis), attended, t))
    return path
