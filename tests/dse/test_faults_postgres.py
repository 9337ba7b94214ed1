"""The PostgreSQL server of a shared study stopped in the middle of a `dse sweep --jobs 2`: the command
and every worker end with the one-paragraph storage message (exit 2), never an Optuna or SQLAlchemy
traceback; started again, the same command finishes the study with no configuration measured twice.

Uses a throwaway server (scripts/postgres.sh); skipped with the reason where the PostgreSQL binaries are
missing (in CI, where .ci/run installs them, their absence is a failure)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from grid_study import tiny_grid_study

from dse.sweep_storage import open_storage

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed")]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "postgres.sh"


def _have_postgres() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or shutil.which("initdb") is not None


def _pg(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True)


def _trials(url: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name="stopped", storage=open_storage(url, heartbeat=False)).trials
    except Exception:  # noqa: BLE001 - the study is not created yet
        return []


def test_postgres_stopped_mid_sweep(tmp_path: Path) -> None:
    if not _have_postgres():
        reason = "PostgreSQL server binaries missing (Debian package postgresql): scripts/postgres.sh install"
        if os.environ.get("CI") == "true":
            pytest.fail(f"in CI the PostgreSQL test must run: {reason}")
        pytest.skip(reason)
    base = tempfile.mkdtemp(prefix="dse-pg-stop-")
    os.chmod(base, 0o755)  # the server runs as `postgres` when we are root: it must reach its directory
    cluster = os.path.join(base, "pg")
    started = _pg("start", cluster)
    if started.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not start PostgreSQL: {started.stderr[-1500:]}")
    url = started.stdout.strip().splitlines()[-1]
    path = tmp_path / "stopped.yaml"
    path.write_text(tiny_grid_study("stopped"))
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "dse.cli",
        "sweep",
        str(path),
        "--storage",
        url,
        "--set",
        f"out_dir={out}",
        "--no-progress",
        "--jobs",
        "2",
    ]
    try:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 600
        while not any(t.state.name == "RUNNING" and t.user_attrs.get("worker") for t in _trials(url)):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "no trial started in 600 s"
            time.sleep(0.5)
        stopped = _pg("stop", cluster)
        assert stopped.returncode == 0, stopped.stderr
        text, _ = proc.communicate(timeout=600)
        logs = {p.name: p.read_text() for p in sorted((out / "workers").glob("*.log"))}
        assert proc.returncode == 2, text
        for name, log in {"dse sweep": text, **logs}.items():
            assert "Traceback" not in log, f"{name}:\n{log[-3000:]}"
        assert f"the Optuna storage '{url}'" in text or "cannot open the Optuna storage" in text, text
        for name, log in logs.items():  # each worker ends with the storage paragraph, or was stopped first
            lines = [line for line in log.splitlines() if line.strip()]
            assert not lines or "Optuna storage" in lines[-1] or lines[-1] == "aborted", f"{name}: {log}"

        # the server back on the same port: the same command finishes the study, nothing measured twice
        restarted = _pg("resume", cluster)
        assert restarted.returncode == 0, restarted.stderr + restarted.stdout
        again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert again.returncode == 0, again.stderr[-3000:]
        complete = [t for t in _trials(url) if t.state.name == "COMPLETE"]
        keys = [t.user_attrs["config_key"] for t in complete]
        assert len(complete) == 3 and len(set(keys)) == 3
    finally:
        _pg("stop", cluster)
        shutil.rmtree(base, ignore_errors=True)
