"""The method catalogue: every KV method of the project, one entry each, read by both halves.

An entry (traces.catalogue.entry.MethodEntry) names a method, its kind, its knobs dataclass
(traces.catalogue.knobs) and where its runtime policy and simulator model live. `freekv_runtime.policies`
and `sim.methods` build their registries from it; the CLI's choices, the study's knob space and Optuna
parameter names, `dse methods`, README's and docs/methods.md's method lists derive from it, and one
conformance test per side walks it. Adding a method: a policy file, a model file and an entry in the
family module of its kind (dense.py, retrieval.py, dropping.py, multi_context.py); see docs/methods.md,
"Adding a method".

    from traces.catalogue import entry
    quest = entry("quest")
    quest.kind, quest.policy, quest.model          # "retrieval", "freekv_runtime...:QuestPolicy", ...
    quest.knobs_from({"group_pooling": "mean"}, side="runtime")   # QuestKnobs(group_pooling='mean', ...)

Plain Python: no torch.
"""

from __future__ import annotations

from typing import Any

from traces.catalogue import dense, dropping, multi_context, retrieval
from traces.catalogue.entry import KINDS, MethodEntry, import_target
from traces.catalogue.knobs import KnobError, KnobSpec, MethodKnobs, knob

__all__ = ["CATALOGUE", "DENSE", "KINDS", "MethodEntry", "MethodKnobs", "KnobError", "KnobSpec", "knob",
           "UnknownMethodError", "entry", "canonical", "names", "runtime_method", "runtime_knobs",
           "import_target"]

DENSE = "dense"  # dense attention: the baseline every method is compared with

_ORDER = ("freekv", "freekv-nohl", "freekv-nodb", "freekv-nosr", "freekv-base", "dense", "full-offload",
          "quest", "arkvale", "shadowkv", "infinigen", "raas", "razorattention", "streamingllm", "h2o",
          "snapkv")
_ENTRIES = {e.name: e for e in (*dense.ENTRIES, *retrieval.ENTRIES, *dropping.ENTRIES,
                                        *multi_context.ENTRIES)}
# name -> entry, in the order listings show them (listed first, then any other entry in module order)
CATALOGUE: dict[str, MethodEntry] = {
    **{name: _ENTRIES[name] for name in _ORDER if name in _ENTRIES},
    **{name: e for name, e in _ENTRIES.items() if name not in _ORDER},
}
_ALIASES = {alias: e.name for e in CATALOGUE.values() for alias in e.aliases}


class UnknownMethodError(ValueError):
    """A method name the catalogue does not know; the message lists the valid ones."""


def canonical(name: str) -> str:
    """The current name of `name` ("full" -> "dense"); other names unchanged."""
    return _ALIASES.get(name, name)


def names(*, kind: str | None = None, runtime: bool | None = None, simulator: bool | None = None,
          searchable: bool | None = None) -> tuple[str, ...]:
    """Method names in listing order, filtered: of a kind, with (True) or without (False) a runtime
    policy, a simulator model, or both halves (searchable by a study)."""
    out = []
    for e in CATALOGUE.values():
        if kind is not None and e.kind != kind:
            continue
        if runtime is not None and (e.policy is not None) != runtime:
            continue
        if simulator is not None and (e.model is not None) != simulator:
            continue
        if searchable is not None and e.searchable != searchable:
            continue
        out.append(e.name)
    return tuple(out)


def entry(name: str, *, runtime: bool = False, simulator: bool = False) -> MethodEntry:
    """The entry of `name` (an alias reads as its method). runtime / simulator: the method must have a
    runtime policy / a simulator model; UnknownMethodError lists the names that do."""
    found = CATALOGUE.get(canonical(name)) if isinstance(name, str) else None
    need = {"runtime": runtime or None, "simulator": simulator or None}
    if found is None or (runtime and found.policy is None) or (simulator and found.model is None):
        valid = names(**need)  # type: ignore[arg-type]
        what = "runtime policies" if runtime else "simulator models" if simulator else "methods"
        why = ""
        if found is not None:
            half = "runtime policy" if runtime and found.policy is None else "simulator model"
            why = f" ({found.name} has no {half})"
        raise UnknownMethodError(f"unknown method {name!r}{why}: valid {what} are {', '.join(valid)}")
    return found


def runtime_method(runtime: dict[str, Any]) -> str:
    """The method a trace's `meta.runtime` names (an old name read as its current one; a trace without a
    method is FreeKV's, as traces were before methods were recorded)."""
    method = runtime.get("method")
    return canonical(method) if isinstance(method, str) and method else "freekv"


_LEGACY_KNOBS = ("tau", "group_pooling", "page_summary")


def runtime_knobs(runtime: dict[str, Any]) -> dict[str, Any]:
    """The method knobs a trace's `meta.runtime` recorded: its `knobs` object, or in traces written before
    knobs were typed, the top-level tau / group_pooling / page_summary the method has and its `extra`."""
    if isinstance(runtime.get("knobs"), dict):
        return dict(runtime["knobs"])
    method = CATALOGUE.get(runtime_method(runtime))
    own = set(method.knobs.names()) if method is not None else set(_LEGACY_KNOBS)
    out = {k: runtime[k] for k in _LEGACY_KNOBS if k in own and runtime.get(k) is not None}
    extra = runtime.get("extra")
    return {**out, **(extra if isinstance(extra, dict) else {})}
