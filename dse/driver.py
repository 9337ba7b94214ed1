"""The study driver: an Optuna multi-objective study over a study file, in any Optuna RDB storage.

One sweep = create (or load) the study named `study.name` in the storage, recover trials of workers
that died, measure the baselines once (dense attention, untuned FreeKV: study user attributes), then
run trials until `trials` of them are finished. The same command resumes an interrupted sweep and,
pointed at one PostgreSQL database from several machines, shares the work.

Trial budget. A trial counts toward `trials` when it is COMPLETE, RUNNING, WAITING, or FAIL with a
recorded `error` (the configuration itself failed). Not counted: PRUNED trials (an invalid knob
combination, skipped without running, or a surplus trial drawn by a racing worker after the budget
was full) and trials stopped by an interrupted or killed worker (FAIL without `error`). Each trial,
when it starts, computes its rank among the counting trials by trial number (numbers are assigned
atomically by the storage); a rank past the budget makes it a surplus trial, so two workers never run
more than `trials` between them.

Killed workers. A trial left RUNNING by a worker that died is marked FAIL (attribute `interrupted`)
and its parameters are re-queued (a new WAITING trial with the same configuration, run first by the
next worker): at start, for dead worker processes on this host (pid check), and through Optuna's
heartbeat (`heartbeat_interval_s`, `grace_period_s`) for workers on other machines. Ctrl-C marks the
running trial FAIL the same way; the next run re-queues it. No finished trial is ever re-run.

Distinct configurations. Each process seeds its sampler from the study seed, the number of trials already
in storage and its worker index (`--jobs`), so a resumed, extended or parallel sweep draws new
configurations instead of replaying the same draws. The grid sampler is the exception: it keeps its
bookkeeping in the storage (each trial's cell, an index into its shuffled grid), so every worker shuffles
the grid with the study seed; with a shuffle of its own, a worker's cell 2 is another's cell 0, and cells
that other workers count as drawn are never measured. A drawn configuration that another trial already
measured, is measuring or failed on is redrawn (the trial is PRUNED, `skipped: duplicate ...`, and does
not count) while the space still holds configurations not taken; the check and the claim happen under a
file lock, so the workers of one machine never measure one configuration twice. Only once every
configuration is taken does a trial copy a COMPLETE twin's measurements (attribute `duplicate_of`).

Nothing finished is lost. A measurement is saved to `<out_dir>/measurements/` (dse/measurements.py)
before it is stored; when storing fails the sweep stops with one message naming the storage and the
cause, and the next run reuses the saved measurement (attribute `reused_measurement`) instead of
running the model again. Baselines are keyed by what they measure, measured once under a file lock, and
reused when the rest of the study's definition changes.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass
from typing import Any

from dse.errors import DseError
from dse.file_lock import exclusive
from dse.heartbeat import Heartbeat
from dse.measurements import MeasurementStore, measurement_key
from dse.objective import Evaluation, OutOfMemory, constraint_values, evaluate, objective_values
from dse.preflight import check_before_compute
from dse.search_space import SearchSpace, TrialConfig, untuned_configs
from dse.study import Study
from dse.sweep_storage import (
    open_storage,
    recover_interrupted,
    requeue,
    storage_errors,
)
from dse.trial_claims import budget_rank, claim, complete_twin

__all__ = ["SweepSummary", "Sweep", "TrialFailed", "MAX_SKIPPED_IN_ROW", "sampler_seed"]


MAX_SKIPPED_IN_ROW = 500  # invalid combinations drawn in a row before the sweep gives up


class TrialFailed(Exception):
    """The configuration of a trial failed (recorded with its error; the sweep goes on)."""


def sampler_seed(study_seed: int, trials_in_storage: int, worker_index: int) -> int:
    """The sampler seed of one sweep process: the study seed for the first process of a new study, else
    a reproducible mix of the seed, the trials already stored and the worker index (distinct draws)."""
    if trials_in_storage == 0 and worker_index == 0:
        return study_seed
    text = f"{study_seed}/{trials_in_storage}/{worker_index}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:4], "big")


@dataclass(frozen=True)
class SweepSummary:
    study_name: str
    storage_url: str
    budget: int
    complete: int
    failed: int
    skipped: int
    duplicates: int
    interrupted: int
    wall_s: float


def _input_error_types() -> tuple[type[BaseException], ...]:
    """Errors that mean the study itself cannot run (missing weights, bad knobs): stop the sweep."""
    from dse.errors import user_error_types

    return tuple(t for t in user_error_types() if t is not FileNotFoundError)


class Sweep:
    """One worker's view of a study: storage, Optuna study, search space, objective."""

    def __init__(self, study: Study, study_text: str, storage_url: str | None = None,
                 worker_index: int = 0) -> None:
        import optuna

        self.study = study
        self.study_text = study_text
        self.storage_url = storage_url or study.storage_url
        self.space = SearchSpace(study.search)
        self.budget = study.trials
        self.n_valid = self.space.n_valid()
        if study.sampler.name == "grid" or study.searches_nothing:
            assert self.n_valid is not None
            self.budget = min(self.budget, self.n_valid)
        self.host = socket.gethostname()
        self.out_dir = study.output_dir
        self.measurements = MeasurementStore(self.out_dir)
        self.stalled = False
        # trial failures and interruptions are recorded in the storage and shown by `dse sweep` itself
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        storage = open_storage(self.storage_url, self._on_stale_trial, start_lock=self.out_dir / "start.lock")
        directions = [o.resolved_direction for o in study.objectives]
        with storage_errors(self.storage_url):
            self.ostudy = optuna.create_study(
                study_name=study.name, storage=storage, directions=directions,
                sampler=self._sampler(study.sampler.seed), load_if_exists=True,
            )
            self.sampler_seed = sampler_seed(study.sampler.seed, len(self.ostudy.get_trials(deepcopy=False)),
                                             worker_index)
            self.ostudy.sampler = self._sampler(self.sampler_seed)
            self._check_same_study(directions)

    # -- setup ---------------------------------------------------------------------------------------

    def _sampler(self, seed: int) -> Any:
        import optuna

        # constraints reach the samplers through Trial.set_constraint (see _store)
        s = self.study.sampler
        if s.name == "tpe":
            kw = {"n_startup_trials": s.n_startup_trials} if s.n_startup_trials else {}
            return optuna.samplers.TPESampler(seed=seed, **kw)
        if s.name == "nsga2":
            kw = {"population_size": s.population_size} if s.population_size else {}
            return optuna.samplers.NSGAIISampler(seed=seed, **kw)
        if s.name == "grid":  # one shuffle for every worker: the cells stored (grid_id) index it
            return optuna.samplers.GridSampler(self.space.grid(), seed=s.seed)
        return optuna.samplers.RandomSampler(seed=seed)

    def _fingerprint(self) -> dict[str, Any]:
        """The parts of the study whose change makes stored trials incomparable (not the baselines:
        they are keyed by what they measure and re-measured when that changes)."""
        d = self.study.model_dump(mode="json")
        keep = ("model", "tasks", "search", "objectives", "constraints", "workload", "hardware",
                "target_model", "extra_replay_models", "seed", "dtype")
        out = {k: d[k] for k in keep}
        if not out["search"].get("knobs"):  # studies stored before per-method knobs had no such key
            out["search"] = {k: v for k, v in out["search"].items() if k != "knobs"}
        return out

    def _check_same_study(self, directions: list[str]) -> None:
        attrs = self.ostudy.user_attrs
        stored = attrs.get("fingerprint")
        if stored is not None:
            stored = {k: v for k, v in stored.items() if k != "baselines"}  # older studies stored it
        nothing_measured = not self.ostudy.get_trials(deepcopy=False)
        if stored is None or nothing_measured:
            self.ostudy.set_user_attr("fingerprint", self._fingerprint())
            self.ostudy.set_user_attr("study_file", self.study_text)
            self.ostudy.set_user_attr("study_config", self.study.model_dump(mode="json"))
            self.ostudy.set_user_attr("objective_names", [o.label for o in self.study.objectives])
            return
        if stored != self._fingerprint():
            changed = sorted(k for k in stored if stored.get(k) != self._fingerprint().get(k))
            raise DseError(
                f"the storage {self.storage_url} already holds a study named {self.study.name!r} with a "
                f"different definition (changed: {', '.join(changed)}). Trials of the two would not be "
                "comparable: give the study a new name (--set name=...) or another storage (--storage). "
                "Only `trials`, `sampler`, `slo`, `baselines`, `storage` and `out_dir` may change on resume."
            )
        self.ostudy.set_user_attr("study_config", self.study.model_dump(mode="json"))

    def _on_stale_trial(self, ostudy: Any, trial: Any) -> None:
        """Heartbeat callback: a worker on some machine stopped beating; re-queue its configuration."""
        with exclusive(self.out_dir / "requeue.lock"):  # two workers noticing it at once re-queue it once
            requeued = set(ostudy.user_attrs.get("requeued", []))
            if trial.number in requeued or "error" in trial.user_attrs:
                return
            requeue(ostudy, trial)
            ostudy.set_user_attr("requeued", sorted(requeued | {trial.number}))

    # -- state ---------------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """complete / failed (with error) / running / waiting / skipped / interrupted / duplicates."""
        from optuna.trial import TrialState

        out = dict.fromkeys(("complete", "failed", "running", "waiting", "skipped", "interrupted",
                             "duplicates"), 0)
        for t in self.ostudy.get_trials(deepcopy=False):
            if t.state == TrialState.COMPLETE:
                out["complete"] += 1
                out["duplicates"] += t.user_attrs.get("duplicate_of") is not None
            elif t.state == TrialState.FAIL:
                out["failed" if "error" in t.user_attrs else "interrupted"] += 1
            elif t.state == TrialState.RUNNING:
                out["running"] += 1
            elif t.state == TrialState.WAITING:
                out["waiting"] += 1
            elif t.state == TrialState.PRUNED:
                out["skipped"] += 1
        return out

    def finished(self) -> int:
        c = self.counts()
        return c["complete"] + c["failed"]

    def recover(self) -> int:
        """Fail trials of dead local workers and re-queue every interrupted trial; returns how many."""
        with exclusive(self.out_dir / "requeue.lock"):  # workers starting together re-queue a trial once
            return recover_interrupted(self.ostudy, self.host)

    # -- before any compute --------------------------------------------------------------------------

    def preflight(self) -> None:
        """Check what the study needs before measuring anything (dse/preflight.py)."""
        check_before_compute(self.study)

    # -- baselines -----------------------------------------------------------------------------------

    def ensure_baselines(self, echo: Any = print) -> None:
        """Measure dense attention and the untuned baselines (FreeKV's, then baselines.untuned: user
        attributes "untuned_<method>") once, keyed by what they measure: under a file lock, so that a
        second sweep started at the same moment waits and reuses."""
        b = self.study.baselines
        if b.dense or self.study.constraints.min_accuracy_ratio is not None:
            self._baseline("dense", None, echo)
        for name, knobs in untuned_configs(b).items():  # untuned FreeKV, then baselines.untuned
            self._baseline(name, knobs, echo)

    def _baseline(self, name: str, knobs: TrialConfig | None, echo: Any) -> None:
        key = measurement_key(self.study, knobs)
        if self.ostudy.user_attrs.get(name, {}).get("measurement_key") == key:
            return
        with exclusive(self.out_dir / "baselines" / f"{name}.lock"):
            if self.ostudy.user_attrs.get(name, {}).get("measurement_key") == key:
                return  # another sweep measured it while this one waited
            ev = self.measurements.load(key)
            if ev is None:
                label = "dense attention" if knobs is None else f"untuned {knobs.method}"
                echo(f"measuring {label} (once per study) ...")
                with Heartbeat(echo, label) as beat:
                    ev = evaluate(self.study, knobs, self.out_dir / "baselines" / f"{name}-{key[:8]}",
                                  progress=beat.stage)
                self.measurements.save(key, ev)
            attrs = {**ev.attrs(self.study.replay_models[0]), "measurement_key": key}
            with storage_errors(self.storage_url, f"the {name} baseline is saved in "
                                f"{self.measurements.path(key)} and is reused by the next run"):
                self.ostudy.set_user_attr(name, attrs)

    # -- the objective -------------------------------------------------------------------------------

    def choose(self, trial: Any) -> TrialConfig:
        """The configuration `trial` measures, recorded on it; optuna.TrialPruned (attribute `skipped`)
        for a surplus trial, an invalid combination or a configuration another trial has taken."""
        import optuna

        trial.set_user_attr("worker", {"host": self.host, "pid": os.getpid()})
        if budget_rank(self.ostudy, trial.number) >= self.budget:
            trial.set_user_attr("skipped", "surplus: the trial budget was already full")
            raise optuna.TrialPruned("over budget")
        knobs = self.space.suggest(trial)
        reason = knobs.invalid_reason()
        if reason is not None:
            trial.set_user_attr("skipped", f"invalid combination: {reason}")
            raise optuna.TrialPruned(reason)
        taken = claim(self.ostudy, trial, knobs, self.out_dir / "claims.lock", self.n_valid)
        if taken is not None:
            trial.set_user_attr("skipped", taken)
            raise optuna.TrialPruned(taken)
        return knobs

    def __call__(self, trial: Any) -> list[float]:
        """Optuna objective: choose the configuration, copy a twin once the space is exhausted, reuse a
        saved measurement, else evaluate."""
        self._saved = None
        knobs = self.choose(trial)
        dense = self.ostudy.user_attrs.get("dense", {}).get("accuracy")
        if dense is not None:
            trial.set_user_attr("dense_accuracy", dense)
        twin = complete_twin(self.ostudy, knobs.key(), trial.number)
        if twin is not None:
            for k, v in twin.user_attrs.items():
                if k not in ("worker", "config", "config_key", "requeued_from"):
                    trial.set_user_attr(k, v)
            for k, v in twin.constraints.items():
                trial.set_constraint(k, v)
            trial.set_user_attr("duplicate_of", twin.number)
            return list(twin.values)
        key = measurement_key(self.study, knobs)
        try:
            ev = self.measurements.load(key)
            if ev is not None:
                trial.set_user_attr("reused_measurement", str(self.measurements.path(key)))
            else:
                ev = evaluate(self.study, knobs, self.out_dir / "trials" / f"{trial.number:05d}")
                self.measurements.save(key, ev)  # on disk before it is in the storage
            constraints = constraint_values(self.study, ev, dense)
            values = objective_values(self.study, ev)
        except _input_error_types():
            raise  # the study cannot run at all (e.g. missing weights): stop at once
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", "Ctrl-C")
            raise
        except OutOfMemory as exc:  # no latency to rank it by: failed, its measurements kept
            self._store(trial, ev, constraints)
            trial.set_user_attr("error", f"OutOfMemory: {exc}")
            trial.set_user_attr("error_type", "OutOfMemory")
            raise TrialFailed(str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 - a failed configuration is recorded, the sweep goes on
            trial.set_user_attr("error", f"{type(exc).__name__}: {exc}")
            trial.set_user_attr("error_type", type(exc).__name__)
            raise TrialFailed(str(exc)) from exc
        self._saved = self.measurements.path(key)
        self._store(trial, ev, constraints)
        return values

    def _store(self, trial: Any, ev: Evaluation, constraints: dict[str, float]) -> None:
        for k, v in ev.attrs(self.study.replay_models[0]).items():
            trial.set_user_attr(k, v)
        trial.set_user_attr("constraints", constraints)
        trial.set_user_attr("feasible", all(v <= 0 for v in constraints.values()))
        for k, v in constraints.items():
            trial.set_constraint(k, v)

    # -- the loop ------------------------------------------------------------------------------------

    def run(self, on_trial_done: Any = None) -> None:
        """Run trials in this process until the budget is full (or another worker fills it)."""
        from optuna.trial import TrialState

        skipped_in_row = 0
        self._saved: Any = None

        def callback(ostudy: Any, trial: Any) -> None:
            nonlocal skipped_in_row
            c = self.counts()
            if c["complete"] + c["failed"] >= self.budget or (
                c["complete"] + c["failed"] + c["running"] >= self.budget and c["waiting"] == 0
            ):
                ostudy.stop()
            skipped_in_row = skipped_in_row + 1 if trial.state == TrialState.PRUNED else 0
            if skipped_in_row >= MAX_SKIPPED_IN_ROW:
                ostudy.stop()
                self.stalled = True
            if on_trial_done is not None and trial.state != TrialState.PRUNED:
                on_trial_done(trial, c)

        c = self.counts()
        if c["complete"] + c["failed"] + c["running"] >= self.budget and c["waiting"] == 0:
            return

        def kept() -> str:
            if self._saved is None:
                return "finished trials are kept"
            return f"the last finished measurement is saved in {self._saved} and is reused by the next run"

        with storage_errors(self.storage_url, kept):
            self.ostudy.optimize(self, n_trials=None, callbacks=[callback], catch=(TrialFailed,), n_jobs=1)
        if self.stalled:
            raise DseError(
                f"the sampler drew {MAX_SKIPPED_IN_ROW} invalid knob combinations in a row: the search space "
                "is almost all invalid under the budget convention (budget_tokens >= sink + window + "
                "page_size). Narrow search.sink_tokens / window_tokens or widen search.budget_tokens."
            )

    def summary(self, wall_s: float) -> SweepSummary:
        c = self.counts()
        return SweepSummary(
            study_name=self.study.name, storage_url=self.storage_url, budget=self.budget,
            complete=c["complete"], failed=c["failed"], skipped=c["skipped"], duplicates=c["duplicates"],
            interrupted=c["interrupted"], wall_s=wall_s,
        )

