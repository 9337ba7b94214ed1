"""Is a paired difference resolved at 95%, and how many paired samples would resolve it?

For a configuration against a reference (dense attention) scored on the same prompts:
- **0/1 scores**: resolved when McNemar's exact test of the discordant prompts rejects equal accuracy
  at 5% (two-sided, scipy.stats.binomtest). Paired samples needed for 80% power at 5%: Connor (1987),
  "Sample size for testing differences in proportions for the paired-sample design", Biometrics
  43(1):207-211, eq. 3, from the observed discordant proportions p10 (configuration right, reference
  wrong) and p01 (the reverse):
      n = (z_{0.975} sqrt(psi) + z_{0.8} sqrt(psi - delta^2))^2 / delta^2,
      psi = p10 + p01, delta = p10 - p01.
- **continuous scores**: resolved when the 95% paired bootstrap interval of the mean difference excludes
  0 (the interval comes from dse/accuracy/floor.py). Paired samples needed: the paired t sample size
  n = ((z_{0.975} + z_{0.8}) sd_d / mean_d)^2 of the per-prompt differences d (at least 2).
With no observed difference (no discordant prompt, or a mean difference of 0) the size is unknown
(None): the data give no effect to size for; `detectable_drop` then says which drop n pairs could see.
Never imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dse.accuracy.floor import floor_verdict, mcnemar_exact, paired_scores

__all__ = ["Resolution", "resolve", "mcnemar_pairs_needed", "paired_means_needed", "detectable_drop",
           "paired_text", "ALPHA", "POWER"]

ALPHA = 0.05  # two-sided
POWER = 0.80


def _z(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


def mcnemar_pairs_needed(p10: float, p01: float, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Connor's (1987) paired sample size for McNemar's test (module docstring); None when p10 == p01
    (no difference to size for)."""
    psi, delta = p10 + p01, p10 - p01
    if delta == 0 or math.isnan(delta):
        return None
    a, b = _z(1 - alpha / 2), _z(power)
    return float(math.ceil((a * math.sqrt(psi) + b * math.sqrt(max(psi - delta * delta, 0.0))) ** 2
                           / (delta * delta) - 1e-9))


def paired_means_needed(diffs: np.ndarray, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Paired-t sample size for the observed per-prompt differences (module docstring); None when the
    mean difference is 0 or fewer than 2 differences are given."""
    d = np.asarray(diffs, dtype=np.float64)
    if len(d) < 2 or float(d.mean()) == 0.0:
        return None
    sd, mean = float(d.std(ddof=1)), abs(float(d.mean()))
    n = ((_z(1 - alpha / 2) + _z(power)) * sd / mean) ** 2
    return float(max(2, math.ceil(n - 1e-9)))  # a paired test needs 2 pairs at least


def detectable_drop(n: int, alpha: float = ALPHA) -> float:
    """The smallest absolute drop that n pairs can resolve by McNemar's exact test (two-sided, at
    alpha), reached when every discordant prompt is a loss: k losses give p = 2 x 0.5^k, so k is the
    least count with p < alpha and the drop is k / n (inf when n < k). For alpha 0.05, k = 6."""
    k = max(1, math.ceil(math.log2(2 / alpha)))
    while 2 * 0.5 ** k >= alpha:
        k += 1
    return math.inf if n < k else k / n


@dataclass(frozen=True)
class Resolution:
    """test: "mcnemar exact" or "paired bootstrap"; p: McNemar's p (None for continuous scores);
    resolved: the difference is significant at 95%; needed: paired samples for 80% power at the
    observed effect (None: no effect observed); n: pairs used; reason: one sentence."""

    test: str
    n: int
    p: float | None
    resolved: bool
    needed: float | None
    reason: str

    def short(self) -> str:
        """'yes (p 0.0039)' / 'no: ~48 pairs' / 'no: no difference seen'."""
        if self.resolved:
            return "yes" + (f" (p {self.p:.2g})" if self.p is not None else "")
        if self.needed is None:
            return "no: no difference seen"
        return f"no: ~{self.needed:.0f} pairs"


def resolve(config: Mapping[str, float], reference: Mapping[str, float],
            interval: tuple[float, float] | None = None, seed: int = 0) -> Resolution:
    """The resolution of config - reference over the prompts both were scored on (module docstring).
    interval: the 95% paired bootstrap interval of the mean difference, when already computed (else it
    is computed here, for continuous scores only)."""
    x, y = paired_scores(config, reference)
    n = len(x)
    if n < 2:
        return Resolution("none", n, None, False, None, f"{n} paired prompt(s): nothing to test")
    binary = bool(np.all(np.isin(x, (0, 1))) and np.all(np.isin(y, (0, 1))))
    if binary:
        p, wins, losses = mcnemar_exact(x, y)
        needed = mcnemar_pairs_needed(wins / n, losses / n)
        resolved = p < ALPHA
        reason = (f"McNemar exact p = {p:.3g} ({losses} losses, {wins} wins of {n} pairs)" if wins + losses
                  else f"no discordant prompt in {n} pairs")
        return Resolution("mcnemar exact", n, p, resolved, None if resolved else needed, reason)
    if interval is None:
        v = floor_verdict(dict(enumerate(x.tolist())), dict(enumerate(y.tolist())), 1.0, seed)
        interval = (v.d_low, v.d_high)
    low, high = interval
    resolved = bool(low > 0 or high < 0)
    needed = paired_means_needed(x - y)
    return Resolution("paired bootstrap", n, None, resolved, None if resolved else needed,
                      f"95% paired bootstrap interval [{low:+.3g}, {high:+.3g}] of the mean difference"
                      f" over {n} pairs")


def paired_text(config: Mapping[str, float], reference: Mapping[str, float], seed: int = 0) -> str:
    """One cell: '-0.375 [-0.62, -0.12], p 0.031, resolved' / '+0.000 [+0.00, +0.00], not resolved: no
    difference seen' / '... not resolved: ~48 pairs' ('-' with fewer than 2 paired prompts)."""
    from dse.accuracy.floor import floor_verdict

    v = floor_verdict(config, reference, 1.0, seed)
    if v.n < 2:
        return "-"
    r = resolve(config, reference, (v.d_low, v.d_high), seed)
    p = f", p {r.p:.2g}" if r.p is not None else ""
    if r.resolved:
        tail = "resolved"
    elif r.needed is None:
        tail = "not resolved: no difference seen"
    else:
        tail = f"not resolved: ~{r.needed:.0f} pairs needed"
    return f"{v.d:+.3f} [{v.d_low:+.2f}, {v.d_high:+.2f}]{p}, {tail} (n={v.n})"
