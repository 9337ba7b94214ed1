"""Decode over the real context, sampled: what the report's capacity figures and tables simulate.

A workload of I prompt tokens and O generated tokens ends at context I + O. The memory fit is decided
there (the KV state of the last decode step), and the per-token latency is the mean over the whole
decode, estimated from `SEGMENTS` windows of `SEGMENT_STEPS` consecutive decode steps spread evenly
from the first step to the last (strided sampling; every step when O <= SEGMENTS * SEGMENT_STEPS).
Each window is a simulator run whose prompt is I + (its first step), so its context is the one the
real decode has there. p50/p99 are percentiles over the sampled steps; the figures and tables show p99
beside the mean.

    res = sampled_decode(cfg, demand, seed, profile)   # cfg: the workload's SimConfig (I, O, batch)
    res["per_token_latency_s"]["mean"], res["memory"]["fits"], res["sampled"]
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["sampled_decode", "segment_starts", "SEGMENTS", "SEGMENT_STEPS"]

SEGMENTS = 4
SEGMENT_STEPS = 16


def segment_starts(output_tokens: int, segments: int = SEGMENTS, steps: int = SEGMENT_STEPS) -> list[int]:
    """First decode step of each sampled window: evenly spread over [0, O - steps]; [0] when one window
    covers the whole decode."""
    if output_tokens <= segments * steps:
        return [0]
    return sorted({int(round(x)) for x in np.linspace(0, output_tokens - steps, segments)})


def sampled_decode(cfg: Any, demand: Any, seed: int, profile: Any) -> dict[str, Any]:
    """A SimResult dict (sim.result.SimResult.to_dict keys) of cfg's whole decode: memory at the final
    context, latency statistics and throughput over the sampled steps, breakdown averaged over the
    windows. Extra key `sampled`: {"steps": n, "windows": k, "of": O, "label": text}."""
    from dse.report.simulate import memory_of
    from sim import run_simulation

    if int(cfg.output_tokens) <= SEGMENTS * SEGMENT_STEPS:
        out = run_simulation(cfg, demand, seed=seed, profile=profile).to_dict()
        out["sampled"] = _label(cfg.output_tokens, cfg.output_tokens, 1)
        return out
    memory = memory_of(cfg, profile, demand)  # at the final context (input + output)
    if not memory["fits"]:
        out = run_simulation(cfg, demand, seed=seed, profile=profile).to_dict()  # OOM: returns at once
        out["sampled"] = _label(0, cfg.output_tokens, 0)
        return out
    starts = segment_starts(cfg.output_tokens)
    lat: list[np.ndarray] = []
    breakdown: dict[str, float] = {}
    last: dict[str, Any] = {}
    for start in starts:
        seg = cfg.replace(input_tokens=cfg.input_tokens + start, output_tokens=SEGMENT_STEPS)
        res = run_simulation(seg, demand, seed=seed, profile=profile)
        lat.append(np.asarray(res.step_latency_s, dtype=np.float64))
        for op, s in res.breakdown_s.items():
            breakdown[op] = breakdown.get(op, 0.0) + s / len(starts)
        last = res.to_dict()
    steps = np.concatenate(lat)
    mean = float(steps.mean())
    out = {
        **last,
        "config": {**last["config"], "input_tokens": cfg.input_tokens, "output_tokens": cfg.output_tokens},
        "per_token_latency_s": {
            "mean": mean,
            "p50": float(np.percentile(steps, 50)),
            "p99": float(np.percentile(steps, 99)),
            "max": float(steps.max()),
        },
        "decode_s": mean * cfg.output_tokens,
        "throughput_tokens_per_s": cfg.batch_size / mean if mean > 0 else 0.0,
        "breakdown_s": breakdown,
        "memory": {**last["memory"], **memory},
        "sampled": _label(int(steps.size), cfg.output_tokens, len(starts)),
    }
    return out


def _label(n_steps: int, of: int, windows: int) -> dict[str, Any]:
    if windows <= 1 and n_steps == of:
        text = f"all {of} decode steps simulated"
    elif windows == 0:
        text = "not simulated: out of memory at the final context"
    else:
        text = (
            f"{n_steps} of {of} decode steps simulated ({windows} windows of {SEGMENT_STEPS} steps spread "
            "from the first to the last step)"
        )
    return {"steps": n_steps, "windows": windows, "of": of, "label": text}
