"""The search space of a study file: the methods, the shared retrieval knobs and each method's own knobs
(lists or ranges), and the baselines measured once per study (pydantic; docs/studies.md). Defaults come
from the shared retrieval knobs (traces.retrieval_knobs) and FreeKV's catalogue knobs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from dse.study_sections import _Strict
from traces.catalogue import names as method_names
from traces.catalogue.retrieval import GROUP_POOLINGS, PAGE_SUMMARIES, FreeKVKnobs
from traces.retrieval_knobs import RetrievalKnobs, budget_convention_violation

__all__ = ["TauRange", "KnobRange", "KnobValues", "SearchSection", "Knobs", "Baselines", "SEARCH_KNOBS",
           "FREEKV_TOP_LEVEL"]

SEARCH_KNOBS = ("method", "tau", "page_size", "budget_tokens", "sink_tokens", "window_tokens",
                "group_pooling", "page_summary", "knobs")
FREEKV_TOP_LEVEL = ("tau", "group_pooling", "page_summary")  # search.<knob>: FreeKV's knob, as before
_SHARED, _FREEKV = RetrievalKnobs(), FreeKVKnobs()  # the defaults of the shared knobs and of FreeKV's


class TauRange(_Strict):
    """Correction threshold range; with `step` the values are discrete (grid sampler, deduplication)."""

    low: Annotated[float, Field(ge=-1.0, le=1.0)]
    high: Annotated[float, Field(ge=-1.0, le=1.0)]
    step: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> TauRange:
        if self.low > self.high:
            raise ValueError(f"tau.low ({self.low}) must not exceed tau.high ({self.high})")
        return self


class KnobRange(_Strict):
    """A method knob searched over a float range (Optuna suggest_float); with `step` discrete."""

    low: float
    high: float
    step: Annotated[float, Field(gt=0)] | None = None
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> KnobRange:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        if self.log and (self.low <= 0 or self.step is not None):
            raise ValueError("log: true needs low > 0 and no step")
        return self

    def values(self) -> list[float] | None:
        """The discrete values (step given), else None (a continuous range)."""
        if self.step is None:
            return None
        n = int(round((self.high - self.low) / self.step))
        return [round(self.low + i * self.step, 6) for i in range(n + 1)]


KnobValues = KnobRange | list[Any]


def _positive_list(v: list[int], name: str, allow_zero: bool = False) -> list[int]:
    if not v:
        raise ValueError(f"{name} needs at least one value")
    bad = [x for x in v if x < 0 or (x == 0 and not allow_zero)]
    if bad:
        raise ValueError(f"{name} values must be {'non-negative' if allow_zero else 'positive'}, got {bad}")
    return sorted(set(v))


class SearchSection(_Strict):
    """The search space. Combinations that the budget convention forbids (sink/window not multiples of
    the page size, budget_tokens < sink + window + page) are skipped, never run."""

    method: list[str] = Field(default_factory=lambda: ["freekv"])
    tau: TauRange | list[float] = Field(default_factory=lambda: [_FREEKV.tau])
    page_size: list[int] = Field(default_factory=lambda: [_SHARED.page_size])
    budget_tokens: list[int] = Field(default_factory=lambda: [_SHARED.budget_tokens])
    sink_tokens: list[int] = Field(default_factory=lambda: [_SHARED.sink_tokens])
    window_tokens: list[int] = Field(default_factory=lambda: [_SHARED.window_tokens])
    dense_layers: list[int] = Field(default_factory=lambda: list(_SHARED.dense_layers))
    group_pooling: list[str] = Field(default_factory=lambda: [_FREEKV.group_pooling])
    page_summary: list[str] = Field(default_factory=lambda: [_FREEKV.page_summary])
    # method -> {knob: values}: searched only in trials of that method (conditional space)
    knobs: dict[str, dict[str, KnobValues]] = Field(default_factory=dict)

    def method_space(self, method: str) -> dict[str, KnobValues | TauRange]:
        """The knobs searched for `method`: FreeKV's tau, group_pooling and page_summary (from
        search.knobs.freekv, else the top-level keys, as before per-method knobs), then knobs.<method>."""
        own: dict[str, KnobValues | TauRange] = dict(self.knobs.get(method, {}))
        if method != "freekv":
            return own
        top: dict[str, KnobValues | TauRange] = {k: getattr(self, k) for k in FREEKV_TOP_LEVEL}
        return {**top, **own}

    @field_validator("group_pooling", "page_summary")
    @classmethod
    def _choices(cls, v: list[str], info: Any) -> list[str]:
        valid = GROUP_POOLINGS if info.field_name == "group_pooling" else PAGE_SUMMARIES
        bad = [x for x in v if x not in valid]
        if not v or bad:
            raise ValueError(f"{info.field_name} needs values among {', '.join(valid)}, got {v}")
        return list(dict.fromkeys(v))

    @field_validator("page_size", "budget_tokens", "window_tokens")
    @classmethod
    def _pos(cls, v: list[int], info: Any) -> list[int]:
        return _positive_list(v, info.field_name)

    @field_validator("sink_tokens")
    @classmethod
    def _nonneg(cls, v: list[int], info: Any) -> list[int]:
        return _positive_list(v, info.field_name, allow_zero=True)

    @field_validator("method")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("method needs at least one value")
        searchable = [m for m in method_names(searchable=True) if m != "dense"]
        bad = [m for m in v if m not in searchable]
        if bad:
            no_model = sorted(m for m in bad if m in method_names(runtime=True, simulator=False))
            note = (f"; {', '.join(no_model)} run in the runtime (dse trace) but have no simulator model yet"
                    if no_model else "")
            raise ValueError(f"unknown method(s) {bad}; valid: {', '.join(searchable)} (dense attention is a "
                             f"baseline; `dse methods` lists every method){note}")
        return list(dict.fromkeys(v))

    @field_validator("tau")
    @classmethod
    def _tau_list(cls, v: TauRange | list[float]) -> TauRange | list[float]:
        if isinstance(v, list):
            if not v or any(not -1.0 <= x <= 1.0 for x in v):
                raise ValueError(f"tau as a list needs values in [-1, 1], got {v}")
            return sorted(set(v))
        return v


class Knobs(_Strict):
    """One fixed retrieval configuration (the untuned-FreeKV baseline); checked like a trial's."""

    method: str = "freekv"
    tau: Annotated[float, Field(ge=-1.0, le=1.0)] = _FREEKV.tau
    page_size: Annotated[int, Field(gt=0)] = _SHARED.page_size
    budget_tokens: Annotated[int, Field(gt=0)] = _SHARED.budget_tokens
    sink_tokens: Annotated[int, Field(ge=0)] = _SHARED.sink_tokens
    window_tokens: Annotated[int, Field(gt=0)] = _SHARED.window_tokens
    group_pooling: str = _FREEKV.group_pooling
    page_summary: str = _FREEKV.page_summary

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        return SearchSection._methods([v])[0]

    @field_validator("group_pooling", "page_summary")
    @classmethod
    def _choice(cls, v: str, info: Any) -> str:
        return SearchSection._choices([v], info)[0]

    @model_validator(mode="after")
    def _convention(self) -> Knobs:
        reason = budget_convention_violation(self.page_size, self.budget_tokens, self.sink_tokens,
                                             self.window_tokens)
        if reason is not None:
            raise ValueError(f"not a valid configuration: {reason}")
        return self


class Baselines(_Strict):
    """dense: dense attention; untuned_freekv: FreeKV at fixed knobs; untuned: other methods at their
    untuned defaults, a list of method names or {method: {knob: value}} (shared knobs page_size,
    budget_tokens, sink_tokens, window_tokens and the method's own knobs; unnamed ones keep their
    defaults). untuned.freekv replaces untuned_freekv."""

    dense: bool = True
    untuned_freekv: Knobs | None = Field(default_factory=Knobs)
    untuned: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("untuned", mode="before")
    @classmethod
    def _untuned_list(cls, v: Any) -> Any:
        if isinstance(v, list):
            if not all(isinstance(m, str) for m in v):
                raise ValueError(f"a list of method names, or a mapping method -> knobs; got {v!r}")
            return {m: {} for m in v}
        if isinstance(v, dict):
            return {m: ({} if knobs is None else knobs) for m, knobs in v.items()}
        return v
