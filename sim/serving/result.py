"""What one simulated serving run answers: per-request TTFT, TPOT and queueing, every inter-token gap
(TBT, sim/serving/token_gaps.py), decode iterations, throughput and goodput, and the verdict against SLOs
(which statistic broke which limit)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.serving.ledger import Ledger
from sim.serving.slos import Failure, Slos
from sim.serving.token_gaps import TokenGaps

__all__ = ["ServingResult"]


def _pct(x: np.ndarray, q: float) -> float | None:
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if len(x) else None


@dataclass
class ServingResult:
    ttft_s: np.ndarray  # per request (NaN: not served before the run stopped)
    tpot_s: np.ndarray  # per request (NaN for a single output token, or not finished)
    step_s: np.ndarray  # every decode iteration
    finish_s: np.ndarray
    output_tokens: np.ndarray
    max_batch: int
    duration_s: float
    queue_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per request: both waits
    prefill_queue_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # arrival to prefill start
    decode_wait_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # disaggregated: for memory
    scheduler: str = "blocking"
    max_iteration_tokens: int = 0  # decode + prefill-chunk tokens of the largest iteration (chunked)
    stopped_by: str | None = None  # the SLO whose violators stopped the run early
    violators: dict[str, int] = field(default_factory=dict)
    slo: dict[str, float] = field(default_factory=dict)
    tbt: TokenGaps = field(default_factory=TokenGaps)  # every inter-token gap of every request

    @classmethod
    def from_ledger(cls, book: Ledger, scheduler: str) -> ServingResult:
        arrival, outputs, first, finish = book.arrival, book.outputs, book.first, book.finish
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(outputs > 1, (finish - first) / np.maximum(outputs - 1, 1), np.nan)
        prefill_wait, decode_wait = book.waits()
        end = book.env.now if book.stopped_by or not np.isfinite(finish).any() else np.nanmax(finish)
        return cls(
            ttft_s=first - arrival,
            tpot_s=tpot,
            step_s=book.step_s(),
            finish_s=finish,
            output_tokens=outputs,
            max_batch=book.max_batch,
            duration_s=float(end - arrival.min()),
            queue_s=prefill_wait + decode_wait,
            prefill_queue_s=prefill_wait,
            decode_wait_s=decode_wait,
            scheduler=scheduler,
            max_iteration_tokens=book.max_iteration_tokens,
            stopped_by=book.stopped_by,
            violators=dict(book.violators),
            tbt=book.gap_log.gaps(),
        )

    def stats(self, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> dict[str, Any]:
        ok = np.isfinite(self.finish_s)
        if ttft_slo_s is not None:
            ok &= np.nan_to_num(self.ttft_s, nan=np.inf) <= ttft_slo_s
        if tpot_slo_s is not None:
            ok &= np.nan_to_num(self.tpot_s, nan=0.0) <= tpot_slo_s
        d = self.duration_s or 1.0
        done = np.isfinite(self.finish_s)
        return {
            "scheduler": self.scheduler,
            "requests": int(len(self.ttft_s)),
            "finished": int(done.sum()),
            "ttft_p50_s": _pct(self.ttft_s, 50),
            "ttft_p99_s": _pct(self.ttft_s, 99),
            "tpot_p50_s": _pct(self.tpot_s, 50),
            "tpot_p99_s": _pct(self.tpot_s, 99),
            "tbt_p50_s": self.tbt.percentile(50),
            "tbt_p90_s": self.tbt.percentile(90),
            "tbt_p99_s": self.tbt.percentile(99),
            "queue_p99_s": _pct(self.queue_s, 99) if len(self.queue_s) else None,
            "step_p50_s": _pct(self.step_s, 50),
            "step_p99_s": _pct(self.step_s, 99),
            "throughput_tokens_per_s": float(self.output_tokens[done].sum() / d),
            "goodput_requests_per_s": float(ok.sum() / d),
            "goodput_tokens_per_s": float(self.output_tokens[ok].sum() / d),
            "slo_attainment": float(ok.mean()) if len(ok) else None,
            "max_batch": self.max_batch,
            "duration_s": self.duration_s,
            "stopped_early_by": self.stopped_by,
        }

    def failures(self, slos: Slos) -> list[Failure]:
        """The SLOs this run broke (empty: it meets them all), the worst (value / limit) first."""
        n = len(self.ttft_s)
        out = []
        for name, (limit, pct) in slos.limits.items():
            count = self.tbt.count if name == "TBT" else n
            if self.stopped_by is not None:
                if name == self.stopped_by:
                    out.append(Failure(name, None, limit, self.violators.get(name, 0), count, pct))
                continue
            if name == "TBT":
                value = self.tbt.percentile(pct)
                over = self.tbt.count_over(limit)
            else:
                x = {"TPOT": self.tpot_s, "TTFT": self.ttft_s, "queueing": self.queue_s}[name]
                value, over = _pct(x, pct), int((np.nan_to_num(x) > limit).sum())
            if value is not None and value > limit:
                out.append(Failure(name, value, limit, over, count, pct))
        return sorted(out, key=lambda f: -(f.value_s or np.inf) / f.limit_s)

    def meets(self, slos: Slos) -> bool:
        return self.stopped_by is None and not self.failures(slos)
