"""TOVA (Token Omission Via Attention): each step, drop the token the current query attends least.

Oren, Hassid, Yarden, Adi, Schwartz, "Transformers are Multi-State RNNs" (arXiv 2401.06104); public code
schwartz-lab-NLP/TOVA (read at 9c7d09b), what this policy follows:
- after every attention of a layer (prefill and decode: src/convert_models/llama_custom.py:112-113 calls
  `TOVACache.reduce` with the layer's fp32 softmax probabilities, :91), when the layer holds more than
  `cache_size` keys, the last query's probabilities are averaged over ALL query heads of the layer
  (src/tova_cache.py:44, `mean(attn_weights[:, :, -1, :], dim=1)`) and the top `cache_size` keys are kept
  for every KV head alike (:45-51: one kept set per layer, gathered for each KV head).

Here (freekv_runtime.policies._dropping): the decode loop appends the new token, and while a layer holds
more than budget_tokens it drops the lowest-scoring unprotected tokens by the probabilities the previous
attention of that layer gave (the last prompt query's after prefill), averaged over the layer's query
heads; then it attends and keeps this step's probabilities for the next drop. That is TOVA's reduce
after each attention with cache_size = budget_tokens - 1 (the budget counts the token appended next): the
kept set after step t is the top budget - 1 of what step t attended, by step t's attention, exactly as
`reduce` keeps it. Protected: sink_tokens [0, S) and the newest window_tokens; TOVA protects none, so
page_size 1, sink_tokens 0 and window_tokens 1 (the token just appended) is TOVA as published; larger
sinks and windows are the variant the FreeKV paper's baselines would use. Ties go to the older token
(a stable sort; TOVA's torch.topk breaks them arbitrarily).

Trace: as every dropping policy (_dropping.py): nothing fetched, `evicted_tokens` the tokens dropped.
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._dropping import DroppingState, prompt_attention
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.timing import OpTimer

__all__ = ["TOVAPolicy", "TOVAState"]


class TOVAState(DroppingState):
    """score[l]: (b, N) float32, layer l's last attention probabilities averaged over its query heads."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.score: list[torch.Tensor | None] = [None] * self.shape.n_layers

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        last = prompt_attention(q, keys, first_query=q.shape[2] - 1)  # (b, Hkv, T): summed over G heads
        self.score[layer] = last.sum(dim=1) / q.shape[1]

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        score = self.score[layer]
        assert score is not None
        if score.shape[1] < n_tokens:  # the new token has not been attended yet (it is in the window)
            score = torch.cat([score, score.new_zeros(score.shape[0], n_tokens - score.shape[1])], dim=1)
        return self.drop_lowest(keep, score[:, None].expand_as(keep), n_tokens)

    def _observe(self, layer: int, probs: torch.Tensor, keep: torch.Tensor) -> None:
        self.score[layer] = probs.mean(dim=(1, 2))  # (b, Hkv, G, N) -> (b, N): every query head of the layer


class TOVAPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> TOVAState:
        return TOVAState(self.config, shape, batch_size, torch.device(device), dtype, timer)
