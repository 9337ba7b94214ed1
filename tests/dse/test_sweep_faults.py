"""Faults in the middle of real sweeps (real runtime, simulator and SQLite storage):

- the storage refuses a write after a trial has been measured (a file-size limit on the database): one
  message naming the storage and the cause, no traceback, and the next run stores the saved measurement
  instead of running the model again;
- two sweeps started at the same moment on a new study measure the dense baseline once;
- a baseline is keyed by what it measures: changing another part of the study (here the untuned-FreeKV
  baseline and the trial budget) keeps the dense measurement.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from grid_study import tiny_grid_study

from dse.driver import Sweep
from dse.study import load_study_file
from dse.sweep_storage import open_storage

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed")]

ROOT = Path(__file__).resolve().parents[2]


def _sweep_cmd(path: Path, out: Path, *sets: str) -> list[str]:
    cmd = [sys.executable, "-m", "dse.cli", "sweep", str(path), "--set", f"out_dir={out}", "--no-progress"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _trials(out: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    storage = open_storage(f"sqlite:///{out / 'study.db'}", heartbeat=False)
    return optuna.load_study(study_name=name, storage=storage).trials


def test_storage_failure_loses_no_finished_measurement(tmp_path: Path) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(tiny_grid_study("faults"))
    out = tmp_path / "out"
    study, text = load_study_file(path, [f"out_dir={out}", "trials=1"])
    Sweep(study, text)  # the database with its tables and the study, before the limit
    limit = (out / "study.db").stat().st_size  # any growth of the database now fails

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    failed = subprocess.run(_sweep_cmd(path, out, "trials=1"), cwd=ROOT, capture_output=True, text=True,
                            timeout=1200, preexec_fn=cap)
    assert failed.returncode == 2, failed.stderr[-2000:]
    assert "Traceback" not in failed.stderr
    assert f"the Optuna storage 'sqlite:///{out / 'study.db'}' failed" in failed.stderr
    saved = sorted((out / "measurements").glob("*.json"))
    assert len(saved) == 1 and str(saved[0]) in failed.stderr
    assert not any(t.state.name == "COMPLETE" for t in _trials(out, "faults"))
    traces_before = sorted((out / "trials").rglob("meta.json"))

    rerun = subprocess.run(_sweep_cmd(path, out, "trials=1"), cwd=ROOT, capture_output=True, text=True,
                           timeout=1200)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    complete = [t for t in _trials(out, "faults") if t.state.name == "COMPLETE"]
    assert len(complete) == 1
    assert complete[0].user_attrs["reused_measurement"] == str(saved[0])
    assert sorted((out / "trials").rglob("meta.json")) == traces_before  # the model did not run again


BASELINE_STUDY = tiny_grid_study("baseline").replace(
    "baselines: {dense: false, untuned_freekv: null}", "baselines: {dense: true, untuned_freekv: null}"
)


def test_two_sweeps_at_once_measure_the_baseline_once_and_keep_it(tmp_path: Path) -> None:
    path = tmp_path / "baseline.yaml"
    path.write_text(BASELINE_STUDY)
    out = tmp_path / "out"
    logs = [open(tmp_path / f"sweep-{i}.log", "w+") for i in range(2)]  # noqa: SIM115
    cmd = _sweep_cmd(path, out, "trials=2")
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT) for log in logs]
    for p in procs:
        p.wait(timeout=1200)
    texts = [(tmp_path / f"sweep-{i}.log").read_text() for i in range(2)]
    for log in logs:
        log.close()
    assert [p.returncode for p in procs] == [0, 0], texts
    assert all("Traceback" not in t for t in texts)
    assert sum("measuring dense attention" in t for t in texts) == 1, texts
    assert len(list((out / "baselines").glob("dense-*/passkey/trace/meta.json"))) == 1
    dense = optuna.load_study(study_name="baseline", storage=open_storage(
        f"sqlite:///{out / 'study.db'}", heartbeat=False)).user_attrs["dense"]

    # another untuned-FreeKV baseline and a larger budget: the dense measurement is kept
    more = subprocess.run(
        _sweep_cmd(path, out, "trials=3",
                   "baselines.untuned_freekv={method: freekv, tau: 0.95, page_size: 16, budget_tokens: 96, "
                   "sink_tokens: 32, window_tokens: 32}"),
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert more.returncode == 0, more.stderr[-2000:]
    assert "measuring dense attention" not in more.stderr and "measuring untuned freekv" in more.stderr
    attrs = optuna.load_study(study_name="baseline", storage=open_storage(
        f"sqlite:///{out / 'study.db'}", heartbeat=False)).user_attrs
    assert attrs["dense"] == dense and attrs["untuned_freekv"]["config"]["page_size"] == 16
