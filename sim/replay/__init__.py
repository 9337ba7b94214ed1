"""The replay service: "this demand, on these models, profiles, methods, knobs and batches".

One place resolves what every simulation front end asks (`dse sim`, `dse capacity`, `dse serve`, the
study objective, the report's re-simulation, calibration): the demand (a trace, a synthetic spec, a
preset with its low and high ends, measured rates: `demand_source`), the knobs (given, else the trace's,
else the defaults, each override noted: `knob_resolution`), which methods may price that demand and the
one message refusing the others (`rules`), and the SimConfig of every (profile, method, implementation,
batch) cell with the demand its method prices, a transplant label, notes and provenance (`answer`).
Front ends parse options, ask a `Question`, and render the `Answer`'s cells simulated their way (a
replay, a capacity search, a serving run). Never imports torch.
"""

from __future__ import annotations

from sim.replay.answer import Answer, Cell, answer
from sim.replay.demand_source import DEFAULT_PRESET, DemandSource, ResolvedDemand, resolve_demand
from sim.replay.knob_resolution import KNOB_DEFAULTS, KnobResolution, parse_dense_layers, resolve_knobs
from sim.replay.question import Question

__all__ = ["Question", "Answer", "Cell", "answer", "DemandSource", "ResolvedDemand", "resolve_demand",
           "DEFAULT_PRESET", "KNOB_DEFAULTS", "KnobResolution", "resolve_knobs", "parse_dense_layers"]
