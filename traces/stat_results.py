"""The results of the trace statistics (traces/stats.py): frozen dataclasses with a JSON form, and the
helpers they share (a ratio that is NaN where nothing was counted, numpy values made JSON-able)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CorrectionRate", "HitRate", "SimilarityStats", "Movement", "ratio", "json_ready"]


def ratio(num: np.ndarray | float, den: np.ndarray | float) -> np.ndarray:
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def json_ready(value: Any) -> Any:
    """numpy arrays / scalars -> nested lists of Python floats, NaN -> None."""
    if isinstance(value, np.ndarray):
        return [json_ready(v) for v in value.tolist()] if value.ndim else json_ready(value.item())
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


@dataclass(frozen=True)
class CorrectionRate:
    """tau: None for the recorded flags. overall: corrected / checks. per_layer (L,), per_head (L, H).
    check_share: share of (step, layer) checks with at least one corrected head; per layer (L,)."""

    tau: float | None
    overall: float
    per_layer: np.ndarray
    per_head: np.ndarray
    check_share: float
    check_share_per_layer: np.ndarray
    n_checks: int

    def to_dict(self) -> dict[str, Any]:
        return {k: json_ready(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class HitRate:
    """overall: 1 - missed / selected pages over the steps past the budget; per_layer (L,).
    corrected_check_share: share of (step, layer) checks with at least one head corrected, from the
    recorded flags. selected_pages, missed_pages: over the steps past the budget."""

    overall: float
    per_layer: np.ndarray
    corrected_check_share: float
    selected_pages: int
    missed_pages: int

    def to_dict(self) -> dict[str, Any]:
        return {k: json_ready(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class SimilarityStats:
    """(L, H) arrays over the finite similarities of sparse layers; count (L, H) int."""

    mean: np.ndarray
    min: np.ndarray
    max: np.ndarray
    std: np.ndarray
    count: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {k: json_ready(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Movement:
    """Tokens moved per decode step (means over every step; per_layer (L,) sums over the layer's heads).

    fetched_tokens_per_step: host -> GPU, all heads (None where no step's fetched tokens are known: a
    format-1 trace without page_size); fetched_tokens_per_step_sync: the corrected heads' share.
    evicted_tokens_per_step, refactorised_heads_per_step: as named. fetched_steps: steps whose fetched
    tokens are known (the means' denominator). derived_steps: steps whose movement was derived from
    missed pages (format 1, or fields not recorded) rather than recorded by the method."""

    fetched_tokens_per_step: float | None
    fetched_tokens_per_step_per_layer: np.ndarray
    fetched_tokens_per_step_sync: float | None
    evicted_tokens_per_step: float
    evicted_tokens_per_step_per_layer: np.ndarray
    refactorised_heads_per_step: float
    refactorised_heads_per_step_per_layer: np.ndarray
    fetched_tokens: int
    evicted_tokens: int
    fetched_steps: int
    derived_steps: int
    n_steps: int

    def to_dict(self) -> dict[str, Any]:
        return {k: json_ready(v) for k, v in self.__dict__.items()}
