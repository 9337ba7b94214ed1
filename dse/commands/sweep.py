"""`dse sweep STUDY.yaml`: run (or resume) an Optuna study of retrieval configurations.

Each trial runs the real model on the study's tasks (measured accuracy, a trace) and replays the trace
on every hardware profile (simulated latency). Run the same command again to resume; run it on several
machines with one `--storage postgresql://...` to share the study. `--jobs N` starts N worker processes
on this machine against the same storage.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from dse.errors import DseError

__all__ = ["command"]


def _describe(trial: Any) -> str:
    ua = trial.user_attrs
    if trial.state.name == "FAIL":
        return f"#{trial.number} failed: {ua.get('error', 'interrupted')[:80]}"
    cis = ua.get("accuracy_ci", {})

    def fmt(k: str, v: float | None) -> str:
        ci = cis.get(k) or {}
        text = f"{k}={v:.3g}" if v is not None else f"{k}=-"
        return text + (f" [{ci['low']:.3g}, {ci['high']:.3g}]" if ci.get("low") is not None else "")

    acc = ", ".join(fmt(k, v) for k, v in ua.get("accuracy", {}).items())
    dup = f" (same as #{ua['duplicate_of']})" if ua.get("duplicate_of") is not None else ""
    return f"#{trial.number} {acc}{dup}"


def _progress(total: int, initial: int, name: str, enabled: bool) -> Any:
    from tqdm import tqdm

    bar_format = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]{postfix}"
    return tqdm(total=total, initial=initial, desc=name, unit="trial", disable=not enabled,
                dynamic_ncols=True, bar_format=bar_format)


def _run_in_process(sweep: Any, progress: bool) -> None:
    bar = _progress(sweep.budget, min(sweep.finished(), sweep.budget), sweep.study.name, progress)

    def done(trial: Any, counts: dict[str, int]) -> None:
        bar.n = min(counts["complete"] + counts["failed"], sweep.budget)
        bar.set_postfix_str(_describe(trial), refresh=False)
        bar.refresh()

    try:
        sweep.run(done)
    finally:
        bar.close()


def _worker_cmd(study_file: str, sets: tuple[str, ...], storage: str, index: int) -> list[str]:
    cmd = [sys.executable, "-m", "dse.cli", "sweep", study_file, "--storage", storage, "--jobs", "1",
           "--no-progress", "--worker", "--worker-index", str(index)]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _run_workers(sweep: Any, study_file: str, sets: tuple[str, ...], jobs: int, progress: bool) -> None:
    """Start `jobs` worker processes on the same storage; show their progress by polling it."""
    log_dir = sweep.out_dir / "workers"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    procs = []
    for i in range(jobs):
        log = open(log_dir / f"worker-{i}.log", "w")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen(_worker_cmd(study_file, sets, sweep.storage_url, i), stdout=log,
                                       stderr=subprocess.STDOUT, env=env), log, log_dir / f"worker-{i}.log"))
    bar = _progress(sweep.budget, min(sweep.finished(), sweep.budget), sweep.study.name, progress)
    try:
        while any(p.poll() is None for p, _, _ in procs):
            time.sleep(2.0)
            bar.n = min(sweep.finished(), sweep.budget)
            bar.set_postfix_str(f"{sum(p.poll() is None for p, _, _ in procs)} workers", refresh=False)
            bar.refresh()
            if any(p.returncode == 2 for p, _, _ in procs):
                break
    except KeyboardInterrupt:
        for p, _, _ in procs:
            p.terminate()
        raise
    finally:
        bar.n = min(sweep.finished(), sweep.budget)
        bar.close()
        for p, log, _ in procs:
            if p.poll() is None and any(q.returncode == 2 for q, _, _ in procs):
                p.terminate()
            p.wait()
            log.close()
    bad = [(p.returncode, path) for p, _, path in procs if p.returncode != 0]
    if bad:
        code, path = bad[0]
        tail = " ".join(path.read_text().strip().splitlines()[-3:])
        raise DseError(f"{len(bad)} of {jobs} sweep workers failed (exit {code}); {path} ends: {tail}")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@click.command("sweep")
@click.argument("study_file", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a study key (dotted), e.g. --set trials=4 --set sampler.seed=1.")
@click.option("--storage", default=None, metavar="URL",
              help="Optuna RDB URL (default: the study's `storage`, else sqlite:///<out_dir>/study.db).")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Worker processes on this machine (all share the storage).")
@click.option("--progress/--no-progress", default=True, help="Show a progress bar with ETA.")
@click.option("--worker", is_flag=True, hidden=True, help="Run as one of --jobs workers (quiet).")
@click.option("--worker-index", default=0, hidden=True, type=click.IntRange(min=0),
              help="Which of the --jobs workers this is (seeds its sampler apart from the others).")
def command(study_file: str, sets: tuple[str, ...], storage: str | None, jobs: int, progress: bool,
            worker: bool, worker_index: int) -> None:
    """Run or resume the study in STUDY_FILE (see docs/studies.md)."""
    from dse.driver import Sweep
    from dse.preflight import check_before_compute
    from dse.study import load_study_file
    from dse.sweep_storage import storage_errors
    from freekv_runtime.errors import RuntimeInputError

    t0 = time.perf_counter()
    study, text = load_study_file(study_file, sets)
    echo = (lambda msg: None) if worker else (lambda msg: click.echo(msg, err=True))
    check_before_compute(study)  # before the storage is touched: a refused study leaves nothing behind
    if worker:  # the parent stops its workers with SIGTERM: end the running trial as interrupted (FAIL)
        signal.signal(signal.SIGTERM, _interrupt)
    sweep = Sweep(study, text, storage, worker_index=worker_index)
    with storage_errors(sweep.storage_url):
        requeued = sweep.recover()
        done = sweep.finished()
    echo(f"study {study.name!r} in {sweep.storage_url}: {done}/{sweep.budget} trials finished"
         + (f", {requeued} interrupted trial(s) re-queued" if requeued else ""))
    if study.searches_nothing:
        echo("note: `search` names no knob, so the study is one configuration, the defaults (method freekv, "
             "tau 0.9, page_size 32, budget_tokens 2048, sink_tokens 512, window_tokens 512); budget 1")
    try:
        sweep.ensure_baselines(echo)
        if jobs == 1:
            _run_in_process(sweep, progress and not worker)
        else:
            with storage_errors(sweep.storage_url):
                _run_workers(sweep, str(Path(study_file)), sets, jobs, progress)
    except KeyboardInterrupt:
        echo("interrupted: run the same command again to resume (finished trials are kept)")
        raise
    except RuntimeInputError as exc:
        if "weights" not in str(exc):
            raise
        raise DseError(
            f"{exc} In a study file the weights are `model.weights` (e.g. --set model.weights=PATH); "
            "see docs/studies.md."
        ) from None
    with storage_errors(sweep.storage_url):
        s = sweep.summary(time.perf_counter() - t0)
    if worker:
        return
    click.echo(
        f"study {s.study_name}: {s.complete} complete ({s.duplicates} copied from identical configurations), "
        f"{s.failed} failed, {s.skipped} skipped, {s.interrupted} interrupted; budget {s.budget}; "
        f"{s.wall_s:.1f} s. Storage: {s.storage_url}"
    )
