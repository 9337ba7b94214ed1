"""A trial budget buys as many distinct configurations as trials where the space has them: a resumed
sweep, an extended study and two workers at once each draw new configurations (real Optuna samplers
on a real SQLite storage; the driver's choice of configuration, before anything is measured).

The configuration choice (`Sweep.choose`) is the driver's own; what a trial would measure is replaced
by a placeholder value told to Optuna, as the bookkeeping tests in test_sweep_storage.py do. The end to
end `--jobs 2` sweep with the real runtime is the slow test at the bottom."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from dse.driver import Sweep, sampler_seed
from dse.results import load_results
from dse.study import load_study_file

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")

ROOT = Path(__file__).resolve().parents[2]

STUDY = """\
name: distinct
model: {name: smollm2-135m}
tasks:
  - {name: passkey, context_tokens: 128, samples: 1}
search:
  tau: [0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
  page_size: [16]
  budget_tokens: [96]
  sink_tokens: [32]
  window_tokens: [32]
objectives:
  - metric: passkey_accuracy
  - latency: {hardware: a100-40g-pcie4}
workload: {input_tokens: 4096, output_tokens: 32}
hardware: [a100-40g-pcie4]
trials: 3
sampler: {name: random, seed: 0}
baselines: {dense: false, untuned_freekv: null}
device: cpu
"""


def _sweep(tmp_path: Path, *sets: str, worker_index: int = 0) -> Sweep:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    study, text = load_study_file(path, [f"out_dir={tmp_path / 'out'}", *sets])
    return Sweep(study, text, worker_index=worker_index)


def _tell(sweep: Sweep, trial: optuna.Trial, **kw: object) -> None:
    try:
        sweep.ostudy.tell(trial, **kw)
    except RuntimeError as exc:  # the grid sampler stops the study once every cell was drawn, which
        if "Study.stop" not in str(exc):  # Optuna allows only inside optimize(); the trial is told
            raise


def _draw(sweep: Sweep) -> optuna.Trial | None:
    """One trial as a worker starts it: chosen (and claimed), left RUNNING; None when pruned."""
    trial = sweep.ostudy.ask()
    try:
        sweep.choose(trial)
    except optuna.TrialPruned:
        _tell(sweep, trial, state=optuna.trial.TrialState.PRUNED)
        return None
    return trial


def _finish(sweep: Sweep, trial: optuna.Trial) -> None:
    _tell(sweep, trial, values=[trial.params["tau"], 0.01])  # placeholder for the measurement


def _run(sweep: Sweep) -> None:
    """Draw and finish trials until the sweep's budget is full (as Sweep.run does, one worker)."""
    for _ in range(200):
        if sweep.finished() >= sweep.budget:
            return
        trial = _draw(sweep)
        if trial is not None:
            _finish(sweep, trial)
    raise AssertionError("the budget was not filled in 200 draws")


def _distinct(sweep: Sweep) -> tuple[int, int]:
    complete = sweep.ostudy.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    return len(complete), len({t.user_attrs["config_key"] for t in complete})


def test_first_process_keeps_the_study_seed_others_get_their_own() -> None:
    assert sampler_seed(7, 0, 0) == 7
    seeds = {sampler_seed(7, n, w) for n in range(4) for w in range(3)}
    assert len(seeds) == 12  # every (trials in storage, worker) pair its own seed
    assert sampler_seed(7, 2, 1) == sampler_seed(7, 2, 1)  # reproducible


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_resumed_study_draws_new_configurations(tmp_path: Path, sampler: str) -> None:
    first = _sweep(tmp_path, f"sampler.name={sampler}", "trials=4")
    for _ in range(50):  # interrupted after two trials
        if _distinct(first)[0] == 2:
            break
        trial = _draw(first)
        if trial is not None:
            _finish(first, trial)
    resumed = _sweep(tmp_path, f"sampler.name={sampler}", "trials=4")  # the same command again
    _run(resumed)
    assert _distinct(resumed) == (4, 4)


@pytest.mark.parametrize("sampler", ["random", "tpe", "grid"])
def test_extended_study_draws_new_configurations(tmp_path: Path, sampler: str) -> None:
    _run(_sweep(tmp_path, f"sampler.name={sampler}", "trials=2"))
    extended = _sweep(tmp_path, f"sampler.name={sampler}", "trials=5")
    _run(extended)
    assert _distinct(extended) == (5, 5)


@pytest.mark.parametrize("sampler", ["random", "tpe", "grid"])
def test_two_workers_at_once_never_take_one_configuration(tmp_path: Path, sampler: str) -> None:
    """Two workers start together (same trials in storage, indices 0 and 1) and draw in lock step, each
    holding its trial RUNNING while the other draws: the second never measures the first's."""
    a = _sweep(tmp_path, f"sampler.name={sampler}", "trials=6", worker_index=0)
    b = _sweep(tmp_path, f"sampler.name={sampler}", "trials=6", worker_index=1)
    assert a.sampler_seed != b.sampler_seed
    for _ in range(100):
        if a.finished() >= a.budget:
            break
        ta, tb = _draw(a), _draw(b)  # both RUNNING at once
        for sweep, t in ((a, ta), (b, tb)):
            if t is not None:
                _finish(sweep, t)
    assert _distinct(a) == (6, 6)


def test_grid_workers_started_apart_draw_every_cell_once(tmp_path: Path) -> None:
    """A second worker started after the first drew (its own sampler seed) reads the cells the storage
    records as drawn in the same grid: the whole grid is measured in as many trials, none redrawn."""
    a = _sweep(tmp_path, "sampler.name=grid", "trials=6")
    first = _draw(a)
    b = _sweep(tmp_path, "sampler.name=grid", "trials=6")  # one trial already in storage
    assert a.sampler_seed != b.sampler_seed
    drawn = [first]
    for _ in range(5):
        drawn.append(_draw(b if len(drawn) % 2 else a))  # lock step, every trial RUNNING meanwhile
    assert all(t is not None for t in drawn), [t.user_attrs.get("skipped") for t in a.ostudy.trials]
    assert len({t.user_attrs["config_key"] for t in drawn}) == 6


def test_a_twin_of_a_running_trial_is_redrawn(tmp_path: Path) -> None:
    a = _sweep(tmp_path)
    b = _sweep(tmp_path, worker_index=1)
    running = _draw(a)
    assert running is not None
    b.ostudy.enqueue_trial(running.params)  # b is handed the very configuration a is measuring
    assert _draw(b) is None
    skipped = b.ostudy.trials[-1].user_attrs["skipped"]
    assert skipped.startswith(f"duplicate: trial #{running.number} (running)")


def test_space_smaller_than_the_budget_copies_after_every_configuration_is_taken(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path, "search.tau=[0.8, 0.9]", "trials=3", "sampler.name=random")
    for _ in range(50):
        if sweep.finished() >= 2:
            break
        trial = _draw(sweep)
        if trial is not None:
            _finish(sweep, trial)
    assert _distinct(sweep) == (2, 2)
    trial = sweep.ostudy.ask()
    knobs = sweep.choose(trial)  # both taken: the third is measured as a copy, not redrawn forever
    assert knobs.tau in (0.8, 0.9) and trial.user_attrs["config_key"] == knobs.key()


@pytest.mark.slow
def test_jobs_2_sweep_measures_distinct_configurations(tmp_path: Path) -> None:
    """`dse sweep --jobs 2` end to end (real runtime and simulator): three trials, three configurations."""
    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "dse.cli", "sweep", str(path), "--set", f"out_dir={out}", "--jobs", "2",
         "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = load_results(f"sqlite:///{out / 'study.db'}", "distinct")
    keys = {json.dumps(t.config, sort_keys=True) for t in res.completed}
    assert len(res.completed) == 3 and len(keys) == 3
    assert all(t.duplicate_of is None for t in res.completed)
