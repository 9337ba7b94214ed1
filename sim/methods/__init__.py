"""Simulated KV methods by name, from the method catalogue (traces.catalogue): every entry with a model.

`method_names()` lists them in the catalogue's order; `method_class(name)` imports one model class;
`get_method(cfg)` builds the method of a SimConfig with its knobs. Adding a method: one module here whose
`DecoderMethod` subclass (sim/methods/decoder_layer.py) declares its own operations on the shared decoder
layer (sim/methods/base.py, "Adding a method"), and its catalogue entry naming it
("sim.methods.<file>:<Class>").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.errors import SimInputError
from traces.catalogue import UnknownMethodError, entry, import_target, names

if TYPE_CHECKING:
    from sim.config import SimConfig
    from sim.demand import Demand
    from sim.methods.base import Method

__all__ = ["METHODS", "method_names", "method_class", "get_method", "available_methods"]


def method_names() -> tuple[str, ...]:
    """Methods with a simulator model, in the catalogue's order."""
    return names(simulator=True)


# name -> "module:Class" of its model (derived from the catalogue; read-only use)
METHODS: dict[str, str] = {name: str(entry(name).model) for name in method_names()}


def method_class(name: str) -> type[Method]:
    """The Method class registered under `name` (imports its module); SimInputError naming the valid
    ones for a name without a model."""
    try:
        target = entry(name, simulator=True).model
    except UnknownMethodError as exc:
        raise SimInputError(str(exc)) from None
    assert target is not None
    return import_target(target)


def get_method(cfg: SimConfig, demand: Demand | None = None) -> Method:
    """Build the method named by `cfg.method` with its knobs (`cfg.method_options`), set up with what
    `demand` recorded beyond the per-step demand (`Method.for_demand`, e.g. RazorAttention's measured
    retrieval heads)."""
    return method_class(cfg.method).from_config(cfg).for_demand(demand, cfg.transplant_method)


def available_methods() -> list[str]:
    """Every method with a simulator model, in the catalogue's order."""
    return list(method_names())
