"""EPIC's LegoLink (runtime: freekv_runtime/policies/epic.py, as DerekHJH/epic runs it): the first
link_tokens of every document recomputed at every layer (main.py:196-217), every token kept, the whole
caches fetched; the shared prefill model: sim/methods/multi_context.py. Order, as published: sequential
(main.py:157-185 builds every document's cache, `old_kvs`, before the timed request; the paper describes
no overlap of loading and recompute); "ideal": layer-pipelined (sim/methods/layer_pipeline.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.methods.multi_context import MultiContextModel

__all__ = ["Epic"]


@dataclass(frozen=True)
class Epic(MultiContextModel):
    sources: ClassVar[tuple[str, ...]] = (
        "Hu et al., EPIC (ICML 2025, arXiv 2410.15332)",
        "DerekHJH/epic benchmarks_ours/evals/e2e/main.py:196-217, "
        "vllm/model_executor/models/llama.py:433-443",
    )

    def rule_shares(self, n_layers: int, document_tokens: float) -> tuple[float, np.ndarray]:
        return 1.0, np.full(n_layers, min(1.0, self.knobs.link_tokens / document_tokens))
