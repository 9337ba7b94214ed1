"""Per-operation timing: CUDA events on a GPU, wall clock on the CPU (labelled as such in traces).

Usage: `with timer.op("select"): ...`. On CUDA the events are recorded on the current stream and only
resolved in `collect()`, once per step, so timing adds no host sync to the hot path. On CPU the clock
is `time.perf_counter` around the (synchronous) work.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["OpTimer"]


class OpTimer:
    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.device = device
        self.enabled = enabled
        self.clock = "cuda_event" if device.type == "cuda" else "wall"
        self._wall_s: dict[str, float] = defaultdict(float)
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    @contextmanager
    def op(self, name: str, stream: torch.cuda.Stream | None = None) -> Iterator[None]:
        """Time the enclosed work under `name` (accumulates if the name repeats within a step)."""
        if not self.enabled:
            yield
            return
        if self.clock == "cuda_event":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            yield
            end.record(stream)
            self._events.append((name, start, end))
        else:
            t0 = time.perf_counter()
            yield
            self._wall_s[name] += time.perf_counter() - t0

    def collect(self) -> dict[str, float]:
        """Seconds per operation since the last collect (syncs on CUDA events), then reset."""
        out = dict(self._wall_s)
        if self._events:
            self._events[-1][2].synchronize()
            for name, start, end in self._events:
                out[name] = out.get(name, 0.0) + start.elapsed_time(end) / 1e3
        self._wall_s.clear()
        self._events.clear()
        return out
