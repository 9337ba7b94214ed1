"""CAKE: a budgeted GPU cache whose total is split over layers by preference, re-evicted every step.

Source: Qin et al., "CAKE: Cascading and Adaptive KV Cache Eviction with Layer Preferences" (ICLR 2025,
arXiv 2503.12491) and its code (qtris123/cakekv at 351be14, a copy of the official implementation).
Assumptions:

- Memory and attention: the layers' budgets sum to budget_tokens per sparse layer (cake/cake_cache.py
  209 and 224-225: total (cache_size - window) * L split by preference, window added back); how it is split
  depends on the prompt's attention, which a trace does not carry per layer, so every sparse layer is
  priced at the mean (min(context, budget) tokens per KV head). Attention is memory bound and layers run
  in sequence, so the step's total attention time and the memory are those of the split too (up to the
  per-layer cap at the prompt, which only moves budget between layers). No host memory, no link traffic.
- Prefill, once per sparse layer (cake/model/modify_llama.py 90-123): the window's W queries against the
  prompt (matmul, mask, fp32 softmax), entropy, variance, mean + gamma var, pooling, group mean (~8 passes
  over the (Hq, W, T) probabilities), then the allocation and the top-k gather of the kept K/V
  (cake_cache.py 248-273); priced as "prefill_vote".
- Decode, per step and sparse layer once the cache is full (modify_llama.py 129-135 and
  `CakeDecodingKVCache_LayerWise.__call__` 293-323): a second q.K^T over the kept cache with an fp32
  softmax (its probabilities written and read), mean, avg-pool, group mean, top-k, and two gathers plus two
  cats that rebuild the kept K and V (the whole cache read and written twice): op "evict". "ideal": the
  attention's own probabilities scored in one pass and the new token written into the dropped slot.
- As published: the flash-attention-2 forward of modify_llama.py 28-190 (K/V repeated to every query head
  for the scoring matmul, 86-87; the cache itself per KV head) on a stock HF decoder; "ideal" charges no
  host cost and a fused attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed, OpSpec, Work
from sim.methods.decoder_layer import DecoderMethod, OwnOps, layer_split
from sim.methods.dropping import budget_attention_s, budget_memory, kept_tokens, own_kernels
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.host_costs import HostOps
from sim.methods.pyramidkv import prompt_vote_s
from traces.models import ModelSpec

__all__ = ["CAKE"]

# modify_llama.py 86-135 + 172-182: repeat_kv (2), scoring matmul, div, softmax, cast (4), transposes
# (views), flash-attention call (1)
CAKE_ATTENTION = HostOps(torch_ops=7, python_ops=8)
# cake_cache.py 293-323: mean, pool, mean, topk, 2 gathers, 2 cats
CAKE_EVICT = HostOps(torch_ops=8, python_ops=8)


@dataclass(frozen=True)
class CAKE(DecoderMethod):
    """CAKE (module docstring)."""

    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Qin et al., CAKE: Cascading and Adaptive KV Cache Eviction with Layer Preferences (ICLR 2025, "
        "arXiv 2503.12491): layer budgets by attention dispersion and shift, mean + variance indicator",
        "qtris123/cakekv cake/cake_cache.py (prefill allocation, decoding eviction), "
        "cake/model/modify_llama.py (flash-attention-2 forward with the scoring pass)",
    )

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(CAKE_ATTENTION)

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(after_attention=(OpSpec("evict", ("compute",), category="select"),))

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        return budget_attention_s(ctx, ctx.model.n_kv_heads)

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, m = ctx.cfg, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        kept = kept_tokens(ctx)
        probs = b * m.n_qo_heads * kept * 4  # fp32 probabilities over the kept cache
        full = ctx.demand.context_tokens > cfg.budget_tokens
        if ctx.as_published:
            scoring_flops = 2.0 * b * m.n_qo_heads * kept * d
            kv = b * m.n_kv_heads * kept * 2 * d * dt
            n_bytes = b * m.n_qo_heads * kept * d * dt + 4 * probs + 2 * 2 * kv
            evict = np.where(full, ctx.cost.kernel_s(scoring_flops, n_bytes, 12), 0.0)
        else:
            evict = np.where(full, ctx.cost.kernel_s(0.0, probs, 1), 0.0)
        return own_kernels(ctx, {"evict": evict}, {"evict": CAKE_EVICT})

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Dense prefill of the prompt plus each sparse layer's statistics and compression."""
        parts = ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
        n_sparse, _ = layer_split(ctx.cfg, ctx.model)
        compressed = ctx.cfg.input_tokens > ctx.cfg.budget_tokens
        vote = prompt_vote_s(ctx, self.knobs.observation_tokens, float(ctx.cfg.budget_tokens),
                             ctx.model.n_kv_heads)
        parts["prefill_vote"] = n_sparse * vote if compressed else 0.0
        return parts

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """The split total: budget tokens per KV head on every sparse layer on average; no host."""
        return budget_memory(cfg, model, model.n_kv_heads)
