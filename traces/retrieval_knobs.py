"""Retrieval knobs: page size, budget, sink, window and dense layers, with the budget convention's one rule.

The budget convention (docs/contracts.md), the same on every side of the project: `budget_tokens` counts
sink and window, as the official FreeKV runtime does. `sink_tokens` and `window_tokens` are multiples of
`page_size`; the window holds at least one page (the current, partially filled page is inside it); the
budget leaves at least one page to selection. Selected pages per KV head = (budget_tokens - sink_tokens
- window_tokens) / page_size. Layers in `dense_layers` attend the whole context.

"The context still fits the budget" (`fits_budget`): ceil(context / page_size) <= budget_tokens //
page_size whole pages. The official runtime takes its sparse path only when `kvc.n_pages > budget`
(rooikeee/FreeKV source/freekv/adapter/modeling.py:210, n_pages = ceil(seq_len / p) counting the token
appended at this step: kv_cache.py:130-131, 213-216; budget = budget_tokens // p: source/pred.py:209);
below it, "not reach the budget" (modeling.py:289-291), it attends without a correction check, selection
or recall.

`RetrievalKnobs` is held by the runtime configuration (freekv_runtime.config.RuntimeConfig), the
simulator configuration (sim.config.SimConfig: both extend it), the study trial (dse.search_space
.TrialConfig.retrieval) and the trace metadata (`RetrievalKnobs.from_runtime(meta.runtime)`). Plain
Python and numpy: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np

from traces.numbers import TOKENS

__all__ = ["RetrievalKnobs", "RetrievalKnobsError", "convention_violation", "budget_convention_violation",
           "budget_fit_tokens", "RETRIEVAL_KNOB_NAMES"]

RETRIEVAL_KNOB_NAMES = ("page_size", "budget_tokens", "sink_tokens", "window_tokens", "dense_layers")


class RetrievalKnobsError(ValueError):
    """Retrieval knobs that break the budget convention; the message names the field and what is valid."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def convention_violation(page_size: object, budget_tokens: object, sink_tokens: object,
                         window_tokens: object) -> tuple[str, str] | None:
    """(field, why) when (page, budget, sink, window) break the budget convention, else None. `why` is
    one sentence naming the value given and what is valid (the one wording of the rule everywhere)."""
    p = page_size
    if not _is_int(p) or p < 1:
        return "page_size", f"must be a positive integer, got {p!r}"
    for name, value in (("sink_tokens", sink_tokens), ("window_tokens", window_tokens)):
        if not _is_int(value) or value < 0 or value % p:
            return name, f"must be a non-negative multiple of page_size={p}, got {value!r}"
    if window_tokens < p:  # type: ignore[operator]
        return "window_tokens", f"must hold at least one page (>= page_size={p}), got {window_tokens}"
    least = sink_tokens + window_tokens + p  # type: ignore[operator]
    if not _is_int(budget_tokens) or budget_tokens < least or budget_tokens % p:  # type: ignore[operator]
        return "budget_tokens", (
            f"counts sink and window and must be a multiple of page_size={p} of at least sink_tokens + "
            f"window_tokens + page_size = {least}, got {budget_tokens!r}"
        )
    for name, value in (("page_size", p), ("budget_tokens", budget_tokens), ("sink_tokens", sink_tokens),
                        ("window_tokens", window_tokens)):
        too_large = TOKENS.problem(value) if value > TOKENS.hi else None  # type: ignore[operator]
        if too_large is not None:
            return name, too_large
    return None


def budget_convention_violation(page_size: object, budget_tokens: object, sink_tokens: object,
                                window_tokens: object) -> str | None:
    """`convention_violation` as one sentence ("budget_tokens counts sink and window and must be ..."),
    or None when the knobs keep the convention."""
    bad = convention_violation(page_size, budget_tokens, sink_tokens, window_tokens)
    return None if bad is None else f"{bad[0]} {bad[1]}"


def budget_fit_tokens(page_size: object, budget_tokens: object) -> int | None:
    """The longest context that fits the budget (budget_tokens // page_size whole pages), or None where
    either value is missing or not a positive integer (e.g. a trace whose metadata does not say)."""
    if not all(_is_int(x) and x > 0 for x in (page_size, budget_tokens)):
        return None
    return budget_tokens // page_size * page_size  # type: ignore[operator]


@dataclass(frozen=True, kw_only=True)
class RetrievalKnobs:
    """The retrieval knobs every method shares (module docstring). Holders name their fields in errors
    with `_knob_prefix` (e.g. "SimConfig.") and raise their own `_knob_error` class."""

    page_size: int = 32
    budget_tokens: int = 2048
    sink_tokens: int = 512
    window_tokens: int = 512
    dense_layers: tuple[int, ...] = (0,)

    _knob_prefix: ClassVar[str] = ""
    _knob_error: ClassVar[type[ValueError]] = RetrievalKnobsError

    def _refuse(self, name: str, why: str) -> ValueError:
        """The holder's error for knob `name`: "<prefix><name> <why>"; an error class that takes them also
        gets `field` and `detail` (sim.errors.SimInputError)."""
        message = f"{self._knob_prefix}{name} {why}"
        try:
            return self._knob_error(message, field=name, detail=why)  # type: ignore[call-arg]
        except TypeError:
            return self._knob_error(message)

    def __post_init__(self) -> None:
        bad = convention_violation(self.page_size, self.budget_tokens, self.sink_tokens, self.window_tokens)
        if bad is not None:
            raise self._refuse(*bad)
        layers = self.dense_layers
        if not isinstance(layers, (tuple, list, range)) or not all(
                isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0 for x in layers):
            raise self._refuse("dense_layers", f"must be layer indices >= 0, got {layers!r}")
        object.__setattr__(self, "dense_layers", tuple(sorted({int(x) for x in layers})))

    # ---- what the convention implies ----
    @property
    def selected_tokens(self) -> int:
        """Budget left to selection per KV head (the capacity): budget_tokens less sink and window."""
        return self.budget_tokens - self.sink_tokens - self.window_tokens

    @property
    def selected_pages(self) -> int:
        """Pages chosen by selection per KV head (sink and window excluded)."""
        return self.selected_tokens // self.page_size

    @property
    def sink_pages(self) -> int:
        return self.sink_tokens // self.page_size

    @property
    def window_pages(self) -> int:
        return self.window_tokens // self.page_size

    @property
    def budget_pages(self) -> int:
        return self.budget_tokens // self.page_size

    @property
    def budget_fit_tokens(self) -> int:
        """The longest context that fits the budget (module docstring)."""
        return self.budget_pages * self.page_size

    def fits_budget(self, context_tokens: Any) -> Any:
        """True while a context (int or numpy array of ints) fits the budget: ceil(context / page_size) <=
        budget pages; then nothing is checked, selected or recalled (module docstring)."""
        if not isinstance(context_tokens, np.ndarray):
            return -(-int(context_tokens) // self.page_size) <= self.budget_pages
        return -(-context_tokens.astype(np.int64) // self.page_size) <= self.budget_pages

    def candidate_pages(self, context_tokens: Any) -> Any:
        """Pages selection scores per KV head: ceil(context / p) - sink pages - window pages, at least 0
        (the runtime store's `candidate_range` and the official runtime's [ns, n_pages - nw))."""
        pages = -(-np.asarray(context_tokens, dtype=np.int64) // self.page_size)
        out = np.maximum(0, pages - self.sink_pages - self.window_pages)
        return out if isinstance(context_tokens, np.ndarray) else int(out)

    # ---- conversion ----
    @property
    def retrieval(self) -> RetrievalKnobs:
        """These knobs alone (a holder's other fields dropped)."""
        return RetrievalKnobs(**self.retrieval_dict())

    def retrieval_dict(self) -> dict[str, Any]:
        """{page_size, budget_tokens, sink_tokens, window_tokens, dense_layers (a tuple)}."""
        return {name: getattr(self, name) for name in RETRIEVAL_KNOB_NAMES}

    @classmethod
    def from_runtime(cls, runtime: dict[str, Any]) -> RetrievalKnobs | None:
        """The knobs a trace's `meta.runtime` recorded, or None where it lacks one or they break the
        convention (a trace written by hand, or by another tool)."""
        try:
            values = {f.name: runtime[f.name] for f in fields(RetrievalKnobs)}
            values["dense_layers"] = tuple(values["dense_layers"])
            return RetrievalKnobs(**values)
        except (KeyError, TypeError, ValueError):
            return None
