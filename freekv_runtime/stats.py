"""Uncertainty of accuracy metrics: 95% confidence intervals and the samples a difference would need.

No torch (the report imports this). Every metric a task returns is an `Estimate`: the point value, a
95% interval and how it was computed:
- "wilson": a proportion of n independent 0/1 outcomes (Wilson score interval, z = 1.96).
- "bootstrap": the mean of n independent per-sample values (percentile bootstrap over the samples,
  2000 resamples, seeded: the same values give the same interval).
- "none": fewer than one value, or a metric that was not measured (NaN).
Units of independence are task samples (sequences): per-token values of one sequence are averaged
first, because tokens of one sequence are not independent.

An Estimate also carries its per-sample results (`samples`: one `SampleScore` per prompt: the prompt's
id, its score, the model's answer), so that two configurations run on the same prompts can be compared
prompt by prompt (paired tests, dse/accuracy). The helpers take `ids=` and `answers=` for that; an id
names the prompt, never the configuration (freekv_runtime.tasks.base.sample_id).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

__all__ = [
    "Estimate",
    "SampleScore",
    "sample_scores",
    "wilson",
    "proportion",
    "bootstrap_mean",
    "estimate",
    "samples_needed_proportions",
    "samples_needed_means",
    "Z95",
]

Z95 = 1.959963984540054  # two-sided 95%
Z80_POWER = 0.8416212335729143  # one-sided 80% power
BOOTSTRAP_RESAMPLES = 2000
ANSWER_CHARS = 200  # a sample's answer is kept up to this many characters


def _json_float(v: float) -> float | None:
    return None if math.isnan(v) else v


@dataclass(frozen=True)
class SampleScore:
    """One prompt's result: id (the same prompt has the same id under every KV method and knob), score
    (0/1 for right/wrong, else the per-sample value; NaN when not measured), answer (the model's
    decoded answer or a short description, at most ANSWER_CHARS characters)."""

    id: str
    score: float
    answer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "score": _json_float(self.score), "answer": self.answer}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SampleScore:
        score = d.get("score")
        return cls(str(d["id"]), float("nan") if score is None else float(score), str(d.get("answer", "")))


def sample_scores(
    ids: Sequence[str], scores: Sequence[float], answers: Sequence[str] | None = None
) -> tuple[SampleScore, ...]:
    """One SampleScore per id (answers cut to ANSWER_CHARS); ValueError when the lengths differ."""
    answers = [""] * len(ids) if answers is None else answers
    if not len(ids) == len(scores) == len(answers):
        raise ValueError(
            f"{len(ids)} ids, {len(scores)} scores and {len(answers)} answers: one each per sample"
        )
    return tuple(
        SampleScore(str(i), float(s), str(a)[:ANSWER_CHARS])
        for i, s, a in zip(ids, scores, answers, strict=True)
    )


@dataclass(frozen=True)
class Estimate:
    """A metric with its 95% interval. value/low/high NaN when not measured; sd: the sample standard
    deviation of the per-sample values (what a sample-size estimate needs), NaN for n < 2; samples: the
    per-sample results the value was computed from (empty where they were not recorded)."""

    value: float
    low: float
    high: float
    n: int
    method: str
    sd: float = float("nan")
    samples: tuple[SampleScore, ...] = ()

    def to_dict(self, with_samples: bool = True) -> dict[str, Any]:
        """JSON-ready: NaN becomes None; "samples" (a list of {"id", "score", "answer"}) only when there
        are samples and with_samples."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "samples":
                out[f.name] = _json_float(v) if isinstance(v, float) else v
        if self.samples and with_samples:
            out["samples"] = [s.to_dict() for s in self.samples]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Estimate:
        nan = float("nan")
        return cls(
            value=nan if d.get("value") is None else float(d["value"]),
            low=nan if d.get("low") is None else float(d["low"]),
            high=nan if d.get("high") is None else float(d["high"]),
            n=int(d.get("n", 0)),
            method=str(d.get("method", "none")),
            sd=nan if d.get("sd") is None else float(d["sd"]),
            samples=tuple(SampleScore.from_dict(s) for s in d.get("samples") or ()),
        )

    def __str__(self) -> str:
        if math.isnan(self.value):
            return "-"
        if math.isnan(self.low):
            return f"{self.value:.3f} (n={self.n})"
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}] (n={self.n}, {self.method})"


def wilson(successes: int, n: int, z: float = Z95) -> Estimate:
    """Wilson score interval of a proportion successes / n."""
    if n < 1:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, "none")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    sd = math.sqrt(p * (1 - p) * n / (n - 1)) if n > 1 else float("nan")
    return Estimate(p, max(0.0, centre - half), min(1.0, centre + half), n, "wilson", sd)


def proportion(
    outcomes: Sequence[bool | float], *, ids: Sequence[str] | None = None,
    answers: Sequence[str] | None = None,
) -> Estimate:
    """Wilson interval of the share of true (or 1) outcomes; with ids, the outcomes as 0/1 samples."""
    scores = [float(bool(o)) for o in outcomes]
    e = wilson(int(sum(scores)), len(scores))
    return e if ids is None else _with_samples(e, ids, scores, answers)


def _with_samples(
    e: Estimate, ids: Sequence[str], scores: Sequence[float], answers: Sequence[str] | None
) -> Estimate:
    return Estimate(e.value, e.low, e.high, e.n, e.method, e.sd, sample_scores(ids, scores, answers))


def bootstrap_mean(
    values: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES, *,
    ids: Sequence[str] | None = None, answers: Sequence[str] | None = None,
) -> Estimate:
    """Percentile-bootstrap 95% interval of the mean of independent values (seeded); NaN values are
    left out of the mean but kept (as unmeasured) among the samples of `ids`."""
    if ids is not None:
        return _with_samples(bootstrap_mean(values, seed, resamples), ids, list(values), answers)
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    n = len(x)
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0, "none")
    mean = float(x.mean())
    if n == 1:
        return Estimate(mean, float("nan"), float("nan"), 1, "none")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, n, size=(resamples, n))].mean(axis=1)  # (resamples,)
    low, high = np.quantile(means, [0.025, 0.975])
    return Estimate(mean, float(low), float(high), n, "bootstrap", float(x.std(ddof=1)))


def estimate(
    values: Sequence[float], seed: int = 0, *, ids: Sequence[str] | None = None,
    answers: Sequence[str] | None = None,
) -> Estimate:
    """Per-sample values -> Estimate: Wilson when every value is 0 or 1, else bootstrap of the mean;
    with ids (one per value), the values as samples."""
    if ids is not None:
        return _with_samples(estimate(values, seed), ids, list(values), answers)
    x = np.asarray(values, dtype=np.float64)
    x = x[~np.isnan(x)]
    if len(x) and np.all((x == 0) | (x == 1)):
        return wilson(int(x.sum()), len(x))
    return bootstrap_mean(x, seed)


def samples_needed_proportions(p1: float, p2: float) -> float:
    """Samples per configuration for a two-sided 5% test with 80% power to tell proportions p1 and p2
    apart (normal approximation); inf when they are equal."""
    d = abs(p1 - p2)
    if d == 0 or math.isnan(d):
        return math.inf
    p_bar = (p1 + p2) / 2
    a = Z95 * math.sqrt(2 * p_bar * (1 - p_bar))
    b = Z80_POWER * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return math.ceil(((a + b) / d) ** 2)


def samples_needed_means(difference: float, sd: float) -> float:
    """Samples per configuration to detect a difference of means with per-sample standard deviation sd
    (two-sided 5%, 80% power, equal sizes); inf when the difference is 0 or sd unknown."""
    if difference == 0 or math.isnan(difference) or math.isnan(sd):
        return math.inf
    return math.ceil(2 * ((Z95 + Z80_POWER) * sd / abs(difference)) ** 2)
