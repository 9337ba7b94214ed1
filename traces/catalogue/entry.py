"""One catalogue entry: what a KV method is and where both halves of the project keep it.

An entry names the method, its kind, a one-line summary, its knobs dataclass (traces.catalogue.knobs),
where its runtime policy and its simulator model live ("module:Class" strings, imported lazily by
`freekv_runtime.policies` and `sim.methods`; either may be None), and what its traces say about it
(which parts of a token it moves). Registries, CLI choices, study knob spaces, Optuna parameter names,
help texts and the method lists of README and docs derive from the entries. Plain Python: no torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from traces.catalogue.knobs import SIDE_WORDS, KnobError, MethodKnobs

__all__ = ["MethodEntry", "KINDS", "import_target"]

# dense: attends the whole KV; retrieval: the whole KV stays reachable (on the host), a subset is attended
# each step; dropping: evicted tokens are gone for good; multi-context: KV caches of separately prefilled
# documents joined at query time
KINDS = ("dense", "retrieval", "dropping", "multi-context")


@dataclass(frozen=True)
class MethodEntry:
    """A KV method (module docstring).

    policy / model: "module:Class" of the runtime policy (a freekv_runtime.policies.base.KVPolicy) and of
        the simulator model (a sim.methods.base.Method); None where that half has none (a simulator-only
        ablation such as freekv-nohl has no policy of its own).
    trace_of: for an entry without a policy, the policy whose traces its model prices (freekv-nohl:
        freekv); `replays` is the entry's own name when it has a policy.
    aliases: older names that still read (traces and studies written before a rename: "full" -> dense).
    moved_parts: which parts of a head-token the method copies when it fetches, recalls or evicts one
        ("K", "V"; ShadowKV moves values only): trace statistics' moved bytes.
    bare_param_names: the method's knobs keep their bare Optuna parameter names (FreeKV: studies stored
        before per-method knobs resume); other methods' are "<method>.<knob>".
    source: the method's paper and public code, one line (docs and `dse methods`).
    """

    name: str
    kind: str
    summary: str
    knobs: type[MethodKnobs]
    policy: str | None = None
    model: str | None = None
    trace_of: str | None = None
    aliases: tuple[str, ...] = ()
    moved_parts: tuple[str, ...] = ("K", "V")
    bare_param_names: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"catalogue entry {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.policy is None and self.model is None:
            raise ValueError(f"catalogue entry {self.name!r} has neither a runtime policy nor a model")
        if self.policy is not None and self.trace_of is not None:
            raise ValueError(f"catalogue entry {self.name!r}: trace_of is for entries without a policy")

    @property
    def replays(self) -> str | None:
        """The runtime policy whose traces this method's model prices: its own, else `trace_of`."""
        return self.name if self.policy is not None else self.trace_of

    @property
    def searchable(self) -> bool:
        """Both halves exist: a study can measure it (runtime) and replay it (simulator)."""
        return self.policy is not None and self.model is not None

    def param_name(self, knob: str) -> str:
        """The Optuna parameter of `knob` (bare for FreeKV, else "<method>.<knob>")."""
        return knob if self.bare_param_names else f"{self.name}.{knob}"

    def knobs_from(self, values: Mapping[str, Any] | MethodKnobs | None, side: str | None = None) -> Any:
        """This method's knobs from user values (None values keep the default): unknown knobs, knobs
        `side` ("runtime" or "simulator") does not read, and invalid values raise KnobError naming the
        method, the knob and what is valid."""
        cls = self.knobs
        if isinstance(values, cls):
            return values
        if isinstance(values, MethodKnobs):
            raise KnobError(f"{type(values).__name__} are not knobs of {self.name} ({cls.__name__})")
        given = dict(values or {})
        for name in given:
            problem = self.knob_problem(name, side)
            if problem is not None:
                raise KnobError(problem)
        try:
            return cls(**{k: v for k, v in given.items() if v is not None})
        except KnobError as exc:
            raise KnobError(f"{self.name} knob {exc}") from None

    def knob_problem(self, name: str, side: str | None = None) -> str | None:
        """Why `name` is not a knob of this method that `side` reads (a sentence naming the valid
        ones), or None."""
        spec = self.knobs.spec(name)
        if spec is None:
            valid = ", ".join(self.knobs.names()) or "none (it takes no knobs)"
            return f"{name!r} is not a knob of {self.name}; valid knobs: {valid} (`dse methods` lists them)"
        if side is not None and not spec.reads(side):
            other = "simulator" if side == "runtime" else "runtime"
            mine = ", ".join(self.knobs.names(side)) or "none"
            return (f"{name} is {SIDE_WORDS[other]} of {self.name}, not read by the {side}; the {side}'s "
                    f"knobs of {self.name}: {mine}")
        return None


def import_target(target: str) -> Any:
    """The object a catalogue location names ("module:attr", e.g. an entry's `policy` or `model`),
    importing its module: the catalogue itself imports neither half."""
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)
