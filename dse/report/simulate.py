"""Simulator runs the report makes itself: timelines and capacity curves (cheap, seconds).

A run replays the measured demand of one trial: its trace (transplanted onto the study's target model
when the runtime ran another model), or, when the trace directory is not on this machine, synthetic
demand at the trial's measured correction and hit rates (labelled as such). The SimConfig mirrors the
sweep's replay (dse/objective.py): the trial's knobs, the study's dense layers, tau None (the trace's
own corrections).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.errors import DseError
from dse.report.data import ReportData, Run
from dse.report.summary import hit_rate, overall_correction_rate
from traces.catalogue import canonical

__all__ = [
    "ReplayDemand",
    "replay_demand",
    "Replays",
    "plan_replays",
    "sim_config",
    "sim_method",
    "simulate",
    "memory_of",
    "workload",
    "KNOB_KEYS",
]

KNOB_KEYS = ("page_size", "budget_tokens", "sink_tokens", "window_tokens")


def sim_method(config: dict[str, Any]) -> str:
    """The method of a stored run's config by its current name (a dense run of an older study: "full")."""
    return canonical(str(config.get("method", "freekv")))


@dataclass(frozen=True)
class ReplayDemand:
    """demand: a sim.demand.Demand on the target model. mapped_from / synthetic: as in SimResult."""

    demand: Any
    mapped_from: str | None
    synthetic: str | None


def replay_demand(data: ReportData, run: Run, seed: int = 0) -> ReplayDemand | None:
    """The run's trace as demand on data.model; synthetic at its measured rates when the trace is not
    here; None when neither is possible (no trace and no measured rates). Resolved by the replay service
    (sim.replay.resolve_demand)."""
    from sim.replay import DemandSource, resolve_demand

    if run.trace_dir and Path(run.trace_dir).is_dir():
        demand = resolve_demand(DemandSource(trace=run.trace_dir), data.model, seed).demand
        return ReplayDemand(demand, demand.mapped_from, None)
    correction, hit = overall_correction_rate(run.trace_summary), hit_rate(run.trace_summary)
    if correction is None or hit is None:
        return None
    note = f"measured rates of the trace of {run.trace_dir}"
    source = DemandSource(rates=(correction, hit), rates_note=note)
    resolved = resolve_demand(source, data.model, seed)
    return ReplayDemand(resolved.demand, None, resolved.label)


Replays = dict[str, tuple[Run, ReplayDemand] | None]  # profile -> (run replayed, its demand)


def plan_replays(data: ReportData, seed: int = 0) -> Replays:
    """For each profile, its capacity run (dse.report.recommend.capacity_run; when that is dense
    attention, the retrieval run it is compared with, see _demand_source) and that run's demand;
    each distinct run's demand is built once (reading a trace or drawing synthetic demand is the
    costly part). None where no run has demand to replay."""
    from dse.report.data import run_label
    from dse.report.recommend import capacity_run

    built: dict[str, ReplayDemand | None] = {}
    out: Replays = {}
    for profile in data.profiles:
        run = capacity_run(data, profile)
        if run is None:
            out[profile] = None
            continue
        # Dense attention records no retrieval demand: its profile replays (and compares with dense)
        # the retrieval run whose demand it borrows.
        run = _demand_source(data, run, profile)
        key = run_label(run)
        if key not in built:
            built[key] = replay_demand(data, run, seed)
        demand = built[key]
        out[profile] = None if demand is None else (run, demand)
    return out


def _demand_source(data: ReportData, run: Run, profile: str) -> Run:
    """The run whose measured demand is replayed for `run`: itself, except dense attention (it records
    no retrieval demand), which borrows that of the untuned-FreeKV baseline, else of the most accurate
    trial, so that the retrieval methods compared beside it have demand to replay."""
    if sim_method(run.config) != "dense":
        return run
    if data.untuned is not None:
        return data.untuned
    scored = data.scored(profile) or list(data.trials)
    return max(scored, key=lambda t: (data.accuracy(t) or 0.0, -(t.latency_s(profile) or 0.0)), default=run)


def sim_config(
    data: ReportData,
    config: dict[str, Any],
    profile: str,
    *,
    batch_size: int,
    input_tokens: int,
    output_tokens: int,
    method: str | None = None,
    implementation: str | None = None,
) -> Any:
    """A SimConfig for `config`'s knobs on `profile` (method overrides config's method; implementation
    overrides the study's `implementation`, default as-published), laid out by the replay service
    (sim.replay) with the stored knobs, the study's dense layers and the recorded corrections."""
    from dse.method_knobs import knobs_for
    from sim.replay import Question, answer

    knobs = {k: int(config[k]) for k in KNOB_KEYS if config.get(k) is not None}
    target = method or sim_method(config)
    # the run's own method: the knobs its simulator model also takes (another method takes none of them)
    own = target == sim_method(config)
    options = knobs_for(target, dict(config.get("options") or {}), "simulator") if own else {}
    dense_layers = tuple((data.results.config.get("search") or {}).get("dense_layers", ()) or ())
    study = data.results.config
    question = Question(
        model=data.model, hardware=(profile,), methods=(target,), input_tokens=input_tokens,
        output_tokens=output_tokens, batches=(batch_size,), knobs={**knobs, "dense_layers": dense_layers},
        method_options=options, implementations=(implementation or study.get("implementation") or
                                                 "as-published",),
        software=study.get("software") or None, trace_knobs=False, model_positions=False,
    )
    return answer(question).cells[0].config


def simulate(
    cfg: Any, demand: ReplayDemand, seed: int, profile: Any, timeline_steps: tuple[int, ...] = ()
) -> Any:
    """sim.run_simulation with an already loaded HardwareProfile (loading one parses its YAML: load it
    once per report, not once per grid point)."""
    from sim import run_simulation

    return run_simulation(cfg, demand.demand, seed=seed, profile=profile, timeline_steps=timeline_steps)


def memory_of(cfg: Any, profile: Any, demand: Any = None) -> dict[str, Any]:
    """sim.memory.MemoryFit of cfg as a dict (gpu_bytes, host_bytes, fits, max_batch, gpu_capacity_bytes,
    ...): the memory model alone, no simulation, at the context of the last decode step; demand: the
    sim.Demand the method is set up with (e.g. RazorAttention's measured retrieval heads), or None."""
    from sim.memory import memory_fit
    from sim.methods import get_method
    from traces.models import get_model

    model = get_model(cfg.model)
    return memory_fit(get_method(cfg, demand).memory(cfg, model), cfg, model, profile).to_dict()


def workload(data: ReportData) -> dict[str, Any]:
    """The study's workload (dse.study.Workload): input/output tokens, batch_sizes, context_lengths."""
    w = data.results.config.get("workload")
    if not isinstance(w, dict) or not {"input_tokens", "output_tokens", "batch_sizes"} <= set(w):
        raise DseError(
            f"study {data.name!r} stored no workload (input_tokens, output_tokens, batch_sizes) in its "
            "study_config attribute; was it written by `dse sweep`? The report needs it to simulate."
        )
    return {"context_lengths": [], **w}
