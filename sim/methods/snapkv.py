"""SnapKV: the prompt's last queries vote, once at prefill, for the prompt tokens to keep on the GPU.

Source: Li et al., "SnapKV: LLM Knows What You are Looking for Before Generation" (NeurIPS 2024, arXiv
2404.14469) and its code (FasterDecoding/SnapKV). Assumptions (docs/methods.md has the discussion):

- Prefill, once per sparse layer (snapkv/monkeypatch/snapkv_utils.py `SnapKVCluster.update_kv` 38-70):
  the last `observation_tokens` prompt queries (window_size, 64 in the runtime policy, 32 in
  `init_snapkv` 72-78) attend the whole prompt (matmul 45, causal mask on the window 46-52, fp32 softmax
  54), their probabilities are summed over the window (55), pooled along the tokens (avg/max pool1d,
  57-59), the top budget - window tokens per head kept (62) and gathered with the window into the new
  cache (63-69). Priced as extra prefill kernels ("prefill_vote").
- Decode: nothing is scored, selected or recalled; all on the GPU, no host memory, no link traffic.
  Each KV head keeps min(context, budget_tokens) tokens (the runtime policy freekv_runtime/policies/
  snapkv.py keeps generated tokens while in the recent window, so the budget is never exceeded; the
  public code instead lets generated tokens grow the cache, llama_hijack_4_37.py 84-90: the same for a
  decode no longer than the window). The shared budgeted cache of sim/methods/dropping.py; dropping a
  generated token that left the window overwrites its slot (no cost).
- `selection` per-query-head by default: the public code repeats K and V to every query head before the
  vote and caches them so (llama_hijack_4_37.py 75-77 "[SnapKV] move to ahead"): G kept sets per KV head,
  G times the memory and attention traffic of a GQA group (priced as the code stores them, not as the
  runtime policy's union). `selection=per-kv-head`: one kept set per KV head (kvpress's pooled rule).

As published: the public code patches HF's flash-attention-2 Llama forward (llama_hijack_4_37.py
`llama_flash_attn2_forward` 19-140): per step and layer a stock HF decoder with repeat_kv of the new
K/V (76-77, 2 kernels), the cache update (counted in the HF decoder recipe), three transposes (views)
and one flash-attention call; "ideal" charges no host cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed
from sim.methods.decoder_layer import GroupOptionMethod, layer_split
from sim.methods.dropping import budget_attention_s, budget_memory
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.host_costs import HostOps
from traces.models import ModelSpec

__all__ = ["SnapKV"]

# llama_hijack_4_37.py 76-130: repeat_kv (2), transposes (3 views), flash-attention call (1)
SNAPKV_ATTENTION = HostOps(torch_ops=3, python_ops=6)
_VOTE_KERNELS = 10  # matmul, mask build and add, softmax, cast, sum, pool, topk, 2 gathers (38-70)


@dataclass(frozen=True)
class SnapKV(GroupOptionMethod):
    """SnapKV (module docstring). observation_tokens: prompt queries that vote (SnapKV's window_size)."""

    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Li et al., SnapKV: LLM Knows What You are Looking for Before Generation (NeurIPS 2024, arXiv "
        "2404.14469): observation-window voting with pooling at prefill, fixed kept set",
        "FasterDecoding/SnapKV snapkv/monkeypatch/snapkv_utils.py (SnapKVCluster.update_kv), "
        "snapkv/monkeypatch/llama_hijack_4_37.py (flash-attention-2 forward, K/V repeated before caching)",
    )

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(SNAPKV_ATTENTION)

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        return budget_attention_s(ctx, self.sets_per_layer(ctx.model))

    def vote_s(self, ctx: CostContext) -> float:
        """GPU seconds of one sparse layer's vote at prefill (module docstring): the window's queries
        against every prompt key of every query head, the fp32 probabilities written and read by the mask,
        softmax, sum and pooling (~5 passes), top-k, and the gather of the kept K and V."""
        cfg, m = ctx.cfg, ctx.model
        b, d, dt, t = cfg.batch_size, m.head_dim, cfg.dtype_bytes, cfg.input_tokens
        if t <= cfg.budget_tokens:  # the prompt fits: nothing to vote on (snapkv_utils.py 42-43)
            return 0.0
        w = min(self.knobs.observation_tokens, t)
        sets = self.sets_per_layer(m)
        probs = b * m.n_qo_heads * w * t * 4
        n_bytes = b * m.n_qo_heads * t * d * dt + 5 * 2 * probs + 3 * b * m.n_qo_heads * t * 4
        n_bytes += 2 * b * sets * cfg.budget_tokens * 2 * d * dt  # gather of the kept K and V
        return float(ctx.cost.kernel_s(2.0 * b * m.n_qo_heads * w * t * d, n_bytes, _VOTE_KERNELS))

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Dense prefill of the prompt plus the vote of every sparse layer."""
        parts = ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
        n_sparse, _ = layer_split(ctx.cfg, ctx.model)
        parts["prefill_vote"] = n_sparse * self.vote_s(ctx)
        return parts

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """Budget tokens per kept set on sparse layers, the whole context on dense layers; no host."""
        return budget_memory(cfg, model, self.sets_per_layer(model))
