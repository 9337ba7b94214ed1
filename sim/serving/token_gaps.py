"""Every inter-token gap (TBT: time between two tokens of one request) of a serving run, kept compactly and
read with exact percentiles.

A replica emits its running batch's tokens in blocks: `steps` decode iterations (or mixed iterations) end
back to back and each running request gets one token per iteration. A block is stored as the batch's
request ids, each request's first gap in the block (from its previous token, which may lie before a
prefill stall) and the block's remaining iteration durations, shared by every request of the block (one
value repeated `repeat` times, or one value per iteration). Nothing is expanded: a block of k iterations
of b requests costs b + (k - 1) numbers at most, and `percentile` weights each shared value by how many
gaps it stands for. `expanded()` and `of_request()` give the gaps one by one (tests, small runs).

`percentile(q)` equals `numpy.percentile(expanded(), q)` (numpy's default linear method, its own
interpolation formula), so an SLO on P99 TBT is the same number a token-by-token log gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["TokenGaps", "GapLog", "weighted_percentile"]


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """numpy.percentile(np.repeat(values, weights), q) without expanding (weights: positive integers)."""
    order = np.argsort(values, kind="stable")
    return _sorted_percentile(values[order], np.cumsum(weights[order]), q)


def _sorted_percentile(v: np.ndarray, cum: np.ndarray, q: float) -> float:
    """The q-th percentile of sorted values `v` with cumulative weights `cum`."""
    n = int(cum[-1])
    h = (q / 100) * (n - 1)
    lo = int(np.floor(h))
    a = v[np.searchsorted(cum, lo, side="right")]
    b = v[np.searchsorted(cum, min(lo + 1, n - 1), side="right")]
    t = h - lo
    diff = b - a
    return float(b - diff * (1 - t) if t >= 0.5 else a + diff * t)  # numpy's _lerp


@dataclass
class TokenGaps:
    """The gaps of a run in blocks (module docstring). Arrays are concatenated over blocks."""

    requests: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per (block, request)
    first_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # its first gap in the block
    block_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # requests per block
    rest_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # the block's other iterations
    rest_repeat: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # times each repeats
    rest_block: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # its block
    _sorted: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def count(self) -> int:
        return int(len(self.first_s) + self._rest_weights().sum())

    def percentile(self, q: float, zeros: int = 0) -> float | None:
        """The q-th percentile of every gap and `zeros` more gaps of 0 s (Sarathi-Serve logs a 0 for each
        request's first output token: sarathi/core/datatypes/sequence_state.py:277-289 at commit
        ceaa066); None without gaps."""
        if self.count + zeros == 0:
            return None
        if zeros:
            values = np.concatenate([[0.0], self.first_s, self.rest_s])
            weights = np.concatenate([[zeros], np.ones(len(self.first_s), np.int64), self._rest_weights()])
            keep = weights > 0
            return weighted_percentile(values[keep], weights[keep], q)
        if self._sorted is None:
            values = np.concatenate([self.first_s, self.rest_s])
            weights = np.concatenate([np.ones(len(self.first_s), np.int64), self._rest_weights()])
            keep = weights > 0
            order = np.argsort(values[keep], kind="stable")
            self._sorted = (values[keep][order], np.cumsum(weights[keep][order]))
        return _sorted_percentile(*self._sorted, q)

    def _rest_weights(self) -> np.ndarray:
        return self.rest_repeat * self.block_sizes[self.rest_block]

    def count_over(self, limit_s: float) -> int:
        """How many gaps are longer than `limit_s`."""
        return int((self.first_s > limit_s).sum() + self._rest_weights()[self.rest_s > limit_s].sum())

    def expanded(self) -> np.ndarray:
        """Every gap, one number each (order: per block, first gaps then the shared ones)."""
        shared = np.repeat(self.rest_s, self._rest_weights())
        return np.concatenate([self.first_s, shared])

    def of_request(self, i: int) -> np.ndarray:
        """Request i's gaps in token order."""
        starts = np.concatenate([[0], np.cumsum(self.block_sizes)])
        out: list[float] = []
        for block in np.unique(np.searchsorted(starts, np.flatnonzero(self.requests == i), side="right") - 1):
            at = starts[block] + int(np.flatnonzero(self.requests[starts[block]:starts[block + 1]] == i)[0])
            out.append(float(self.first_s[at]))
            mine = self.rest_block == block
            out.extend(np.repeat(self.rest_s[mine], self.rest_repeat[mine]).tolist())
        return np.array(out)


class GapLog:
    """Collects a run's blocks of tokens; `last_s[i]` is when request i's last token was emitted."""

    def __init__(self, n_requests: int) -> None:
        self.last_s = np.full(n_requests, np.nan)
        self._ids: list[np.ndarray] = []
        self._first: list[np.ndarray] = []
        self._rest: list[np.ndarray] = []
        self._repeat: list[np.ndarray] = []

    def first_token(self, i: int, now_s: float) -> None:
        self.last_s[i] = now_s

    def block(self, ids: np.ndarray, now_s: float, step_s: float | np.ndarray, steps: int) -> tuple:
        """`steps` iterations ending at `now_s` gave each of `ids` one token each: iterations of `step_s`
        each, or of the durations in the array `step_s`. Returns (first gaps, shared gaps, their repeat)."""
        durations = np.atleast_1d(np.asarray(step_s, dtype=np.float64))
        if durations.size == 1:
            first_end = now_s - (steps - 1) * float(durations[0])
            keep = 1 if steps > 1 else 0
            rest, repeat = durations[:keep], np.full(keep, steps - 1, np.int64)
        else:
            first_end = now_s - float(durations[1:].sum())
            rest, repeat = durations[1:], np.ones(len(durations) - 1, np.int64)
        first = first_end - self.last_s[ids]
        self.last_s[ids] = now_s
        self._ids.append(ids)
        self._first.append(first)
        self._rest.append(rest)
        self._repeat.append(repeat)
        return first, rest, repeat

    def gaps(self) -> TokenGaps:
        if not self._ids:
            return TokenGaps()
        sizes = np.array([len(x) for x in self._ids], np.int64)
        return TokenGaps(
            requests=np.concatenate(self._ids).astype(np.int64),
            first_s=np.concatenate(self._first),
            block_sizes=sizes,
            rest_s=np.concatenate(self._rest),
            rest_repeat=np.concatenate(self._repeat),
            rest_block=np.repeat(np.arange(len(sizes)), [len(r) for r in self._rest]),
        )
