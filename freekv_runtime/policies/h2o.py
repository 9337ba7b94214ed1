"""H2O (Heavy-Hitter Oracle): keep the tokens with the largest accumulated attention plus the recent ones.

Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models"
(NeurIPS 2023, arXiv 2306.14048); public code FMInference/H2O, h2o_hf/utils_real_drop/
modify_llama.py (H2OKVCache_LayerWise: hh_score = attention summed over the queries seen so far, evict
the lowest outside the recent window). kvpress: NVIDIA/kvpress kvpress/presses/observed_attention_press.py
(the prefill-time form: attention summed over the prompt's queries).

Score of a token (per KV head): the attention probability it received, summed over every query so far
(all prompt queries under the causal mask, then every decode query) and over the group's query heads
(the GQA group shares one kept set). Dropped tokens stop accumulating. When a KV head holds more than
budget_tokens tokens, the lowest-scoring tokens outside the sink and the recent window are dropped
(ties: the older token goes first), so budget = sink + recent window + heavy hitters.

Configuration (RuntimeConfig; no runtime knobs of its own):
- budget_tokens: tokens per KV head, sink and window included; heavy hitters = budget - sink - window;
- window_tokens: the recent tokens always kept (H2O's "recent" part; the paper splits the budget half
  heavy, half recent);
- sink_tokens: first tokens always kept (0 = the paper's H2O; the FreeKV paper's baselines use a sink);
- dense_layers: layers that keep everything (FreeKV baseline setup: layer 0).
The attention probabilities come from the decode attention itself (`_dropping.masked_decode`) and, for the
prompt, from one extra pass over the prompt's causal attention per sparse layer.
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._dropping import DroppingState, prompt_attention
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.timing import OpTimer

__all__ = ["H2OPolicy", "H2OState"]


class H2OState(DroppingState):
    """score[l]: (b, Hkv, N) float32 accumulated attention of layer l's tokens."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.score: list[torch.Tensor | None] = [None] * self.shape.n_layers

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        self.score[layer] = prompt_attention(q, keys)

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        return self.drop_lowest(keep, self._scores(layer, n_tokens), n_tokens)

    def _observe(self, layer: int, probs: torch.Tensor, keep: torch.Tensor) -> None:
        self.score[layer] = self._scores(layer, keep.shape[2]) + probs.sum(dim=2)

    def _scores(self, layer: int, n_tokens: int) -> torch.Tensor:
        score = self.score[layer]
        assert score is not None
        if score.shape[2] < n_tokens:  # the new token has received no attention yet
            score = torch.cat([score, score.new_zeros(*score.shape[:2], n_tokens - score.shape[2])], dim=2)
            self.score[layer] = score
        return score


class H2OPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> H2OState:
        return H2OState(self.config, shape, batch_size, torch.device(device), dtype, timer)
