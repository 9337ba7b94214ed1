"""The outcome of one simulation: latency, throughput, breakdown, link use, memory, timelines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.memory import MemoryFit
from sim.schedule import Event

__all__ = ["SimResult", "TimelineEvent", "oom_message"]

TimelineEvent = dict[str, Any]  # {name, stream, start_s, end_s, step, layer}


def _event_dict(ev: Event) -> TimelineEvent:
    name, stream, start, end, step, layer = ev
    return {
        "name": name,
        "stream": stream or "join",
        "start_s": start,
        "end_s": end,
        "step": step,
        "layer": layer,
    }


@dataclass(frozen=True)
class SimResult:
    """Everything `run_simulation` computes. Times in seconds; per-token values are per decode step
    (every sequence of the batch emits one token per step).

    step_latency_s: (S,) time of each decode step. breakdown_s: op -> seconds per step on the critical
    path of the compute stream (busy time, or idle time it waited for that op); sums to the mean step.

    oom: the batch does not fit GPU or host memory (`memory.fits` False). Then nothing is timed: there is
    no latency (step_latency_s NaN, prefill_s NaN, breakdown empty), `to_dict` has `"oom": true`, the
    `oom_message` and null latency and throughput figures, and consumers report out of memory.
    """

    method: str
    hardware: str
    model: str
    config: dict[str, Any]
    step_latency_s: np.ndarray
    prefill_s: float
    prefill_breakdown_s: dict[str, float]
    breakdown_s: dict[str, float]
    categories: dict[str, str]
    link_bytes: dict[str, float]
    link_busy_s: dict[str, float]
    link_effective_gbps: dict[str, float]
    memory: MemoryFit
    demand_label: str
    mapped_from: str | None
    synthetic: str | None
    engine: str
    transplanted_method: str | None = None  # the trace's policy when another method's model priced it
    # Transfer op -> (bandwidth seconds, per-copy seconds) of its copies over the whole run, each copy's
    # pipeline cycle split into its bytes' wire time and the rest (sim.engine.transfer_parts_s)
    transfer_parts_s: dict[str, tuple[float, float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    oom: bool = False
    _events: list[Event] = field(default_factory=list, repr=False)
    _replay: Callable[[int], list[Event]] | None = field(default=None, repr=False, compare=False)

    @property
    def implementation(self) -> str:
        """ "as-published" or "ideal": how the method was priced (SimConfig.implementation)."""
        return str(self.config.get("implementation", "ideal"))

    @property
    def software(self) -> str:
        """The software profile whose host costs were charged ("none" in ideal mode)."""
        return str(self.config.get("software", "")) if self.implementation == "as-published" else "none"

    @property
    def pricing_label(self) -> str:
        """How the latencies were priced, for every output: e.g. "as-published (pytorch2-cuda12)"."""
        if self.implementation == "ideal":
            return "ideal (hardware limits)"
        changed = sorted(self.config.get("software_overrides") or {})
        extra = f" with {', '.join(changed)} overridden" if changed else ""
        return f"as-published ({self.software}{extra})"

    @property
    def decode_s(self) -> float:
        return float(self.step_latency_s.sum())

    @property
    def batch_size(self) -> int:
        return int(self.config["batch_size"])

    @property
    def oom_message(self) -> str | None:
        """'out of memory: needs X GiB ..., has Y; largest batch that fits: N', or None when it fits."""
        return oom_message(self.memory) if self.oom else None

    def latency_stats(self) -> dict[str, float]:
        """mean, p50, p99 and max of the step latency (NaN when out of memory: there is none).

        p99 is below the mean only when rare stalls (fewer than 1% of the steps, e.g. a blocking
        re-factorisation every few hundred tokens) dominate it; `max` shows them."""
        if self.oom:
            return dict.fromkeys(("mean", "p50", "p99", "max"), float("nan"))
        lat = self.step_latency_s
        return {
            "mean": float(lat.mean()),
            "p50": float(np.percentile(lat, 50)),
            "p99": float(np.percentile(lat, 99)),
            "max": float(lat.max()),
        }

    def critical_share(self) -> dict[str, float]:
        """Share of the critical path per category: "select", "recall" (their GPU streams and copies) and
        "host" (the host thread late with its own work: "<op>.host" entries, host-only ops)."""
        total = sum(self.breakdown_s.values()) or 1.0
        return {
            cat: sum(v for op, v in self.breakdown_s.items() if self.categories.get(op) == cat) / total
            for cat in ("select", "recall", "host")
        }

    def link_utilisation(self) -> dict[str, float]:
        """Bytes moved over (effective bandwidth * decode time), per direction."""
        t = self.decode_s or 1.0
        return {d: self.link_bytes[d] / (self.link_effective_gbps[d] * 1e9 * t) for d in ("h2d", "d2h")}

    def timeline(self, step: int) -> list[TimelineEvent]:
        """Op-level events of decode step `step` (recorded, or recomputed by replaying the schedule)."""
        n = len(self.step_latency_s)
        if not 0 <= step < n:
            from sim.errors import SimInputError

            raise SimInputError(f"timeline step must be in [0, {n - 1}], got {step}")
        events = [e for e in self._events if e[4] == step]
        if not events and self._replay is not None:
            events = self._replay(step)
        return [_event_dict(e) for e in sorted(events, key=lambda e: (e[2], e[0]))]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (docs/contracts.md "Simulator API")."""
        mem = self.memory
        decode = self.decode_s
        tokens = self.batch_size * len(self.step_latency_s)
        memory = {
            "gpu_bytes": mem.gpu_bytes,
            "host_bytes": mem.host_bytes,
            "fits": mem.fits,
            "max_batch": mem.max_batch,
            "gpu_capacity_bytes": mem.gpu_capacity_bytes,
            "gpu_total_bytes": mem.gpu_total_bytes,
            "gpu_memory_utilization": mem.gpu_memory_utilization,
            "host_capacity_bytes": mem.host_capacity_bytes,
            "weights_bytes": mem.weights_bytes,
            "kv_gpu_bytes": mem.kv_gpu_bytes,
            "activation_bytes": mem.activation_bytes,
            "limit": mem.limit,
        }
        if self.oom:
            return {
                "method": self.method, "hardware": self.hardware, "model": self.model,
                "config": self.config, "engine": self.engine, "demand": self.demand_label,
                "mapped_from": self.mapped_from, "synthetic": self.synthetic,
                "transplanted_method": self.transplanted_method,
                "oom": True, "oom_message": self.oom_message,
                "per_token_latency_s": None, "prefill_s": None, "prefill_breakdown_s": {}, "decode_s": None,
                "throughput_tokens_per_s": None, "end_to_end_tokens_per_s": None, "breakdown_s": {},
                "breakdown_category": self.categories, "critical_share": None, "link_utilisation": None,
                "link_busy_share": None, "link_bytes": None, "memory": memory, "notes": list(self.notes),
            }
        return {
            "method": self.method,
            "hardware": self.hardware,
            "model": self.model,
            "config": self.config,
            "implementation": self.implementation,
            "software": self.software,
            "engine": self.engine,
            "demand": self.demand_label,
            "mapped_from": self.mapped_from,
            "transplanted_method": self.transplanted_method,
            "synthetic": self.synthetic,
            "oom": False,
            "oom_message": None,
            "per_token_latency_s": self.latency_stats(),
            "prefill_s": self.prefill_s,
            "prefill_breakdown_s": self.prefill_breakdown_s,
            "decode_s": decode,
            "throughput_tokens_per_s": tokens / decode if decode else 0.0,
            "end_to_end_tokens_per_s": tokens / (decode + self.prefill_s) if decode else 0.0,
            "breakdown_s": self.breakdown_s,
            "breakdown_category": self.categories,
            "critical_share": self.critical_share(),
            "link_utilisation": self.link_utilisation(),
            "link_busy_share": {d: self.link_busy_s[d] / (decode or 1.0) for d in ("h2d", "d2h")},
            "link_bytes": self.link_bytes,
            "memory": memory,
            "notes": list(self.notes),
        }


def _usable_share(mem: MemoryFit) -> str:
    """' usable (0.9 of 40.0)' when only a share of the GPU's memory is usable (sim.memory)."""
    if not mem.gpu_total_bytes or mem.gpu_memory_utilization >= 1.0:
        return ""
    return f" usable ({mem.gpu_memory_utilization:g} of {mem.gpu_total_bytes / 2**30:.1f})"


def oom_message(mem: MemoryFit) -> str:
    """What does not fit, what it needs and has, and the largest batch that fits (one line)."""
    gib = 2**30
    parts = []
    if mem.gpu_bytes > mem.gpu_capacity_bytes:
        parts.append(
            f"needs {mem.gpu_bytes / gib:.1f} GiB of GPU memory, has {mem.gpu_capacity_bytes / gib:.1f}"
            + _usable_share(mem)
        )
    if mem.host_bytes > mem.host_capacity_bytes:
        parts.append(
            f"needs {mem.host_bytes / gib:.1f} GiB of host memory, has {mem.host_capacity_bytes / gib:.1f}"
        )
    return f"out of memory: {'; '.join(parts) or 'does not fit'}; largest batch that fits: {mem.max_batch}"
