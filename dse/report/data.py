"""The report's view of a study: the results table (`dse.results`) plus the choices a report makes.

Figures are drawn from `StudyResults` alone (complete, non-duplicate trials and the two baselines);
this module adds which accuracy metric is plotted, the latency SLO, the hardware profiles, and short
labels for runs. Nothing here recomputes a measured or simulated number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dse.errors import DseError
from dse.results import BaselineResult, StudyResults, TrialResult

__all__ = ["Run", "ReportData", "make_report_data", "run_label", "describe_config"]

Run = TrialResult | BaselineResult

_BASELINE_LABELS = {"dense": "dense", "untuned_freekv": "untuned FreeKV"}


def run_label(run: Run) -> str:
    """'trial 12', 'dense', 'untuned FreeKV' or 'untuned h2o'."""
    if isinstance(run, TrialResult):
        return f"trial {run.number}"
    if run.name.startswith("untuned_") and run.name not in _BASELINE_LABELS:
        return f"untuned {run.name.removeprefix('untuned_')}"
    return _BASELINE_LABELS.get(run.name, run.name)


def describe_config(config: dict[str, Any]) -> str:
    """Short config text, e.g. 'freekv tau=0.9 p=32 B=2048 S=512 W=512' (method knobs appended)."""
    parts = [str(config.get("method", "?"))]
    for key, short in (
        ("tau", "tau"),
        ("page_size", "p"),
        ("budget_tokens", "B"),
        ("sink_tokens", "S"),
        ("window_tokens", "W"),
    ):
        if config.get(key) is not None:
            parts.append(f"{short}={config[key]}")
    parts.extend(f"{k}={v}" for k, v in sorted((config.get("options") or {}).items()))
    return " ".join(parts)


@dataclass(frozen=True)
class ReportData:
    """results: the study as `dse.results.load_results` read it.
    trials: complete trials with a simulated result, duplicates (copied measurements) left out.
    profiles: hardware profiles the runs were simulated on (study order).
    model: the model latency is simulated for (the study's target model); measured_model: the model the
        runtime ran (accuracy, traces). They differ when traces are mapped onto another model's shape.
    accuracy_metric: the measured metric on the accuracy axis.  slo_s: per-token latency SLO or None.
    """

    results: StudyResults
    trials: tuple[TrialResult, ...]
    profiles: tuple[str, ...]
    model: str
    measured_model: str
    accuracy_metric: str
    slo_s: float | None

    @property
    def name(self) -> str:
        return self.results.study_name

    @property
    def dense(self) -> BaselineResult | None:
        return self.results.dense

    @property
    def untuned(self) -> BaselineResult | None:
        return self.results.untuned_freekv

    def baselines(self) -> list[BaselineResult]:
        """Dense, untuned FreeKV, then the other methods' untuned baselines (baselines.untuned)."""
        return [*(r for r in (self.dense, self.untuned) if r is not None), *self.results.untuned_methods]

    def accuracy(self, run: Run) -> float | None:
        value = run.accuracy.get(self.accuracy_metric)
        return None if value is None else float(value)

    def scored(self, profile: str) -> list[TrialResult]:
        """Trials with both a measured accuracy and a simulated latency on `profile`."""
        return [t for t in self.trials if t.latency_s(profile) is not None and self.accuracy(t) is not None]

    def runs(self) -> list[Run]:
        """The baselines (dense, untuned FreeKV) then the trials: everything the Pareto fronts and the
        recommendation compare."""
        return [*self.baselines(), *self.trials]

    def scored_runs(self, profile: str) -> list[Run]:
        """Baselines and trials with both a measured accuracy and a simulated latency on `profile`."""
        return [r for r in self.runs() if r.latency_s(profile) is not None and self.accuracy(r) is not None]

    def feasible(self, run: Run) -> bool | None:
        """Whether `run` meets the study's accuracy constraint: a trial's recorded verdict; dense
        attention is the constraint's reference (feasible); a baseline's measured accuracy against
        min_accuracy_ratio x dense's on the constraint metric. None: not known."""
        if isinstance(run, TrialResult):
            return run.feasible
        if run.name == "dense":
            return True
        ratio = (self.results.config.get("constraints") or {}).get("min_accuracy_ratio")
        if ratio is None:
            return True
        metric = _constraint_metric(self.results.config) or self.accuracy_metric
        mine = run.accuracy.get(metric)
        ref = self.dense.accuracy.get(metric) if self.dense is not None else None
        if mine is None or ref is None:
            return None
        return float(mine) >= float(ratio) * float(ref)


def make_report_data(
    results: StudyResults, slo_ms: float | None = None, metric: str | None = None
) -> ReportData:
    """slo_ms and metric override what the study file says (its latency SLO, its accuracy metric)."""
    trials = tuple(t for t in results.completed if t.sim and t.duplicate_of is None)
    if not trials:
        raise DseError(
            f"study {results.study_name!r} in {results.storage_url!r} has no complete trial with "
            "simulated results; run `dse sweep` on it until at least one trial completes"
        )
    runs: list[Run] = [*(r for r in (results.dense, results.untuned_freekv) if r is not None),
                       *results.untuned_methods, *trials]
    profiles = tuple(results.hardware) or tuple(dict.fromkeys(p for r in runs for p in r.sim))
    profiles = tuple(p for p in profiles if any(p in r.sim for r in runs))
    metric = metric or _accuracy_metric(results, runs)
    if not any(metric in r.accuracy for r in runs):
        known = sorted({k for r in runs for k in r.accuracy})
        raise DseError(
            f"accuracy metric {metric!r} was not measured in study {results.study_name!r}; "
            f"measured metrics: {', '.join(known) or 'none'}"
        )
    slo_s = slo_ms / 1e3 if slo_ms is not None else _slo_s(results.config)
    model = results.target_model or next((str(r.sim[p].get("model")) for r in runs for p in r.sim), "?")
    measured_model = str((results.config.get("model") or {}).get("name") or model)
    return ReportData(
        results=results,
        trials=trials,
        profiles=profiles,
        model=model,
        measured_model=measured_model,
        accuracy_metric=metric,
        slo_s=slo_s,
    )


def _accuracy_metric(results: StudyResults, runs: list[Run]) -> str:
    """The first accuracy objective of the study, else the first metric any run measured."""
    for objective in results.config.get("objectives") or []:
        if isinstance(objective, dict) and isinstance(objective.get("metric"), str):
            return objective["metric"]
    for r in runs:
        if r.accuracy:
            return next(iter(r.accuracy))
    raise DseError(f"no run of study {results.study_name!r} recorded a measured accuracy")


def _constraint_metric(config: dict[str, Any]) -> str | None:
    """The metric the accuracy constraint applies to (study key constraints.metric, else the first
    accuracy objective)."""
    c = config.get("constraints") or {}
    if isinstance(c.get("metric"), str):
        return c["metric"]
    from dse.study import ACCURACY_METRICS

    for objective in config.get("objectives") or []:
        metric = objective.get("metric") if isinstance(objective, dict) else None
        if isinstance(metric, str) and ACCURACY_METRICS.get(metric, ("", True))[1]:
            return metric
    return None


def _slo_s(config: dict[str, Any]) -> float | None:
    """The study's per-token latency SLO in seconds (study key `slo.per_token_latency_s`), or None."""
    slo = config.get("slo")
    if isinstance(slo, dict) and slo.get("per_token_latency_s") is not None:
        return float(slo["per_token_latency_s"])
    return None
