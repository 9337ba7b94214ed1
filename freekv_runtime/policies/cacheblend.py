"""CacheBlend: every token recomputed up to a check layer, then the tokens whose values deviate most.

Source: Yao et al., "CacheBlend: Fast Large Language Model Serving for RAG with Cached Knowledge Fusion"
(EuroSys 2025, arXiv 2405.16444); code YaoJiayi/CacheBlend (vllm_blend). As its code runs:
- layers before the check layer run a full prefill (status 0) and the check layer recomputes every
  token too (status 1: fresh K/V of all tokens attended and written; vllm_blend/vllm/model_executor/
  models/llama.py:348-356 statuses, vllm/attention/backends/xformers.py:203-217 and 268-272);
- at the check layer (check_layers [1], llama.py:300) the deviation of each non-query token is the
  squared L2 distance between its fresh and cached values summed over heads (xformers.py:210,
  `temp_diff`), and the top int((total - suffix) x recomp_ratio) tokens are kept for recompute
  (xformers.py:209-211), with the query (suffix) always (212-215);
- after the check layer only those tokens' hidden states go on (llama.py:265 `residual[imp_indices]`,
  376 positions) and their fresh K/V overwrite the cached ones (xformers.py:240-245);
- recomp_ratio 0.16 by default (llama.py:303), 0.18 in the examples (example/blend_wikimqa.py:107,
  blend_samsum.py:108);
- nothing is dropped: every token stays attended.
`ratio_decay` < 1 gives the paper's gradual filtering (section 4.3: each later layer re-selects a shrinking
share by its own deviation among the previous set), which the public code does not run (one check layer).
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._multi_context import LayerPlan, MultiContextPolicy, RecomputePlan, Segments
from freekv_runtime.policies.base import AttentionShape

__all__ = ["CacheBlendPolicy", "CacheBlendPlan", "value_deviation"]


def value_deviation(fresh_v: torch.Tensor, cached_v: torch.Tensor) -> torch.Tensor:
    """(b, Hkv, T, d) x 2 -> (b, T): sum over heads and channels of (v_fresh - v_cached)^2
    (xformers.py:210)."""
    return ((fresh_v.float() - cached_v.float()) ** 2).sum(dim=(1, 3))


class CacheBlendPlan(RecomputePlan):
    def __init__(self, recompute_ratio: float, check_layer: int, ratio_decay: float) -> None:
        self.ratio, self.check_layer, self.decay = recompute_ratio, check_layer, ratio_decay
        self.selected: torch.Tensor | None = None  # (b, T) after the check layer

    def layer_plan(self, seg: Segments, layer: int, fresh_k: torch.Tensor, fresh_v: torch.Tensor,
                   cached_k: torch.Tensor, cached_v: torch.Tensor) -> LayerPlan:
        b, t, device = fresh_k.shape[0], seg.total_tokens, fresh_k.device
        every = torch.ones(b, t, dtype=torch.bool, device=device)
        if layer < self.check_layer:
            return LayerPlan(recompute=every, keep=every)
        if layer == self.check_layer or (self.decay < 1.0 and self.selected is not None):
            n_candidates = seg.query_start  # prefix + documents: the code's total_len - last_len
            ratio = self.ratio * self.decay ** max(0, layer - self.check_layer)
            n_pick = int(n_candidates * ratio)
            deviation = value_deviation(fresh_v, cached_v)[:, :n_candidates]  # (b, n)
            if layer > self.check_layer:  # gradual filtering: only among the previous set
                assert self.selected is not None
                deviation = deviation.masked_fill(~self.selected[:, :n_candidates], float("-inf"))
                n_pick = min(n_pick, int(self.selected[:, :n_candidates].sum(-1).min()))
            chosen = torch.zeros(b, t, dtype=torch.bool, device=device)
            if n_pick > 0:
                top = torch.topk(deviation, k=n_pick, dim=-1).indices  # (b, n_pick)
                chosen.scatter_(1, top, True)
            self.selected = chosen
            if layer == self.check_layer:  # the check layer itself recomputes every token
                return LayerPlan(recompute=every, keep=every)
        assert self.selected is not None
        return LayerPlan(recompute=self.selected, keep=every)


class CacheBlendPolicy(MultiContextPolicy):
    name = "cacheblend"

    def new_plan(self, shape: AttentionShape) -> RecomputePlan:
        k = self.config.knobs
        return CacheBlendPlan(k.recompute_ratio, k.check_layer, k.ratio_decay)
