"""Per-operation timing: CUDA events on a GPU, wall clock on the CPU (labelled as such in traces).

Usage: `with timer.op("select"): ...`. On CUDA the events are recorded on the current stream and only
resolved in `collect()`, once per step, so timing adds no host sync to the hot path. On CPU the clock
is `time.perf_counter` around the (synchronous) work.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

__all__ = ["OpTimer"]


class OpTimer:
    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.device = device
        self.enabled = enabled
        self.clock = "cuda_event" if device.type == "cuda" else "wall"
        self._wall_s: dict[str, float] = defaultdict(float)
        self._events: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []

    def op(self, name: str, stream: torch.cuda.Stream | None = None) -> _TimedOp:
        """Time the enclosed work under `name` (accumulates if the name repeats within a step).

        A plain object rather than a generator-based context manager: it is entered several times per
        layer on the decode path, where contextlib's per-use generator costs more than the clock reads.
        """
        return _TimedOp(self, name, stream)

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


class _TimedOp:
    """`with timer.op(name):` — wall clock on the CPU, a pair of CUDA events on a GPU, nothing if disabled."""

    __slots__ = ("timer", "name", "stream", "start")

    def __init__(self, timer: OpTimer, name: str, stream: torch.cuda.Stream | None) -> None:
        self.timer, self.name, self.stream = timer, name, stream

    def __enter__(self) -> None:
        if not self.timer.enabled:
            return
        if self.timer.clock == "cuda_event":
            self.start = torch.cuda.Event(enable_timing=True)
            self.start.record(self.stream)
        else:
            self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        if not self.timer.enabled:
            return
        if self.timer.clock == "cuda_event":
            end = torch.cuda.Event(enable_timing=True)
            end.record(self.stream)
            self.timer._events.append((self.name, self.start, end))
        else:
            self.timer._wall_s[self.name] += time.perf_counter() - self.start
