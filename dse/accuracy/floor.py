"""The accuracy floor: does a configuration keep at least `ratio` of dense attention's accuracy?

Decided on paired samples: the prompts both the configuration and dense attention were scored on (the
same prompt ids). The rule (`FLOOR_RULE`, printed with every answer that applies it):

- d = mean(configuration) - ratio x mean(dense) over the n paired prompts; its 95% interval from a
  paired percentile bootstrap (scipy.stats.bootstrap, `paired=True`, 4000 resamples, seeded);
- **below** the floor: the whole interval is under 0 and, for 0/1 scores, McNemar's exact test of the
  discordant prompts (configuration wrong where dense was right, and the reverse) rejects equal accuracy
  at 5% (scipy.stats.binomtest) with more losses than wins;
- **meets** it: the whole interval is at or above 0 and n >= 3 / (1 - ratio): with fewer prompts, even
  a configuration that never failed could hide a drop of 1 - ratio (the rule of three: 0 failures in n
  bound the failure rate by 3/n at 95%). A ratio of 1 (no drop at all) is met only by an interval above 0;
- otherwise **undecided**: the evidence cannot tell, and the answer says so rather than keeping or
  dropping the configuration silently.

Never imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["FloorVerdict", "floor_verdict", "FLOOR_RULE", "MEETS", "BELOW", "UNDECIDED", "REFERENCE",
           "min_prompts_to_meet", "drop_resolvable", "rule_text", "paired_scores", "mcnemar_exact"]

MEETS, BELOW, UNDECIDED, REFERENCE = "meets", "below", "undecided", "reference"
RESAMPLES = 4000

FLOOR_RULE = (
    "floor: accuracy >= {ratio:g} x dense's on the same prompts. d = mean(config) - {ratio:g} x "
    "mean(dense) over the paired prompts, 95% paired bootstrap interval; below: interval < 0 (and, for "
    "0/1 scores, McNemar's exact test p < 0.05 with more losses than wins); meets: interval >= 0 with at "
    "least {n_min} paired prompts (rule of three); else undecided"
)


@dataclass(frozen=True)
class FloorVerdict:
    """verdict: meets, below, undecided, or reference (dense attention itself).
    n: paired prompts. config_mean / dense_mean: over those prompts. d_low..d_high: the 95% interval of
    d = config_mean - ratio x dense_mean. mcnemar_p: exact McNemar p-value (0/1 scores), else None.
    wins / losses: prompts the configuration got right where dense did not, and the reverse (0/1
    scores). reason: one sentence why."""

    verdict: str
    ratio: float
    n: int
    config_mean: float
    dense_mean: float
    d: float
    d_low: float
    d_high: float
    mcnemar_p: float | None
    wins: int | None
    losses: int | None
    reason: str

    @property
    def ratio_to_dense(self) -> float:
        return self.config_mean / self.dense_mean if self.dense_mean > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}

    def short(self) -> str:
        """'meets (d +0.04 [+0.01, +0.08], n=60)'."""
        if self.verdict == REFERENCE:
            return REFERENCE
        if self.n < 2:
            return f"{self.verdict} (n={self.n})"
        return f"{self.verdict} (d {self.d:+.2f} [{self.d_low:+.2f}, {self.d_high:+.2f}], n={self.n})"


def min_prompts_to_meet(ratio: float) -> float:
    """Paired prompts a 'meets' verdict needs: 3 / (1 - ratio) (inf for a ratio of 1)."""
    return math.inf if ratio >= 1 else math.ceil(3 / (1 - ratio) - 1e-9)


def rule_text(ratio: float) -> str:
    n_min = min_prompts_to_meet(ratio)
    return FLOOR_RULE.format(ratio=ratio, n_min="an interval above 0 and" if math.isinf(n_min) else n_min)


def paired_scores(config: Mapping[str, float], dense: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The scores of the prompts both were scored on (NaN left out), in config's order."""
    ids = [i for i in config if i in dense and not math.isnan(config[i]) and not math.isnan(dense[i])]
    return (np.array([config[i] for i in ids], dtype=np.float64),
            np.array([dense[i] for i in ids], dtype=np.float64))


def _interval(x: np.ndarray, y: np.ndarray, ratio: float, seed: int) -> tuple[float, float]:
    from scipy.stats import bootstrap

    d = x - ratio * y
    if np.all(d == d[0]):  # every resample gives the same mean
        return float(d[0]), float(d[0])
    res = bootstrap((x, y), lambda a, b, axis: a.mean(axis) - ratio * b.mean(axis), paired=True,
                    vectorized=True, n_resamples=RESAMPLES, method="percentile", confidence_level=0.95,
                    rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mcnemar_exact(x: np.ndarray, y: np.ndarray) -> tuple[float, int, int]:
    """McNemar's exact test of paired 0/1 scores x vs y: (two-sided p, wins of x, losses of x); p = 1
    when no prompt is discordant."""
    from scipy.stats import binomtest

    wins = int(np.sum((x == 1) & (y == 0)))
    losses = int(np.sum((x == 0) & (y == 1)))
    p = 1.0 if wins + losses == 0 else float(binomtest(losses, wins + losses, 0.5).pvalue)
    return p, wins, losses


def floor_verdict(config: Mapping[str, float], dense: Mapping[str, float], ratio: float,
                  seed: int = 0) -> FloorVerdict:
    """The floor's verdict for per-prompt scores {prompt id: score} of a configuration and of dense
    attention (see the module docstring for the rule)."""
    if not 0 < ratio <= 1:
        raise ValueError(f"accuracy floor ratio must be in (0, 1], got {ratio}")
    x, y = paired_scores(config, dense)
    n = len(x)
    nan = math.nan
    if n < 2:
        return FloorVerdict(UNDECIDED, ratio, n, float(x.mean()) if n else nan, float(y.mean()) if n else nan,
                            nan, nan, nan, None, None, None,
                            f"{n} prompt(s) scored under both the configuration and dense: nothing to pair")
    low, high = _interval(x, y, ratio, seed)
    binary = bool(np.all(np.isin(x, (0, 1))) and np.all(np.isin(y, (0, 1))))
    p, wins, losses = mcnemar_exact(x, y) if binary else (None, None, None)
    d = float(x.mean() - ratio * y.mean())
    n_min = min_prompts_to_meet(ratio)
    if high < 0 and (p is None or (p < 0.05 and losses > wins)):
        verdict, reason = BELOW, "the whole interval of d is below 0" + (
            f" and McNemar's exact test gives p = {p:.3g} ({losses} losses, {wins} wins)" if p is not None
            else "")
    elif high < 0:
        verdict, reason = UNDECIDED, (f"d's interval is below 0 but McNemar's exact test does not reject "
                                      f"equal accuracy (p = {p:.3g}; {losses} losses, {wins} wins)")
    elif (low >= 0 and n >= n_min) or (math.isinf(n_min) and low > 0):
        verdict, reason = MEETS, "the whole interval of d is at or above 0"
    elif low >= 0:
        verdict, reason = UNDECIDED, (f"d's interval is at or above 0 but {n} paired prompts cannot rule out "
                                      f"a drop of {1 - ratio:.0%} (the rule of three needs {n_min})")
    else:
        verdict, reason = UNDECIDED, "d's interval contains 0"
    return FloorVerdict(verdict, ratio, n, float(x.mean()), float(y.mean()), d, low, high, p, wins, losses,
                        reason)


def drop_resolvable(n: int, dense_accuracy: float, drop: float = 0.10) -> bool:
    """Whether n prompts per configuration resolve a drop of `drop` (absolute) from dense's accuracy
    with a two-sided 5% test at 80% power (normal approximation for proportions, unpaired: pairing
    only helps)."""
    from freekv_runtime.stats import samples_needed_proportions

    low = max(0.0, dense_accuracy - drop)
    return samples_needed_proportions(dense_accuracy, low) <= n
