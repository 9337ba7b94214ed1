"""Pick a configuration per profile: the fastest one that keeps accuracy.

The rule (`RULE`): the highest throughput (tokens/s) within the study's latency SLO and its accuracy
floor, each run taken at the largest batch that meets the SLO. In detail:

- Candidates: every run, the baselines (dense attention, untuned FreeKV, other methods' untuned
  baselines) and the trials, with a measured accuracy and a simulated result on the profile.
- Accuracy floor (`constraints.min_accuracy_ratio` of dense attention's accuracy, on the constraint's
  metric): decided per run by dse/accuracy/floor.py on paired per-prompt scores where the run and dense
  attention both stored them (`accuracy_samples`), else by the stored point (or lower-bound) comparison
  (`ReportData.feasible`), and every verdict says which. Dense attention is the reference (passes).
  Runs below the floor are excluded; undecided runs are excluded from the pick too, and named as such.
- Operating point: of the batches simulated for the run at the study's prompt length on this profile
  (the stored capacity grid `sim_grid`: workload.batch_sizes x context_lengths, else the study's batch
  alone), the largest that fits memory and whose mean per-token latency meets the SLO (without an SLO:
  the largest that fits memory), and the simulated tokens/s there.
- The pick: the highest tokens/s there; ties go to the more accurate run, then the lower latency.

When none qualifies, `why_none` says what excluded the runs (floor below, undecided, memory, SLO).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from dse.accuracy.floor import BELOW, MEETS, REFERENCE, UNDECIDED, FloorVerdict, floor_verdict
from dse.report.data import ReportData, Run, _constraint_metric, run_label
from dse.results import TrialResult

__all__ = ["Recommendation", "Entry", "FloorCheck", "OperatingPoint", "recommend", "capacity_run",
           "floor_check", "floor_metric", "operating_point", "describe_entry", "prompt_scores", "RULE",
           "RULE_NO_SLO", "NO_FLOOR"]

RULE = ("the highest throughput (tokens/s) within the SLO and the accuracy floor, at the largest batch "
        "that meets the SLO")
RULE_NO_SLO = ("no SLO given: the highest throughput (tokens/s) within the accuracy floor, at the largest "
               "batch that fits memory")
NO_FLOOR = "no floor"
_MAX_NAMES = 8


@dataclass(frozen=True)
class FloorCheck:
    """A run's accuracy-floor verdict: meets, below, undecided, reference (dense attention) or "no floor"
    (the study sets no min_accuracy_ratio). paired: decided on paired per-prompt scores (detail: the
    FloorVerdict), else on the stored point (or lower-bound) comparison. how: which way, for the page."""

    verdict: str
    paired: bool
    how: str
    detail: FloorVerdict | None = None

    @property
    def passes(self) -> bool:
        return self.verdict in (MEETS, REFERENCE, NO_FLOOR)

    def text(self) -> str:
        """'meets (paired, n=60: d +0.04 [+0.01, +0.08])', 'below (point estimate: no per-prompt scores)'."""
        if self.verdict in (REFERENCE, NO_FLOOR):
            return f"{self.verdict} ({self.how})"
        if self.detail is not None and self.detail.n >= 2:
            v = self.detail
            return f"{self.verdict} ({self.how}: d {v.d:+.2f} [{v.d_low:+.2f}, {v.d_high:+.2f}])"
        return f"{self.verdict} ({self.how})"


@dataclass(frozen=True)
class OperatingPoint:
    """A run's operating point on a profile. batch: the largest simulated batch that fits memory and
    meets the SLO (fits memory, without an SLO), None when none does; result: its SimResult dict.
    batches: the batches looked at (ascending); fits: whether any of them fits memory; from_grid: they
    come from the stored capacity grid (else the study's batch alone)."""

    batch: int | None
    result: dict | None
    batches: tuple[int, ...]
    fits: bool
    from_grid: bool
    grid_elsewhere: bool = False  # a stored grid, but no point of it at the study's prompt length

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.result is None else float(self.result["throughput_tokens_per_s"])

    @property
    def latency_s(self) -> float | None:
        return None if self.result is None else float(self.result["per_token_latency_s"]["mean"])

    @property
    def source(self) -> str:
        listed = ", ".join(str(b) for b in self.batches)
        if self.from_grid:
            return f"of the stored batches {listed}"
        if self.grid_elsewhere:
            return f"study's batch {listed} only: the stored grid has no point at the study's prompt length"
        return f"study's batch {listed} only: no stored grid"


@dataclass(frozen=True)
class Entry:
    """One run on one profile: its floor verdict and operating point. outcome: qualifies, below,
    undecided, oom (no batch fits memory) or over_slo (fits, but no batch meets the SLO)."""

    run: Run
    accuracy: float
    floor: FloorCheck
    point: OperatingPoint

    @property
    def label(self) -> str:
        return run_label(self.run)

    @property
    def outcome(self) -> str:
        if self.floor.verdict == BELOW:
            return "below"
        if self.floor.verdict == UNDECIDED:
            return "undecided"
        if not self.point.fits:
            return "oom"
        return "qualifies" if self.point.batch is not None else "over_slo"


@dataclass(frozen=True)
class Recommendation:
    """run: the chosen run (a trial or a baseline), None if none qualifies on this profile.
    n_runs: runs with a measured accuracy and a result on the profile; n_infeasible: of those, below the
    accuracy floor; n_undecided: the floor could not decide them (excluded, named in `undecided`);
    n_oom: runs passing the floor that fit memory at no simulated batch; n_over_slo: passing runs that fit
    but meet the SLO at no simulated batch; n_candidates: passing runs that fit; n_meeting_slo: of those,
    within the SLO at some batch (the ones ranked by tokens/s). entries: every run's verdict and operating
    point, ranked: the qualifying ones best first (chosen, runner-up, ...)."""

    profile: str
    run: Run | None
    slo_s: float | None
    n_meeting_slo: int
    n_candidates: int
    n_runs: int = 0
    n_infeasible: int = 0
    n_oom: int = 0
    n_over_slo: int = 0
    n_undecided: int = 0
    entries: tuple[Entry, ...] = ()
    ranked: tuple[Entry, ...] = ()
    ratio: float | None = None

    @property
    def rule(self) -> str:
        return RULE if self.slo_s is not None else RULE_NO_SLO

    @property
    def chosen(self) -> Entry | None:
        return self.ranked[0] if self.ranked else None

    @property
    def runner_up(self) -> Entry | None:
        return self.ranked[1] if len(self.ranked) > 1 else None

    @property
    def undecided(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if e.outcome == "undecided")

    def undecided_names(self) -> str:
        names = [e.label for e in self.undecided]
        more = f" and {len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else ""
        return ", ".join(names[:_MAX_NAMES]) + more

    def losers(self) -> str:
        """Why the runs other than the chosen one lost, as counts: 'of 8 runs: 2 below the floor; ...'."""
        slo = "" if self.slo_s is None else f" ({self.slo_s * 1e3:g} ms/token)"
        parts = [
            f"{self.n_infeasible} below the accuracy floor",
            f"{self.n_undecided} undecided on the floor" + (f" ({self.undecided_names()})"
                                                            if self.n_undecided else ""),
            f"{self.n_over_slo} over the SLO{slo} at every simulated batch" if self.slo_s is not None
            else "",
            f"{self.n_oom} out of memory at every simulated batch",
            f"{max(0, self.n_meeting_slo - 1)} qualify with fewer tokens/s" if self.run is not None else "",
        ]
        return f"of {self.n_runs} runs: " + "; ".join(p for p in parts if p)

    @property
    def why_none(self) -> str:
        """Why no run qualifies ('' when one does)."""
        if self.run is not None:
            return ""
        if self.n_runs == 0:
            return "no run has both a measured accuracy and a simulated latency on this profile"
        parts = []
        if self.n_infeasible:
            parts.append(f"{self.n_infeasible} of {self.n_runs} runs are below the accuracy floor")
        if self.n_undecided:
            parts.append(f"{self.n_undecided} are undecided on the floor (excluded: "
                         f"{self.undecided_names()})")
        if self.n_oom:
            parts.append(f"{self.n_oom} do not fit memory at any simulated batch")
        if self.n_over_slo:
            slo = "" if self.slo_s is None else f" ({self.slo_s * 1e3:g} ms/token)"
            parts.append(f"{self.n_over_slo} fit but are slower than the SLO{slo} at every simulated batch")
        return "none qualifies: " + "; ".join(parts)


def _ratio(data: ReportData) -> float | None:
    ratio = (data.results.config.get("constraints") or {}).get("min_accuracy_ratio")
    return None if ratio is None else float(ratio)


def floor_metric(data: ReportData) -> str:
    """The metric the accuracy floor applies to (constraints.metric, else the first accuracy objective,
    else the report's accuracy metric)."""
    return _constraint_metric(data.results.config) or data.accuracy_metric


def prompt_scores(run: Run | None, metric: str) -> dict[str, float]:
    """{prompt id: score} of `run` on `metric` from its per-prompt scores (`accuracy_samples`: {metric:
    [{"id", "score", "answer"}]}); {} when it stored none."""
    samples = (getattr(run, "accuracy_samples", {}) or {}) if run is not None else {}
    out: dict[str, float] = {}
    for s in samples.get(metric) or []:
        if isinstance(s, dict) and s.get("id") is not None and s.get("score") is not None:
            out[str(s["id"])] = float(s["score"])
    return out


@lru_cache(maxsize=1024)
def _paired_verdict(config: tuple[tuple[str, float], ...], dense: tuple[tuple[str, float], ...],
                    ratio: float) -> FloorVerdict:
    return floor_verdict(dict(config), dict(dense), ratio)


def floor_check(data: ReportData, run: Run) -> FloorCheck:
    """The accuracy floor's verdict on `run` (see the module docstring)."""
    if data.dense is not None and run is data.dense:
        return FloorCheck(REFERENCE, False, "dense attention, the floor's reference")
    ratio = _ratio(data)
    if ratio is None:
        return FloorCheck(NO_FLOOR, False, "the study sets no min_accuracy_ratio")
    metric = floor_metric(data)
    mine, dense = prompt_scores(run, metric), prompt_scores(data.dense, metric)
    if mine and dense:
        v = _paired_verdict(tuple(sorted(mine.items())), tuple(sorted(dense.items())), ratio)
        return FloorCheck(v.verdict, True, f"paired, n={v.n}", v)
    why = "no per-prompt scores"
    lower = (data.results.config.get("constraints") or {}).get("bound") == "lower"
    if isinstance(run, TrialResult):
        stored = next((v for k, v in run.constraints.items() if k.startswith("min_accuracy_ratio")), None)
        ok = run.feasible if stored is None else float(stored) <= 0
        how = f"{'95% lower bound' if lower else 'point estimate'}: {why}"
    else:
        ok, how = data.feasible(run), f"point estimate: {why}"
    if ok is None:
        return FloorCheck(UNDECIDED, False, f"{how}, and no stored verdict")
    return FloorCheck(MEETS if ok else BELOW, False, how)


def _fits(res: dict) -> bool:
    return not res.get("oom") and res.get("per_token_latency_s") is not None


def operating_point(data: ReportData, run: Run, profile: str) -> OperatingPoint:
    """`run`'s operating point on `profile` (see the module docstring): from its stored capacity grid
    at the study's prompt length on the target model, plus its stored result at the study's batch."""
    w = data.results.config.get("workload") or {}
    input_tokens = w.get("input_tokens")
    points: dict[int, dict] = {}
    for g in run.sim_grid or []:
        if (g.get("hardware") == profile and g.get("model", data.model) == data.model
                and (input_tokens is None or g.get("input_tokens") == input_tokens)
                and isinstance(g.get("result"), dict)):
            points[int(g["batch_size"])] = g["result"]
    from_grid = bool(points)
    elsewhere = not from_grid and any(g.get("hardware") == profile for g in run.sim_grid or [])
    stored = run.sim.get(profile)
    if stored is not None:
        first = (w.get("batch_sizes") or [1])[0]
        points[int((stored.get("config") or {}).get("batch_size") or first)] = stored
    batches = tuple(sorted(points))
    fitting = [b for b in batches if _fits(points[b])]
    ok = [b for b in fitting
          if data.slo_s is None or float(points[b]["per_token_latency_s"]["mean"]) <= data.slo_s]
    best = ok[-1] if ok else None
    return OperatingPoint(best, None if best is None else points[best], batches, bool(fitting), from_grid,
                          elsewhere)


def recommend(data: ReportData, profile: str) -> Recommendation:
    runs = [r for r in data.runs() if data.accuracy(r) is not None and profile in r.sim]
    entries = tuple(Entry(r, float(data.accuracy(r)), floor_check(data, r), operating_point(data, r, profile))
                    for r in runs)
    count = {k: sum(e.outcome == k for e in entries) for k in ("below", "undecided", "oom", "over_slo")}
    qualifying = [e for e in entries if e.outcome == "qualifies"]
    ranked = tuple(sorted(qualifying, key=lambda e: (-(e.point.tokens_per_s or 0.0), -e.accuracy,
                                                     e.point.latency_s or math.inf)))
    return Recommendation(
        profile=profile,
        run=ranked[0].run if ranked else None,
        slo_s=data.slo_s,
        n_meeting_slo=len(qualifying),
        n_candidates=len(qualifying) + count["over_slo"],
        n_runs=len(runs),
        n_infeasible=count["below"],
        n_oom=count["oom"],
        n_over_slo=count["over_slo"],
        n_undecided=count["undecided"],
        entries=entries,
        ranked=ranked,
        ratio=_ratio(data),
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


def describe_entry(entry: Entry) -> str:
    """'trial 3: 1234 tokens/s at batch 4' (or why it has no operating point)."""
    p = entry.point
    if p.batch is None:
        return f"{entry.label}: {'out of memory' if not p.fits else 'over the SLO'} at every simulated batch"
    return f"{entry.label}: {p.tokens_per_s:.0f} tokens/s at batch {p.batch}"
