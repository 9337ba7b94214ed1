"""Per-request times and every inter-token gap one simulated run writes (the replicas, prefill and decode
pools write here), with the early stop: once enough requests (TBT: gaps) broke one SLO that its
percentile is certainly over the limit (sim.serving.slos.violators_needed), the run's `stop` event fires
and the simulation ends there."""

from __future__ import annotations

import numpy as np
import simpy

from sim.serving.requests import Request
from sim.serving.slos import Slos, violators_needed
from sim.serving.token_gaps import GapLog

__all__ = ["Ledger"]


class Ledger:
    def __init__(
        self, env: simpy.Environment, requests: list[Request], slos: Slos | None, stop_early: bool
    ) -> None:
        n = len(requests)
        self.env, self.requests, self.slos, self.stop_early = env, requests, slos, stop_early
        self.arrival = np.array([r.arrival_s for r in requests], dtype=np.float64)
        self.outputs = np.array([r.output_tokens for r in requests], dtype=np.int64)
        self.start = np.full(n, np.nan)  # prefill (first chunk) starts
        self.first = np.full(n, np.nan)  # first token reaches the user
        self.finish = np.full(n, np.nan)
        self.prefill_end = np.full(n, np.nan)  # disaggregated: the prompt's prefill ends
        self.decode_admit = np.full(n, np.nan)  # disaggregated: decode memory reserved
        self._step_one: list[float] = []  # decode iterations of one duration each
        self._step_many: list[tuple[float, int]] = []  # (duration, count) of spans of equal steps
        self._step_arrays: list[np.ndarray] = []
        self.max_batch = 0
        self.max_iteration_tokens = 0  # decode tokens + prefill chunk tokens of one iteration (chunked)
        self.done = 0
        self.gap_log = GapLog(n)
        self.violators = {"TPOT": 0, "TBT": 0, "TTFT": 0, "queueing": 0}
        self.stopped_by: str | None = None
        n_gaps = int(np.maximum(self.outputs - 1, 0).sum())
        token_pct = slos.token_percentile if slos is not None else 99.0
        self._needed = {
            "TPOT": violators_needed(n),
            "TTFT": violators_needed(n),
            "queueing": violators_needed(n),
            "TBT": violators_needed(n_gaps, token_pct) if n_gaps else 1,
        }
        self.stop = env.event()

    def _violated(self, slo: str, count: int = 1) -> None:
        self.violators[slo] += count
        if self.stop_early and self.stopped_by is None and self.violators[slo] >= self._needed[slo]:
            self.stopped_by = slo
            if not self.stop.triggered:
                self.stop.succeed()

    def started(self, i: int) -> None:
        """Request i's prefill starts now."""
        self.start[i] = self.env.now
        s = self.slos
        if s is not None and s.ttft_s is None and self.env.now - self.arrival[i] > s.queue_s:
            self._violated("queueing")

    def prefilled(self, i: int) -> None:
        """Disaggregated: request i's prefill ends now."""
        self.prefill_end[i] = self.env.now

    def decode_admitted(self, i: int) -> None:
        """Disaggregated: request i got decode memory now."""
        self.decode_admit[i] = self.env.now
        s = self.slos
        if s is not None and s.ttft_s is None:
            queue = self.start[i] - self.arrival[i]
            if queue <= s.queue_s < queue + self.env.now - self.prefill_end[i]:
                self._violated("queueing")

    def waits(self) -> tuple[np.ndarray, np.ndarray]:
        """(prefill queueing, decode-memory wait) per request; a wait still under way counts up to now."""
        now = self.env.now
        arrived = self.arrival <= now
        prefill = np.where(
            np.isnan(self.start), np.where(arrived, now - self.arrival, np.nan), self.start - self.arrival
        )
        pending = np.isfinite(self.prefill_end) & np.isnan(self.decode_admit)
        waited = np.nan_to_num(self.decode_admit - self.prefill_end)
        decode = np.where(pending, now - self.prefill_end, waited)
        return prefill, decode

    def first_token(self, i: int) -> None:
        self.first[i] = self.env.now
        self.gap_log.first_token(i, self.env.now)
        s = self.slos
        if s is not None and s.ttft_s is not None and self.env.now - self.arrival[i] > s.ttft_s:
            self._violated("TTFT")
        if self.outputs[i] == 1:
            self.finished(i)

    def finished(self, i: int) -> None:
        self.finish[i] = self.env.now
        self.done += 1
        s, out = self.slos, self.outputs[i]
        if s is not None and s.token_slo == "TPOT" and out > 1:
            if (self.env.now - self.first[i]) / (out - 1) > s.token_s:
                self._violated("TPOT")
        if self.done == len(self.requests) and not self.stop.triggered:
            self.stop.succeed()

    def tokens(self, ids: np.ndarray, step_s: float | np.ndarray, steps: int) -> None:
        """The `steps` iterations ending now gave each request of `ids` one token each: iterations of
        `step_s` each, or of the durations in the array `step_s` (sim/serving/token_gaps.py)."""
        first, rest, repeat = self.gap_log.block(ids, self.env.now, step_s, steps)
        s = self.slos
        if s is not None and s.token_slo == "TBT":
            over = int((first > s.token_s).sum()) + int(repeat[rest > s.token_s].sum()) * len(ids)
            if over:
                self._violated("TBT", over)

    def steps(self, duration_s: float | np.ndarray, count: int = 1) -> None:
        """Record decode iterations: `count` of one duration, or an array of durations."""
        if isinstance(duration_s, np.ndarray):
            self._step_arrays.append(duration_s)
        elif count == 1:
            self._step_one.append(duration_s)
        else:
            self._step_many.append((duration_s, count))

    def step_s(self) -> np.ndarray:
        """Every decode iteration's duration (order not kept)."""
        many = np.array(self._step_many, dtype=np.float64).reshape(-1, 2)
        parts = [
            np.array(self._step_one, dtype=np.float64),
            np.repeat(many[:, 0], many[:, 1].astype(np.int64)),
        ]
        return np.concatenate(parts + self._step_arrays)

    def batch(self, size: int) -> None:
        self.max_batch = max(self.max_batch, size)

    def iteration_tokens(self, tokens: int) -> None:
        self.max_iteration_tokens = max(self.max_iteration_tokens, tokens)
