"""The search space of a study: retrieval configurations and how Optuna samples them.

A conditional space: each trial draws the method first, then the shared knobs (page size, budget,
sink, window), then only that method's own knobs (`SearchSection.method_space`: FreeKV's tau and
selection design, other methods' `search.knobs.<method>`). Every knob is its own Optuna parameter
(categorical for lists, float for ranges), so samplers see the structure; FreeKV's knobs keep their
bare names (tau, group_pooling, page_summary), other methods' are "<method>.<knob>"
(dse/method_knobs.py). TPE models a parameter from the trials that drew it. Combinations the budget
convention forbids (docs/contracts.md: budget_tokens counts sink and window; sink and window are
multiples of the page size; the window holds at least one page; at least one selected page) are not
errors: `TrialConfig.invalid_reason` names the rule and the driver records such a trial as PRUNED
("skipped") without running anything. A space with no valid combination at all is rejected when the
sweep starts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from dse.errors import DseError
from dse.method_knobs import SHARED_KNOBS, knobs_for, param_name
from dse.study import FREEKV_TOP_LEVEL, Baselines, KnobRange, SearchSection, TauRange
from traces.catalogue import entry
from traces.catalogue.retrieval import FreeKVKnobs
from traces.retrieval_knobs import RetrievalKnobs, budget_convention_violation

__all__ = ["TrialConfig", "SearchSpace", "TAU_DECIMALS", "make_config", "untuned_configs"]

TAU_DECIMALS = 6  # tau is rounded to this many decimals (identical-configuration detection)
_FREEKV = FreeKVKnobs()  # FreeKV's defaults of its top-level knobs (tau, group_pooling, page_summary)


@dataclass(frozen=True)
class TrialConfig:
    """One retrieval configuration (the `config` user attribute of a trial, a stored format: the method,
    the shared knobs, tau / group_pooling / page_summary (None for a method that does not take them, or
    leaves them at its own default) and `options`, the method's other knobs (traces.catalogue)). It may
    break the budget convention: `invalid_reason` says why, and such a trial is skipped."""

    method: str
    tau: float | None
    page_size: int
    budget_tokens: int
    sink_tokens: int
    window_tokens: int
    group_pooling: str | None = "softmax_mean"  # FreeKV's selection design (RuntimeConfig)
    page_summary: str | None = "minmax"
    options: dict[str, Any] = field(default_factory=dict)

    def invalid_reason(self) -> str | None:
        """Why this combination breaks the budget convention or a method knob does not go with the shared
        knobs (ArkVale's top_pages past the selected pages), or None if it is valid."""
        reason = budget_convention_violation(self.page_size, self.budget_tokens, self.sink_tokens,
                                             self.window_tokens)
        if reason is not None:
            return reason
        problem = entry(self.method).knobs_from(self.knob_values()).check_retrieval(self.retrieval)
        return None if problem is None else f"{self.method} knob {problem}"

    @property
    def retrieval(self) -> RetrievalKnobs:
        """The shared knobs (dense layers: the default; the study sets them); raises on an invalid one."""
        return RetrievalKnobs(page_size=self.page_size, budget_tokens=self.budget_tokens,
                              sink_tokens=self.sink_tokens, window_tokens=self.window_tokens)

    def knob_values(self, side: str | None = None) -> dict[str, Any]:
        """The method's own knobs this configuration sets (tau, group_pooling, page_summary where given,
        and the options), those `side` ("runtime" / "simulator") reads when given."""
        values = {k: getattr(self, k) for k in FREEKV_TOP_LEVEL if getattr(self, k) is not None}
        values.update(self.options)
        return values if side is None else knobs_for(self.method, values, side)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        tau = data.get("tau")
        return cls(
            method=str(data["method"]),
            tau=None if tau is None else round(float(tau), TAU_DECIMALS),
            page_size=int(data["page_size"]),
            budget_tokens=int(data["budget_tokens"]),
            sink_tokens=int(data["sink_tokens"]),
            window_tokens=int(data["window_tokens"]),
            group_pooling=_text(data.get("group_pooling", "softmax_mean")),
            page_summary=_text(data.get("page_summary", "minmax")),
            options=dict(data.get("options") or {}),
        )

    def key(self) -> str:
        """Identity of the configuration: trials with equal keys measure the same thing."""
        tau = "-" if self.tau is None else f"{self.tau:.{TAU_DECIMALS}f}"
        key = (
            f"{self.method}|tau={tau}|p={self.page_size}|b={self.budget_tokens}"
            f"|s={self.sink_tokens}|w={self.window_tokens}|gp={self.group_pooling or '-'}"
            f"|ps={self.page_summary or '-'}"
        )
        if self.options:
            key += "|o=" + ",".join(f"{k}:{self.options[k]!r}" for k in sorted(self.options))
        return key


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def make_config(method: str, shape: dict[str, int], knobs: dict[str, Any]) -> TrialConfig:
    """A configuration of `method`: shape holds the shared knobs; knobs the method's own (tau,
    group_pooling and page_summary where the method has them, the rest go to `options`). FreeKV's
    top-level knobs that `knobs` lacks keep FreeKV's defaults; another method's stay None (its own
    default applies, e.g. Quest's max pooling); those a method does not have are None."""
    own = entry(method).knobs.names()
    fields_ = {k: (knobs.get(k, getattr(_FREEKV, k) if method == "freekv" else None) if k in own else None)
               for k in FREEKV_TOP_LEVEL}
    if fields_["tau"] is not None:
        fields_["tau"] = round(float(fields_["tau"]), TAU_DECIMALS)
    options = {k: v for k, v in knobs.items() if k not in FREEKV_TOP_LEVEL}
    return TrialConfig(method=method, **{k: int(shape[k]) for k in SHARED_KNOBS}, **fields_, options=options)


def untuned_configs(baselines: Baselines) -> dict[str, TrialConfig]:
    """Baseline name -> configuration of every untuned baseline: "untuned_freekv" (baselines.untuned_freekv,
    or untuned.freekv), then "untuned_<method>" for each other method of baselines.untuned."""
    from dse.study import Knobs

    out: dict[str, TrialConfig] = {}
    if baselines.untuned_freekv is not None and "freekv" not in baselines.untuned:
        out["untuned_freekv"] = TrialConfig.from_dict(baselines.untuned_freekv.model_dump())
    defaults = Knobs()
    for method, knobs in baselines.untuned.items():
        shape = {k: knobs.get(k, getattr(defaults, k)) for k in SHARED_KNOBS}
        own = {k: v for k, v in knobs.items() if k not in SHARED_KNOBS}
        out["untuned_freekv" if method == "freekv" else f"untuned_{method}"] = make_config(method, shape, own)
    return out


def _discrete(spec: Any) -> list[Any] | None:
    """The values of a knob's spec (list, TauRange or KnobRange with a step), None when continuous."""
    if isinstance(spec, list):
        return [round(x, TAU_DECIMALS) if isinstance(x, float) else x for x in spec]
    if isinstance(spec, TauRange | KnobRange) and spec.step is not None:
        n = int(round((spec.high - spec.low) / spec.step))
        return [round(spec.low + i * spec.step, TAU_DECIMALS) for i in range(n + 1)]
    return None


class SearchSpace:
    """Samples `TrialConfig`s from a study's `search` section."""

    def __init__(self, section: SearchSection) -> None:
        self.section = section
        # method -> knob -> spec (list, or a range), in suggestion order (FreeKV's tau first, as before)
        self._spaces = {m: section.method_space(m) for m in section.method}
        if not any(c.invalid_reason() is None for c in self._shape_product()):
            raise DseError(
                "the study's search space has no valid combination: every (page_size, budget_tokens, "
                "sink_tokens, window_tokens) breaks the budget convention (budget_tokens counts sink and "
                "window and must be at least sink + window + one page; sink and window are multiples of "
                f"page_size; the window holds a page). Got page_size {section.page_size}, budget_tokens "
                f"{section.budget_tokens}, sink_tokens {section.sink_tokens}, window_tokens "
                f"{section.window_tokens}."
            )

    def _shape_product(self) -> Iterator[TrialConfig]:
        s = self.section
        for p, b, sink, w in itertools.product(s.page_size, s.budget_tokens, s.sink_tokens, s.window_tokens):
            shape = {"page_size": p, "budget_tokens": b, "sink_tokens": sink, "window_tokens": w}
            yield make_config(s.method[0], shape, {"tau": 0.0})  # tau only where the method takes it

    def _suggest_knob(self, trial: Any, method: str, knob: str, spec: Any) -> Any:
        name = param_name(method, knob)
        values = _discrete(spec)
        if values is not None and isinstance(spec, list):
            return trial.suggest_categorical(name, values)
        if values is not None and knob == "tau":  # as before: a stepped tau range is categorical
            return trial.suggest_categorical(name, values)
        return trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=getattr(spec, "log", False))

    def suggest(self, trial: Any) -> TrialConfig:
        """Ask an optuna.Trial for one configuration (it may be invalid: check invalid_reason()):
        the method, FreeKV's tau (FreeKV trials), the shared knobs, then the method's other knobs."""
        s = self.section
        method = trial.suggest_categorical("method", s.method)
        space = self._spaces[method]
        knobs: dict[str, Any] = {}
        if "tau" in space:
            knobs["tau"] = self._suggest_knob(trial, method, "tau", space["tau"])
        shape = {
            "page_size": trial.suggest_categorical("page_size", s.page_size),
            "budget_tokens": trial.suggest_categorical("budget_tokens", s.budget_tokens),
            "sink_tokens": trial.suggest_categorical("sink_tokens", s.sink_tokens),
            "window_tokens": trial.suggest_categorical("window_tokens", s.window_tokens),
        }
        for knob, spec in space.items():
            if knob != "tau":
                knobs[knob] = self._suggest_knob(trial, method, knob, spec)
        return make_config(method, shape, knobs)

    def grid(self) -> dict[str, list[Any]]:
        """The full grid for optuna's GridSampler (invalid cells are skipped when drawn; cells that differ
        only in another method's knobs are the same configuration and are redrawn by the driver)."""
        s = self.section
        out: dict[str, list[Any]] = {
            "method": list(s.method),
            "page_size": list(s.page_size),
            "budget_tokens": list(s.budget_tokens),
            "sink_tokens": list(s.sink_tokens),
            "window_tokens": list(s.window_tokens),
        }
        for method, space in self._spaces.items():
            for knob, spec in space.items():
                values = _discrete(spec)
                if values is None:
                    raise DseError(f"sampler grid needs discrete values: give {method}'s {knob} as a list or "
                                   "a range with a step (search.tau / search.knobs)")
                out[param_name(method, knob)] = values
        return out

    def n_valid(self) -> int | None:
        """Number of valid configurations, or None when a searched knob is continuous."""
        shapes = sum(1 for c in self._shape_product() if c.invalid_reason() is None)
        total = 0
        for space in self._spaces.values():
            sizes = [_discrete(spec) for spec in space.values()]
            if any(v is None for v in sizes):
                return None
            total += shapes * math.prod(len(v) for v in sizes if v is not None)
        return total
