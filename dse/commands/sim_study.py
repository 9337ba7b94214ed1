"""`dse sim --study STUDY --trial N`: a stored study run's trace as the demand of `dse sim`.

STUDY is what `dse report` takes (a study YAML, an Optuna storage URL or an SQLite file); --trial is a
trial number, or `dense` / `untuned` / `untuned_<method>` for the baselines. The run's first task's
trace is replayed (its page size, budget, sink, window, tau and dense layers come from the trace's
metadata, as for any TRACE).
Equivalent to passing the trace directory itself: `dse sim runs/smoke/trials/00003/passkey/trace ...`
(the path is printed with the result).
"""

from __future__ import annotations

from pathlib import Path

from dse.errors import DseError

__all__ = ["study_trace"]

_BASELINES = {"dense": "dense", "untuned": "untuned_freekv", "untuned_freekv": "untuned_freekv"}


def study_trace(source: str, trial: str, study_name: str | None = None) -> Path:
    """The trace directory of `trial` (a number, 'dense' or 'untuned') of the study in `source`."""
    from dse.report.source import study_location
    from dse.results import load_results

    storage_url, name = study_location(source, study_name)
    results = load_results(storage_url, name)
    key = trial.strip().lower()
    others = {b.name: b for b in results.untuned_methods}  # untuned_<method> of baselines.untuned
    if key in _BASELINES or key in others:
        run = others.get(key) or (results.dense if _BASELINES[key] == "dense" else results.untuned_freekv)
        if run is None:
            raise DseError(f"--trial {trial}: study {results.study_name!r} has no {key} baseline")
        trace_dir, label = run.trace_dir, f"the {key} baseline"
    else:
        try:
            number = int(key)
        except ValueError:
            raise DseError(
                f"--trial {trial!r}: give a trial number, 'dense' or 'untuned' (FreeKV's), or "
                f"'untuned_<method>' ({', '.join(others) or 'none in this study'})"
            ) from None
        found = {t.number: t for t in results.trials}
        if number not in found:
            done = sorted(t.number for t in results.completed)
            raise DseError(
                f"--trial {number}: study {results.study_name!r} has no trial {number}; complete trials: "
                f"{', '.join(map(str, done)) or 'none'}"
            )
        t = found[number]
        if t.duplicate_of is not None:
            t = found.get(t.duplicate_of, t)  # a repeated configuration: the measured trial's trace
        trace_dir, label = t.trace_dir, f"trial {number}"
    if not trace_dir:
        raise DseError(f"--trial {trial}: {label} of study {results.study_name!r} recorded no trace")
    path = Path(trace_dir)
    if not path.is_dir():
        raise DseError(
            f"--trial {trial}: the trace of {label} ({path}) is not on this machine; copy the study's "
            "out_dir here or replay its measured rates with --synthetic"
        )
    return path
