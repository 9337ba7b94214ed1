"""Two runs compared prompt by prompt: the paired difference, McNemar's test, the floor, the disagreements.

`compare_metric(metric, a, b, floor_ratio)` takes the per-prompt results of run A and of run B (lists of
{"id", "score", "answer"}) and pairs them by prompt id (prompts scored NaN on either side are left out).
The statistics come from dse/accuracy/floor.py, with B as the reference: the difference mean(A) -
mean(B) and its 95% paired bootstrap interval are `floor_verdict(A, B, ratio=1)`'s d, as are McNemar's
exact p and the win/loss counts for 0/1 scores; `floor_ratio` adds the floor's own verdict (A keeps at
least that share of B's accuracy). `resolution` says whether the difference is resolved at 95% (McNemar
for 0/1 scores, the bootstrap interval otherwise) and, when it is not, how many paired prompts would
resolve it (dse/accuracy/resolution.py). Never imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dse.accuracy.floor import FloorVerdict, floor_verdict
from dse.accuracy.resolution import Resolution, resolve
from dse.accuracy.samples import answers, scores

__all__ = ["Disagreement", "PairedComparison", "compare_metric"]


@dataclass(frozen=True)
class Disagreement:
    """A prompt both runs were scored on with different scores."""

    id: str
    a_score: float
    a_answer: str
    b_score: float
    b_answer: str


@dataclass(frozen=True)
class PairedComparison:
    """n: paired prompts; only_a / only_b: prompts scored in one run only. mean_a / mean_b over the
    paired prompts; diff = mean_a - mean_b with its 95% paired bootstrap interval (NaN for n < 2).
    mcnemar_p, a_wins (A right where B wrong), b_wins: for 0/1 scores, else None. floor: the floor
    verdict of A against B when a ratio was given. disagreements: the paired prompts whose scores
    differ, largest difference first. resolution: resolved at 95% or the pairs that would resolve it."""

    metric: str
    n: int
    only_a: int
    only_b: int
    mean_a: float
    mean_b: float
    diff: float
    diff_low: float
    diff_high: float
    mcnemar_p: float | None
    a_wins: int | None
    b_wins: int | None
    floor: FloorVerdict | None
    disagreements: tuple[Disagreement, ...]
    resolution: Resolution | None = None

    def to_dict(self, failures: int | None = None) -> dict[str, Any]:
        """JSON-ready (NaN -> None); the first `failures` disagreements (all when None)."""
        def clean(v: Any) -> Any:
            return None if isinstance(v, float) and math.isnan(v) else v

        out = {k: clean(getattr(self, k)) for k in (
            "metric", "n", "only_a", "only_b", "mean_a", "mean_b", "diff", "diff_low", "diff_high",
            "mcnemar_p", "a_wins", "b_wins")}
        out["floor"] = None if self.floor is None else self.floor.to_dict()
        r = self.resolution
        out["resolved"] = None if r is None else r.resolved
        out["pairs_needed"] = None if r is None else r.needed
        out["resolution"] = None if r is None else r.reason
        out["n_disagreements"] = len(self.disagreements)
        shown = self.disagreements if failures is None else self.disagreements[:failures]
        out["disagreements"] = [{k: clean(v) for k, v in vars(d).items()} for d in shown]
        return out


def _finite(x: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in x.items() if not math.isnan(v)}


def compare_metric(metric: str, a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]],
                   floor_ratio: float | None = None, seed: int = 0) -> PairedComparison:
    """Run A against run B (the reference) on the prompts both were scored on."""
    sa, sb = _finite(scores(a)), _finite(scores(b))
    diff = floor_verdict(sa, sb, 1.0, seed)  # d = mean(A) - 1 x mean(B), McNemar for 0/1 scores
    floor = None if floor_ratio is None else floor_verdict(sa, sb, floor_ratio, seed)
    aa, ab = answers(a), answers(b)
    paired = [i for i in sa if i in sb]
    differ = sorted((i for i in paired if sa[i] != sb[i]), key=lambda i: (-abs(sa[i] - sb[i]), i))
    return PairedComparison(
        metric=metric, n=diff.n, only_a=len(sa.keys() - sb.keys()), only_b=len(sb.keys() - sa.keys()),
        mean_a=diff.config_mean, mean_b=diff.dense_mean, diff=diff.config_mean - diff.dense_mean,
        diff_low=diff.d_low, diff_high=diff.d_high, mcnemar_p=diff.mcnemar_p, a_wins=diff.wins,
        b_wins=diff.losses, floor=floor,
        disagreements=tuple(Disagreement(i, sa[i], aa.get(i, ""), sb[i], ab.get(i, "")) for i in differ),
        resolution=resolve(sa, sb, (diff.d_low, diff.d_high)),
    )
