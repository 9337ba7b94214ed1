"""Per-prompt accuracy results, read back without torch.

Every accuracy measurement keeps one result per prompt: `{"id", "score", "answer"}` (summary.json's
`accuracy_samples`, a study trial's or baseline's user attribute of the same name; docs/contracts.md).
Prompt ids do not depend on the KV method or its knobs, so two runs of the same task spec and seed pair
up by id (dse/accuracy/floor.py, `dse compare`).

    from dse.accuracy.samples import load_summary_samples, scores
    load_summary_samples("runs/freekv")   # {"passkey_accuracy": {"passkey/2048/seed0/0": 1.0, ...}}
    scores(trial.accuracy_samples["passkey_accuracy"])   # {id: score}

A summary.json written before per-prompt results were recorded gives {} (never an error): callers say
that such a run must be re-run to be paired.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dse.errors import DseError

__all__ = ["scores", "answers", "summary_path", "read_summary", "summary_samples", "load_summary_samples"]


def _score(value: Any) -> float:
    return math.nan if value is None else float(value)


def scores(samples: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """{id: score} of a list of per-prompt results (a null score, i.e. not measured, becomes NaN)."""
    return {str(s["id"]): _score(s.get("score")) for s in samples}


def answers(samples: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """{id: the model's answer} of a list of per-prompt results."""
    return {str(s["id"]): str(s.get("answer", "")) for s in samples}


def summary_path(path: str | Path) -> Path:
    """The summary.json of a `dse trace` output directory, or `path` itself when it names the file;
    DseError when there is none."""
    p = Path(path)
    if p.is_dir():
        p = p / "summary.json"
        if not p.is_file():
            raise DseError(f"{path} holds no summary.json: give a `dse trace` output directory (its --out) "
                           "or a summary.json file")
        return p
    if not p.is_file():
        raise DseError(f"{path} does not exist: give a `dse trace` output directory (its --out) or a "
                       "summary.json file")
    return p


def read_summary(path: str | Path) -> dict[str, Any]:
    """The parsed summary.json of a trace output directory (or the file itself); DseError naming the
    file when it cannot be read or is not a JSON object."""
    p = summary_path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DseError(f"cannot read {p}: {exc}; is it a summary.json written by `dse trace`?") from None
    if not isinstance(data, dict):
        raise DseError(f"{p} is not a summary.json written by `dse trace` (not a JSON object)")
    return data


def summary_samples(summary: Mapping[str, Any], where: str = "summary.json") -> dict[str, list[dict]]:
    """{metric: [{"id", "score", "answer"}, ...]} of a parsed summary; {} for summaries written before
    per-prompt results were recorded (and for random-weights runs, whose results are withheld)."""
    found = summary.get("accuracy_samples") or {}
    ok = isinstance(found, dict) and all(
        isinstance(v, list) and all(isinstance(s, dict) and "id" in s for s in v) for v in found.values()
    )
    if not ok:
        raise DseError(f"{where}: accuracy_samples is not {{metric: [{{id, score, answer}}, ...]}}")
    return {str(k): list(v) for k, v in found.items()}


def load_summary_samples(path: str | Path) -> dict[str, dict[str, float]]:
    """{metric: {prompt id: score}} from a trace output directory or its summary.json; {} for a summary
    written before per-prompt results were recorded. DseError naming the file when it is unreadable."""
    where = str(summary_path(path))
    return {m: scores(v) for m, v in summary_samples(read_summary(path), where).items()}
