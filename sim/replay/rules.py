"""Which method models may price which demand, and the one message that refuses the others.

- Each model prices the traces of its own runtime policy (`Method.replays`); a trace of another policy
  is refused unless `SimConfig.transplant_method`, and then labelled 'demand of <policy> transplanted onto
  <method>' in every output (`method_transplant`).
- A trace of dense attention (`Demand.dense_attention`, policy sim.demand.DENSE_POLICY) selected and
  recalled nothing: it holds no recall demand, so the models that need demand are refused, also with
  `transplant_method` (there is no selection to transplant); the models that need none replay it in
  closed form.
- Synthetic demand (method None) may be priced by any model; models that need no demand ignore a trace
  (except their own policy's, when `own_demand_optional`).

`dse sim`, `dse capacity` and `dse serve` refuse through `replay_refusal` (one paragraph, exit 2);
`sim.engine.prepare` through `check_replay`. Never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.demand import DENSE_POLICY
from sim.errors import SimInputError
from sim.methods import available_methods, method_class
from traces.catalogue import entry

if TYPE_CHECKING:
    from sim.config import SimConfig
    from sim.demand import Demand
    from sim.methods.base import Method

__all__ = ["check_replay", "own_demand_methods", "replayable_methods", "replay_refusal", "method_transplant",
           "demand_free_methods"]


def check_replay(cfg: SimConfig, demand: Demand | None) -> None:
    """Raise `replay_refusal` for cfg's method: a trace of dense attention to a model that needs demand, or
    a trace of another runtime policy (`Method.replays`) unless cfg.transplant_method. Synthetic demand
    (method None) and methods that ignore demand pass."""
    refusal = replay_refusal([cfg.method], demand, cfg.transplant_method)
    if refusal:
        raise SimInputError(refusal)


def own_demand_methods(names: list[str], trace_method: str | None) -> tuple[list[str], list[str]]:
    """(kept, refused) of the method `names` for a trace of policy `trace_method`: kept are the methods
    that replay that policy's traces and those whose costs need no trace; refused the others
    (`check_replay` would refuse them). Synthetic demand (None) keeps all."""
    if trace_method is None:
        return list(names), []
    kept, refused = [], []
    for name in names:
        needs = method_class(name).needs_demand
        (kept if not needs or entry(name).replays == trace_method else refused).append(name)
    return kept, refused


def replayable_methods(
    names: list[str], demand: Demand | None, transplant: bool = False
) -> tuple[list[str], list[str]]:
    """(kept, refused) of the method `names` for `demand` (None: no demand, all kept here): as
    `own_demand_methods`, but with `transplant` every model prices another policy's trace, and a trace of
    dense attention is refused to every model that needs demand whatever `transplant` says."""
    if demand is None or (transplant and not demand.dense_attention):
        return list(names), []
    return own_demand_methods(names, demand.method)


def replay_refusal(names: list[str], demand: Demand | None, transplant: bool = False) -> str | None:
    """One paragraph refusing the methods of `names` that cannot price `demand` (`replayable_methods`),
    or None when all can. Starts with the refused methods as the `--method` flag names them."""
    _, refused = replayable_methods(names, demand, transplant)
    if not refused or demand is None:
        return None
    if demand.dense_attention:
        return f"--method {','.join(refused)}: " + _dense_text(refused, demand)
    replays = {n: entry(n).replays for n in refused}
    if len(refused) == 1:
        name = refused[0]
        own = f"the {name!r} model replays " + (
            f"traces of the {replays[name]!r} policy" if replays[name] else "no trace")
    else:
        own = "these models replay only their own policy's traces (" + ", ".join(
            f"{n}: {p!r}" if p else f"{n}: none" for n, p in replays.items()) + ")"
    policies = sorted({p for p in replays.values() if p})
    record = " or ".join(f"`dse trace --method {p} ...`" for p in policies) or "`dse trace --method ...`"
    return (
        f"--method {','.join(refused)}: the trace {demand.source} holds the demand of the "
        f"{demand.method!r} policy, but {own}; record one with {record}, or give --transplant-method "
        f"(SimConfig.transplant_method) to price {demand.method}'s demand with "
        f"{'it' if len(refused) == 1 else 'them'} (labelled 'demand of {demand.method} transplanted onto "
        f"<method>')"
    )


def method_transplant(method: Method, cfg: SimConfig, demand: Demand | None) -> str | None:
    """'demand of <trace policy> transplanted onto <method>' when `cfg` prices another policy's trace
    with this method's model, else None."""
    if demand is None or demand.method is None or demand.method == method.replays:
        return None
    if not method.uses_demand(demand.method, cfg.transplant_method):
        return None
    return f"demand of {demand.method} transplanted onto {cfg.method}"


def demand_free_methods() -> list[str]:
    """The installed models whose costs need no trace (they replay a trace of dense attention)."""
    return [n for n in available_methods() if not method_class(n).needs_demand]


def _dense_text(refused: list[str], demand: Demand) -> str:
    from traces.catalogue import runtime_method

    policy = runtime_method(demand.source_runtime)
    how = f"runtime policy {policy!r}" + ("" if policy == DENSE_POLICY else " with every layer dense")
    which, them = (f"the {refused[0]} model", "it") if len(refused) == 1 else ("these models", "them")
    return (
        f"the trace {demand.source} is of dense attention ({how}): it selected and recalled nothing, so it "
        f"holds no recall demand for {which} to replay, nor any selection to transplant "
        f"(--transplant-method does not apply). The models that need no demand replay it: "
        f"{', '.join(demand_free_methods())}; for {them}, record a trace with a retrieval policy "
        f"(`dse trace --method freekv ...`) or give synthetic demand (dse sim --synthetic SPEC, "
        f"dse capacity / dse serve --demand SPEC)"
    )
