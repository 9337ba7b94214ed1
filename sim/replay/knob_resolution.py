"""Which retrieval knobs a replay uses: the ones given, else the trace's, else the defaults.

A trace records the page size, budget, sink, window, tau and dense layers its run used (`meta.runtime`,
its method knobs for tau). A replay takes those unless a value is given; a given value that differs from
the trace's is reported (one note per override, naming the trace's value). Without a trace unset knobs
take `KNOB_DEFAULTS` (the shared retrieval knobs' defaults, traces.retrieval_knobs, and tau None: the
corrections as recorded). Never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.errors import SimInputError
from traces.catalogue import DENSE, runtime_knobs, runtime_method
from traces.retrieval_knobs import RETRIEVAL_KNOB_NAMES, RetrievalKnobs

__all__ = ["KNOB_DEFAULTS", "KnobResolution", "resolve_knobs", "parse_dense_layers"]

# the values where neither the user nor a trace says (the FreeKV paper's setup; layer 0 dense as the runtime)
KNOB_DEFAULTS: dict[str, Any] = {**RetrievalKnobs().retrieval_dict(), "tau": None}
KNOB_NAMES = (*RETRIEVAL_KNOB_NAMES, "tau")


@dataclass(frozen=True)
class KnobResolution:
    """values: the knobs to replay with; source: knob -> "given" | "trace" | "default"; notes: one line per
    given value that overrides what the trace recorded."""

    values: dict[str, Any]
    source: dict[str, str]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in self.values.items()}
        return {"values": values, "source": dict(self.source), "overrides": list(self.notes)}


def parse_dense_layers(text: str | None, name: str = "dense_layers") -> tuple[int, ...] | None:
    """'0,5' -> (0, 5); None (not given) -> None; '' -> () (explicitly none). `name`: how the user named
    the value, for the error."""
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SimInputError(f"{name} must be comma-separated integers, got {text!r}", field="dense_layers",
                            detail=f"must be comma-separated integers, got {text!r}") from None


def _from_trace(runtime: dict[str, Any], name: str) -> Any:
    """The trace's value of a knob, or None where it did not record a usable one. A trace of dense
    attention lists every layer as dense (freekv_runtime/api.py runtime_dict): that is what dense
    attention is, not a choice of layers to replay a retrieval model with, so it is not taken."""
    if name == "tau":
        value = runtime_knobs(runtime).get("tau")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    value = runtime.get(name)
    if name == "dense_layers":
        if runtime_method(runtime) == DENSE:
            return None
        if isinstance(value, (list, tuple)) and all(isinstance(x, int) for x in value):
            return tuple(sorted(int(x) for x in value))
        return None
    least = 0 if name == "sink_tokens" else 1  # a run without sink tokens recorded 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= least else None


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(x) for x in value) or "none"
    return "none" if value is None else str(value)


def resolve_knobs(given: Mapping[str, Any], runtime: dict[str, Any] | None, n_layers: int | None = None,
                  names: Mapping[str, str] | None = None) -> KnobResolution:
    """given: knob -> the value given or None (not given); runtime: the trace's meta.runtime, or None
    without a trace. n_layers: the target model's layers (the trace's dense layers past them are dropped,
    e.g. when replaying on a shallower model). names: how the user named each knob (e.g. a CLI flag), for
    the notes; default the knob's name."""
    unknown = sorted(set(given) - set(KNOB_NAMES))
    if unknown:
        raise SimInputError(f"unknown replay knobs {unknown}: valid {', '.join(KNOB_NAMES)}")
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    notes: list[str] = []
    for name in KNOB_NAMES:
        value = given.get(name)
        recorded = _from_trace(runtime, name) if runtime is not None else None
        if name == "dense_layers" and recorded is not None and n_layers is not None:
            recorded = tuple(x for x in recorded if x < n_layers)
        if value is not None:
            values[name], source[name] = value, "given"
            if recorded is not None and value != recorded:
                shown = (names or {}).get(name, name)
                notes.append(f"{shown} {_show(value)} overrides the trace's {name} {_show(recorded)}")
        elif recorded is not None:
            values[name], source[name] = recorded, "trace"
        else:
            values[name], source[name] = KNOB_DEFAULTS[name], "default"
    return KnobResolution(values, source, tuple(notes))
