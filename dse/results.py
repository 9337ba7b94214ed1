"""Reading a study back: the results table that `dse report` (and users' notebooks) build on.

`dse sweep` stores everything a report needs as Optuna user attributes (see docs/contracts.md, "Study
results"); this module turns a study in any Optuna RDB storage into plain frozen records and flat
rows, so that report code never touches Optuna itself.

    from dse.results import load_results
    res = load_results("sqlite:///runs/smoke/study.db", "smoke")
    res.completed            # list[TrialResult], COMPLETE trials (duplicates included, marked)
    res.pareto()             # feasible, non-dominated COMPLETE trials under the study's objectives
    res.rows()               # list[dict]: one flat row per COMPLETE trial (see `TrialResult.row`)
    res.dense, res.untuned_freekv   # BaselineResult | None
    res.untuned_methods             # untuned baselines of other methods (baselines.untuned)

Latency and throughput are *simulated* (per hardware profile and replayed model); accuracy is
*measured* by the real runtime. `mapped_from` inside a sim dict says when a trace taken on one
model was replayed on another model's shape.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.errors import DseError
from dse.stored_attrs import baseline_attr_problem, study_attr_problem, trial_attr_problem

__all__ = [
    "BaselineResult",
    "StudyResults",
    "TrialResult",
    "list_studies",
    "load_results",
    "CONFIG_KEYS",
    "to_json",
    "StoredAttributeWarning",
]

CONFIG_KEYS = ("method", "tau", "page_size", "budget_tokens", "sink_tokens", "window_tokens")


class StoredAttributeWarning(UserWarning):
    """A trial or baseline whose stored attributes have the wrong type was left out of the results."""


def _overall(value: Any) -> float | None:
    """A scalar from a trace-summary entry that may be a number or {"overall": x, ...}."""
    if isinstance(value, dict):
        value = value.get("overall")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


@dataclass(frozen=True)
class _Replays:
    """Simulated results of one run: `sim[hardware]` on the target model, `sim_models[model][hardware]`
    on every replayed model (target included), `sim_grid` the capacity grid (may be empty)."""

    target_model: str | None
    sim: dict[str, dict]
    sim_models: dict[str, dict[str, dict]]
    sim_grid: list[dict]

    def sim_result(self, hardware: str, model: str | None = None) -> dict | None:
        """SimResult.to_dict() on `hardware` for `model` (default: the study's target model)."""
        if model is None or model == self.target_model:
            return self.sim.get(hardware)
        return self.sim_models.get(model, {}).get(hardware)

    def latency_s(self, hardware: str, model: str | None = None, stat: str = "mean") -> float | None:
        """Simulated per-token latency in seconds (stat: mean, p50 or p99); None where not simulated or
        out of memory (no latency: see `oom`)."""
        res = self.sim_result(hardware, model)
        if res is None or res.get("oom") or res.get("per_token_latency_s") is None:
            return None
        return float(res["per_token_latency_s"][stat])

    def throughput_tokens_per_s(self, hardware: str, model: str | None = None) -> float | None:
        res = self.sim_result(hardware, model)
        if res is None or res.get("oom") or res.get("throughput_tokens_per_s") is None:
            return None
        return float(res["throughput_tokens_per_s"])

    def oom(self, hardware: str, model: str | None = None) -> bool:
        """True where the simulated batch did not fit memory on `hardware` (out of memory, no latency)."""
        res = self.sim_result(hardware, model)
        return bool(res is not None and res.get("oom"))


@dataclass(frozen=True)
class BaselineResult(_Replays):
    """Dense attention or untuned FreeKV, measured once per study (study-level user attributes)."""

    name: str = ""
    config: dict = field(default_factory=dict)
    accuracy: dict[str, float] = field(default_factory=dict)
    trace_dir: str | None = None
    trace_summary: dict = field(default_factory=dict)
    accuracy_ci: dict[str, dict] = field(default_factory=dict)  # metric -> 95% interval (stats.Estimate)
    accuracy_samples: dict[str, list[dict]] = field(default_factory=dict)  # see TrialResult


@dataclass(frozen=True)
class TrialResult(_Replays):
    """One Optuna trial of a sweep.

    state: "COMPLETE", "FAIL", "PRUNED", "RUNNING" or "WAITING".
    values: objective values in the order of `StudyResults.objective_names` (COMPLETE only).
    constraints: {name: value}, feasible iff every value <= 0; `feasible` is their conjunction.
    duplicate_of: number of the trial whose measurement was copied (same configuration), else None.
    error: the recorded error of a FAIL trial; interrupted: why a trial was stopped by a killed or
        interrupted worker (such trials are re-queued and do not count toward the budget).
    skipped: why a PRUNED trial ran nothing (invalid combination, or over the trial budget).
    accuracy_samples: metric -> per-prompt results [{"id", "score", "answer"}, ...]; empty for studies
        measured before they were recorded, and no entry for dense fidelity (exact, never run).
        `dse.accuracy.samples.scores` turns one list into {id: score} for paired comparisons.
    """

    number: int = -1
    state: str = ""
    config: dict = field(default_factory=dict)
    values: tuple[float, ...] | None = None
    accuracy: dict[str, float] = field(default_factory=dict)
    accuracy_ci: dict[str, dict] = field(default_factory=dict)  # metric -> 95% interval (stats.Estimate)
    accuracy_samples: dict[str, list[dict]] = field(default_factory=dict)
    dense_accuracy: dict[str, float] = field(default_factory=dict)
    trace_dir: str | None = None
    trace_dirs: dict[str, str] = field(default_factory=dict)
    trace_summary: dict = field(default_factory=dict)
    constraints: dict[str, float] = field(default_factory=dict)
    feasible: bool | None = None
    duplicate_of: int | None = None
    error: str | None = None
    interrupted: str | None = None
    skipped: str | None = None
    wall_s: float | None = None
    worker: dict = field(default_factory=dict)

    @property
    def correction_rate(self) -> float | None:
        return _overall(self.trace_summary.get("correction_rate"))

    @property
    def hit_rate(self) -> float | None:
        return _overall(self.trace_summary.get("hit_rate"))

    def row(self, hardware: list[str] | None = None) -> dict[str, Any]:
        """A flat JSON-able row: number, state, the config keys, every accuracy metric (measured),
        `<metric>/dense`, correction_rate, hit_rate, feasible, duplicate_of, and per hardware profile
        of the target model `latency_s/<hw>` (mean), `latency_p99_s/<hw>`,
        `throughput_tokens_per_s/<hw>` (None when out of memory), `oom/<hw>`, `fits/<hw>`,
        `max_batch/<hw>`."""
        out: dict[str, Any] = {"number": self.number, "state": self.state}
        out.update({k: self.config.get(k) for k in CONFIG_KEYS})
        out.update(self.accuracy)
        for k, ci in self.accuracy_ci.items():
            out[f"{k}/ci_low"], out[f"{k}/ci_high"] = ci.get("low"), ci.get("high")
        out.update({f"{k}/dense": v for k, v in self.dense_accuracy.items()})
        out["correction_rate"] = self.correction_rate
        out["hit_rate"] = self.hit_rate
        out["feasible"] = self.feasible
        out["duplicate_of"] = self.duplicate_of
        for hw in hardware if hardware is not None else sorted(self.sim):
            res = self.sim.get(hw)
            if res is None:
                continue
            out[f"latency_s/{hw}"] = self.latency_s(hw)
            out[f"latency_p99_s/{hw}"] = self.latency_s(hw, stat="p99")
            out[f"throughput_tokens_per_s/{hw}"] = self.throughput_tokens_per_s(hw)
            out[f"oom/{hw}"] = self.oom(hw)
            memory = res.get("memory", {})
            out[f"fits/{hw}"] = memory.get("fits")
            out[f"max_batch/{hw}"] = memory.get("max_batch")
        return out


@dataclass(frozen=True)
class StudyResults:
    """Everything `dse sweep` stored about one study.

    config: the validated study (dse.study.Study.model_dump(mode="json")) as run; study_file: the
    YAML text it came from; objective_names / directions: per objective ("maximize"/"minimize").
    """

    study_name: str
    storage_url: str
    config: dict
    study_file: str
    objective_names: tuple[str, ...]
    directions: tuple[str, ...]
    target_model: str | None
    hardware: tuple[str, ...]
    trials: tuple[TrialResult, ...]
    dense: BaselineResult | None
    untuned_freekv: BaselineResult | None
    untuned_methods: tuple[BaselineResult, ...] = ()  # "untuned_<method>" of baselines.untuned, study order

    @property
    def completed(self) -> list[TrialResult]:
        return [t for t in self.trials if t.state == "COMPLETE"]

    @property
    def failed(self) -> list[TrialResult]:
        """Trials that failed with a recorded error (interrupted ones are excluded)."""
        return [t for t in self.trials if t.state == "FAIL" and t.error is not None]

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per COMPLETE trial (see TrialResult.row), in trial-number order."""
        return [t.row(list(self.hardware)) for t in self.completed]

    def pareto(self, feasible_only: bool = True) -> list[TrialResult]:
        """Non-dominated COMPLETE trials under the study's objectives (duplicates dropped)."""
        pool = [t for t in self.completed if t.values is not None and t.duplicate_of is None]
        if feasible_only:
            pool = [t for t in pool if t.feasible is not False]
        signs = [1.0 if d == "minimize" else -1.0 for d in self.directions]

        def key(t: TrialResult) -> list[float]:
            return [s * v for s, v in zip(signs, t.values or (), strict=True)]

        keyed = [(t, key(t)) for t in pool]
        front = []
        for t, kt in keyed:
            dominated = any(
                all(a <= b for a, b in zip(ko, kt, strict=True)) and ko != kt for _, ko in keyed
            )
            if not dominated:
                front.append(t)
        return front

    def best_under_slo(
        self, hardware: str, per_token_latency_s: float, metric: str, model: str | None = None
    ) -> TrialResult | None:
        """The feasible trial with the highest `metric` whose mean simulated latency on `hardware`
        meets the SLO; ties go to the lower latency. None if no trial meets it."""
        best: tuple[float, float, TrialResult] | None = None
        for t in self.completed:
            lat = t.latency_s(hardware, model)
            acc = t.accuracy.get(metric)
            if t.feasible is False or lat is None or acc is None or lat > per_token_latency_s:
                continue
            cand = (acc, -lat, t)
            if best is None or cand[:2] > best[:2]:
                best = cand
        return None if best is None else best[2]


def _trial_result(trial: Any, target_model: str | None) -> TrialResult:
    """From an optuna FrozenTrial."""
    ua = trial.user_attrs
    values = trial.values
    return TrialResult(
        target_model=target_model,
        sim=ua.get("sim", {}),
        sim_models=ua.get("sim_models", {}),
        sim_grid=ua.get("sim_grid", []),
        number=trial.number,
        state=trial.state.name,
        config=ua.get("config", {}),
        values=tuple(float(v) for v in values) if values is not None else None,
        accuracy=ua.get("accuracy", {}),
        accuracy_ci=ua.get("accuracy_ci", {}),
        accuracy_samples=ua.get("accuracy_samples") or {},
        dense_accuracy=ua.get("dense_accuracy", {}),
        trace_dir=ua.get("trace_dir"),
        trace_dirs=ua.get("trace_dirs", {}),
        trace_summary=ua.get("trace_summary", {}),
        constraints=ua.get("constraints", {}),
        feasible=ua.get("feasible"),
        duplicate_of=ua.get("duplicate_of"),
        error=ua.get("error"),
        interrupted=ua.get("interrupted") or (
            "stopped by an interrupted or killed worker (re-queued)"
            if trial.state.name == "FAIL" and "error" not in ua else None
        ),
        skipped=ua.get("skipped"),
        wall_s=ua.get("wall_s"),
        worker=ua.get("worker", {}),
    )


def _baseline(name: str, data: dict | None, target_model: str | None) -> BaselineResult | None:
    if not data:
        return None
    problem = baseline_attr_problem(data)
    if problem is not None:
        warnings.warn(f"the {name} baseline is left out: its stored attribute {problem}",
                      StoredAttributeWarning, stacklevel=2)
        return None
    return BaselineResult(
        target_model=target_model,
        sim=data.get("sim", {}),
        sim_models=data.get("sim_models", {}),
        sim_grid=data.get("sim_grid", []),
        name=name,
        config=data.get("config", {}),
        accuracy=data.get("accuracy", {}),
        accuracy_ci=data.get("accuracy_ci", {}),
        accuracy_samples=data.get("accuracy_samples") or {},
        trace_dir=data.get("trace_dir"),
        trace_summary=data.get("trace_summary", {}),
    )


def list_studies(storage_url: str) -> list[str]:
    """Names of the studies in an Optuna storage."""
    import optuna

    from dse.sweep_storage import open_storage, sqlite_path

    if storage_url.startswith("sqlite:"):
        sqlite_path(storage_url)  # an in-memory database holds no study: refused with the reason
    if storage_url.startswith("sqlite:///"):
        path = Path(storage_url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise DseError(f"no study database at {path} (storage {storage_url!r}): run `dse sweep` first.")
    storage = open_storage(storage_url, heartbeat=False)
    try:
        return [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
    except Exception as exc:  # noqa: BLE001 - any storage failure becomes one user-facing paragraph
        raise DseError(f"cannot read the Optuna storage {storage_url!r}: {exc}") from None


def load_results(storage_url: str, study_name: str | None = None) -> StudyResults:
    """Load a study written by `dse sweep`. `study_name` may be omitted when the storage holds one study.

    Raises DseError when the storage cannot be opened or the study is not there (naming the ones that
    are)."""
    import optuna

    from dse.sweep_storage import open_storage

    names = list_studies(storage_url)
    if study_name is None:
        if len(names) != 1:
            raise DseError(
                f"the storage {storage_url!r} holds {len(names)} studies ({', '.join(names) or 'none'}): "
                "name one with --study NAME."
            )
        study_name = names[0]
    if study_name not in names:
        raise DseError(
            f"no study named {study_name!r} in {storage_url!r}; it holds: {', '.join(names) or 'none'}."
        )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=open_storage(storage_url, heartbeat=False))
    attrs = study.user_attrs
    directions = tuple(d.name.lower() for d in study.directions)
    problem = study_attr_problem(attrs)
    names_attr = attrs.get("objective_names") or [f"objective_{i}" for i in range(len(directions))]
    if problem is None and len(names_attr) != len(directions):
        problem = f"'objective_names' names {len(names_attr)} objectives, the study has {len(directions)}"
    if problem is not None:
        raise DseError(
            f"the study {study_name!r} in {storage_url!r} cannot be read: its stored attribute {problem}. "
            "The database was edited or written by another tool; `dse sweep` writes these attributes."
        )
    config = attrs.get("study_config", {})
    target_model = config.get("target_model") or (config.get("model") or {}).get("name")
    trials, skipped = [], []
    for t in study.get_trials(deepcopy=False):
        bad = trial_attr_problem(t.user_attrs, t.values)
        if bad is None:
            trials.append(_trial_result(t, target_model))
        else:
            skipped.append(f"trial #{t.number} left out: its stored attribute {bad}")
    for note in skipped:
        warnings.warn(f"{storage_url} study {study_name!r}: {note}", StoredAttributeWarning, stacklevel=2)
    return StudyResults(
        study_name=study_name,
        storage_url=storage_url,
        config=config,
        study_file=attrs.get("study_file", ""),
        objective_names=tuple(names_attr),
        directions=directions,
        target_model=target_model,
        hardware=tuple(config.get("hardware", [])),
        trials=tuple(trials),
        dense=_baseline("dense", attrs.get("dense"), target_model),
        untuned_freekv=_baseline("untuned_freekv", attrs.get("untuned_freekv"), target_model),
        untuned_methods=_untuned_methods(attrs, config, target_model),
    )


def _untuned_methods(attrs: dict, config: dict, target_model: str | None) -> tuple[BaselineResult, ...]:
    """The stored "untuned_<method>" baselines (other than FreeKV's) the study names, in its order."""
    names = [f"untuned_{m}" for m in ((config.get("baselines") or {}).get("untuned") or {}) if m != "freekv"]
    found = (_baseline(name, attrs.get(name), target_model) for name in names)
    return tuple(b for b in found if b is not None)


def to_json(results: StudyResults) -> str:
    """The rows and baselines as JSON text (for `dse report --json` and notebooks); NaN -> null."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    data = {
        "study": results.study_name,
        "objectives": dict(zip(results.objective_names, results.directions, strict=True)),
        "rows": results.rows(),
        "pareto": [t.number for t in results.pareto()],
        "dense": results.dense.accuracy if results.dense else None,
        "untuned_freekv": results.untuned_freekv.accuracy if results.untuned_freekv else None,
    }
    return json.dumps(clean(data), indent=1)
