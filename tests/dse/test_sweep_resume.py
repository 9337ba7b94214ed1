"""An interrupted sweep resumes with the same command: a worker is SIGKILLed after its first finished
trial; the rerun keeps every finished trial as it was, fails and re-queues the killed one, and ends
with exactly `trials` finished trials, each configuration run once (real runtime and simulator)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
from grid_study import tiny_grid_study

from dse.sweep_storage import ORPHAN_AFTER_S, open_storage

ROOT = Path(__file__).resolve().parents[2]

STUDY = tiny_grid_study("resume")


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name="resume", storage=open_storage(url, heartbeat=False)).trials
    except KeyError:  # the worker has not created the study yet
        return []


def test_sigkill_then_rerun_loses_and_repeats_nothing(tmp_path: Path) -> None:
    path = tmp_path / "resume.yaml"
    path.write_text(STUDY)
    out = tmp_path / "out"
    url = f"sqlite:///{out / 'study.db'}"
    cmd = [sys.executable, "-m", "dse.cli", "sweep", str(path), "--set", f"out_dir={out}", "--no-progress"]
    log = open(tmp_path / "first.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 900
    try:
        while not any(t.state.name == "COMPLETE" for t in (_trials(url) if out.exists() else [])):
            assert proc.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline, "no trial finished in 900 s"
            time.sleep(0.5)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
    at_kill = _trials(url)
    finished = {t.number: (t.values, t.datetime_complete) for t in at_kill if t.state.name == "COMPLETE"}
    running = [t.number for t in at_kill if t.state.name == "RUNNING"]
    assert finished
    if any(not t.user_attrs.get("worker") for t in at_kill if t.state.name == "RUNNING"):
        # killed between Optuna creating the trial and the worker recording itself on it: the rerun
        # recognises that orphan once it is ORPHAN_AFTER_S old (it could be a live worker's before)
        time.sleep(ORPHAN_AFTER_S + 1)

    rerun = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert rerun.returncode == 0, rerun.stderr[-2000:]

    after = _trials(url)
    complete = [t for t in after if t.state.name == "COMPLETE"]
    assert len(complete) == 3, [(t.number, t.state.name, t.params.get("tau"), t.user_attrs) for t in after]
    for number, (values, when) in finished.items():  # kept as they were, not re-run
        assert (after[number].state.name, after[number].values, after[number].datetime_complete) == (
            "COMPLETE",
            values,
            when,
        )
    keys = [t.user_attrs["config_key"] for t in complete]
    assert len(set(keys)) == 3, keys  # every configuration run exactly once
    requeued = 0
    for number in running:  # the killed trial: failed as interrupted, its configuration re-queued
        killed = after[number]
        assert killed.state.name == "FAIL" and "died" in killed.user_attrs["interrupted"]
        again = [t for t in complete if t.user_attrs.get("requeued_from") == number]
        if "grid_id" not in killed.system_attrs:  # killed before the grid gave it a cell: nothing to keep
            assert not again and not killed.params
            continue
        # killed while sampling, it may hold only some parameters: the re-queue keeps those and its cell
        assert len(again) == 1 and killed.params.items() <= again[0].params.items()
        assert again[0].system_attrs["grid_id"] == killed.system_attrs["grid_id"]
        requeued += 1
    assert "re-queued" in rerun.stderr or not requeued
