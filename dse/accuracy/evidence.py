"""Accuracy evidence: what was measured for a method and its knobs, on which prompts, where it came from.

An `Evidence` is one measured configuration: its method, the knobs it ran with, one accuracy metric with
its 95% interval and the per-prompt scores (prompt id -> score) the paired floor needs, the model it was
measured on, the trace it recorded (its own recall demand, for the simulator), and a source sentence.
`planned_knobs` are the knobs the answer prices on the planned model: the measured ones, unless the
measurement ran a stand-in at a shorter context with the budget scaled to the same share of the context
(dse.accuracy.measure), in which case both are kept and the answer says so.

Sources (`load_evidence`): a trace output directory (summary.json + trace/, as `dse trace` writes), a
directory holding such directories (any depth), or a study (a study YAML, an Optuna storage URL or an
SQLite file): its baselines and complete trials. Never imports torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.errors import DseError

__all__ = ["Evidence", "load_evidence", "evidence_from_summary", "evidence_from_study", "knob_text",
           "pair_with_dense", "RETRIEVAL_KEYS"]

RETRIEVAL_KEYS = ("budget_tokens", "page_size", "sink_tokens", "window_tokens")


def knob_text(method: str, knobs: dict[str, Any]) -> str:
    """'B=2048 p=32 S=64 W=64 tau=0.9' (the knobs a method reads; dense: '-')."""
    if method == "dense":
        return "-"
    short = {"budget_tokens": "B", "page_size": "p", "sink_tokens": "S", "window_tokens": "W"}
    parts = [f"{short[k]}={knobs[k]}" for k in RETRIEVAL_KEYS if knobs.get(k) is not None]
    parts += [f"{k}={v}" for k, v in sorted((knobs.get("options") or {}).items())]
    return " ".join(parts)


@dataclass(frozen=True)
class Evidence:
    """One measured configuration (module docstring). knobs / planned_knobs: the retrieval knobs
    (RETRIEVAL_KEYS) and `options` (the method's own knobs, tau included). value/low/high/n: the metric
    with its 95% interval. scores: prompt id -> score (empty: no per-prompt results recorded)."""

    method: str
    knobs: dict[str, Any]
    metric: str
    value: float
    low: float
    high: float
    n: int
    scores: dict[str, float]
    source: str
    measured_model: str
    context_tokens: int | None
    trace_dir: Path | None
    planned_knobs: dict[str, Any] = field(default_factory=dict)

    @property
    def planned(self) -> dict[str, Any]:
        return self.planned_knobs or self.knobs

    @property
    def key(self) -> tuple:
        """Identity of the planned configuration: method and planned knobs."""
        p = self.planned
        return (self.method, *(p.get(k) for k in RETRIEVAL_KEYS),
                tuple(sorted((p.get("options") or {}).items())))


def _nan(x: Any) -> float:
    return math.nan if x is None else float(x)


def _scores(samples: Any) -> dict[str, float]:
    """[{id, score, answer}] -> {id: score} (dse.accuracy.samples.scores); {} for anything else."""
    from dse.accuracy.samples import scores

    return scores(samples) if isinstance(samples, list) else {}


def _knobs_from_runtime(runtime: dict[str, Any]) -> dict[str, Any]:
    knobs = {k: runtime.get(k) for k in RETRIEVAL_KEYS}
    knobs["options"] = dict(runtime.get("knobs") or {})
    return knobs


def evidence_from_summary(out_dir: Path, metric: str | None = None) -> Evidence:
    """The evidence of one `dse trace` output directory (summary.json and its trace)."""
    from traces import open_trace

    path = out_dir / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DseError(f"--accuracy-from {out_dir}: cannot read {path}: {exc}") from None
    measured = [m for m, v in (summary.get("accuracy") or {}).items() if v is not None]
    if not measured:
        raise DseError(f"--accuracy-from {out_dir}: {path} records no accuracy (random weights, or no task)")
    if metric is None:
        metric = measured[0]
    elif metric not in measured:
        raise DseError(f"--accuracy-from {out_dir}: no metric {metric!r} in {path}; it measured "
                       f"{', '.join(measured)}")
    trace_dir = Path(summary.get("trace_dir") or out_dir / "trace")
    if not trace_dir.is_dir():
        trace_dir = out_dir / "trace"
    reader = open_trace(trace_dir)
    runtime = dict(reader.meta.runtime)
    ci = (summary.get("accuracy_ci") or {}).get(metric) or {}
    planned = (summary.get("planned") or {}).get("knobs") or {}
    return Evidence(
        method=str(runtime.get("method")), knobs=_knobs_from_runtime(runtime), metric=metric,
        value=float(summary["accuracy"][metric]), low=_nan(ci.get("low")), high=_nan(ci.get("high")),
        n=int(ci.get("n") or 0), scores=_scores((summary.get("accuracy_samples") or {}).get(metric)),
        source=str(summary.get("source") or f"trace {out_dir}"), measured_model=reader.meta.model.name,
        context_tokens=(reader.meta.task or {}).get("context_tokens"), trace_dir=trace_dir,
        planned_knobs=planned,
    )


def _run_knobs(config: dict[str, Any]) -> dict[str, Any]:
    knobs = {k: config.get(k) for k in RETRIEVAL_KEYS}
    options = dict(config.get("options") or {})
    if config.get("tau") is not None:
        options["tau"] = config["tau"]
    knobs["options"] = options
    return knobs


def evidence_from_study(source: str, metric: str | None = None) -> list[Evidence]:
    """The evidence of a study's baselines and complete, non-duplicate trials."""
    from dse.report.source import study_location
    from dse.results import load_results

    storage_url, name = study_location(source, None)
    results = load_results(storage_url, name)
    runs: list[tuple[str, Any]] = [(n, r) for n, r in (("dense", results.dense),
                                                        ("untuned FreeKV", results.untuned_freekv)) if r]
    runs += [(f"untuned {r.name.removeprefix('untuned_')}", r) for r in results.untuned_methods]
    runs += [(f"trial {t.number}", t) for t in results.completed if t.duplicate_of is None]
    model = str((results.config.get("model") or {}).get("name") or "?")
    task = next(iter(results.config.get("tasks") or []), {}) or {}
    out = []
    for label, run in runs:
        chosen = metric or next(iter(run.accuracy), None)
        if chosen is None or run.accuracy.get(chosen) is None:
            continue
        ci = (run.accuracy_ci or {}).get(chosen) or {}
        samples = (getattr(run, "accuracy_samples", None) or {}).get(chosen)
        trace = next(iter(getattr(run, "trace_dirs", None) or {}), None)
        trace_dir = (getattr(run, "trace_dirs", {}) or {}).get(trace) or run.trace_dir
        out.append(Evidence(
            method=str(run.config.get("method") or "dense"), knobs=_run_knobs(run.config), metric=chosen,
            value=float(run.accuracy[chosen]), low=_nan(ci.get("low")), high=_nan(ci.get("high")),
            n=int(ci.get("n") or 0), scores=_scores(samples), source=f"study {results.study_name}, {label}",
            measured_model=model, context_tokens=task.get("context_tokens"),
            trace_dir=Path(trace_dir) if trace_dir else None,
        ))
    return out


def _is_study(text: str) -> bool:
    return "://" in text or text.endswith((".yaml", ".yml", ".db", ".sqlite", ".sqlite3"))


def load_evidence(sources: Iterable[str], metric: str | None = None) -> list[Evidence]:
    """Every source's evidence, in order (module docstring)."""
    out: list[Evidence] = []
    for text in sources:
        path = Path(text)
        if _is_study(text):
            out += evidence_from_study(text, metric)
        elif (path / "summary.json").is_file():
            out.append(evidence_from_summary(path, metric))
        elif path.is_dir():
            found = sorted(p.parent for p in path.rglob("summary.json"))
            if not found:
                raise DseError(f"--accuracy-from {text}: no summary.json under it (give `dse trace` output "
                               "directories, a directory of them, or a study file or storage URL)")
            out += [evidence_from_summary(p, metric) for p in found]
        else:
            raise DseError(f"--accuracy-from {text}: not a directory, a study file (.yaml) or a storage URL")
    return out


def pair_with_dense(item: Evidence, dense: list[Evidence]) -> Evidence | None:
    """The dense-attention evidence sharing the most prompt ids with `item` (same metric), else None."""
    same = [d for d in dense if d.metric == item.metric]
    best = max(same, key=lambda d: len(set(d.scores) & set(item.scores)), default=None)
    return best if best is not None and set(best.scores) & set(item.scores) else None
