"""Finished measurements on disk, before they reach the Optuna storage; a lock for work done once.

A configuration's measurement (accuracy, traces, simulated results: an `Evaluation`) is written to
`<out_dir>/measurements/<key>.json` the moment it is finished, and only then stored in the study. If
storing fails (a full disk, a lost database connection, a killed worker), the next run that draws the
same configuration finds the file and reuses it instead of running the model again.

The key covers everything a measurement depends on: the configuration (None: dense attention) and
the study's measuring part (model and weights, tasks, dense layers, workload, hardware, replayed
models, seed, device, dtype, and any key a later version adds), but not what only steers the search
(name, search space, objectives, constraints, sampler, trials, slo, storage, out_dir, baselines).
So a baseline measured once is reused when the rest of the study's definition changes.

`exclusive(path)` (dse/file_lock.py) is an exclusive file lock (fcntl): two sweeps started at once on one
machine measure a baseline once, the second waiting for the first and then reusing its result.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dse.errors import DseError
from dse.file_lock import exclusive
from dse.objective import Evaluation
from dse.search_space import TrialConfig
from dse.study import Study
from traces.atomic_write import atomic_write_text

__all__ = ["MeasurementStore", "measurement_key", "exclusive", "NOT_MEASURING"]

# study keys that steer the search but do not change what one configuration measures
NOT_MEASURING = frozenset({
    "name", "description", "objectives", "constraints", "slo", "trials", "sampler", "baselines", "storage",
    "out_dir",
})


def measurement_key(study: Study, knobs: TrialConfig | None) -> str:
    """A short hash naming what `knobs` (None: dense attention) measures under `study`."""
    d = study.model_dump(mode="json")
    context = {k: v for k, v in d.items() if k not in NOT_MEASURING and k != "search"}
    context["dense_layers"] = d["search"]["dense_layers"]
    what = "dense" if knobs is None else knobs.key()
    text = json.dumps({"context": context, "configuration": what}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class MeasurementStore:
    """Evaluations by measurement key under `<out_dir>/measurements/`."""

    def __init__(self, out_dir: Path) -> None:
        self.dir = out_dir / "measurements"

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def load(self, key: str) -> Evaluation | None:
        """The evaluation saved under `key`, if its file is whole and its trace directories still exist."""
        try:
            data = json.loads(self.path(key).read_text())
            ev = Evaluation(**data["evaluation"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not all(Path(p).is_dir() for p in ev.trace_dirs.values()):
            return None
        return ev

    def save(self, key: str, ev: Evaluation) -> Path:
        """Write `ev` atomically (a temporary file renamed into place); returns the file."""
        path = self.path(key)
        text = json.dumps({"key": key, "evaluation": asdict(ev)}, default=_jsonable)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
        except OSError as exc:
            raise DseError(
                f"cannot save the finished measurement to {path} ({exc.strerror or exc}); free space in "
                "out_dir or choose another (--set out_dir=...)"
            ) from None
        return path


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
