"""The answer to a replay question: the resolved demand and knobs, and one SimConfig per cell.

`answer(question)` checks the question once (the model's positions, the method names, which methods may
price the demand: sim.replay.rules), resolves the demand and the knobs, and lays out a `Cell` for every
(hardware profile, method, implementation, batch) and, when asked, every end of a preset: its SimConfig,
the demand its method prices (None when the method runs without one), and the transplant label when a
method prices another policy's trace. Front ends simulate the cells their way (sim.run_simulation,
sim.capacity.capacity, sim.serving.StepCosts) and render. Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.config import DEFAULT_GPU_MEMORY_UTILIZATION, SimConfig
from sim.errors import SimInputError
from sim.replay.demand_source import ResolvedDemand, resolve_demand
from sim.replay.knob_resolution import KnobResolution, resolve_knobs
from sim.replay.question import Question

__all__ = ["Cell", "Answer", "answer", "memory_headroom_note"]

NO_DEMAND = "n/a (no demand)"


@dataclass(frozen=True)
class Cell:
    """One configuration to simulate. demand: the resolved sim.Demand at this end (None without a
    source); priced: whether the method prices it (else its costs are closed-form: `priced_demand` is
    None; sim.run_simulation still takes `demand` to say why in its notes); demand_end: "central", a
    preset's "low" / "high", or NO_DEMAND when not priced; transplant: 'demand of <policy> transplanted
    onto <method>' when the method prices another policy's trace, else None; notes: how the replay goes
    beyond what the trace recorded (sim.demand.replay_notes)."""

    hardware: str
    method: str
    implementation: str
    batch: int
    config: SimConfig
    demand: Any
    priced: bool
    demand_end: str
    transplant: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def priced_demand(self) -> Any:
        """The demand the method prices, or None when it runs without one."""
        return self.demand if self.priced else None

    @property
    def transplanted_method(self) -> str | None:
        """The runtime policy whose trace this cell's method prices as a transplant, else None."""
        return self.demand.method if self.transplant else None


@dataclass(frozen=True)
class Answer:
    """cells: in order of hardware, method, batch, implementation, demand end. skipped: methods left out
    (every_method) and why. notes: what every output should say once (the trace's state, a preset's
    provenance, knob overrides, methods not replayed)."""

    question: Question
    demand: ResolvedDemand
    knobs: KnobResolution
    methods: tuple[str, ...]
    cells: tuple[Cell, ...]
    skipped: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def provenance(self) -> dict[str, Any]:
        """JSON-able: the demand (label, provenance, kind), the knobs (values, source, overrides), the
        trace (path, complete, truncated, steps) where there is one."""
        trace = None if self.demand.trace_info is None else {**self.demand.trace_info,
                                                              "knobs": self.knobs.to_dict()}
        return {"demand": {"label": self.demand.label, "provenance": self.demand.provenance,
                           "kind": self.demand.kind},
                "knobs": self.knobs.to_dict(), "trace": trace}

    def cell_notes(self) -> list[str]:
        """The cells' transplant labels and replay notes, each once, in order."""
        out: list[str] = []
        for cell in self.cells:
            for note in ([cell.transplant] if cell.transplant else []) + list(cell.notes):
                if note not in out:
                    out.append(note)
        return out

    def table_notes(self) -> list[str]:
        """The notes of an output that states the demand's label and provenance itself (dse capacity,
        dse serve): the trace's state, knob overrides, methods not replayed, then `cell_notes`."""
        preset = self.demand.notes if self.demand.kind == "preset" else ()
        return [n for n in self.notes if n not in preset] + self.cell_notes()


def answer(q: Question, resolved: ResolvedDemand | None = None) -> Answer:
    """Resolve `q` into cells (module docstring). SimInputError, worded with `q.names`, for what cannot
    be replayed: a context past the model's positions, an unknown method, a demand a method may not
    price (unless `every_method`), an invalid configuration. resolved: `q.demand` already resolved on
    `q.model` (resolve_demand), for a caller that asks several questions of one demand."""
    spec = _model(q)
    if resolved is None:
        resolved = resolve_demand(q.demand, q.model, q.seed)
    methods, skipped, notes = _methods(q, resolved.demand)
    runtime = resolved.runtime if q.trace_knobs else None
    knobs = resolve_knobs(q.knobs, runtime, spec.n_layers, q.names)
    cells: list[Cell] = []
    for hw in q.hardware:
        for method in methods:
            if method in skipped:
                continue
            try:
                cells += _method_cells(q, hw, method, knobs, resolved)
            except SimInputError as exc:
                if not q.every_method:
                    raise
                skipped[method] = str(exc)  # e.g. an option that only some methods take
    if not cells:
        why = "; ".join(f"{k}: {v}" for k, v in skipped.items())
        raise SimInputError(f"no method could be simulated: {why}")
    return Answer(q, resolved, knobs, tuple(m for m in methods if m not in skipped), tuple(cells), skipped,
                  (*resolved.notes, *knobs.notes, *notes, memory_headroom_note(q)))


def memory_headroom_note(q: Question) -> str:
    """The note every answer carries: the share of GPU memory it lets the engine fill."""
    given = q.gpu_memory_utilization != DEFAULT_GPU_MEMORY_UTILIZATION
    why = "as given" if given else "the default: vLLM's for its flag of the same name"
    return (f"GPU memory usable: {q.gpu_memory_utilization:g} of each GPU's memory for weights, activations "
            f"and KV ({q.named('gpu_memory_utilization')} {q.gpu_memory_utilization:g}, {why}); the rest is "
            "headroom")


def _model(q: Question) -> Any:
    """The target model (traces.models.ModelSpec); with `q.model_positions`, a context past its maximum
    positions is refused (as `dse trace` does)."""
    from traces.models import UnknownModelError, get_model

    try:
        spec = get_model(q.model)
    except UnknownModelError as exc:
        raise SimInputError(f"{q.named('model')}: {exc}", field="model", detail=f": {exc}") from None
    total = q.input_tokens + q.output_tokens
    if q.model_positions and total > spec.max_position_tokens:
        raise SimInputError(
            f"{q.named('input_tokens')} {q.input_tokens} + {q.named('output_tokens')} {q.output_tokens} = "
            f"{total} tokens exceeds the {spec.max_position_tokens} positions of model {spec.name!r}; give a "
            f"context of at most {spec.max_position_tokens} tokens (or a model with more positions)"
        )
    return spec


def _methods(q: Question, demand: Any) -> tuple[list[str], dict[str, str], list[str]]:
    """(methods in order, those skipped and why, notes): the question's methods, checked against the
    catalogue and the replay rules (sim.replay.rules)."""
    from sim.methods import method_class, method_names
    from sim.replay.rules import replay_refusal, replayable_methods
    from traces.catalogue import UnknownMethodError, entry

    if q.every_method:
        names = list(method_names())
    else:
        names = list(q.methods) or [demand.method if demand is not None and demand.method else "freekv"]
    try:
        names = [entry(name, simulator=True).name for name in names]  # current names ("full" -> dense)
    except UnknownMethodError as exc:
        raise SimInputError(f"{q.named('method')}: {exc}", field="method", detail=f": {exc}") from None
    refusal = replay_refusal(names, demand, q.transplant_method)
    if refusal and not q.every_method:
        raise SimInputError(refusal)
    skipped: dict[str, str] = {}
    notes = [f"not replayed: {refusal}"] if refusal else []
    if q.every_method:
        names = replayable_methods(names, demand, q.transplant_method)[0]
        if demand is None:
            skipped.update({n: "needs a trace or synthetic demand" for n in names
                            if method_class(n).needs_demand})
    return names, skipped, notes


def _config(q: Question, hw: str, method: str, knobs: KnobResolution, impl: str, batch: int) -> SimConfig:
    extra = {} if q.software is None else {"software": q.software}
    try:
        return SimConfig(
            model=q.model, hardware=hw, method=method, batch_size=batch, input_tokens=q.input_tokens,
            output_tokens=q.output_tokens, **knobs.values,
            method_options=q.rag.options_for(method, dict(q.method_options)) if q.rag is not None
            else dict(q.method_options),
            hardware_overrides=dict(q.hardware_overrides), software_overrides=dict(q.software_overrides),
            implementation=impl, transplant_method=q.transplant_method,
            gpu_memory_utilization=q.gpu_memory_utilization, **extra,
        )
    except SimInputError as exc:
        raise exc.reworded(dict(q.names)) from None


def _preset_transplant(resolved: ResolvedDemand, method: str) -> str | None:
    """'rates of preset:NAME (<method>'s) priced with <other method>' when a preset of another method's
    rates is priced (its own rates are another preset: sim.demand_presets.own_preset), else None."""
    from traces.catalogue import entry

    preset = resolved.preset
    if preset is None or preset.method in (method, entry(method).replays):
        return None
    return (f"rates of preset:{preset.name} ({preset.method}'s) priced with {method}, whose own rates these "
            "are not")


def _method_cells(q: Question, hw: str, method: str, knobs: KnobResolution,
                  resolved: ResolvedDemand) -> list[Cell]:
    """The cells of one method on one profile: every batch and implementation, and a preset's ends when
    the method prices the demand and `q.demand_ends`."""
    from sim.demand import replay_notes
    from sim.methods import get_method
    from sim.replay.rules import method_transplant

    demand = resolved.demand
    out = []
    for batch in q.batches:
        for impl in q.implementations:
            cfg = _config(q, hw, method, knobs, impl, batch)
            try:
                model = get_method(cfg)  # checks the method's options
            except SimInputError as exc:
                raise exc.reworded(dict(q.names)) from None
            used = demand is not None and model.uses_demand(demand.method, cfg.transplant_method)
            if not used:
                out.append(Cell(hw, method, impl, batch, cfg, demand, False, NO_DEMAND))
                continue
            moved = method_transplant(model, cfg, demand) or _preset_transplant(resolved, method)
            ends = {"central": demand, **(resolved.ends if q.demand_ends else {})}
            notes = tuple(replay_notes(demand, cfg))
            out += [Cell(hw, method, impl, batch, cfg, end_demand, True, end, moved, notes)
                    for end, end_demand in ends.items()]
    return out
