"""A `dse sweep --jobs 2` whose whole process group is SIGKILLed, resumed ten times (real runtime,
simulator and SQLite storage): every finished trial stays as it was, no configuration is measured twice,
no worker aborts (e.g. two workers starting the same re-queued trial and colliding on its trace
directory), and the last resume finishes the budget."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from grid_study import tiny_grid_study

from dse.sweep_storage import ORPHAN_AFTER_S, open_storage

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed")]

ROOT = Path(__file__).resolve().parents[2]
TAUS = (0.75, 0.8, 0.85, 0.9, 0.95)
STUDY = tiny_grid_study("killed", TAUS)


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name="killed", storage=open_storage(url, heartbeat=False)).trials
    except (KeyError, Exception):  # noqa: BLE001 - not created yet, or the database is being created
        return []


def _worker_logs(out: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted((out / "workers").glob("*.log")))


def _check_kept(url: str, finished: dict[int, tuple]) -> dict[int, tuple]:
    """Every trial finished before stays exactly as it was; returns the finished trials now."""
    now = {t.number: (t.values, t.datetime_complete) for t in _trials(url) if t.state.name == "COMPLETE"}
    for number, seen in finished.items():
        assert now.get(number) == seen, f"finished trial #{number} changed or was lost"
    return now


def _measured(trials: list[optuna.trial.FrozenTrial]) -> list[str]:
    """config_key of every COMPLETE trial that ran the model itself (not a copy, not a reused file)."""
    return [
        t.user_attrs["config_key"]
        for t in trials
        if t.state.name == "COMPLETE"
        and t.user_attrs.get("duplicate_of") is None
        and "reused_measurement" not in t.user_attrs
    ]


def test_killed_jobs2_group_resumed_ten_times(tmp_path: Path) -> None:
    path = tmp_path / "killed.yaml"
    path.write_text(STUDY)
    out = tmp_path / "out"
    url = f"sqlite:///{out / 'study.db'}"
    cmd = [
        sys.executable,
        "-m",
        "dse.cli",
        "sweep",
        str(path),
        "--set",
        f"out_dir={out}",
        "--no-progress",
        "--jobs",
        "2",
    ]
    rng = random.Random(0)
    finished: dict[int, tuple] = {}
    for cycle in range(10):
        log = tmp_path / f"cycle-{cycle}.log"
        with open(log, "w") as handle:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )
            # even cycles: kill right after the next trial finishes (so the study advances); odd cycles:
            # kill both workers in the middle of their measurements, a random time after both started
            delay_s = rng.uniform(2.0, 25.0) if cycle % 2 else float("inf")
            before = {t.number for t in _trials(url)}  # trials of earlier cycles (dead workers)
            both_since = None
            deadline = time.monotonic() + 600
            try:
                while proc.poll() is None and time.monotonic() < deadline:
                    trials = _trials(url) if (out / "study.db").exists() else []
                    running = [
                        t
                        for t in trials
                        if t.state.name == "RUNNING" and t.user_attrs.get("worker") and t.number not in before
                    ]
                    done = {t.number for t in trials if t.state.name == "COMPLETE"}
                    if done - finished.keys():
                        break  # a new trial finished: kill right after it
                    if len(running) >= 2:
                        both_since = both_since or time.monotonic()
                        if time.monotonic() - both_since >= delay_s:
                            break  # both workers measuring: kill in the middle
                    time.sleep(0.2)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        text = log.read_text() + _worker_logs(out)
        assert "Traceback" not in text and "already holds a trace" not in text, text[-3000:]
        assert proc.returncode in (0, -signal.SIGKILL), text[-3000:]
        finished = _check_kept(url, finished)
        measured = _measured(_trials(url))
        assert len(measured) == len(set(measured)), f"cycle {cycle}: a configuration was measured twice"
        # a cycle that ended by itself (the budget filled) is a resume too: the next ones must add nothing
        if any(t.state.name == "RUNNING" and not t.user_attrs.get("worker") for t in _trials(url)):
            time.sleep(ORPHAN_AFTER_S + 1)  # an orphan (killed before recording its worker) ages first

    time.sleep(ORPHAN_AFTER_S + 1)
    final = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    text = final.stdout + final.stderr + _worker_logs(out)
    assert final.returncode == 0, text[-3000:]
    assert "Traceback" not in text
    _check_kept(url, finished)
    trials = _trials(url)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    keys = [t.user_attrs["config_key"] for t in complete]
    assert len(complete) == len(TAUS) and len(set(keys)) == len(TAUS), [
        (t.number, t.state.name, t.params, t.user_attrs.get("skipped")) for t in trials
    ]
    measured = _measured(trials)
    assert len(measured) == len(set(measured))
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
