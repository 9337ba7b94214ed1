"""CacheBlend (runtime: freekv_runtime/policies/cacheblend.py, as YaoJiayi/CacheBlend's vllm_blend runs
it): every token recomputed up to and at the check layer (llama.py:300, check_layers [1]), then
recompute_ratio of the tokens (xformers.py:209-211) at every later layer (x ratio_decay per layer for the
paper's gradual filtering); every token kept, the whole caches fetched. The deviation check (a squared
difference of the values at the check layer, xformers.py:210) is priced as one elementwise kernel over
the check layer's values; the shared prefill model: sim/methods/multi_context.py.

Order of fetch and recompute, as published: layer-pipelined (sim/methods/layer_pipeline.py), as CacheBlend
runs in LMCache: LMCache/LMCache lmcache/v1/compute/blend/blender.py:139-142 (b7dc975) fetches layer l+1
while computing layer l (its blender recomputes every token to check layer 1 and the top 15% by key
deviation after it, blender.py:45-46, 86-97; our rule follows YaoJiayi's value deviation); the paper's
loading controller sizes the recompute to hide under the fetch. YaoJiayi/CacheBlend itself keeps the
caches on the GPU (example/blend.py:79 sets `old_kvs` before the blended generate at 97) and has no
fetch to order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.methods.base import CostContext
from sim.methods.multi_context import MultiContextModel

__all__ = ["CacheBlend"]


@dataclass(frozen=True)
class CacheBlend(MultiContextModel):
    published_order: ClassVar[str] = "layer-pipelined"
    sources: ClassVar[tuple[str, ...]] = (
        "Yao et al., CacheBlend (EuroSys 2025, arXiv 2405.16444)",
        "YaoJiayi/CacheBlend vllm_blend/vllm/attention/backends/xformers.py:203-245, "
        "vllm_blend/vllm/model_executor/models/llama.py:296-376",
        "LMCache/LMCache lmcache/v1/compute/blend/blender.py:121-147 (b7dc975), layerwise fetch + blend",
    )

    def rule_shares(self, n_layers: int, document_tokens: float) -> tuple[float, np.ndarray]:
        c, r, decay = self.knobs.check_layer, self.knobs.recompute_ratio, self.knobs.ratio_decay
        layers = np.arange(n_layers)
        return 1.0, np.where(layers <= c, 1.0, r * decay ** np.maximum(0, layers - c - 1))

    def selection_s(self, ctx: CostContext, k: int, n: float) -> dict[str, float]:
        m, cfg = ctx.model, ctx.cfg
        tokens = cfg.batch_size * k * n
        n_bytes = 2 * tokens * m.n_kv_heads * m.head_dim * cfg.dtype_bytes  # fresh and cached values read
        return {"prefill_deviation": float(ctx.cost.kernel_s(3.0 * tokens * m.n_kv_heads * m.head_dim,
                                                             n_bytes, 2))}
