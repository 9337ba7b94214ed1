"""Calibrate a hardware profile from a trace with measured GPU timings; report held-out error.

`calibrate(trace, hardware)` replays the traced run (its model, method, knobs and steps) on the
profile, compares the simulated per-step timings with the measured `timings_s` of the first
`train_fraction` of the steps, fits the profile's achievable fractions and overheads (coordinate
search in log space, no tuning to any published number), and reports the prediction error on the
remaining steps. Only traces timed with CUDA events can calibrate a GPU profile: wall-clock timings of
a CPU run measure the CPU, and are refused with a message saying so (`allow_wall_clock=True` exists
for tests of the code path only).

`simulated_timings` gives the simulator's own per-step timings under the trace's keys;
`write_simulated_trace` writes a trace whose timings come from the simulator (for a perturbed profile,
for instance), which is how the fitting is tested.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from os import PathLike
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.config import SimConfig
from sim.copy_engines import CopyEngines
from sim.cost_model import CostModel
from sim.demand import Demand, demand_from_trace
from sim.engine import durations_of, prepare
from sim.errors import SimInputError
from sim.hardware import HardwareProfile, load_profile
from sim.methods.base import CostContext, Method
from sim.schedule import run_schedule

if TYPE_CHECKING:
    from traces import TraceReader

__all__ = [
    "PARAMETERS",
    "TIMING_KEYS",
    "Calibration",
    "calibrate",
    "simulated_timings",
    "write_simulated_trace",
    "config_from_trace",
]

PARAMETERS = (
    "gpu.achievable_bandwidth_fraction",
    "gpu.achievable_compute_fraction",
    "gpu.kernel_launch_s",
    "link.copy_issue_s",
    "link.dma_latency_s",
    "host.sync_s",
)
# measured timing key -> simulator operations summed over layers ("step_total" = step latency)
TIMING_KEYS: dict[str, tuple[str, ...]] = {
    "qkv": ("qkv",),
    "correction_check": ("check",),
    "select": ("select_sync", "select_bg"),
    "recall_sync": ("recall_sync",),
    "recall_background": ("recall_bg",),
    "attention": ("attention",),
    "out_proj": ("out_proj",),
    "ffn": ("ffn",),
    "lm_head": ("lm_head",),
}


@dataclass(frozen=True)
class Calibration:
    """Fitted profile and errors. Errors are mean absolute relative errors of step_total."""

    profile: HardwareProfile
    before: dict[str, float]
    after: dict[str, float]
    train_error: float
    test_error: float
    test_error_before: float
    n_train: int
    n_test: int
    keys: tuple[str, ...]
    timing_clock: str
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "before": self.before,
            "after": self.after,
            "train_error": self.train_error,
            "test_error": self.test_error,
            "test_error_before": self.test_error_before,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "keys": list(self.keys),
            "timing_clock": self.timing_clock,
            "notes": list(self.notes),
        }


def _get(profile: HardwareProfile, dotted: str) -> float:
    part, _, name = dotted.partition(".")
    return float(getattr(getattr(profile, part), name))


def _set(profile: HardwareProfile, values: dict[str, float], source: str) -> HardwareProfile:
    parts: dict[str, dict[str, float]] = {}
    for dotted, value in values.items():
        part, _, name = dotted.partition(".")
        parts.setdefault(part, {})[name] = value
    changes = {p: dataclasses.replace(getattr(profile, p), **kv) for p, kv in parts.items()}
    sources = dict(profile.sources)
    sources.update({k: f"calibrated: {source}" for k in values})
    return dataclasses.replace(profile, sources=sources, **changes)


def config_from_trace(
    demand: Demand, meta_runtime: dict, model: str, prompt_tokens: int, n_steps: int, hardware: str
) -> SimConfig:
    """The SimConfig of the traced run: its method (a trace of dense attention replays with the dense
    model), its knobs as the replay service resolves them against the trace (sim.replay.resolve_knobs:
    the recorded ones, else the defaults), batch 1, its prompt and step count.

    Replayed in the "ideal" implementation mode: the fitted numbers are hardware-profile fields, which
    are what that mode prices (the traced runtime is this project's, not a published one)."""
    from sim.replay import resolve_knobs
    from traces.catalogue import runtime_method
    from traces.models import get_model

    knobs = resolve_knobs({}, meta_runtime, get_model(model).n_layers).values
    knobs["tau"] = None  # the corrections as recorded
    if "dense_layers" not in meta_runtime:
        knobs["dense_layers"] = ()
    try:
        return SimConfig(
            model=model, hardware=hardware, method="dense" if demand.dense_attention else
            runtime_method(meta_runtime), batch_size=1, input_tokens=prompt_tokens, output_tokens=n_steps,
            implementation="ideal", **knobs,
        )
    except SimInputError as exc:
        raise SimInputError(f"the trace's runtime configuration cannot be simulated: {exc}") from None


def simulated_timings(
    cfg: SimConfig, demand: Demand | None, profile: HardwareProfile
) -> dict[str, np.ndarray]:
    """Per-step timings (S,) the simulator predicts, under the trace's keys plus "step_total"."""
    prep = prepare(cfg, demand, 0, profile)
    return _timings(prep.method, prep.ctx, profile)


def _timings(method: Method, ctx: CostContext, profile: HardwareProfile) -> dict[str, np.ndarray]:
    template = method.template(ctx)
    work = method.work(ctx)
    durations = durations_of(work)
    sched = run_schedule(template, work, profile.host.sync_s, copy_engines=CopyEngines.from_profile(profile))
    out = {"step_total": np.diff(np.concatenate([[0.0], sched.step_end_s]))}
    for key, ops in TIMING_KEYS.items():
        present = [op for op in ops if op in durations]
        if present:
            out[key] = sum(durations[op].sum(axis=1) for op in present)
    return out


# Fit in stages so that each parameter is first fitted on the timings it alone explains, then jointly:
# GPU fractions and launch cost on the kernels, copy costs on the recalls, then everything on all keys.
_GPU_KEYS = ("qkv", "attention", "out_proj", "ffn", "lm_head", "select", "correction_check")
_STAGES: tuple[tuple[tuple[str, ...], tuple[str, ...] | None], ...] = (
    (PARAMETERS[:3], _GPU_KEYS),
    (("link.copy_issue_s", "link.dma_latency_s"), ("recall_sync", "recall_background")),
    (PARAMETERS, None),
)


def _coordinate_search(loss, start: dict[str, float], params: Sequence[str], rounds: int) -> dict[str, float]:
    """Multiplicative coordinate search in log space: step 0.5, halved each round; fractions capped at 1."""
    current, best = dict(start), loss(start)
    step = 0.5
    for _ in range(rounds):
        for _pass in range(8):
            improved = False
            for p in params:
                for direction in (+1.0, -1.0):
                    trial = dict(current)
                    value = current[p] * float(np.exp(direction * step))
                    trial[p] = min(value, 1.0) if p.endswith("_fraction") else value
                    value_loss = loss(trial)
                    if value_loss < best - 1e-12:
                        best, current, improved = value_loss, trial, True
                        break
            if not improved:
                break
        step /= 2
    return current


def _first_sequence(demand: Demand) -> Demand:
    return dataclasses.replace(
        demand,
        corrected=demand.corrected[:1],
        fetch_ratio=demand.fetch_ratio[:1],
        similarity=None if demand.similarity is None else demand.similarity[:1],
        timings_s=demand.timings_s[:1],
        evict_ratio=None if demand.evict_ratio is None else demand.evict_ratio[:1],
        refactorised=None if demand.refactorised is None else demand.refactorised[:1],
    )


def _errors(pred: dict[str, np.ndarray], meas: dict[str, np.ndarray], rows: np.ndarray, keys: Sequence[str]):
    """Sum over keys of mean squared log ratio on `rows` (the fit loss), and step_total MARE."""
    loss = 0.0
    for k in keys:
        p, m = pred[k][rows], meas[k][rows]
        ok = (p > 0) & (m > 0)
        if ok.any():
            loss += float(np.mean(np.log(p[ok] / m[ok]) ** 2))
    p, m = pred["step_total"][rows], meas["step_total"][rows]
    return loss, float(np.mean(np.abs(p - m) / m))


@dataclass(frozen=True)
class _Measured:
    """What a trace measured on its sequence 0: its demand, per-step timings by key, the prompt."""

    demand: Demand
    timings: dict[str, np.ndarray]  # key -> (S,) seconds (NaN where a step lacks the key)
    keys: list[str]  # the TIMING_KEYS and "step_total" the trace has
    n_steps: int
    prompt_tokens: int


def _check_clock(trace: str | PathLike[str], clock: str, allow_wall_clock: bool) -> None:
    if clock != "cuda_event" and not allow_wall_clock:
        raise SimInputError(
            f"trace {trace} was timed with the {clock!r} clock: only CUDA-event timings of a GPU run can "
            "calibrate a GPU profile (wall-clock timings of a CPU run measure the CPU, not the GPU, link "
            "or host of the profile). Record a trace with `dse trace` on a GPU and calibrate with that."
        )


def _measured(reader: TraceReader, trace: str | PathLike[str]) -> _Measured:
    demand = _first_sequence(demand_from_trace(reader))
    timings = demand.timings_s[0]
    n_steps = len(timings)
    keys = sorted({k for t in timings for k in t} & (set(TIMING_KEYS) | {"step_total"}))
    if "step_total" not in keys or n_steps < 4:
        raise SimInputError(
            f"trace {trace}: calibration needs measured 'step_total' timings on at least 4 steps of "
            f"sequence 0; found keys {keys} on {n_steps} steps"
        )
    meas = {k: np.array([t.get(k, np.nan) for t in timings], dtype=np.float64) for k in keys}
    prefills = reader.prefills()
    prompt = prefills[0].prompt_tokens if prefills else int(next(iter(reader.steps())).context_tokens) - 1
    prompt += demand.skipped_steps[0] if demand.skipped_steps else 0  # steps within the budget left out
    return _Measured(demand, meas, keys, n_steps, prompt)


class _ProfileFit:
    """The fit loss of trial profile values: the traced run's demand is fixed, only the profile changes."""

    def __init__(self, cfg: SimConfig, profile0: HardwareProfile, measured: _Measured, train: np.ndarray):
        self.cfg, self.profile0, self.measured, self.train = cfg, profile0, measured, train
        self.prep = prepare(cfg, measured.demand, 0, profile0)

    def loss(self, values: dict[str, float], keys: Sequence[str]) -> tuple[float, dict[str, np.ndarray]]:
        """(loss on the training steps over `keys`, the predicted timings) with `values` set."""
        cfg, prep = self.cfg, self.prep
        prof = _set(self.profile0, values, "trial")
        ctx = CostContext(
            cfg=cfg,
            model=prep.ctx.model,
            profile=prof,
            cost=CostModel(prep.ctx.model, prof, cfg.batch_size, cfg.dtype_bytes),
            demand=prep.ctx.demand,
        )
        pred = _timings(prep.method, ctx, prof)
        loss, _ = _errors(pred, self.measured.timings, self.train, [k for k in keys if k in pred])
        return loss, pred


def _fit_stages(
    fit: _ProfileFit, start: dict[str, float], fit_keys: Sequence[str], rounds: int
) -> dict[str, float]:
    """The coordinate search of each of _STAGES in turn, each on its parameters and timing keys."""
    current = start
    for params, stage_keys in _STAGES:
        keys = [k for k in fit_keys if stage_keys is None or k in stage_keys]
        if keys:
            current = _coordinate_search(lambda v, k=keys: fit.loss(v, k)[0], current, params, rounds)
    return current


def calibrate(
    trace: str | PathLike[str],
    hardware: str,
    train_fraction: float = 0.6,
    rounds: int = 8,
    allow_wall_clock: bool = False,
) -> Calibration:
    """Fit PARAMETERS of profile `hardware` on the first `train_fraction` of the steps of `trace`."""
    from traces import open_trace

    reader = open_trace(trace)
    clock = reader.meta.timing_clock
    _check_clock(trace, clock, allow_wall_clock)
    measured = _measured(reader, trace)
    meas, n_steps = measured.timings, measured.n_steps
    profile0 = load_profile(hardware)
    cfg = config_from_trace(
        measured.demand, reader.meta.runtime, reader.meta.model.name, measured.prompt_tokens, n_steps,
        profile0.name,
    )  # fmt: skip
    n_train = max(2, int(round(train_fraction * n_steps)))
    train, test = np.arange(n_train), np.arange(n_train, n_steps)
    fit_keys = [k for k in measured.keys if np.isfinite(meas[k][train]).all()]
    fit = _ProfileFit(cfg, profile0, measured, train)
    before = {p: _get(profile0, p) for p in PARAMETERS}
    _, pred0 = fit.loss(before, fit_keys)
    current = _fit_stages(fit, dict(before), fit_keys, rounds)
    source = f"fitted by dse sim calibrate on {trace}, steps 0..{n_train - 1} of sequence 0"
    _, pred = fit.loss(current, fit_keys)
    test_rows = test if len(test) else train
    notes = []
    if clock != "cuda_event":
        notes.append(f"timings use the {clock!r} clock: this fit only exercises the code path")
    return Calibration(
        profile=_set(profile0, current, source),
        before=before,
        after=current,
        train_error=_errors(pred, meas, train, [])[1],
        test_error=_errors(pred, meas, test_rows, [])[1],
        test_error_before=_errors(pred0, meas, test_rows, [])[1],
        n_train=n_train,
        n_test=len(test),
        keys=tuple(fit_keys),
        timing_clock=clock,
        notes=tuple(notes),
    )


def write_simulated_trace(
    path: str | PathLike[str],
    source_trace: str | PathLike[str],
    profile: HardwareProfile,
    clock: str = "cuda_event",
) -> None:
    """Copy `source_trace` to `path` with each step's timings replaced by the simulator's on `profile`."""
    from traces import TraceWriter, open_trace

    reader = open_trace(source_trace)
    demand = _first_sequence(demand_from_trace(reader))
    steps = [s for s in reader.steps() if s.sequence == 0]
    prefills = reader.prefills()
    prompt = prefills[0].prompt_tokens if prefills else steps[0].context_tokens - 1
    cfg = config_from_trace(
        demand, reader.meta.runtime, reader.meta.model.name, prompt, len(steps), profile.name
    )
    pred = simulated_timings(cfg, demand, profile)
    meta = dataclasses.replace(
        reader.meta,
        timing_clock=clock,
        created_utc=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        extra={**reader.meta.extra, "timings": f"simulated on {profile.name}"},
    )
    with TraceWriter.create(path, meta) as w:
        for p in prefills:
            w.append_prefill(p)
        for i, s in enumerate(steps):
            w.append_step(dataclasses.replace(s, timings_s={k: float(v[i]) for k, v in pred.items()}))
