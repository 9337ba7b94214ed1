"""One run's per-prompt results, named the way `dse compare` takes them.

A run is either
- a `dse trace` output directory (holding summary.json) or a summary.json file, or
- a run of a study: `STUDY:trial:N` (trial number N), `STUDY:dense` (the dense-attention baseline),
  `STUDY:untuned_freekv` or `STUDY:untuned_<method>` (an untuned baseline), where STUDY is what
  `dse report` takes: a study YAML, an Optuna storage URL or an SQLite file written by `dse sweep`
  (e.g. `studies/smoke.yaml:trial:3`, `sqlite:///runs/smoke/study.db:dense`).
A path that exists is always a path, even when it ends like a study reference.

Never imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.accuracy.samples import read_summary, summary_path, summary_samples
from dse.errors import DseError

__all__ = ["RunSamples", "load_run", "parse_study_ref", "RUN_SYNTAX"]

RUN_SYNTAX = (
    "a `dse trace` output directory (or its summary.json), or STUDY:trial:N, STUDY:dense, "
    "STUDY:untuned_freekv or STUDY:untuned_<method> with STUDY a study YAML, an Optuna storage URL or an "
    "SQLite file written by `dse sweep`"
)
_STUDY_REF = re.compile(r"^(?P<source>.+):(?P<which>trial:\d+|dense|untuned_[A-Za-z0-9_-]+)$")


@dataclass(frozen=True)
class RunSamples:
    """label: how the run was named. samples: {metric: [{"id", "score", "answer"}, ...]}. accuracy:
    {metric: value} as the run recorded it. exact: {metric: why} for metrics that were never run
    (dense fidelity, exact by definition). note: why the run has no samples, when it is known."""

    label: str
    samples: dict[str, list[dict]]
    accuracy: dict[str, Any] = field(default_factory=dict)
    exact: dict[str, str] = field(default_factory=dict)
    note: str | None = None


def parse_study_ref(text: str) -> tuple[str, str] | None:
    """(study source, "trial:N" | "dense" | "untuned_<method>") of a study reference, or None when
    `text` is not one (an existing path never is)."""
    if Path(text).exists():
        return None
    match = _STUDY_REF.match(text)
    return None if match is None else (match["source"], match["which"])


def load_run(text: str, study_name: str | None = None) -> RunSamples:
    """The run named by `text` (see the module docstring); DseError with one paragraph otherwise."""
    ref = parse_study_ref(text)
    if ref is not None:
        return _study_run(text, *ref, study_name)
    path = Path(text)
    if not path.exists():
        raise DseError(f"{text} does not exist: a run is {RUN_SYNTAX}")
    summary = read_summary(path)
    note = None
    if summary.get("random_weights") is not None:
        note = (f"{text} ran with random weights (seed {summary['random_weights']}): its accuracy and "
                "per-prompt results are withheld as meaningless; run it with real weights")
    return RunSamples(text, summary_samples(summary, str(summary_path(path))), summary.get("accuracy") or {},
                      summary.get("accuracy_exact") or {}, note)


def _study_run(text: str, source: str, which: str, study_name: str | None) -> RunSamples:
    from dse.report.source import study_location
    from dse.results import load_results

    url, name = study_location(source, study_name)
    res = load_results(url, name)
    if which.startswith("trial:"):
        number = int(which.split(":")[1])
        trial = next((t for t in res.trials if t.number == number), None)
        if trial is None:
            numbers = [t.number for t in res.trials]
            have = f"trials {min(numbers)}-{max(numbers)}" if numbers else "no trials"
            raise DseError(f"{text}: study {res.study_name!r} has no trial {number} ({have})")
        note = None
        if not trial.accuracy:
            why = trial.skipped or trial.error or trial.interrupted or f"state {trial.state}"
            note = f"trial {number} measured nothing ({why})"
        return RunSamples(text, trial.accuracy_samples, trial.accuracy,
                          trial.trace_summary.get("accuracy_exact") or {}, note)
    baselines = {"dense": res.dense, "untuned_freekv": res.untuned_freekv,
                 **{b.name: b for b in res.untuned_methods}}
    base = baselines.get(which)
    if base is None:
        present = ", ".join(k for k, v in baselines.items() if v is not None) or "none"
        raise DseError(f"{text}: study {res.study_name!r} has no {which} baseline (it has: {present})")
    exact = base.trace_summary.get("accuracy_exact") or {}
    return RunSamples(text, base.accuracy_samples, base.accuracy, exact)
