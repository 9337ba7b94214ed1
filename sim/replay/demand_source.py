"""Where replayed demand comes from: a trace, a synthetic spec, a named preset, or measured rates.

`DemandSource` names it (one of the four, or none: methods whose costs need no demand); `resolve_demand`
builds the `sim.Demand` on the target model with what every output says about it: a label, its
provenance, the trace's recorded configuration (`runtime`, whose knobs the replay takes unless given),
notes (a trace cut short), and, for a preset, the demand at its low and high ends. Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import SimInputError

__all__ = ["DemandSource", "ResolvedDemand", "resolve_demand", "trace_status_note", "DEFAULT_PRESET"]

DEFAULT_PRESET = "preset:freekv-tau0.9"


@dataclass(frozen=True)
class DemandSource:
    """One of: trace (a trace directory or an open traces.TraceReader), spec (a synthetic spec
    'correction=0.6,hit=0.8', a YAML/JSON file of those keys, or preset:NAME), rates (measured
    (correction, hit) shares with `rates_note` saying whose). None of them: no demand."""

    trace: Any = None
    spec: str | None = None
    rates: tuple[float, float] | None = None
    rates_note: str = ""

    def __post_init__(self) -> None:
        given = [k for k in ("trace", "spec", "rates") if getattr(self, k) is not None]
        if len(given) > 1:
            raise SimInputError(f"give one demand, not {' and '.join(given)}")

    @classmethod
    def from_text(cls, text: str | None) -> DemandSource:
        """`--demand TEXT`: a trace directory when it is one, else a synthetic spec or preset; None (the
        option left out) is the default preset. Empty text is refused (SimInputError): it is a mistake
        (an unset shell variable), not a request for the default."""
        if text is not None and not text.strip():
            raise SimInputError(
                f"--demand {text!r} is empty: give a trace directory, a synthetic spec (e.g. "
                f"correction=0.3,hit=0.8) or preset:NAME, or leave --demand out for the default "
                f"({DEFAULT_PRESET})"
            )
        text = text or DEFAULT_PRESET
        return cls(trace=Path(text)) if Path(text).is_dir() else cls(spec=text)

    @property
    def empty(self) -> bool:
        return self.trace is None and self.spec is None and self.rates is None


@dataclass(frozen=True)
class ResolvedDemand:
    """demand: sim.Demand on the target model (None for an empty source). kind: "trace", "synthetic",
    "preset", "rates" or "none". ends: a preset's "low" / "high" demand. runtime: the trace's
    meta.runtime, else None. trace_info: path, complete, truncated, steps (traces only)."""

    demand: Any
    kind: str
    label: str
    provenance: str
    runtime: dict | None = None
    ends: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    trace_info: dict[str, Any] | None = None
    preset: Any = None  # sim.demand_presets.DemandPreset of a "preset" demand


def trace_status_note(reader: Any) -> str | None:
    """A note when the trace did not end cleanly (the reader knows), else None."""
    if reader.truncated:
        return (
            f"trace {reader.path} is truncated (a partial last record was cut at byte "
            f"{reader.valid_bytes} of {reader.file_bytes}): replaying its {reader.n_steps} whole steps"
        )
    if not reader.complete:
        return (
            f"trace {reader.path} is incomplete (its writer did not close it: the run was killed or "
            f"failed): replaying the {reader.n_steps} steps it holds"
        )
    return None


def resolve_demand(source: DemandSource, model: str, seed: int = 0) -> ResolvedDemand:
    """The demand `source` names, on `model` (a trace of another model is mapped onto its layers and
    heads: Demand.mapped_from)."""
    if source.trace is not None:
        return _from_trace(source.trace, model)
    if source.rates is not None:
        return _from_rates(source.rates, source.rates_note, model, seed)
    if source.spec is not None:
        return _from_spec(source.spec, model, seed)
    return ResolvedDemand(None, "none", "none", "no demand: closed-form costs only")


def _from_trace(trace: Any, model: str) -> ResolvedDemand:
    from sim.demand import demand_from_trace
    from traces import open_trace

    reader = trace if hasattr(trace, "steps") and hasattr(trace, "meta") else open_trace(trace)
    demand = demand_from_trace(reader, target_model=model)  # dense attention: Demand.dense_attention
    status = trace_status_note(reader)
    if "method" not in reader.meta.runtime:
        legacy = (f"the trace {reader.path} records no method (meta.runtime.method): read as FreeKV's, as "
                  "traces were written before methods were recorded")
        status = f"{status}; {legacy}" if status else legacy
    dense = " (dense attention: no recall demand)" if demand.dense_attention else ""
    label = f"trace {reader.path}{dense}"
    info = {"path": str(reader.path), "complete": reader.complete, "truncated": reader.truncated,
            "steps": reader.n_steps}
    return ResolvedDemand(demand, "trace", label, f"measured trace {reader.path} ({reader.meta.model.name})",
                          dict(reader.meta.runtime), notes=(status,) if status else (), trace_info=info)


def _from_spec(spec: str, model: str, seed: int) -> ResolvedDemand:
    from sim.demand_presets import get_preset, is_preset
    from sim.synthetic import synthetic_demand

    if not is_preset(spec):
        return ResolvedDemand(synthetic_demand(spec, model=model, seed=seed), "synthetic",
                              f"synthetic({spec})", "synthetic: rates given by the user")
    preset = get_preset(spec)
    ends = {end: synthetic_demand(preset.spec(end), model=model, seed=seed) for end in ("low", "high")}
    note = f"demand preset:{preset.name} = {preset.spec()}: {preset.label}; {preset.source}"
    return ResolvedDemand(
        synthetic_demand(preset.spec(), model=model, seed=seed), "preset",
        f"preset:{preset.name} ({preset.spec()}; low end {preset.spec('low')}, "
        f"high end {preset.spec('high')})",
        f"{preset.label}: {preset.source}", ends=ends, notes=(note,), preset=preset)


def _from_rates(rates: tuple[float, float], note: str, model: str, seed: int) -> ResolvedDemand:
    from sim.synthetic import synthetic_demand

    spec = f"correction={rates[0]:.4f},hit={rates[1]:.4f}"
    labelled = f"{spec} ({note})" if note else spec
    return ResolvedDemand(synthetic_demand(spec, model=model, seed=seed), "rates", labelled,
                          f"measured rates: {note or spec}")
