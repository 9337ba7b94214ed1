"""Service-level objectives of a serving answer and the verdict on a run: which p99 broke which limit.

- per-token (TPOT): p99 over requests of (last token - first token) / (output tokens - 1); always set;
- TTFT: p99 time to first token, only when given;
- queueing: without a TTFT SLO a fleet must still keep up with its arrivals, so p99 queueing delay
  (arrival to the start of the request's prefill, plus, disaggregated, the wait for decode memory) must
  stay under `queue_s` (default `DEFAULT_QUEUE_S`): Vidur's capacity search bounds the p99 scheduling
  delay the same way, at 5 s (microsoft/vidur vidur/config_optimizer/config_explorer/main.py:35-36).

A run may stop early once enough requests broke one limit that its p99 is certainly over it
(`violators_needed`); its verdict then says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Slos", "Failure", "DEFAULT_QUEUE_S", "PERCENTILE", "violators_needed"]

DEFAULT_QUEUE_S = 5.0
PERCENTILE = 99.0


def violators_needed(n_requests: int) -> int:
    """How many of n requests over a limit make numpy's (linearly interpolated) p99 over it: the value at
    index floor(0.99 (n - 1)) of the sorted values and all above it."""
    k = int((PERCENTILE / 100) * (n_requests - 1))
    return n_requests - k


@dataclass(frozen=True)
class Slos:
    tpot_s: float
    ttft_s: float | None = None
    queue_s: float = DEFAULT_QUEUE_S

    @property
    def limits(self) -> dict[str, float]:
        """SLO name -> limit in seconds (queueing only without a TTFT SLO)."""
        out = {"TPOT": self.tpot_s}
        if self.ttft_s is not None:
            out["TTFT"] = self.ttft_s
        else:
            out["queueing"] = self.queue_s
        return out

    def text(self) -> str:
        parts = [f"p99 per-token <= {self.tpot_s * 1e3:g} ms"]
        if self.ttft_s is not None:
            parts.append(f"p99 TTFT <= {self.ttft_s:g} s")
        else:
            parts.append(f"no TTFT SLO (keeps up: p99 queueing <= {self.queue_s:g} s)")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tpot_slo_ms": self.tpot_s * 1e3,
            "ttft_slo_s": self.ttft_s,
            "queue_slo_s": self.queue_s,
            "text": self.text(),
        }


@dataclass(frozen=True)
class Failure:
    """One SLO a run broke: its p99 (None when the run stopped before all requests finished) vs the limit."""

    slo: str  # "TPOT", "TTFT" or "queueing"
    p99_s: float | None
    limit_s: float
    violators: int
    requests: int

    def text(self) -> str:
        unit, scale = ("ms", 1e3) if self.slo == "TPOT" else ("s", 1.0)
        name = {"TPOT": "per-token", "TTFT": "TTFT", "queueing": "queueing"}[self.slo]
        if self.p99_s is None:
            return (
                f"p99 {name} > {self.limit_s * scale:.3g} {unit} ({self.violators} of "
                f"{self.requests} requests over it; run stopped early)"
            )
        return (
            f"p99 {name} {self.p99_s * scale:.3g} {unit} > {self.limit_s * scale:.3g} {unit} "
            f"({self.p99_s / self.limit_s:.2f}x the limit)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "slo": self.slo,
            "p99_s": self.p99_s,
            "limit_s": self.limit_s,
            "violators": self.violators,
            "requests": self.requests,
            "text": self.text(),
        }
