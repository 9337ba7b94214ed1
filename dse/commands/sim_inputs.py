"""What `dse sim` replays with: retrieval knobs from the trace's metadata unless given on the command line.

A trace records the page size, budget, sink, window, tau and dense layers its run used
(`meta.runtime`). `dse sim TRACE` replays with those; an option given on the command line overrides the
trace's value and the command says so (one note per override, naming the trace's value). Without a trace
(`--synthetic`, or methods that need none) unset options take `DEFAULTS`. Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.demand import DENSE_POLICY
from sim.errors import SimInputError

__all__ = ["DEFAULTS", "Resolved", "parse_dense_layers", "resolve_knobs", "trace_status_note",
           "check_max_positions"]

# The CLI's values where neither the command line nor a trace says (the FreeKV paper's setup).
DEFAULTS: dict[str, Any] = {
    "page_size": 32,
    "budget_tokens": 2048,
    "sink_tokens": 512,
    "window_tokens": 512,
    "tau": None,
    "dense_layers": (0,),  # the runtime keeps layer 0 dense (freekv_runtime/config.py RuntimeConfig)
}

_FLAGS = {
    "page_size": "--page-size",
    "budget_tokens": "--budget-tokens",
    "sink_tokens": "--sink-tokens",
    "window_tokens": "--window-tokens",
    "tau": "--tau",
    "dense_layers": "--dense-layers",
}


@dataclass(frozen=True)
class Resolved:
    """values: the knobs to replay with; source: knob -> "command line" | "trace" | "default";
    notes: one line per command-line override of a value the trace recorded."""

    values: dict[str, Any]
    source: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in self.values.items()}
        return {"values": values, "source": dict(self.source), "overrides": list(self.notes)}


def parse_dense_layers(text: str | None) -> tuple[int, ...] | None:
    """'0,5' -> (0, 5); None (option not given) -> None; '' -> () (explicitly none)."""
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SimInputError(f"--dense-layers must be comma-separated integers, got {text!r}") from None


def _from_trace(runtime: dict[str, Any], name: str) -> Any:
    """The trace's value of a knob, or None where it did not record a usable one. A trace of the dense
    policy lists every layer as dense (freekv_runtime/api.py runtime_dict): that is what dense attention
    is, not a choice of layers to replay a retrieval model with, so it is not taken."""
    value = runtime.get(name)
    if name == "dense_layers" and runtime.get("method") == DENSE_POLICY:
        return None
    if name == "dense_layers":
        if isinstance(value, (list, tuple)) and all(isinstance(x, int) for x in value):
            return tuple(sorted(int(x) for x in value))
        return None
    if name == "tau":
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(x) for x in value) or "none"
    return "none" if value is None else str(value)


def resolve_knobs(
    given: dict[str, Any], runtime: dict[str, Any] | None, n_layers: int | None = None
) -> Resolved:
    """given: knob -> the command-line value or None (not given); runtime: the trace's meta.runtime, or
    None without a trace. n_layers: the target model's layers (the trace's dense layers past them are
    dropped, e.g. when transplanting onto a shallower model)."""
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    notes: list[str] = []
    for name, default in DEFAULTS.items():
        cli = given.get(name)
        recorded = _from_trace(runtime, name) if runtime is not None else None
        if name == "dense_layers" and recorded is not None and n_layers is not None:
            recorded = tuple(x for x in recorded if x < n_layers)
        if cli is not None:
            values[name], source[name] = cli, "command line"
            if recorded is not None and cli != recorded:
                notes.append(
                    f"{_FLAGS[name]} {_show(cli)} overrides the trace's {name} {_show(recorded)}"
                )
        elif recorded is not None:
            values[name], source[name] = recorded, "trace"
        else:
            values[name], source[name] = default, "default"
    return Resolved(values, source, notes)


def trace_status_note(reader: Any) -> str | None:
    """A note when the trace did not end cleanly (the reader knows), else None."""
    if reader.truncated:
        return (
            f"trace {reader.path} is truncated (a partial last record was cut at byte "
            f"{reader.valid_bytes} of {reader.file_bytes}): replaying its {reader.n_steps} whole steps"
        )
    if not reader.complete:
        return (
            f"trace {reader.path} is incomplete (its writer did not close it: the run was killed or "
            f"failed): replaying the {reader.n_steps} steps it holds"
        )
    return None


def check_max_positions(model: str, input_tokens: int, output_tokens: int) -> None:
    """Refuse a context past the target model's maximum positions (as `dse trace` does)."""
    from traces.models import get_model

    spec = get_model(model)
    total = input_tokens + output_tokens
    if total > spec.max_position_tokens:
        raise SimInputError(
            f"--input-tokens {input_tokens} + --output-tokens {output_tokens} = {total} tokens exceeds the "
            f"{spec.max_position_tokens} positions of model {spec.name!r}; give a context of at most "
            f"{spec.max_position_tokens} tokens (or a model with more positions)"
        )


def workload_config(model: str, hardware: str, method: str, input_tokens: int, output_tokens: int,
                    implementation: str, knobs: dict[str, Any], software: str | None = None,
                    transplant_method: bool = False) -> Any:
    """The SimConfig of one (hardware, method) cell of `dse capacity` / `dse serve`: the workload, the
    resolved retrieval knobs (`resolve_knobs(...).values`), if given the software profile, and whether
    another policy's trace is transplanted onto the method (--transplant-method)."""
    from sim import SimConfig

    extra = {} if software is None else {"software": software}
    return SimConfig(model=model, hardware=hardware, method=method, input_tokens=input_tokens,
                     output_tokens=output_tokens, implementation=implementation,
                     transplant_method=transplant_method, **knobs, **extra)
