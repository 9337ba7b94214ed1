"""Each method on its own demand: a question with no demand given, split by the demand each method owns.

A method that needs recall demand prices its own rates: its own preset (sim.demand_presets.own_preset,
with its published or stated range: the answer is also given at both ends) or a trace of its own policy;
never another method's. Methods whose costs need no demand take none. `own_source(method, tau)` is that
choice for one method (dse capacity and dse serve ask the replay service once per method with it).
Never imports torch.
"""

from __future__ import annotations

from sim.errors import SimInputError
from sim.replay.demand_source import DemandSource

__all__ = ["own_source"]


def own_source(method: str, tau: float | None = None) -> DemandSource:
    """The demand `method` owns when none is given: nothing for a method whose costs need none, else its
    own preset; a SimInputError when it needs demand and has none."""
    from sim.demand_presets import own_preset
    from sim.methods import method_class
    from traces.catalogue import entry

    if not method_class(method).needs_demand:
        return DemandSource()
    spec = own_preset(entry(method).replays or method, tau)
    if spec is None:
        raise SimInputError(
            f"--method {method}: no demand of its own: record a trace with `dse trace --method "
            f"{entry(method).replays or method} ...` and give it with --demand, or give a synthetic spec"
        )
    return DemandSource(spec=spec)
