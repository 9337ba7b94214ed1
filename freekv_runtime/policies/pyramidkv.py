"""PyramidKV: SnapKV's prompt votes, with layer budgets that decrease with depth (a pyramid).

Cai et al., "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling" (arXiv
2406.02069); public code Zefan-Cai/PyramidKV (read at 5d4e2e1), what this policy follows:
- selection per layer is SnapKV's (pyramidkv/pyramidkv_utils.py `PyramidKVCluster.update_kv` 221-275):
  the last `observation_tokens` prompt queries (window_size) attend the prompt (causal mask on the
  window, fp32 softmax), their probabilities are summed over the window, pooled along the tokens
  (avg_pool1d / max_pool1d, kernel_size, padding kernel_size // 2, stride 1), the top-k prefix tokens per
  head kept with the window itself;
- the k of each layer is PyramidKV's schedule (update_kv 205-220; traces.layer_budgets
  `pyramid_layer_budgets`): the first layer gets about twice the uniform share, the last 1/beta of it,
  linearly in between, the same total as SnapKV; prompts shorter than the budget are not compressed and
  prompts shorter than 2 (budget - window) get SnapKV's uniform budget;
- defaults are its LongBench runs' (run_longbench.py 220-237: window_sizes 8, kernel_sizes 7, pooling
  maxpool) and the cluster's beta 20 (pyramidkv_utils.py 174).

Here (freekv_runtime.policies._layer_budget): the votes are computed per KV head at prefill (SnapKV's
`snap_votes`: the group's query heads summed, one kept set per KV head; the public code repeats K/V to
every query head first, pyramidkv/llama_model.py 379-380, and selects per query head) and the layer
budgets from the prompt length; at decode a sparse layer drops, while it holds more than its own budget,
generated tokens that left the recent window first, then the prefix tokens with the fewest votes (the
observation window last), so its kept set is exactly the prefill-time compression's. Budget adaptation as
SnapKV's (freekv_runtime/policies/snapkv.py): generated tokens are kept while in the recent window, each
layer's budget is never exceeded, sink_tokens and window_tokens are always kept. The schedule's window W
(what every layer keeps besides its selection) is sink_tokens + max(window_tokens, observation_tokens):
PyramidKV's own window is its observation window, which it keeps; here the sink and the recent window are
kept too, so the pyramid spreads budget - W selected tokens (with no sink and window_tokens <=
observation_tokens, PyramidKV's numbers). Layers whose pyramid budget exceeds budget_tokens attend more
than the uniform budget by the method's definition (`unbudgeted_heads`); the total over the layers is the
uniform one (up to the schedule's integer rounding).

Configuration: RuntimeConfig budget_tokens (PyramidKV's max_capacity_prompt), sink_tokens, window_tokens,
dense_layers; `config.knobs` (traces.catalogue.dropping.PyramidKVKnobs): observation_tokens, kernel_size,
pooling, beta.
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._layer_budget import LayerBudgetState
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.policies.snapkv import snap_votes
from freekv_runtime.timing import OpTimer
from traces.layer_budgets import pyramid_layer_budgets

__all__ = ["PyramidKVPolicy", "PyramidKVState"]

class PyramidKVState(LayerBudgetState):
    """votes[l] SnapKV's pooled votes, layer_budget[l] PyramidKV's schedule for the prompt's length."""

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        knobs = self.config.knobs
        self.votes[layer] = snap_votes(q, keys, knobs.observation_tokens, knobs.kernel_size, knobs.pooling)
        budgets = pyramid_layer_budgets(self.config.budget_tokens, self.kept_tokens(knobs.observation_tokens),
                                        self.shape.n_layers, keys.shape[2], knobs.beta, self.floor_tokens())
        budget = budgets[layer]
        self.layer_budget[layer] = torch.full((self.b,), budget, dtype=torch.int64, device=self.device)


class PyramidKVPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> PyramidKVState:
        return PyramidKVState(self.config, shape, batch_size, torch.device(device), dtype, timer)
