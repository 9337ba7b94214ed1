"""Read measured quantities out of a `traces.stats.trace_summary` dict stored with each trial.

The summary is JSON (see traces/stats.py): correction rates overall and per layer, the GPU-cache hit
rate, and the mean adjacent-query similarity per (layer, KV head). These helpers return None where a
summary lacks a quantity, so a figure can say so instead of failing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["overall_correction_rate", "layer_correction_rates", "hit_rate", "similarity_matrix"]


def _correction(summary: dict[str, Any]) -> Any:
    return summary.get("correction_rate")


def overall_correction_rate(summary: dict[str, Any]) -> float | None:
    """Share of (step, layer, KV head) checks that were corrected (sparse layers only)."""
    value = _correction(summary)
    if isinstance(value, dict):
        value = value.get("overall")
    return None if value is None else float(value)


def layer_correction_rates(summary: dict[str, Any]) -> list[float | None] | None:
    """Per layer, the share of (step, KV head) checks corrected; None entries for dense layers."""
    value = _correction(summary)
    per_layer = (
        value.get("per_layer") if isinstance(value, dict) else summary.get("correction_rate_per_layer")
    )
    if per_layer is None:
        return None
    return [None if v is None else float(v) for v in per_layer]


def hit_rate(summary: dict[str, Any]) -> float | None:
    """Share of selected pages already resident in the GPU cache."""
    value = summary.get("hit_rate")
    if isinstance(value, dict):
        value = value.get("overall")
    return None if value is None else float(value)


def similarity_matrix(summary: dict[str, Any]) -> np.ndarray | None:
    """(L, H) float64 mean cosine similarity of adjacent queries; NaN where undefined (dense layers)."""
    value = summary.get("mean_similarity")
    if value is None:
        return None
    return np.array([[np.nan if v is None else float(v) for v in row] for row in value], dtype=np.float64)
