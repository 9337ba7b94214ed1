"""The simulator half walks the method catalogue: every entry with a simulator model imports, is built from
its catalogue knobs (its `knobs` and `replays` are the entry's), takes every other valid value of each
knob the simulator reads, refuses the knobs only the runtime reads, and prices a short decode in both
implementation modes (synthetic demand where its costs need demand). The peer suite
(tests/sim/test_peer_methods.py) and the engine-equivalence tests take their method lists from the
catalogue too."""

from __future__ import annotations

import math

import pytest

from sim import SimConfig, SimInputError, run_simulation, synthetic_demand
from sim.methods import METHODS, get_method, method_class, method_names
from sim.methods.base import Method
from traces.catalogue import CATALOGUE, KnobSpec, names

MODEL = "llama-3.1-8b"


def _cfg(method: str, **kw) -> SimConfig:
    return SimConfig(model=MODEL, hardware="a100-40g-pcie4", method=method, input_tokens=4096,
                     output_tokens=16, **kw)


def _other_value(spec: KnobSpec) -> object:
    """A valid value other than the default (None when there is none or it needs a model's shape)."""
    if spec.choices is not None:
        return next((c for c in spec.choices if c != spec.default), None)
    if spec.kind is bool:
        return not spec.default
    if spec.name in ("group_heads",):  # must divide the model's KV heads: checked by the model
        return 8
    base = spec.low if spec.default is None else spec.default
    value = (base or 0) + (2 if spec.odd else (1 if spec.kind is int else 0.5 * ((spec.high or 1.0) - base)))
    return value if spec.problem(value) is None else None


def test_the_models_are_the_catalogues() -> None:
    assert method_names() == names(simulator=True)
    assert METHODS == {n: CATALOGUE[n].model for n in method_names()}


@pytest.mark.parametrize("method", names(simulator=True))
def test_each_model_is_built_from_its_catalogue_entry(method: str) -> None:
    e = CATALOGUE[method]
    assert issubclass(method_class(method), Method)
    model = get_method(_cfg(method))
    assert isinstance(model.knobs, e.knobs) and model.replays == e.replays
    for spec in e.knobs.specs("simulator"):
        value = _other_value(spec)
        if value is not None:
            built = get_method(_cfg(method, method_options={spec.name: value}))
            assert getattr(built.knobs, spec.name) == value
    for spec in e.knobs.specs():
        if not spec.reads("simulator"):
            with pytest.raises(SimInputError, match=f"{spec.name} is a runtime knob"):
                get_method(_cfg(method, method_options={spec.name: spec.default}))


@pytest.mark.parametrize("implementation", ["as-published", "ideal"])
@pytest.mark.parametrize("method", names(simulator=True))
def test_each_model_prices_a_short_decode(method: str, implementation: str) -> None:
    demand = synthetic_demand("correction=0.4,hit=0.8,steps=64,seqs=2", model=MODEL, seed=0)
    cfg = _cfg(method, implementation=implementation, batch_size=2)
    res = run_simulation(cfg, demand if method_class(method).needs_demand else None, seed=0)
    latency = res.latency_stats()
    assert res.method == method and not res.oom
    assert all(math.isfinite(latency[k]) and latency[k] > 0 for k in ("mean", "p50", "p99"))
    assert res.to_dict()["memory"]["gpu_bytes"] > 0


def test_a_name_without_a_model_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(SimInputError, match="unknown method 'lru': valid simulator models are freekv"):
        method_class("lru")
