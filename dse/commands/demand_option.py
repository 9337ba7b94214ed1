"""`--demand TRACE|SPEC|preset:NAME` and `--implementation` as `dse capacity` and `dse serve` read them, and
`--transplant-method` as they and `dse sim` read it (the replay rules: sim/replay_rules.py). Never imports
torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

__all__ = ["DemandChoice", "resolve_demand", "DEMAND_HELP", "DEFAULT_DEMAND", "transplant_option",
           "implementation_option", "check_replayable", "demand_use"]

TRANSPLANT_HELP = (
    "price a trace of one runtime policy with another method's model (refused otherwise); labelled "
    "'demand of <trace method> transplanted onto <method>' in every output"
)


def transplant_option(command: Callable) -> Callable:
    """The `--transplant-method` flag (SimConfig.transplant_method) of dse sim, capacity and serve."""
    return click.option("--transplant-method", is_flag=True, help=TRANSPLANT_HELP)(command)


def implementation_option(command: Callable) -> Callable:
    """`--implementation as-published|ideal` (SimConfig.implementation) of dse capacity and serve; dse sim
    also takes `both`."""
    return click.option(
        "--implementation",
        type=click.Choice(["as-published", "ideal"]),
        default="as-published",
        show_default=True,
    )(command)


def check_replayable(methods: list[str], demand: Any, transplant: bool) -> None:
    """Refuse up front, in one paragraph, the methods that cannot price `demand` (a trace of another
    policy without --transplant-method, or of dense attention: sim.replay_rules)."""
    from sim.errors import SimInputError
    from sim.replay_rules import replay_refusal

    refusal = replay_refusal(methods, demand, transplant)
    if refusal:
        raise SimInputError(refusal)


def demand_use(cfg: Any, demand: Any) -> tuple[bool, str | None]:
    """(whether cfg's method prices `demand`, else it runs without one; the transplant label 'demand of
    <policy> transplanted onto <method>' or None), as sim.engine decides them for `dse sim`."""
    from sim.methods import get_method
    from sim.replay_rules import method_transplant

    method = get_method(cfg)
    used = demand is not None and method.uses_demand(demand.method, cfg.transplant_method)
    return used, method_transplant(method, cfg, demand)

DEFAULT_DEMAND = "preset:freekv-tau0.9"

DEMAND_HELP = (
    "recall demand: a trace directory, a synthetic spec ('correction=0.59,hit=0.8', keys as in "
    "dse sim --help), or preset:NAME (preset:freekv-tau0.9, preset:freekv-tau0.8: published rates, with "
    f"the answer also at their low and high ends) [{DEFAULT_DEMAND}]"
)


@dataclass(frozen=True)
class DemandChoice:
    """The demand to simulate with, what it is (for every output) and, for a preset, its two ends."""

    demand: Any  # sim.Demand
    kind: str  # "trace" | "synthetic" | "preset"
    label: str
    provenance: str
    runtime: dict | None  # the trace's meta.runtime (its knobs), else None
    ends: dict[str, Any]  # preset only: "low" / "high" -> Demand


def resolve_demand(text: str | None, model: str, seed: int) -> DemandChoice:
    from sim import synthetic_demand
    from sim.demand_presets import get_preset, is_preset

    text = text or DEFAULT_DEMAND
    if is_preset(text):
        preset = get_preset(text)
        ends = {end: synthetic_demand(preset.spec(end), model=model, seed=seed) for end in ("low", "high")}
        return DemandChoice(
            synthetic_demand(preset.spec(), model=model, seed=seed), "preset",
            f"preset:{preset.name} ({preset.spec()}; low end {preset.spec('low')}, "
            f"high end {preset.spec('high')})",
            f"{preset.label}: {preset.source}", None, ends,
        )
    path = Path(text)
    if path.is_dir():
        from sim import demand_from_trace
        from traces import open_trace

        reader = open_trace(path)
        provenance = f"measured trace {path} ({reader.meta.model.name})"
        demand = demand_from_trace(reader, target_model=model)
        label = f"trace {path}" + (" (dense attention: no recall demand)" if demand.dense_attention else "")
        return DemandChoice(demand, "trace", label, provenance, dict(reader.meta.runtime), {})
    return DemandChoice(synthetic_demand(text, model=model, seed=seed), "synthetic", f"synthetic({text})",
                        "synthetic: rates given by the user", None, {})
