"""sim: a discrete-event model of KV retrieval during decode, on hardware profiles.

`run_simulation` prices a method's decode steps (sim/methods: each method's operations per layer and
their work) on a hardware profile with the aggregated schedule (sim/schedule.py, a loop compiled with
numba: the default engine), or with the fine-grained SimPy model (sim/actors.py, `engine="simpy"`), which
the tests prove equal to it. The replay service (sim/replay) turns a question (demand, models, profiles,
methods, knobs, batches) into the configurations to simulate.

Public API (docs/contracts.md "Simulator API"):
    SimConfig, SimResult, SimInputError, run_simulation, load_profile, list_profiles,
    demand_from_trace, synthetic_demand, METHODS
`sim` never imports torch.
"""

from __future__ import annotations

from sim.config import SimConfig
from sim.demand import Demand, demand_from_trace
from sim.engine import run_simulation
from sim.errors import SimInputError
from sim.hardware import HardwareProfile, list_profiles, load_profile
from sim.methods import METHODS, available_methods
from sim.result import SimResult
from sim.synthetic import synthetic_demand

__all__ = [
    "SimConfig",
    "SimResult",
    "SimInputError",
    "Demand",
    "HardwareProfile",
    "run_simulation",
    "load_profile",
    "list_profiles",
    "demand_from_trace",
    "synthetic_demand",
    "METHODS",
    "available_methods",
]
