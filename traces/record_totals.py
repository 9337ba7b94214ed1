"""Totals over a trace's records that `traces.stats.trace_summary` reports beside its statistics: the
sequences seen, the context of the steps, and the mean measured timings of steps and prefills."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from traces.records import PrefillRecord, StepRecord

__all__ = ["RecordTotals"]


@dataclass
class RecordTotals:
    """Totals over a trace's records: the sequences seen, the context range, the measured timings."""

    sequences: set[int] = field(default_factory=set)
    context_min: float = math.inf
    context_max: int = 0
    context_sum: int = 0
    timing_sum: dict[str, float] = field(default_factory=dict)
    timing_steps: dict[str, int] = field(default_factory=dict)
    prefill_sum: dict[str, float] = field(default_factory=dict)
    prefill_count: dict[str, int] = field(default_factory=dict)

    def add_prefill(self, rec: PrefillRecord) -> None:
        for name, seconds in rec.timings_s.items():
            self.prefill_sum[name] = self.prefill_sum.get(name, 0.0) + seconds
            self.prefill_count[name] = self.prefill_count.get(name, 0) + 1

    def add_step(self, rec: StepRecord) -> None:
        self.context_min = min(self.context_min, rec.context_tokens)
        self.context_max = max(self.context_max, rec.context_tokens)
        self.context_sum += rec.context_tokens
        for name, seconds in rec.timings_s.items():
            self.timing_sum[name] = self.timing_sum.get(name, 0.0) + seconds
            self.timing_steps[name] = self.timing_steps.get(name, 0) + 1

    def timings(self, clock: str) -> dict[str, Any]:
        """Mean measured seconds per timing name, over the steps and over the prefills that have it."""
        return {
            "clock": clock,
            "step_mean": {k: self.timing_sum[k] / self.timing_steps[k] for k in sorted(self.timing_sum)},
            "steps_with": dict(sorted(self.timing_steps.items())),
            "prefill_mean": {
                k: self.prefill_sum[k] / self.prefill_count[k] for k in sorted(self.prefill_sum)
            },
        }
