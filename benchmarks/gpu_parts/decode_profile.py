"""The CUDA timeline of a few decode steps under the torch profiler, for the `decode` part (decode.py):
overlap and bandwidth figures (gpu_parts/timeline.py) and a compact copy of the timeline on disk."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import torch

from gpu_parts.timeline import analyze_events

__all__ = ["PROFILE_STEPS", "profile_steps"]

PROFILE_STEPS = 3


def profile_steps(step: Any, out: Path) -> dict[str, Any]:
    """PROFILE_STEPS steps under the torch profiler (CUDA activity only): overlap and bandwidth figures,
    and a compact timeline (kernels and copies: stream, start, duration, bytes) in timeline.json.gz."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILE_STEPS):
            step()
        torch.cuda.synchronize()
    raw = out / "profiler.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, encoding="utf-8") as f:
        data = json.load(f)
    raw.unlink()
    events = data["traceEvents"] if isinstance(data, dict) else data
    result = analyze_events(events)
    compact = [
        {
            "cat": e["cat"],
            "name": e.get("name", "")[:80],
            "stream": e.get("args", {}).get("stream"),
            "ts": e["ts"],
            "dur": e["dur"],
            **({"bytes": e["args"]["bytes"]} if "bytes" in e.get("args", {}) else {}),
        }
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e
    ]
    with gzip.open(out / "timeline.json.gz", "wt", encoding="utf-8") as f:
        json.dump(
            {"units": "ts, dur in microseconds (CUPTI clock)", "steps": PROFILE_STEPS, "events": compact}, f
        )
    result["file"] = str(out / "timeline.json.gz")
    result["steps"] = PROFILE_STEPS
    return result
