"""rag-no-recompute: the document caches joined as stored (runtime: freekv_runtime/policies/
rag_no_recompute.py). Nothing recomputed but the query, every document token kept: the fetch of the
whole caches and the query's prefill over them (sim/methods/multi_context.py); as published the fetch
precedes the prefill (sequential), "ideal" pipelines them layer by layer (sim/methods/layer_pipeline.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.methods.multi_context import MultiContextModel

__all__ = ["RagNoRecompute"]


@dataclass(frozen=True)
class RagNoRecompute(MultiContextModel):
    sources: ClassVar[tuple[str, ...]] = (
        "SamKV / CacheBlend 'Reuse' baseline: document caches joined as stored",)

    def rule_shares(self, n_layers: int, document_tokens: float) -> tuple[float, np.ndarray]:
        return 1.0, np.zeros(n_layers)
