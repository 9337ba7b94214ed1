"""EPIC's LegoLink: the first `link_tokens` tokens of every document recomputed at every layer.

Source: Hu et al., "EPIC: Efficient Position-Independent Context Caching for Serving Large Language
Models" (ICML 2025, arXiv 2410.15332); code DerekHJH/epic. As its code runs:
- the recomputed positions (`kvlink-N`, benchmarks_ours/evals/e2e/main.py:196-217): for every document
  (start_offset[1:-1]) its first N tokens, and the whole last segment (the query); the system prompt
  (token_ids[0]) is not recomputed (it sits at its own positions);
- those positions are the only hidden states carried from layer 0 on (vllm/model_executor/models/
  llama.py:433-443: imp_indices = kvlink, hidden states and positions cut to them), and at every layer
  their fresh K/V overwrite the cached ones (vllm/attention/backends/xformers.py:506-525);
- nothing is dropped: every document token stays attended.
Difference: EPIC prefills each document with its own BOS token and keeps it (main.py:165-178); here a
document starts with its first text token (SmolLM2's tokenizer adds no BOS), so the first tokens recomputed
are the document's own first tokens, the ones that became attention sinks when it was prefilled alone.
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._multi_context import LayerPlan, MultiContextPolicy, RecomputePlan, Segments
from freekv_runtime.policies.base import AttentionShape

__all__ = ["EpicPolicy", "EpicPlan", "link_positions"]


def link_positions(seg: Segments, link_tokens: int, device: torch.device) -> torch.Tensor:
    """(T,) bool: the first `link_tokens` tokens of every document (main.py:212-217)."""
    mask = torch.zeros(seg.total_tokens, dtype=torch.bool, device=device)
    for start, end in zip(seg.starts, seg.ends, strict=True):
        mask[start:min(end, start + link_tokens)] = True
    return mask


class EpicPlan(RecomputePlan):
    def __init__(self, link_tokens: int) -> None:
        self.link_tokens = link_tokens

    def layer_plan(self, seg: Segments, layer: int, fresh_k: torch.Tensor, fresh_v: torch.Tensor,
                   cached_k: torch.Tensor, cached_v: torch.Tensor) -> LayerPlan:
        b = fresh_k.shape[0]
        links = link_positions(seg, self.link_tokens, fresh_k.device)[None].expand(b, -1)
        return LayerPlan(recompute=links, keep=torch.ones_like(links))


class EpicPolicy(MultiContextPolicy):
    name = "epic"

    def new_plan(self, shape: AttentionShape) -> RecomputePlan:
        return EpicPlan(self.config.knobs.link_tokens)
