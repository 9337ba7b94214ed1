"""Per-method knobs of a study: which knobs a method takes, where each goes, and checking values.

A study searches the method first, then that method's own knobs (dse/search_space.py). A method knob
is either a field of `RuntimeConfig` that the method reads (`CONFIG_KNOBS`: FreeKV's tau and its
selection design, Quest's selection design) or a key of `RuntimeConfig.extra`, which the policy itself
validates when it is built (every policy rejects unknown `extra` keys with the valid ones). A knob whose
name is also an option of the same-named simulator model (a field of its `Method` dataclass, e.g.
FreeKV's `staging_pages`) is passed to `SimConfig.method_options` too. The shared knobs (page size,
budget, sink, window) are searched for every method alike and are never method knobs.

Checking a value builds the policy (imports torch) only for `extra` knobs; `RuntimeConfig` fields are
checked by `RuntimeConfig` alone.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

__all__ = ["SHARED_KNOBS", "CONFIG_KNOBS", "config_knobs", "knob_problem", "sim_options", "method_kind",
           "param_name"]

SHARED_KNOBS = ("page_size", "budget_tokens", "sink_tokens", "window_tokens")

# method -> RuntimeConfig fields the policy reads as its own knobs (issue 11: group_pooling and
# page_summary are FreeKV's selection design, and Quest's where they apply). Other methods ignore them.
CONFIG_KNOBS: dict[str, tuple[str, ...]] = {
    "freekv": ("tau", "group_pooling", "page_summary"),
    "quest": ("group_pooling", "page_summary"),
}
_NOT_KNOBS = frozenset({"method", "dense_layers", "measure_attention_mass", "extra", *SHARED_KNOBS})


def config_knobs(method: str) -> tuple[str, ...]:
    """The RuntimeConfig fields that `method` takes as knobs (empty for most methods)."""
    return CONFIG_KNOBS.get(method, ())


def param_name(method: str, knob: str) -> str:
    """The Optuna parameter of `knob` of `method`: FreeKV's keep their bare names (studies stored before
    per-method knobs resume), every other method's are "<method>.<knob>" (a name has one distribution)."""
    return knob if method == "freekv" else f"{method}.{knob}"


def knob_problem(method: str, knob: str, value: Any) -> str | None:
    """Why `value` is not a valid `knob` of `method` (a sentence naming what is valid), or None."""
    from freekv_runtime.config import RuntimeConfig, RuntimeConfigError

    if knob in SHARED_KNOBS:
        return f"{knob} is shared by every method: give it as search.{knob}, not as a method knob"
    runtime_fields = {f.name for f in fields(RuntimeConfig)}
    if knob in runtime_fields and knob in _NOT_KNOBS:
        return f"{knob} is not a method knob (it is a study-wide setting)"
    if knob in runtime_fields:
        if knob not in config_knobs(method):
            takes = ", ".join(config_knobs(method)) or "none"
            return (f"{method} does not read RuntimeConfig.{knob} (its RuntimeConfig knobs: {takes}; its "
                    "other knobs are the policy's `extra` keys, see docs/methods.md)")
        try:
            RuntimeConfig(method=method, **{knob: value})
        except (RuntimeConfigError, TypeError) as exc:
            return str(exc)
        return None
    from freekv_runtime.policies import make_policy

    try:
        make_policy(RuntimeConfig(method=method, extra={knob: value}))
    except (RuntimeConfigError, TypeError, ValueError) as exc:
        return str(exc)
    return None


def sim_options(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """The method knobs in `options` that the same-named simulator model also takes (its
    `method_options`), e.g. FreeKV's staging_pages; none when the model is not installed."""
    if not options:
        return {}
    from sim.errors import SimInputError
    from sim.methods import METHODS, method_class

    if method not in METHODS:
        return {}
    try:
        cls = method_class(method)
    except SimInputError:
        return {}
    names = ({f.name for f in fields(cls) if f.metadata.get("option", True)}  # not what for_demand sets
             if hasattr(cls, "__dataclass_fields__") else set())
    return {k: v for k, v in options.items() if k in names}


def method_kind(method: str) -> str:
    """"retrieval", "dropping" or "dense" (freekv_runtime.policies.KIND; "dense" for the dense
    baseline's names), "unknown" for a name without a kind."""
    from freekv_runtime.policies import KIND

    if method in ("full", "dense"):
        return "dense"
    return KIND.get(method, "unknown")


def check_search_knobs(search: Any) -> None:
    """Validate search.knobs (a SearchSection): searched methods only, knob names and values valid for
    the method, FreeKV's top-level knobs not given twice. Raises ValueError naming the YAML key."""
    from dse.study import FREEKV_TOP_LEVEL, KnobRange

    for method, knobs in search.knobs.items():
        where = f"search.knobs.{method}"
        if method not in search.method:
            raise ValueError(f"{where}: {method!r} is not in search.method {search.method}; per-method knobs "
                             "apply to searched methods only")
        for knob, values in knobs.items():
            if method == "freekv" and knob in FREEKV_TOP_LEVEL and knob in search.model_fields_set:
                raise ValueError(f"{where}.{knob}: FreeKV's {knob} is also given as search.{knob}; give it "
                                 "once")
            if isinstance(values, KnobRange):
                samples: list[Any] = [values.low, values.high]
            else:
                samples = list(values)
                if not samples:
                    raise ValueError(f"{where}.{knob}: needs at least one value")
            for value in samples:
                problem = _value_problem(method, knob, value)
                if problem is not None:
                    raise ValueError(f"{where}.{knob}: {problem}")


def _value_problem(method: str, knob: str, value: Any) -> str | None:
    if knob == "tau" and (isinstance(value, bool) or not isinstance(value, int | float) or
                          not -1.0 <= value <= 1.0):
        return f"tau is a cosine-similarity threshold in [-1, 1], got {value!r}"
    return knob_problem(method, knob, value)


def check_untuned(baselines: Any) -> None:
    """Validate baselines.untuned (a Baselines): searchable methods, knob names and values, the budget
    convention. Raises ValueError naming the YAML key."""
    from dse.study import Knobs, SearchSection, budget_convention_violation

    if "freekv" in baselines.untuned and baselines.untuned_freekv is not None \
            and "untuned_freekv" in baselines.model_fields_set:
        raise ValueError("baselines.untuned.freekv: FreeKV's untuned baseline is also given as "
                         "baselines.untuned_freekv; give it once (untuned.freekv replaces untuned_freekv)")
    defaults = Knobs()
    for method, knobs in baselines.untuned.items():
        where = f"baselines.untuned.{method}"
        try:
            SearchSection._methods([method])
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        shape = {k: getattr(defaults, k) for k in SHARED_KNOBS}
        for knob, value in knobs.items():
            if knob in SHARED_KNOBS:
                least = 0 if knob == "sink_tokens" else 1
                if isinstance(value, bool) or not isinstance(value, int) or value < least:
                    raise ValueError(f"{where}.{knob}: an integer >= {least}, got {value!r}")
                shape[knob] = value
                continue
            problem = _value_problem(method, knob, value)
            if problem is not None:
                raise ValueError(f"{where}.{knob}: {problem}")
        reason = budget_convention_violation(shape["page_size"], shape["budget_tokens"], shape["sink_tokens"],
                                             shape["window_tokens"])
        if reason is not None:
            raise ValueError(f"{where}: not a valid configuration: {reason} (unnamed shared knobs keep "
                             f"their defaults: {shape})")
