"""Registry of simulated KV methods: name -> "module:Class", imported lazily.

`METHODS` lists every known name (including peers whose module may not exist yet); `available_methods()`
the ones that import; `get_method(cfg)` builds the method for a config. See sim/methods/base.py for the
interface and the checklist for adding a method.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

from sim.errors import SimInputError

if TYPE_CHECKING:
    from sim.config import SimConfig
    from sim.demand import Demand
    from sim.methods.base import Method

__all__ = ["METHODS", "method_class", "get_method", "available_methods", "missing_methods"]

METHODS: dict[str, str] = {
    "freekv": "sim.methods.freekv:FreeKV",
    "freekv-nohl": "sim.methods.freekv:FreeKVNoHybridLayout",
    "freekv-nodb": "sim.methods.freekv:FreeKVNoDoubleBuffer",
    "freekv-nosr": "sim.methods.freekv:FreeKVNoSpeculation",
    "freekv-base": "sim.methods.freekv:FreeKVBase",
    "dense": "sim.methods.dense:Dense",
    "full-offload": "sim.methods.full_offload:FullOffload",
    "quest": "sim.methods.quest:Quest",
    "arkvale": "sim.methods.arkvale:ArkVale",
    "shadowkv": "sim.methods.shadowkv:ShadowKV",
    "infinigen": "sim.methods.infinigen:InfiniGen",
    "raas": "sim.methods.raas:RaaS",
    "razorattention": "sim.methods.razorattention:RazorAttention",
    "streamingllm": "sim.methods.streamingllm:StreamingLLM",
    "h2o": "sim.methods.h2o:H2O",
    "snapkv": "sim.methods.snapkv:SnapKV",
}


def method_class(name: str) -> type[Method]:
    """The Method class registered under `name` (imports its module)."""
    if name not in METHODS:
        raise SimInputError(f"unknown method {name!r}: valid methods are {', '.join(METHODS)}")
    module_name, _, attr = METHODS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise SimInputError(
            f"method {name!r} is registered but its module {module_name} is not present in this "
            f"installation; available methods: {', '.join(available_methods())}"
        ) from None
    return getattr(module, attr)


def get_method(cfg: SimConfig, demand: Demand | None = None) -> Method:
    """Build the method named by `cfg.method` from its options, set up with what `demand` recorded beyond
    the per-step demand (`Method.for_demand`, e.g. RazorAttention's measured retrieval heads)."""
    return method_class(cfg.method).from_config(cfg).for_demand(demand, cfg.transplant_method)


def available_methods() -> list[str]:
    """Registered names whose module imports, in registry order."""
    out = []
    for name, target in METHODS.items():
        module_name = target.partition(":")[0]
        if importlib.util.find_spec(module_name) is not None:
            out.append(name)
    return out


def missing_methods() -> list[str]:
    """Registered names whose module is not present (yet)."""
    have = set(available_methods())
    return [n for n in METHODS if n not in have]
