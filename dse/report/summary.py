"""Read measured quantities out of a `traces.stats.trace_summary` dict stored with each trial.

Keys used (traces/stats.py): `correction_rate` (share of checks corrected), `correction_rate_per_layer`
(L,), `hit_rate` (share of selected pages resident on the GPU), `mean_similarity` (L, H); JSON null
where nothing was counted (dense layers). Each helper returns None when a summary lacks its key, so a
figure can say so instead of failing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["overall_correction_rate", "layer_correction_rates", "hit_rate", "similarity_matrix"]


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def overall_correction_rate(summary: dict[str, Any]) -> float | None:
    """Share of (step, sparse layer, KV head) checks that were corrected."""
    return _float(summary.get("correction_rate"))


def layer_correction_rates(summary: dict[str, Any]) -> list[float | None] | None:
    """(L,) share of (step, KV head) checks corrected per layer; None entries for dense layers."""
    per_layer = summary.get("correction_rate_per_layer")
    return None if per_layer is None else [_float(v) for v in per_layer]


def hit_rate(summary: dict[str, Any]) -> float | None:
    """Share of selected pages already resident in the GPU cache."""
    return _float(summary.get("hit_rate"))


def similarity_matrix(summary: dict[str, Any]) -> np.ndarray | None:
    """(L, H) float64 mean cosine similarity of adjacent queries; NaN where undefined (dense layers)."""
    value = summary.get("mean_similarity")
    if value is None:
        return None
    return np.array([[np.nan if v is None else float(v) for v in row] for row in value], dtype=np.float64)
