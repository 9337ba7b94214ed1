"""A method's own knobs: one frozen dataclass per method, each field declared with `knob(...)`.

A knob has a default, a one-line doc, a type, its valid range or choices, and the side that reads it:
"runtime" (the policy: what the method selects, keeps or recalls, so only a trace records its effect),
"simulator" (how the model prices the method: an implementation choice) or "both". The dataclass checks
every value when it is built (`KnobError` naming the knob and what is valid); the catalogue entry builds
it from user input (study YAML, `--option KEY=VALUE`), refusing unknown knobs and knobs of the other side.
Shared retrieval knobs (page size, budget, sink, window, dense layers) are not method knobs: see
traces.retrieval_knobs. Plain Python: no torch, no numpy.

    @dataclass(frozen=True)
    class SnapKVKnobs(MethodKnobs):
        observation_tokens: int = knob(64, "prompt queries that vote", side="both", low=1)
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

__all__ = ["KnobError", "KnobSpec", "MethodKnobs", "SelectionKnobs", "SELECTIONS", "knob", "Side", "SIDES",
           "SIDE_WORDS"]

Side = Literal["runtime", "simulator", "both"]
SIDES: tuple[str, ...] = ("runtime", "simulator", "both")
SIDE_WORDS = {
    "runtime": "a runtime knob (it changes what the method selects or keeps, which only a trace records)",
    "simulator": "a simulator knob (how the simulator prices the method; the runtime does not read it)",
}


class KnobError(ValueError):
    """An invalid method knob; the message names the knob, the method and what is valid."""


@dataclass(frozen=True)
class KnobSpec:
    """What a knob is: type (`kind`), range [low, high] (`low_open`/`high_open`: exclusive ends) or
    `choices`, whether None is valid (`optional`: a default derived from other settings), and its side."""

    default: Any
    doc: str
    side: str = "runtime"
    kind: type = int
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] | None = None
    optional: bool = False
    odd: bool = False
    name: str = ""

    def reads(self, side: str) -> bool:
        """Whether `side` ("runtime" or "simulator") reads this knob."""
        return self.side in (side, "both")

    def valid(self) -> str:
        """What is valid, in words: 'an integer >= 1', 'one of avg, max', 'a number in (0, 1]'."""
        if self.choices is not None:
            text = "one of " + ", ".join(str(c) for c in self.choices)
        elif self.kind is bool:
            text = "true or false"
        elif self.kind is str:
            text = "a string"
        else:
            text = ("an odd integer" if self.odd else "an integer") if self.kind is int else "a number"
            text += self._range()
        return text + (" or null (derived)" if self.optional else "")

    def _range(self) -> str:
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            return f" in {'(' if self.low_open else '['}{lo:g}, {hi:g}{')' if self.high_open else ']'}"
        if lo is not None:
            return f" {'>' if self.low_open else '>='} {lo:g}"
        if hi is not None:
            return f" {'<' if self.high_open else '<='} {hi:g}"
        return ""

    def problem(self, value: Any) -> str | None:
        """Why `value` is not valid for this knob (a sentence), or None."""
        if value is None:
            return None if self.optional else f"must be {self.valid()}, got None"
        if self.choices is not None:
            return None if value in self.choices and type(value) is type(self.choices[0]) else \
                f"must be {self.valid()}, got {value!r}"
        if not self._typed(value):
            return f"must be {self.valid()}, got {value!r}"
        if self.kind is bool:
            return None
        out_of_range = (
            (self.low is not None and (value <= self.low if self.low_open else value < self.low))
            or (self.high is not None and (value >= self.high if self.high_open else value > self.high))
            or (self.odd and value % 2 != 1)
        )
        return f"must be {self.valid()}, got {value!r}" if out_of_range else None

    def _typed(self, value: Any) -> bool:
        if self.kind is bool:
            return isinstance(value, bool)
        if isinstance(value, bool):
            return False
        if self.kind is int:
            return isinstance(value, int)
        if self.kind is float:
            return isinstance(value, (int, float)) and value == value and abs(value) != float("inf")
        return isinstance(value, self.kind)


def knob(default: Any, doc: str, *, side: Side = "runtime", kind: type | None = None,
         low: float | None = None, high: float | None = None, low_open: bool = False, high_open: bool = False,
         choices: tuple[Any, ...] | None = None, optional: bool = False, odd: bool = False) -> Any:
    """A knob field of a `MethodKnobs` dataclass (module docstring). `kind` defaults to the default's type
    (give it when the default is None)."""
    if side not in SIDES:
        raise ValueError(f"knob side must be one of {SIDES}, got {side!r}")
    if kind is None:
        if default is None:
            raise ValueError("a knob whose default is None needs kind=")
        kind = float if isinstance(default, float) else type(default)
    spec = KnobSpec(default, doc, side, kind, low, high, low_open, high_open, choices,
                    optional or default is None, odd)
    return field(default=default, metadata={"knob": spec})


@dataclass(frozen=True)
class MethodKnobs:
    """Base of every method's knobs dataclass (module docstring); a method without knobs subclasses it
    empty. Values are checked when built (KnobError "KNOB must be ..., got ..."); the catalogue entry
    (traces.catalogue.entry.MethodEntry.knobs_from) builds them from user input and names the method."""

    def __post_init__(self) -> None:
        for spec in self.specs():
            value = getattr(self, spec.name)
            if spec.kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, spec.name, float(value))
            problem = spec.problem(value)
            if problem is not None:
                raise KnobError(f"{spec.name} {problem}")

    @classmethod
    def specs(cls, side: str | None = None) -> tuple[KnobSpec, ...]:
        """Every knob (named), in declaration order; only those `side` reads when given."""
        out = []
        for f in fields(cls):
            spec = f.metadata.get("knob")
            if spec is not None and (side is None or spec.reads(side)):
                out.append(KnobSpec(**{**spec.__dict__, "name": f.name}))
        return tuple(out)

    @classmethod
    def names(cls, side: str | None = None) -> tuple[str, ...]:
        return tuple(s.name for s in cls.specs(side))

    @classmethod
    def spec(cls, name: str) -> KnobSpec | None:
        """The knob `name`, or None when there is no such knob."""
        return next((s for s in cls.specs() if s.name == name), None)

    def values(self, side: str | None = None) -> dict[str, Any]:
        """knob -> value (JSON-able), every knob or those `side` reads."""
        return {s.name: getattr(self, s.name) for s in self.specs(side)}

    def changed(self, side: str | None = None) -> dict[str, Any]:
        """The knobs whose value differs from their default."""
        return {s.name: getattr(self, s.name) for s in self.specs(side) if getattr(self, s.name) != s.default}

    def check_retrieval(self, retrieval: Any) -> str | None:
        """Why these knobs do not go with the retrieval knobs `retrieval` (traces.retrieval_knobs), or
        None. Default: they always do."""
        return None


SELECTIONS = ("per-query-head", "per-kv-head")


@dataclass(frozen=True)
class SelectionKnobs(MethodKnobs):
    """Knobs of a method whose code selects per query head (Quest, InfiniGen, SnapKV): `selection` says
    whether each query head keeps its own set (a KV head then holds the union of its group's sets) or the
    GQA group is pooled into one set per KV head. `group_consistent` (read by the simulator's models) is
    the same choice as a bool."""

    selection: str = knob(
        "per-query-head", "which heads select: per-query-head (each query head its own set, attended by it "
        "alone; a KV head holds the union of its group's sets) or per-kv-head (the GQA group pooled into one "
        "set per KV head)", side="both", choices=SELECTIONS)

    @property
    def group_consistent(self) -> bool:
        """One set per KV head (selection per-kv-head)."""
        return self.selection == "per-kv-head"
