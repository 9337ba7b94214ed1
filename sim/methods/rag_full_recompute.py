"""rag-full-recompute: every document token recomputed at every layer (joint prefill; runtime:
freekv_runtime/policies/rag_full_recompute.py). Its document caches are never read: nothing fetched
(hit rate ignored), the whole prompt prefilled (sim/methods/multi_context.py with recompute ratio 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.methods.base import CostContext
from sim.methods.multi_context import MultiContextModel

__all__ = ["RagFullRecompute"]


@dataclass(frozen=True)
class RagFullRecompute(MultiContextModel):
    sources: ClassVar[tuple[str, ...]] = ("SamKV / CacheBlend / EPIC 'Recompute' baseline: joint prefill",)

    def rule_shares(self, n_layers: int, document_tokens: float) -> tuple[float, np.ndarray]:
        return 1.0, np.ones(n_layers)

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        return ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
