"""Runtime configuration of one traced run: the method, the shared retrieval knobs and the method's own.

`RuntimeConfig` extends `traces.retrieval_knobs.RetrievalKnobs` (page size, budget counting sink and
window, sink, window, dense layers: the budget convention's one validation) with the method's name (a
catalogue entry with a runtime policy: traces.catalogue) and its typed knobs (`knobs`: the entry's knobs
dataclass; a mapping is checked and converted, refusing knobs only the simulator reads). Each policy reads
its own knobs (`config.knobs.tau`, `config.knobs.group_pooling`, ...); their defaults are the method's own
(Quest pools a group's page scores by max, ArkVale by the mean with box summaries, FreeKV by the
softmax mean with min/max summaries: traces/catalogue/retrieval.py).

    RuntimeConfig(method="freekv", budget_tokens=1024, sink_tokens=64, window_tokens=64,
                  knobs={"tau": 0.8})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from traces.catalogue import KnobError, MethodKnobs, UnknownMethodError, entry
from traces.catalogue.retrieval import GROUP_POOLINGS, PAGE_SUMMARIES
from traces.retrieval_knobs import RetrievalKnobs

__all__ = ["RuntimeConfig", "RuntimeConfigError", "GROUP_POOLINGS", "PAGE_SUMMARIES"]


class RuntimeConfigError(ValueError):
    """An invalid runtime configuration; the message names the field and what is valid."""


@dataclass(frozen=True, kw_only=True)
class RuntimeConfig(RetrievalKnobs):
    """One run's configuration (module docstring). `method` reads an old name as its current one
    ("full" -> "dense")."""

    method: str = "freekv"
    knobs: Any = field(default_factory=dict)  # the method's knobs dataclass once built (a mapping given)
    measure_attention_mass: bool = False

    _knob_error = RuntimeConfigError

    def __post_init__(self) -> None:
        try:
            method = entry(self.method, runtime=True)
        except UnknownMethodError as exc:
            raise RuntimeConfigError(str(exc)) from None
        object.__setattr__(self, "method", method.name)
        super().__post_init__()
        if not isinstance(self.knobs, (Mapping, MethodKnobs)):
            raise RuntimeConfigError(f"knobs must be a mapping of {method.name}'s knobs, got {self.knobs!r}")
        try:
            knobs = method.knobs_from(self.knobs, side="runtime")
        except KnobError as exc:
            raise RuntimeConfigError(str(exc)) from None
        problem = knobs.check_retrieval(self)
        if problem is not None:
            raise RuntimeConfigError(f"{method.name} knob {problem}")
        object.__setattr__(self, "knobs", knobs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the method, the retrieval knobs, the knobs the runtime reads, attention-mass flag."""
        return {
            "method": self.method, **self.retrieval_dict(), "dense_layers": list(self.dense_layers),
            "knobs": self.knobs.values("runtime"), "measure_attention_mass": self.measure_attention_mass,
        }
