"""Service-level objectives of a serving answer and the verdict on a run: which statistic broke which limit.

- per-token, one of `TOKEN_STATS` (`Slos.token_stat`), always set:
  - `tpot-p99`: p99 over requests of TPOT, a request's mean gap (last token - first token) / (output
    tokens - 1): what DistServe's and Vidur's per-token SLOs bind (a request's mean);
  - `tbt-p99`, `tbt-p90`, `tbt-p50`: that percentile over every inter-token gap (TBT) of every request
    (sim/serving/token_gaps.py): what Sarathi-Serve's capacity search binds at P99
    (microsoft/sarathi-serve sarathi/benchmark/capacity_search/capacity_search.py:79-90 at commit
    ceaa066). A prefill that stalls the running batch shows in the TBT tail at full length; TPOT spreads
    it over the request's tokens;
- TTFT: p99 time to first token, only when given;
- queueing: without a TTFT SLO a fleet must still keep up with its arrivals, so p99 queueing delay
  (arrival to the start of the request's prefill, plus, disaggregated, the wait for decode memory) must
  stay under `queue_s` (default `DEFAULT_QUEUE_S`): Vidur's capacity search bounds the p99 scheduling
  delay the same way, at 5 s (microsoft/vidur vidur/config_optimizer/config_explorer/main.py:35-36).

A run may stop early once enough requests (TBT: gaps) broke one limit that its percentile is certainly
over it (`violators_needed`); its verdict then says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import SimInputError

__all__ = ["Slos", "Failure", "DEFAULT_QUEUE_S", "PERCENTILE", "TOKEN_STATS", "violators_needed"]

DEFAULT_QUEUE_S = 5.0
PERCENTILE = 99.0
# statistic name -> (SLO name, percentile): TPOT over requests, TBT over every gap
TOKEN_STATS: dict[str, tuple[str, float]] = {
    "tpot-p99": ("TPOT", 99.0),
    "tbt-p99": ("TBT", 99.0),
    "tbt-p90": ("TBT", 90.0),
    "tbt-p50": ("TBT", 50.0),
}
_NAMES = {"TPOT": "per-token (TPOT)", "TBT": "inter-token (TBT)", "TTFT": "TTFT", "queueing": "queueing"}


def violators_needed(n: int, percentile: float = PERCENTILE) -> int:
    """How many of n values over a limit make numpy's (linearly interpolated) percentile over it: the value
    at index floor(q (n - 1)) of the sorted values and all above it."""
    return n - int((percentile / 100) * (n - 1))


@dataclass(frozen=True)
class Slos:
    token_s: float  # the per-token limit, on the statistic `token_stat`
    ttft_s: float | None = None
    queue_s: float = DEFAULT_QUEUE_S
    token_stat: str = "tpot-p99"

    def __post_init__(self) -> None:
        if self.token_stat not in TOKEN_STATS:
            raise SimInputError(
                f"--token-slo-stat: unknown statistic {self.token_stat!r}; valid: {', '.join(TOKEN_STATS)}"
            )

    @property
    def token_slo(self) -> str:
        """'TPOT' or 'TBT': the name of the per-token SLO in verdicts."""
        return TOKEN_STATS[self.token_stat][0]

    @property
    def token_percentile(self) -> float:
        return TOKEN_STATS[self.token_stat][1]

    @property
    def limits(self) -> dict[str, tuple[float, float]]:
        """SLO name -> (limit in seconds, percentile) (queueing only without a TTFT SLO)."""
        out = {self.token_slo: (self.token_s, self.token_percentile)}
        if self.ttft_s is not None:
            out["TTFT"] = (self.ttft_s, PERCENTILE)
        else:
            out["queueing"] = (self.queue_s, PERCENTILE)
        return out

    def text(self) -> str:
        name, pct = TOKEN_STATS[self.token_stat]
        parts = [f"p{pct:g} {_NAMES[name]} <= {self.token_s * 1e3:g} ms"]
        if self.ttft_s is not None:
            parts.append(f"p99 TTFT <= {self.ttft_s:g} s")
        else:
            parts.append(f"no TTFT SLO (keeps up: p99 queueing <= {self.queue_s:g} s)")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "token_slo_ms": self.token_s * 1e3,
            "token_slo_stat": self.token_stat,
            "ttft_slo_s": self.ttft_s,
            "queue_slo_s": self.queue_s,
            "text": self.text(),
        }


@dataclass(frozen=True)
class Failure:
    """One SLO a run broke: its percentile value (None when the run stopped before all requests finished)
    vs the limit; violators out of `count` requests (TBT: gaps)."""

    slo: str  # "TPOT", "TBT", "TTFT" or "queueing"
    value_s: float | None
    limit_s: float
    violators: int
    count: int
    percentile: float = PERCENTILE

    def text(self) -> str:
        unit, scale = ("ms", 1e3) if self.slo in ("TPOT", "TBT") else ("s", 1.0)
        name = f"p{self.percentile:g} {_NAMES[self.slo]}"
        what = "gaps" if self.slo == "TBT" else "requests"
        if self.value_s is None:
            return (
                f"{name} > {self.limit_s * scale:.3g} {unit} ({self.violators} of {self.count} {what} over "
                "it; run stopped early)"
            )
        return (
            f"{name} {self.value_s * scale:.3g} {unit} > {self.limit_s * scale:.3g} {unit} "
            f"({self.value_s / self.limit_s:.2f}x the limit)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "slo": self.slo,
            "percentile": self.percentile,
            "value_s": self.value_s,
            "limit_s": self.limit_s,
            "violators": self.violators,
            "count": self.count,
            "text": self.text(),
        }
