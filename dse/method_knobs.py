"""Per-method knobs of a study: names, values and where each goes, read from the method catalogue.

A study searches the method first, then the shared retrieval knobs (page size, budget, sink, window:
traces.retrieval_knobs), then that method's own knobs (`search.knobs.<method>`, and FreeKV's top-level
tau / group_pooling / page_summary): each is a field of the method's catalogue knobs dataclass
(traces.catalogue), which says its type, range and side. The runtime reads the "runtime" and "both"
knobs, the simulator the "simulator" and "both" ones (`knobs_for`). Checking a value needs neither torch
nor the policy.
"""

from __future__ import annotations

from typing import Any

from traces.catalogue import CATALOGUE, KnobError, UnknownMethodError, entry
from traces.retrieval_knobs import RETRIEVAL_KNOB_NAMES, convention_violation

__all__ = ["SHARED_KNOBS", "knob_problem", "knobs_for", "sim_options", "method_kind", "param_name",
           "check_search_knobs", "check_untuned"]

SHARED_KNOBS = tuple(k for k in RETRIEVAL_KNOB_NAMES if k != "dense_layers")  # searched for every method


def param_name(method: str, knob: str) -> str:
    """The Optuna parameter of `knob` of `method`: FreeKV's keep their bare names (studies stored before
    per-method knobs resume), every other method's are "<method>.<knob>" (a name has one distribution)."""
    return entry(method).param_name(knob)


def knob_problem(method: str, knob: str, value: Any) -> str | None:
    """Why `value` is not a valid `knob` of `method` (a sentence naming what is valid), or None."""
    if knob in SHARED_KNOBS:
        return f"{knob} is shared by every method: give it as search.{knob}, not as a method knob"
    if knob == "dense_layers":
        return f"{knob} is not a method knob (it is a study-wide setting: search.dense_layers)"
    try:
        entry(method).knobs_from({knob: value})  # an unknown knob, or a value it refuses
    except KnobError as exc:
        return str(exc)
    return None


def knobs_for(method: str, values: dict[str, Any], side: str) -> dict[str, Any]:
    """The knob values of `values` that `side` ("runtime" or "simulator") reads."""
    knobs = entry(method).knobs
    return {k: v for k, v in values.items() if (spec := knobs.spec(k)) is not None and spec.reads(side)}


def sim_options(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """The knobs in `options` that the method's simulator model reads (its `method_options`), e.g.
    FreeKV's staging_pages; none when the method has no model."""
    method_entry = CATALOGUE.get(method)
    if method_entry is None or method_entry.model is None:
        return {}
    return knobs_for(method, options, "simulator")


def method_kind(method: str) -> str:
    """The catalogue kind ("dense", "retrieval", "dropping", "multi-context"), "unknown" for a name the
    catalogue does not know."""
    try:
        return entry(method).kind
    except UnknownMethodError:
        return "unknown"


def check_search_knobs(search: Any) -> None:
    """Validate search.knobs (a SearchSection): searched methods only, knob names and values valid for
    the method, FreeKV's top-level knobs not given twice. Raises ValueError naming the YAML key."""
    from dse.study_search import FREEKV_TOP_LEVEL, KnobRange

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
                problem = knob_problem(method, knob, value)
                if problem is not None:
                    raise ValueError(f"{where}.{knob}: {problem}")


def check_untuned(baselines: Any) -> None:
    """Validate baselines.untuned (a Baselines): searchable methods, knob names and values, the budget
    convention. Raises ValueError naming the YAML key."""
    from dse.study_search import Knobs, SearchSection

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
        own = {}
        for knob, value in knobs.items():
            if knob in SHARED_KNOBS:
                least = 0 if knob == "sink_tokens" else 1
                if isinstance(value, bool) or not isinstance(value, int) or value < least:
                    raise ValueError(f"{where}.{knob}: an integer >= {least}, got {value!r}")
                shape[knob] = value
                continue
            problem = knob_problem(method, knob, value)
            if problem is not None:
                raise ValueError(f"{where}.{knob}: {problem}")
            own[knob] = value
        bad = convention_violation(shape["page_size"], shape["budget_tokens"], shape["sink_tokens"],
                                   shape["window_tokens"])
        if bad is not None:
            raise ValueError(f"{where}: not a valid configuration: {bad[0]} {bad[1]} (unnamed shared knobs "
                             f"keep their defaults: {shape})")
        _check_against_shape(method, own, shape, where)


def _check_against_shape(method: str, own: dict[str, Any], shape: dict[str, int], where: str) -> None:
    """A method knob that must agree with the shared knobs (ArkVale's top_pages <= selected pages)."""
    from traces.retrieval_knobs import RetrievalKnobs

    problem = entry(method).knobs_from(own).check_retrieval(RetrievalKnobs(**shape))
    if problem is not None:
        raise ValueError(f"{where}: {method} knob {problem}")
