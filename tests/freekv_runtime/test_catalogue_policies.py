"""The runtime half walks the method catalogue: every entry with a runtime policy imports, builds from its
catalogue knobs (defaults and every other valid value of each runtime knob), records exactly its runtime
knobs in a trace's metadata, and runs the policy conformance suite (tests/freekv_runtime/
test_policy_conformance.py is parametrized over the same names). Entries without a policy are refused
with the valid names."""

from __future__ import annotations

import pytest

from freekv_runtime.api import runtime_dict
from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.policies import make_policy, policy_class, policy_names
from freekv_runtime.policies.base import KVPolicy
from traces.catalogue import CATALOGUE, KnobSpec, names
from traces.catalogue import runtime_knobs as read_knobs

# small enough that ArkVale's top_pages, ShadowKV's refactor interval and the like have room
SHARED = dict(page_size=8, budget_tokens=96, sink_tokens=8, window_tokens=16)


def _other_value(spec: KnobSpec) -> object:
    """A valid value of the knob other than its default (None when there is none)."""
    if spec.choices is not None:
        return next((c for c in spec.choices if c != spec.default), None)
    if spec.kind is bool:
        return not spec.default
    base = spec.low if spec.default is None else spec.default
    step = 1 if spec.kind is int else 0.5 * (spec.high - base if spec.high is not None else 1.0)
    value = (base or 0) + (2 if spec.odd else step)
    if spec.kind is int:
        value = int(value)
    return value if spec.problem(value) is None else None


def test_the_policies_are_the_catalogues() -> None:
    assert policy_names() == names(runtime=True)
    assert set(policy_names()) == {e.name for e in CATALOGUE.values() if e.policy}


@pytest.mark.parametrize("method", names(runtime=True))
def test_each_policy_builds_from_its_catalogue_knobs(method: str) -> None:
    assert issubclass(policy_class(method), KVPolicy)
    knobs = CATALOGUE[method].knobs
    config = RuntimeConfig(method=method, **SHARED)
    assert isinstance(config.knobs, knobs) and isinstance(make_policy(config), policy_class(method))
    recorded = runtime_dict(config, n_layers=4, dtype="float32")
    assert set(recorded["knobs"]) == set(knobs.names("runtime"))
    assert read_knobs(recorded) == recorded["knobs"]
    for spec in knobs.specs("runtime"):
        value = _other_value(spec)
        if value is None:
            continue
        built = RuntimeConfig(method=method, **SHARED, knobs={spec.name: value})
        assert getattr(built.knobs, spec.name) == value
        make_policy(built)
    for spec in knobs.specs():
        if not spec.reads("runtime"):
            with pytest.raises(RuntimeConfigError, match=f"{spec.name} is a simulator knob"):
                RuntimeConfig(method=method, **SHARED, knobs={spec.name: spec.default})


def test_an_entry_without_a_runtime_policy_is_refused_with_the_valid_ones() -> None:
    for name in names(runtime=False):
        with pytest.raises(RuntimeConfigError,
                           match=f"{name} has no runtime policy\\): valid runtime policies"):
            RuntimeConfig(method=name)


def test_dense_is_read_by_its_old_name() -> None:
    config = RuntimeConfig(method="full")
    assert config.method == "dense" and type(make_policy(config)).__name__ == "DensePolicy"
