"""Evaluate ONE retrieval configuration of a study: measure accuracy, replay the trace, score it.

`evaluate(study, knobs, out_dir)` runs the real runtime (`freekv_runtime.api.run_trace`) with the
configuration's method and knobs on every task of the study (measured accuracy, one trace per task, of
that method's own demand), then replays the first task's trace with the same-named simulator model
(never another method's demand) on every hardware profile and replayed model (simulated latency,
throughput, memory fit; a replayed model other than the measured one is a labelled shape transplant),
plus the capacity grid (workload.batch_sizes x workload.context_lengths) on the target model.
`objective_values` and `constraint_values` turn an `Evaluation` into what Optuna optimises.
Nothing here knows about Optuna storage; the driver (dse/driver.py) does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.search_space import TrialConfig
from dse.study import ACCURACY_METRICS, Study
from traces.catalogue import DENSE

__all__ = [
    "Evaluation", "Measured", "OutOfMemory", "evaluate", "measure", "objective_values", "constraint_values",
    "DENSE",
]


@dataclass(frozen=True)
class Evaluation:
    """What one configuration measured (accuracy, traces) and simulated (per replayed model and
    profile: SimResult.to_dict(); the capacity grid as a list of dicts). accuracy_samples: metric ->
    the per-prompt results [{"id", "score", "answer"}, ...] (none for dense fidelity, exact by
    definition and never run; none in measurements saved before they were recorded)."""

    config: dict[str, Any]
    accuracy: dict[str, float]
    trace_dirs: dict[str, str]
    trace_summary: dict[str, Any]
    sim_models: dict[str, dict[str, dict]]
    sim_grid: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    accuracy_ci: dict[str, dict] = field(default_factory=dict)  # metric -> Estimate.to_dict(), no samples
    accuracy_samples: dict[str, list[dict]] = field(default_factory=dict)

    def attrs(self, target_model: str) -> dict[str, Any]:
        """The user attributes stored for this evaluation (docs/contracts.md, "Study results")."""
        first = next(iter(self.trace_dirs.values()), None)  # None: no task ran (dense fidelity)
        return {
            "config": self.config,
            "accuracy": self.accuracy,
            "accuracy_ci": self.accuracy_ci,
            "accuracy_samples": self.accuracy_samples,
            "trace_dir": first,
            "trace_dirs": self.trace_dirs,
            "trace_summary": self.trace_summary,
            "sim": self.sim_models.get(target_model, {}),
            "sim_models": self.sim_models,
            "sim_grid": self.sim_grid,
            "wall_s": self.wall_s,
        }


def _runtime_config(study: Study, knobs: TrialConfig | None) -> Any:
    from freekv_runtime.config import RuntimeConfig

    dense_layers = tuple(study.search.dense_layers)
    if knobs is None:  # dense attention: the retrieval knobs are unused by the dense policy
        return RuntimeConfig(method=DENSE, dense_layers=dense_layers)
    return RuntimeConfig(
        method=knobs.method, page_size=knobs.page_size, budget_tokens=knobs.budget_tokens,
        sink_tokens=knobs.sink_tokens, window_tokens=knobs.window_tokens, dense_layers=dense_layers,
        knobs=knobs.knob_values("runtime"),
    )


DENSE_FIDELITY = {"top1_agreement": 1.0, "mean_kl": 0.0, "attention_mass": 1.0}
EXACT_LABEL = "dense vs dense, exact by definition (not measured)"


@dataclass(frozen=True)
class Measured:
    """What `measure` returns: accuracy {metric: value}, trace_dirs {task: trace dir}, summary (the first
    task's summary.json less its per-prompt results), intervals {metric: 95% interval as
    Estimate.to_dict() without samples}, samples {metric: [{"id", "score", "answer"}, ...]}."""

    accuracy: dict[str, float]
    trace_dirs: dict[str, str]
    summary: dict[str, Any]
    intervals: dict[str, dict]
    samples: dict[str, list[dict]]


_SUMMARY_SAMPLES = ("accuracy_samples", "accuracy_samples_random_weights")  # stored once, in Measured.samples


def measure(study: Study, knobs: TrialConfig | None, out_dir: Path, progress: Any = None) -> Measured:
    """Run every task with the real runtime (knobs None: dense attention). progress: called with a line
    per task (or None). Dense fidelity is exact by definition: values, no run, no per-prompt samples."""
    from freekv_runtime.api import TaskSpec, TraceRequest, run_trace

    runtime = _runtime_config(study, knobs)
    accuracy: dict[str, float] = {}
    intervals: dict[str, dict] = {}
    samples: dict[str, list[dict]] = {}
    trace_dirs: dict[str, str] = {}
    summary: dict[str, Any] = {}
    exact: dict[str, str] = {}
    for i, task in enumerate(study.tasks):
        if knobs is None and task.name == "fidelity":
            # Dense attention against dense attention: exact by definition, not measured (the model run
            # would only score itself). The first trial computes (and caches) the dense logits.
            accuracy.update(DENSE_FIDELITY)
            exact.update(dict.fromkeys(DENSE_FIDELITY, EXACT_LABEL))
            intervals.update({k: {"value": v, "low": v, "high": v, "n": 0, "method": "exact", "sd": None}
                              for k, v in DENSE_FIDELITY.items()})
            if progress is not None:
                progress(f"task fidelity ({i + 1} of {len(study.tasks)}): exact by definition, not run")
            continue
        if progress is not None:
            progress(f"measuring task {task.name} ({i + 1} of {len(study.tasks)}: {task.samples} samples at "
                     f"{task.context_tokens} tokens)")
        spec = TaskSpec(
            name=task.name, context_tokens=task.context_tokens, n_samples=task.samples,
            decode_tokens=task.decode_tokens, params=dict(task.params),
        )
        req = TraceRequest(
            model=study.model.name, weights=Path(study.model.weights) if study.model.weights else None,
            task=spec, runtime=runtime, out_dir=_fresh_dir(out_dir / task.name), seed=study.seed,
            device=study.device, dtype=study.dtype,
        )
        outcome = run_trace(req)
        accuracy.update({k: float(v) for k, v in outcome.accuracy.items()})
        intervals.update({k: e.to_dict(with_samples=False) for k, e in outcome.intervals.items()})
        samples.update({k: list(v) for k, v in outcome.summary.get("accuracy_samples", {}).items()})
        trace_dirs[task.name] = str(outcome.trace_dir)
        if not summary:
            summary = {k: v for k, v in outcome.summary.items() if k not in _SUMMARY_SAMPLES}
    if exact:
        summary["accuracy_exact"] = exact
    return Measured(accuracy, trace_dirs, summary, intervals, samples)


def _fresh_dir(path: Path) -> Path:
    """`path`, or `path.2`, `path.3`, ... when a previous attempt left a directory there; created here
    (mkdir fails if it exists), so that two processes never write into one directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    candidate, n = path, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            n += 1
            candidate = path.with_name(f"{path.name}.{n}")


def replay(
    study: Study, trace_dir: str, knobs: TrialConfig | None
) -> tuple[dict[str, dict[str, dict]], list[dict]]:
    """Simulate the trace on every (replayed model, hardware profile) at the study's workload
    (batch_sizes[0]), and the capacity grid on the target model, through the replay service
    (sim.replay) with the trial's knobs and the recorded corrections. knobs None: dense attention, which
    prices no demand. Returns (sim_models, sim_grid)."""
    from sim.replay import DemandSource, resolve_demand

    w = study.workload
    source = DemandSource() if knobs is None else DemandSource(trace=trace_dir)
    sim_models: dict[str, dict[str, dict]] = {}
    sim_grid: list[dict] = []
    for model in study.replay_models:
        demand = resolve_demand(source, model, study.seed)  # read once per model, replayed at every cell
        first = _replayed(study, source, demand, knobs, model, (w.batch_sizes[0],), w.input_tokens)
        sim_models[model] = {cell.hardware: result for cell, result in first}
        if model != study.replay_models[0] or (len(w.batch_sizes) < 2 and not w.context_lengths):
            continue
        for input_tokens in w.context_lengths or [w.input_tokens]:
            for cell, result in _replayed(study, source, demand, knobs, model, tuple(w.batch_sizes),
                                          input_tokens):
                sim_grid.append({
                    "hardware": cell.hardware, "model": model, "batch_size": cell.batch,
                    "input_tokens": input_tokens, "output_tokens": w.output_tokens, "result": result,
                })
    sim_grid.sort(key=lambda g: (study.hardware.index(g["hardware"]), w.batch_sizes.index(g["batch_size"]),
                                 (w.context_lengths or [w.input_tokens]).index(g["input_tokens"])))
    return sim_models, sim_grid


def _replayed(study: Study, source: Any, demand: Any, knobs: TrialConfig | None, model: str,
              batches: tuple[int, ...], input_tokens: int) -> list[tuple[Any, dict]]:
    """(cell, SimResult.to_dict()) of every hardware profile and batch for `model` at `input_tokens`;
    source: the trial's sim.replay.DemandSource (empty for dense attention), demand: it resolved on
    `model` (sim.replay.ResolvedDemand)."""
    from sim import run_simulation
    from sim.replay import Question, answer

    given: dict[str, Any] = {"dense_layers": tuple(study.search.dense_layers)}
    if knobs is not None:
        given.update(page_size=knobs.page_size, budget_tokens=knobs.budget_tokens,
                     sink_tokens=knobs.sink_tokens, window_tokens=knobs.window_tokens)
    ans = answer(Question(
        model=model, hardware=tuple(study.hardware), methods=(DENSE if knobs is None else knobs.method,),
        demand=source, input_tokens=input_tokens, output_tokens=study.workload.output_tokens, batches=batches,
        knobs=given, method_options={} if knobs is None else knobs.knob_values("simulator"),
        implementations=(study.implementation,), software=study.software, trace_knobs=False,
        model_positions=False, seed=study.seed,
    ), demand)
    return [(cell, run_simulation(cell.config, cell.demand, seed=study.seed).to_dict()) for cell in ans.cells]


def evaluate(study: Study, knobs: TrialConfig | None, out_dir: Path, progress: Any = None) -> Evaluation:
    """Measure and replay one configuration (knobs None: dense attention). Errors of the runtime and
    the simulator propagate (the driver decides whether they fail the trial or stop the sweep).
    progress: called with a line at each stage (tasks, replay), e.g. dse.heartbeat.Heartbeat.stage."""
    t0 = time.perf_counter()
    m = measure(study, knobs, out_dir, progress)
    if progress is not None:
        progress(f"replaying on {len(study.hardware)} profile(s) x {len(study.replay_models)} model(s)")
    # dense attention replays no trace (and may have none: a fidelity-only study measures nothing for it)
    sim_models, sim_grid = replay(study, next(iter(m.trace_dirs.values()), ""), knobs)
    config = knobs.to_dict() if knobs is not None else {"method": DENSE}
    return Evaluation(
        config, m.accuracy, m.trace_dirs, m.summary, sim_models, sim_grid, time.perf_counter() - t0,
        m.intervals, m.samples,
    )


class OutOfMemory(Exception):
    """A latency or throughput objective was asked of a profile where the configuration's batch does not
    fit memory: there is no such value (the trial fails with this message, its measurements kept)."""


def objective_values(study: Study, ev: Evaluation) -> list[float]:
    """The objective values of `ev`, in the order of study.objectives. Raises OutOfMemory where a
    latency or throughput objective's simulation is out of memory (never a fictitious value)."""
    target = study.replay_models[0]
    out = []
    for obj in study.objectives:
        if obj.metric is not None:
            out.append(float(ev.accuracy[obj.metric]))
            continue
        spec = obj.latency if obj.latency is not None else obj.throughput
        assert spec is not None
        model = spec.model or target
        res = ev.sim_models[model][spec.hardware]
        if res.get("oom"):
            raise OutOfMemory(f"{model} on {spec.hardware}: {res.get('oom_message') or 'out of memory'}")
        if obj.latency is not None:
            out.append(float(res["per_token_latency_s"][obj.latency.stat]))
        else:
            out.append(float(res["throughput_tokens_per_s"]))
    return out


def constraint_values(
    study: Study, ev: Evaluation, dense_accuracy: dict[str, float] | None
) -> dict[str, float]:
    """Named constraint values, feasible iff <= 0 (Optuna's convention).

    min_accuracy_ratio r on metric m: r * dense[m] - m, where m is the trial's point estimate, or with
    constraints.bound "lower" the lower end of its 95% interval (the point estimate where it has none).
    require_fit: 1 per profile where the workload does not fit the target model's GPU memory, else 0
    (summed into one value)."""
    out: dict[str, float] = {}
    c = study.constraints
    if c.min_accuracy_ratio is not None:
        metric = study.constraint_metric
        assert metric is not None and ACCURACY_METRICS[metric][1]
        if dense_accuracy is None or metric not in dense_accuracy:
            raise RuntimeError(f"dense accuracy of {metric} is missing: the driver measures it before trials")
        bound = c.min_accuracy_ratio * dense_accuracy[metric]
        value = ev.accuracy[metric]
        if c.bound == "lower":
            low = (ev.accuracy_ci.get(metric) or {}).get("low")
            value = value if low is None else float(low)
        out[f"min_accuracy_ratio:{metric}"] = bound - value
    if c.require_fit:
        target = study.replay_models[0]
        misfits = [hw for hw, res in ev.sim_models[target].items() if not res["memory"]["fits"]]
        out["require_fit"] = float(len(misfits))
    return out
