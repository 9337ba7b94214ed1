"""rag-full-recompute: every document token recomputed at every layer, every one kept.

The "Recompute" baseline of SamKV, CacheBlend (its `fr`) and EPIC: the joined prompt prefilled as one
context, i.e. dense causal attention over the concatenation. Its logits equal the dense policy's on the
joined prompt (tests/runtime/test_multi_context.py checks it).
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._multi_context import LayerPlan, MultiContextPolicy, RecomputePlan, Segments
from freekv_runtime.policies.base import AttentionShape

__all__ = ["RagFullRecomputePolicy", "FullRecomputePlan"]


class FullRecomputePlan(RecomputePlan):
    needs_document_pass = False
    def layer_plan(self, seg: Segments, layer: int, fresh_k: torch.Tensor, fresh_v: torch.Tensor,
                   cached_k: torch.Tensor, cached_v: torch.Tensor) -> LayerPlan:
        b, t = fresh_k.shape[0], seg.total_tokens
        every = torch.ones(b, t, dtype=torch.bool, device=fresh_k.device)
        return LayerPlan(recompute=every, keep=every)


class RagFullRecomputePolicy(MultiContextPolicy):
    name = "rag-full-recompute"

    def new_plan(self, shape: AttentionShape) -> RecomputePlan:
        return FullRecomputePlan()
