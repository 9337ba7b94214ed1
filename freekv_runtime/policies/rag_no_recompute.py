"""rag-no-recompute: the document KV caches joined as stored; only the user query is prefilled over them.

SamKV's and CacheBlend's "Reuse" baseline (prefix caching extended to non-prefix documents): no document
token is recomputed at any layer and every one is kept. The query's own tokens are prefilled over the
joined caches (as SamKV's final "incremental prefill of the user query", section 3.3). EPIC's `naive`
(DerekHJH/epic benchmarks_ours/evals/e2e/main.py:192-193) also takes the query from a cache and
recomputes only the last token; here the query is always new, so it is computed.
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._multi_context import LayerPlan, MultiContextPolicy, RecomputePlan, Segments
from freekv_runtime.policies.base import AttentionShape

__all__ = ["RagNoRecomputePolicy", "NoRecomputePlan"]


class NoRecomputePlan(RecomputePlan):
    def layer_plan(self, seg: Segments, layer: int, fresh_k: torch.Tensor, fresh_v: torch.Tensor,
                   cached_k: torch.Tensor, cached_v: torch.Tensor) -> LayerPlan:
        b, t = fresh_k.shape[0], seg.total_tokens
        none = torch.zeros(b, t, dtype=torch.bool, device=fresh_k.device)
        return LayerPlan(recompute=none, keep=~none)


class RagNoRecomputePolicy(MultiContextPolicy):
    name = "rag-no-recompute"

    def new_plan(self, shape: AttentionShape) -> RecomputePlan:
        return NoRecomputePlan()
