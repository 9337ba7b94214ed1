"""Pick a configuration per profile: the most accurate one that meets the study's latency SLO.

With an SLO this is `StudyResults.best_under_slo` (feasible trials only, ties to the lower simulated
latency). Without one, the most accurate feasible trial (then the fastest) is chosen, and the page says
that no SLO was given.
"""

from __future__ import annotations

from dataclasses import dataclass

from dse.report.data import ReportData, Run
from dse.results import TrialResult

__all__ = ["Recommendation", "recommend", "capacity_run"]


@dataclass(frozen=True)
class Recommendation:
    """run: the chosen trial, None if none meets the SLO on this profile.
    n_meeting_slo: scored feasible trials whose mean per-token latency is within the SLO (all when no SLO)."""

    profile: str
    run: TrialResult | None
    slo_s: float | None
    n_meeting_slo: int
    n_candidates: int


def recommend(data: ReportData, profile: str) -> Recommendation:
    candidates = [t for t in data.scored(profile) if t.feasible is not False]
    meeting = [t for t in candidates if data.slo_s is None or t.latency_s(profile) <= data.slo_s]
    if data.slo_s is not None:
        best = data.results.best_under_slo(profile, data.slo_s, data.accuracy_metric)
    else:
        best = min(meeting, key=lambda t: (-data.accuracy(t), t.latency_s(profile), t.number), default=None)
    return Recommendation(
        profile=profile, run=best, slo_s=data.slo_s, n_meeting_slo=len(meeting), n_candidates=len(candidates)
    )


def capacity_run(data: ReportData, profile: str) -> Run | None:
    """The configuration the capacity curves, timelines and method comparison of `profile` replay: the
    recommendation, else the untuned-FreeKV baseline, else the most accurate (then fastest) trial."""
    rec = recommend(data, profile).run
    if rec is not None:
        return rec
    if data.untuned is not None and profile in data.untuned.sim:
        return data.untuned
    scored = data.scored(profile)
    return max(scored, key=lambda t: (data.accuracy(t), -t.latency_s(profile)), default=None)
