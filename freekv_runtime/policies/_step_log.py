"""Collects one decode step's decisions, layer by layer, into a `StepDecisions`.

Shapes: b = batch, L = layers, H = KV heads. Arrays are reset after `finish()`. A sparse layer's pages
are kept as the plan's whole (b, H, k) arrays during the step and cut into per-head arrays once, in
`finish()`.
"""

from __future__ import annotations

import numpy as np

from freekv_runtime.policies._reuse import ReusePlan
from freekv_runtime.policies.base import StepDecisions

__all__ = ["StepLog"]

_EMPTY = np.zeros(0, dtype=np.int32)


class StepLog:
    def __init__(self, batch_size: int, n_layers: int, n_kv_heads: int, measure_mass: bool) -> None:
        self.shape = (batch_size, n_layers, n_kv_heads)
        self.measure_mass = measure_mass
        self._reset()

    def _reset(self) -> None:
        self.similarity = np.full(self.shape, np.nan, dtype=np.float32)
        self.corrected = np.zeros(self.shape, dtype=bool)
        self.attended_tokens = np.zeros(self.shape, dtype=np.int32)
        self.mass = np.full(self.shape, np.nan, dtype=np.float32) if self.measure_mass else None
        # what the method moved (StepDecisions): None until a policy reports it (then derived by the recorder)
        self.fetched: np.ndarray | None = None
        self.evicted: np.ndarray | None = None
        self.refactorised: np.ndarray | None = None
        # layer -> (selected ascending, n_selected, missed ascending, n_missed), each (b, H, ...)
        self._pages: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

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

    def moved(self, layer: int, fetched_tokens: np.ndarray | None = None,
              evicted_tokens: np.ndarray | None = None, refactorised: np.ndarray | None = None) -> None:
        """What layer `layer` moved at this step, each (b, H): tokens copied host -> GPU, tokens its GPU
        cache gave up, heads whose compressed state was rebuilt. A policy that reports one of them for
        some layer reports it for all (the others stay 0 / False)."""
        reports = (("fetched", fetched_tokens, np.int32), ("evicted", evicted_tokens, np.int32),
                   ("refactorised", refactorised, bool))
        for name, value, dtype in reports:
            if value is None:
                continue
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(self.shape, dtype=dtype))
            getattr(self, name)[:, layer] = value

    def sparse(self, layer: int, similarity: np.ndarray, corrected: np.ndarray, plan: ReusePlan) -> None:
        """similarity, corrected (b, H); plan of this step's selection with q_t."""
        self.similarity[:, layer] = similarity
        self.corrected[:, layer] = corrected
        self._pages[layer] = (plan.selected, plan.n_selected, plan.missed_ascending(), plan.n_missed)

    def finish(self) -> StepDecisions:
        b, n_layers, h = self.shape
        selected = [[[_EMPTY] * h for _ in range(n_layers)] for _ in range(b)]
        missed = [[[_EMPTY] * h for _ in range(n_layers)] for _ in range(b)]
        for layer, (sel, n_sel, miss, n_miss) in self._pages.items():
            sel32, miss32 = sel.astype(np.int32), miss.astype(np.int32)  # page ids < 2**31; padding cut off
            for i in range(b):
                for kv in range(h):
                    selected[i][layer][kv] = sel32[i, kv, : n_sel[i, kv]]
                    missed[i][layer][kv] = miss32[i, kv, : n_miss[i, kv]]
        out = StepDecisions(
            similarity=self.similarity, corrected=self.corrected, selected=selected, missed=missed,
            attended_tokens=self.attended_tokens, attention_mass=self.mass,
            fetched_tokens=self.fetched, evicted_tokens=self.evicted, refactorised=self.refactorised,
        )
        self._reset()
        return out
