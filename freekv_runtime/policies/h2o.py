"""H2O (Heavy-Hitter Oracle): keep the tokens with the largest accumulated attention plus the recent ones.

Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models"
(NeurIPS 2023, arXiv 2306.14048); public code FMInference/H2O, h2o_hf/utils_real_drop/modify_llama.py
(H2OKVCache_LayerWise: `_update_hh_score` 317-326 SUMS the attention each key received over every query
so far; 271-285 keep the top hh_size of those sums outside the recent window). The reference library
differs: NVIDIA/kvpress kvpress/presses/observed_attention_press.py:44-48 sums over the prompt's queries
and then DIVIDES by the number of queries that saw each key (n_tokens - i under the causal mask), then
averages over the group. Summing favours old tokens (they have been seen by more queries); dividing
removes that bias. Both are here: knob `normalise` (false: H2O's code, the default; true: kvpress's).

Score of a token (per KV head): the attention probability it received, summed over every query so far
(all prompt queries under the causal mask, then every decode query) and over the group's query heads
(the GQA group shares one kept set); with `normalise`, divided by the number of those queries that saw
it (prompt queries at or after it, then one per decode step while it is kept). Dropped tokens stop
accumulating. When a KV head holds more than budget_tokens tokens, the lowest-scoring tokens outside the
sink and the recent window are dropped (ties: the older token goes first), so budget = sink + recent
window + heavy hitters.

Without a recent window H2O degenerates: the summed scores pin the oldest tokens, the newest tokens are
dropped as soon as they arrive, and the model loses its local context (measured on smollm2-135m: answers
such as "* * *"). The paper's setting splits the budget half heavy hitters, half recent; `config_notes`
warns when window_tokens is under a quarter of the budget, and the note reaches the trace metadata
(`meta.extra["policy_notes"]`), summary.json and the `dse trace` output.

Configuration (RuntimeConfig; `config.knobs` = traces.catalogue.dropping.H2OKnobs: `normalise`):
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
    """score[l]: (b, Hkv, N) float32 accumulated attention of layer l's tokens; seen[l]: (N,) float32 the
    queries that saw each token (used when the `normalise` knob is set)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.normalise = bool(self.config.knobs.normalise)
        self.score: list[torch.Tensor | None] = [None] * self.shape.n_layers
        self.seen: list[torch.Tensor | None] = [None] * self.shape.n_layers

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        t = keys.shape[2]
        self.score[layer] = prompt_attention(q, keys)
        # under the causal mask prompt token i is seen by the T - i queries at or after it
        self.seen[layer] = torch.arange(t, 0, -1, device=keys.device, dtype=torch.float32).expand(
            *keys.shape[:2], t).clone()

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        score = self._scores(layer, n_tokens)
        if self.normalise:
            score = score / self._seen(layer, n_tokens).clamp(min=1.0)
        return self.drop_lowest(keep, score, n_tokens)

    def _observe(self, layer: int, probs: torch.Tensor, keep: torch.Tensor) -> None:
        self.score[layer] = self._scores(layer, keep.shape[2]) + probs.sum(dim=2)
        self.seen[layer] = self._seen(layer, keep.shape[2]) + keep.float()

    def _seen(self, layer: int, n_tokens: int) -> torch.Tensor:
        seen = self.seen[layer]
        assert seen is not None
        if seen.shape[2] < n_tokens:  # the new token has not been seen yet
            seen = torch.cat([seen, seen.new_zeros(*seen.shape[:2], n_tokens - seen.shape[2])], dim=2)
            self.seen[layer] = seen
        return seen

    def _scores(self, layer: int, n_tokens: int) -> torch.Tensor:
        score = self.score[layer]
        assert score is not None
        if score.shape[2] < n_tokens:  # the new token has received no attention yet
            score = torch.cat([score, score.new_zeros(*score.shape[:2], n_tokens - score.shape[2])], dim=2)
            self.score[layer] = score
        return score


class H2OPolicy(KVPolicy):
    def config_notes(self) -> list[str]:
        c = self.config
        if c.window_tokens * 4 >= c.budget_tokens:
            return []
        return [f"h2o: window_tokens={c.window_tokens} is under a quarter of "
                f"budget_tokens={c.budget_tokens}; "
                "H2O without a recent window degenerates (summed scores pin the oldest tokens and the newest "
                "are dropped on arrival; on smollm2-135m it answered '* * *'). The paper splits the budget "
                "half heavy hitters, half recent: raise --window-tokens"]

    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> H2OState:
        return H2OState(self.config, shape, batch_size, torch.device(device), dtype, timer)
