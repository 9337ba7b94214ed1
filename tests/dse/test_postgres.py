"""Many machines, one study: two `dse sweep` workers share a study in a real PostgreSQL server.

The fixture starts a throwaway server on loopback with scripts/postgres.sh (initdb in a temp directory,
as the `postgres` user when running as root). Without the PostgreSQL binaries the test is skipped with
the reason, except in CI (CI=true), where .ci/run installs them and their absence is a failure."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from grid_study import tiny_grid_study

from dse.results import load_results

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "postgres.sh"

STUDY = tiny_grid_study("shared")


def _have_postgres() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or shutil.which("initdb") is not None


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    if not _have_postgres():
        reason = "PostgreSQL server binaries missing (Debian package postgresql): scripts/postgres.sh install"
        if os.environ.get("CI") == "true":
            pytest.fail(f"in CI the PostgreSQL test must run: {reason}")
        pytest.skip(reason)
    base = tempfile.mkdtemp(prefix="dse-pg-")
    os.chmod(base, 0o755)  # the server runs as `postgres` when we are root: it must reach its directory
    cluster = os.path.join(base, "pg")
    started = subprocess.run(["bash", str(SCRIPT), "start", cluster], capture_output=True, text=True)
    if started.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not start PostgreSQL: {started.stderr[-1500:]}")
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", cluster], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_two_workers_share_one_study(postgres_url: str, tmp_path: Path) -> None:
    path = tmp_path / "shared.yaml"
    path.write_text(STUDY)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    workers = []
    for i in range(2):
        cmd = [
            sys.executable,
            "-m",
            "dse.cli",
            "sweep",
            str(path),
            "--storage",
            postgres_url,
            "--set",
            f"out_dir={tmp_path / f'machine-{i}'}",
            "--no-progress",
        ]
        log = open(tmp_path / f"worker-{i}.log", "w")  # noqa: SIM115
        workers.append((subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    for proc, log in workers:
        proc.wait(timeout=1200)
        log.close()
    logs = [(tmp_path / f"worker-{i}.log").read_text() for i in range(2)]
    assert [p.returncode for p, _ in workers] == [0, 0], logs

    res = load_results(postgres_url, "shared")
    counted = [t for t in res.trials if t.state in ("COMPLETE", "FAIL")]
    assert len(res.completed) == 3 and len(counted) == 3, [(t.number, t.state, t.skipped) for t in res.trials]
    keys = [(t.config["tau"], t.config["budget_tokens"]) for t in res.completed]
    assert len(set(keys)) == 3  # every trial done once: no configuration ran twice
    pids = {t.worker["pid"] for t in res.completed}
    assert pids <= {p.pid for p, _ in workers}
    assert len(pids) == 2, "both workers should have run trials of the shared study"
    for t in res.trials:  # anything else is a surplus trial drawn in a race, pruned without running
        assert t.state in ("COMPLETE", "PRUNED") and (t.state == "COMPLETE" or t.skipped)
