"""Collects one decode step's decisions, layer by layer, into a `StepDecisions`.

Shapes: b = batch, L = layers, H = KV heads. Arrays are reset after `finish()`.
"""

from __future__ import annotations

import numpy as np

from freekv_runtime.policies._reuse import HeadPlan
from freekv_runtime.policies.base import StepDecisions

__all__ = ["StepLog"]

_EMPTY = np.zeros(0, dtype=np.int32)


class StepLog:
    def __init__(self, batch_size: int, n_layers: int, n_kv_heads: int, measure_mass: bool) -> None:
        self.shape = (batch_size, n_layers, n_kv_heads)
        self.measure_mass = measure_mass
        self._reset()

    def _reset(self) -> None:
        b, n_layers, h = self.shape
        self.similarity = np.full(self.shape, np.nan, dtype=np.float32)
        self.corrected = np.zeros(self.shape, dtype=bool)
        self.attended_tokens = np.zeros(self.shape, dtype=np.int32)
        self.mass = np.full(self.shape, np.nan, dtype=np.float32) if self.measure_mass else None
        self.selected = [[[_EMPTY] * h for _ in range(n_layers)] for _ in range(b)]
        self.missed = [[[_EMPTY] * h for _ in range(n_layers)] for _ in range(b)]

    def dense(self, layer: int, n_tokens: int) -> None:
        """A dense layer attended all n_tokens tokens of every sequence."""
        self.attended_tokens[:, layer] = n_tokens
        if self.mass is not None:
            self.mass[:, layer] = 1.0

    def attended(self, layer: int, attended_tokens: np.ndarray, mass: np.ndarray | None) -> None:
        """attended_tokens (b, H) int; mass (b, H) float or None."""
        self.attended_tokens[:, layer] = attended_tokens
        if self.mass is not None and mass is not None:
            self.mass[:, layer] = mass

    def sparse(self, layer: int, similarity: np.ndarray, corrected: np.ndarray,
               plans: list[list[HeadPlan]]) -> None:
        """similarity, corrected (b, H); plans[b][h] of this step's selection with q_t."""
        self.similarity[:, layer] = similarity
        self.corrected[:, layer] = corrected
        for i, row in enumerate(plans):
            for h, plan in enumerate(row):
                self.selected[i][layer][h] = plan.selected
                self.missed[i][layer][h] = plan.missed_sorted

    def finish(self) -> StepDecisions:
        out = StepDecisions(
            similarity=self.similarity, corrected=self.corrected, selected=self.selected, missed=self.missed,
            attended_tokens=self.attended_tokens, attention_mass=self.mass,
        )
        self._reset()
        return out
