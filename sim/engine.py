"""`run_simulation(cfg, demand, seed)`: replay demand on a hardware profile with a method; pure.

Pipeline: model shape (traces.models) + profile (sim.hardware) -> cost model -> the method's layer
template and work per (step, layer) -> the aggregated schedule (sim/schedule.py: Kernel seconds,
Transfer closed forms, host lane, copy engines and link of sim/copy_engines.py), or with
engine="simpy" the fine-grained SimPy model (sim/actors.py, every op and every copy; slow, for small
cases and copy-level timelines) -> SimResult.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import numpy as np

from sim.config import SimConfig
from sim.copy_engines import CopyEngines
from sim.cost_model import CostModel, transfer_duration_s
from sim.demand import Demand, batch_demand, replay_notes
from sim.errors import SimInputError
from sim.hardware import HardwareProfile, load_profile
from sim.memory import MemoryFit, memory_fit
from sim.methods import get_method
from sim.methods.base import CostContext, Kernel, Method, OpSpec, Transfer, Work
from sim.replay.rules import check_replay, method_transplant, own_demand_methods
from sim.result import SimResult, oom_message
from sim.schedule import normalise_template, run_schedule, validate_template
from sim.software import SoftwareProfile, load_software
from traces.models import ModelSpec, UnknownModelError, get_model

__all__ = ["run_simulation", "prepare", "durations_of", "Prepared", "engine_sync_s", "check_replay",
           "method_transplant", "own_demand_methods", "transfer_parts_s"]

EngineName = Literal["aggregated", "simpy"]


class Prepared:
    """A method's template, work and durations for one config and demand (inputs of both engines)."""

    def __init__(
        self,
        cfg: SimConfig,
        method: Method,
        ctx: CostContext,
        template: tuple[OpSpec, ...],
        work: dict[str, Work],
    ) -> None:
        self.cfg, self.method, self.ctx, self.template, self.work = cfg, method, ctx, template, work
        self._durations_s: dict[str, np.ndarray] | None = None

    @property
    def durations_s(self) -> dict[str, np.ndarray]:
        """op -> (S, L) seconds of each op alone (Transfers: sim.cost_model.transfer_duration_s)."""
        if self._durations_s is None:
            self._durations_s = durations_of(self.work)
        return self._durations_s


def durations_of(work: dict[str, Work]) -> dict[str, np.ndarray]:
    """op -> (S, L) seconds: Kernel seconds, or the closed-form duration of each Transfer."""
    out = {}
    for name, item in work.items():
        if isinstance(item, Kernel):
            out[name] = np.asarray(item.seconds, dtype=np.float64)
        else:
            out[name] = transfer_duration_s(
                item.n_copies,
                item.copy_s,
                item.issue_s,
                item.issue_threads,
                item.chunk_copies,
                item.buffers,
                item.convert_fixed_s,
                item.convert_per_copy_s,
            )
    return out


def _resolve(cfg: SimConfig) -> tuple[ModelSpec, HardwareProfile]:
    try:
        model = get_model(cfg.model)
    except UnknownModelError as exc:
        raise SimInputError(f"SimConfig.model: {exc}") from None
    profile = load_profile(cfg.hardware)
    if cfg.hardware_overrides:
        profile = profile.with_overrides(cfg.hardware_overrides)
    return model, profile


def engine_sync_s(cfg: SimConfig, profile: HardwareProfile, software: SoftwareProfile) -> float:
    """Host cost of one host<->device sync: the software profile's stream sync in as-published mode,
    the hardware profile's host.sync_s in ideal mode (docs/hardware.md, "Software profiles and
    implementation modes")."""
    return software.stream_sync_s if cfg.implementation == "as-published" else profile.host.sync_s


def prepare(
    cfg: SimConfig,
    demand: Demand | None,
    seed: int = 0,
    profile: HardwareProfile | None = None,
    software: SoftwareProfile | None = None,
) -> Prepared:
    """Build the method, its template and its work for `cfg` (no timing yet)."""
    model, loaded = _resolve(cfg) if profile is None else (get_model(cfg.model), profile)
    sw = load_software(cfg.software) if software is None else software
    if cfg.software_overrides:
        sw = sw.with_overrides(cfg.software_overrides)
    method = get_method(cfg, demand)
    if method.needs_demand and demand is None:
        raise SimInputError(
            f"method {cfg.method!r} needs recall demand: pass a trace directory or --synthetic SPEC "
            "(e.g. 'correction=0.6,hit=0.8')"
        )
    check_replay(cfg, demand)
    rng = np.random.default_rng(seed)
    used = demand is not None and method.uses_demand(demand.method, cfg.transplant_method)
    bd = batch_demand(demand if used else None, cfg, model, rng)
    ctx = CostContext(
        cfg=cfg,
        model=model,
        profile=loaded,
        cost=CostModel(model, loaded, cfg.batch_size, cfg.dtype_bytes),
        demand=bd,
        software=sw,
    )
    template = normalise_template(method.template(ctx))  # the link is implied by Transfer.direction
    validate_template(template)
    work = method.work(ctx)
    missing = sorted({op.name for op in template} - set(work))
    if missing:
        raise ValueError(f"method {cfg.method!r}: no work for template ops {missing}")
    return Prepared(cfg, method, ctx, template, work)


def run_simulation(
    cfg: SimConfig,
    demand: Demand | None = None,
    seed: int = 0,
    *,
    engine: EngineName = "aggregated",
    timeline_steps: Iterable[int] = (),
    profile: HardwareProfile | None = None,
    software: SoftwareProfile | None = None,
) -> SimResult:
    """Simulate `cfg` on `demand` (None only for methods whose costs need no trace). Writes nothing.

    seed: draws the step offsets of extra batch members (sim.demand.batch_demand); same seed, same result.
    engine: "aggregated" (default, fast) or "simpy" (fine-grained reference; small cases only).
    timeline_steps: steps whose op-level events are kept (others are recomputed on demand).
    profile: an already loaded profile (e.g. from calibration) instead of `cfg.hardware`.
    software: an already loaded software profile instead of `cfg.software`.
    """
    prep = prepare(cfg, demand, seed, profile, software)
    ctx, template = prep.ctx, prep.template
    mem = memory_fit(prep.method.memory(cfg, ctx.model), cfg, ctx.model, ctx.profile)
    if not mem.fits:
        return _out_of_memory(prep, demand, mem, engine)
    sync_s = engine_sync_s(cfg, ctx.profile, ctx.software)
    engines = CopyEngines.from_profile(ctx.profile)
    ends, stall, events, busy, link_busy = _timed(prep, engine, sync_s, engines, sorted(set(timeline_steps)))
    latency = np.diff(np.concatenate([[0.0], ends]))
    breakdown, categories = _breakdown(template, busy, stall, len(ends))
    link_bytes = _link_bytes(prep)
    transfer_parts = transfer_parts_s(prep.work, ctx.profile.link.dma_latency_s)
    prefill = prep.method.prefill(ctx)
    notes = _demand_notes(prep, demand)

    def replay(step: int) -> list:
        return run_schedule(template, prep.work, sync_s, [step], copy_engines=engines).events

    return SimResult(
        **_identity(prep, demand, mem, engine),
        step_latency_s=latency,
        prefill_s=float(sum(prefill.values())),
        prefill_breakdown_s=prefill,
        breakdown_s=breakdown,
        categories=categories,
        link_bytes=link_bytes,
        link_busy_s=dict(link_busy),
        transfer_parts_s=transfer_parts,
        notes=tuple(notes),
        _events=events,
        _replay=replay,
    )


def _timed(prep: Prepared, engine: str, sync_s: float, engines: CopyEngines,
           record: list[int]) -> tuple[np.ndarray, dict, list, dict, dict]:
    """(step end times, stall seconds by key, recorded events, busy seconds of compute-stream ops, link
    busy seconds) of the prepared steps on `engine`."""
    template = prep.template
    if engine == "aggregated":
        sched = run_schedule(template, prep.work, sync_s, record, copy_engines=engines)
        return sched.step_end_s, sched.stall_s, sched.events, sched.busy_s, sched.link_busy_s
    if engine == "simpy":
        from sim.actors import simulate_simpy

        fine = simulate_simpy(template, prep.work, sync_s, record, copy_engines=engines)
        durations = prep.durations_s
        busy = {op.name: float(durations[op.name].sum()) for op in template if "compute" in op.resources}
        return fine.step_end_s, _stall_from_ends(busy, fine.step_end_s), fine.events, busy, fine.link_busy_s
    raise SimInputError(f"engine must be 'aggregated' or 'simpy', got {engine!r}")


def _breakdown(template: tuple[OpSpec, ...], busy: dict, stall: dict,
               n_steps: int) -> tuple[dict[str, float], dict[str, str]]:
    """Seconds per token on the critical path by op (and "<op>.host", "idle"), and each key's category."""
    breakdown: dict[str, float] = {}
    categories = {op.name: op.category for op in template}
    for op in template:
        value = (busy.get(op.name, 0.0) + stall.get(op.name, 0.0)) / n_steps
        if value > 0.0:
            breakdown[op.name] = value
        host_key = f"{op.name}.host"  # compute-stream idle while the host was busy issuing this op
        if stall.get(host_key, 0.0) > 0.0:
            breakdown[host_key] = stall[host_key] / n_steps
            categories[host_key] = "host"
    if "idle" in stall:  # compute-stream idle time not attributed to an op (always so with SimPy)
        breakdown["idle"] = stall["idle"] / n_steps
    return breakdown, categories


def _link_bytes(prep: Prepared) -> dict[str, float]:
    """Bytes moved over the host link per direction by the prepared transfers."""
    link_bytes = {"h2d": 0.0, "d2h": 0.0}
    for op in prep.template:
        item = prep.work[op.name]
        if isinstance(item, Transfer):
            per_copy = np.broadcast_to(
                np.asarray(item.bytes_per_copy, dtype=np.float64), np.shape(item.n_copies)
            )
            link_bytes[item.direction] += float((np.asarray(item.n_copies) * per_copy).sum())
    return link_bytes


def transfer_parts_s(work: dict[str, Work], dma_latency_s: float) -> dict[str, tuple[float, float]]:
    """Transfer op -> (bandwidth seconds, per-copy seconds), summed over every (step, layer) of `work`.

    Each copy of a transfer costs its pipeline, in steady state, the larger of its copy-engine time
    (`copy_s` = `dma_latency_s` + its bytes' wire time at the link's effective bandwidth and run
    efficiency) and its issue interval (`issue_s` over the issuing threads: `issue_threads` for a pool,
    1 for the main thread; sim/transfer_forms.py). Of that cycle, the bytes' wire time
    (`copy_s - dma_latency_s`, the link clock's charge in sim/copy_engines.py) is "bandwidth"; the rest
    (the engine's per-copy latency, or the issue interval where it is longer than the copy) is "per-copy".
    Staging conversions (GPU kernels) are in neither part."""
    out: dict[str, tuple[float, float]] = {}
    for name, item in work.items():
        if not isinstance(item, Transfer):
            continue
        n = np.asarray(item.n_copies, dtype=np.float64)
        e = np.broadcast_to(np.asarray(item.copy_s, dtype=np.float64), n.shape)
        threads = 1 if item.issuer == "host" else item.issue_threads
        wire = np.maximum(e - dma_latency_s, 0.0)
        cycle = np.maximum(e, item.issue_s / threads)
        out[name] = (float((n * wire).sum()), float((n * (cycle - wire)).sum()))
    return out


def _identity(prep: Prepared, demand: Demand | None, mem: MemoryFit, engine: str) -> dict:
    """SimResult fields that do not depend on the timing: what ran, where, on which demand."""
    cfg, ctx = prep.cfg, prep.ctx
    link = ctx.profile.link
    used = demand is not None and prep.method.uses_demand(demand.method, cfg.transplant_method)
    moved = method_transplant(prep.method, cfg, demand)
    label = ctx.demand.label + (f" ({moved})" if moved else "")
    return dict(
        method=cfg.method,
        hardware=ctx.profile.name,
        model=cfg.model,
        config=cfg.to_dict(),
        link_effective_gbps={"h2d": link.h2d_effective_gbps, "d2h": link.d2h_effective_gbps},
        memory=mem,
        demand_label=label if used else "none (costs do not depend on a trace)",
        transplanted_method=demand.method if moved and demand is not None else None,
        mapped_from=demand.mapped_from if used else None,
        synthetic=demand.synthetic if used else None,
        engine=engine,
    )


def _demand_notes(prep: Prepared, demand: Demand | None) -> list[str]:
    method, cfg = prep.method, prep.cfg
    notes: list[str] = list(method.notes())  # settings the method took from the trace, or why not
    if demand is None:
        return notes
    if demand.dense_attention:  # only models that need no demand get here (check_replay)
        notes.append(f"the trace is of dense attention (method {demand.method}): it holds no recall demand; "
                     f"the {cfg.method} model needs none")
        return notes
    if not method.uses_demand(demand.method, cfg.transplant_method):
        if method.optional_demand() and demand.method is not None:
            notes.append(f"the trace holds the demand of {demand.method}, not {method.replays}: "
                         f"{cfg.method}'s closed-form demand is used")
        return notes
    moved = method_transplant(method, cfg, demand)
    if moved:
        notes.append(moved)
    if demand.mapped_from:
        notes.append(f"demand mapped from {demand.mapped_from}'s layers and heads onto {cfg.model}'s")
    if demand.synthetic:
        notes.append(f"synthetic demand: {demand.synthetic}")
    return notes + replay_notes(demand, cfg)


def _out_of_memory(prep: Prepared, demand: Demand | None, mem: MemoryFit, engine: str) -> SimResult:
    """The batch does not fit: no latency is simulated (SimResult.oom; its latencies are NaN)."""
    return SimResult(
        **_identity(prep, demand, mem, engine),
        step_latency_s=np.full(prep.cfg.output_tokens, np.nan),
        prefill_s=float("nan"),
        prefill_breakdown_s={},
        breakdown_s={},
        categories={op.name: op.category for op in prep.template},
        link_bytes={"h2d": 0.0, "d2h": 0.0},
        link_busy_s={"h2d": 0.0, "d2h": 0.0},
        notes=tuple([oom_message(mem), *_demand_notes(prep, demand)]),
        oom=True,
    )


def _stall_from_ends(busy: dict[str, float], ends: np.ndarray) -> dict[str, float]:
    """For the SimPy engine: compute-stream idle time (not attributed to ops; reported as 'idle')."""
    return {"idle": max(0.0, float(ends[-1]) - sum(busy.values()))}
