"""PyramidKV: SnapKV's prefill votes with layer budgets decreasing with depth; all kept on the GPU.

Source: Cai et al., "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling"
(arXiv 2406.02069) and its code (Zefan-Cai/PyramidKV at 5d4e2e1). Assumptions:

- Layer budgets: PyramidKV's schedule for the prompt length (pyramidkv/pyramidkv_utils.py
  `PyramidKVCluster.update_kv` 205-220; traces.layer_budgets, the same function the runtime policy
  keeps, with the window W = sink + max(window, observation_tokens) as the runtime), floored at sink +
  window + 1 as the runtime. Layer l keeps min(context, budget_l) tokens per
  kept set; the GPU memory is the sum over the sparse layers (about the uniform budget's: the schedule's
  mean is the uniform share, up to integer rounding).
- Prefill, once per sparse layer (update_kv 253-275): the last observation_tokens queries attend the
  prompt, fp32 softmax, sum over the window, pooling, top-k and the gather of the kept K/V (SnapKV's
  vote, priced as sim/methods/snapkv.py prices it: "prefill_vote").
- Decode: nothing scored, selected or recalled; no host memory, no link traffic.
- As published: the flash-attention-2 forward of pyramidkv/llama_model.py (`llama_flash_attn2_forward_
  PyramidKV` 323-453): repeat_kv of K/V before the cache (379-380, so the cache and the votes are per
  query head: `group_consistent=False`; the runtime policy keeps one set per KV head, the default),
  transposes and one flash-attention call (443), on a stock HF decoder; "ideal" charges no host cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed
from sim.methods.decoder_layer import GroupOptionMethod, layer_attention_s, layer_split
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.host_costs import HostOps
from traces.layer_budgets import pyramid_layer_budgets
from traces.models import ModelSpec

__all__ = ["PyramidKV", "prompt_vote_s"]

# llama_model.py 379-443: repeat_kv (2), transposes (3 views), flash-attention call (1)
PYRAMIDKV_ATTENTION = HostOps(torch_ops=3, python_ops=6)
_VOTE_KERNELS = 10  # matmul, mask build and add, softmax, cast, sum, pool, topk, 2 gathers (253-275)


def prompt_vote_s(ctx: CostContext, window: int, kept_tokens: float, sets: int) -> float:
    """GPU seconds of one layer's SnapKV-style vote at prefill: the `window` last queries of every query
    head against every prompt key, the fp32 probabilities through mask, softmax, sum and pooling (~5
    passes), top-k, and the gather of `kept_tokens` K and V per set."""
    cfg, m = ctx.cfg, ctx.model
    b, d, dt, t = cfg.batch_size, m.head_dim, cfg.dtype_bytes, cfg.input_tokens
    w = min(window, t)
    probs = b * m.n_qo_heads * w * t * 4
    n_bytes = b * m.n_qo_heads * t * d * dt + 5 * 2 * probs + 3 * b * m.n_qo_heads * t * 4
    n_bytes += 2 * b * sets * kept_tokens * 2 * d * dt
    return float(ctx.cost.kernel_s(2.0 * b * m.n_qo_heads * w * t * d, n_bytes, _VOTE_KERNELS))


@dataclass(frozen=True)
class PyramidKV(GroupOptionMethod):
    """PyramidKV (module docstring)."""

    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Cai et al., PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling "
        "(arXiv 2406.02069): SnapKV selection with budgets decreasing linearly with depth",
        "Zefan-Cai/PyramidKV pyramidkv/pyramidkv_utils.py (PyramidKVCluster.update_kv), "
        "pyramidkv/llama_model.py (flash-attention-2 forward, K/V repeated before caching)",
    )

    def layer_budgets(self, cfg: SimConfig, model: ModelSpec) -> np.ndarray:
        """(L,) tokens each layer keeps after the prefill of cfg.input_tokens (module docstring)."""
        return np.array(pyramid_layer_budgets(
            cfg.budget_tokens, cfg.sink_tokens + max(cfg.window_tokens, self.knobs.observation_tokens),
            model.n_layers, cfg.input_tokens,
            self.knobs.beta, cfg.sink_tokens + cfg.window_tokens + 1), dtype=np.float64)

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(PYRAMIDKV_ATTENTION)

    def kept_tokens(self, ctx: CostContext) -> np.ndarray:
        """(S, L) tokens kept per set at each step and sparse layer: min(context, the layer's budget)."""
        context = ctx.demand.context_tokens.astype(np.float64)
        return np.minimum(context[:, None], self.layer_budgets(ctx.cfg, ctx.model)[None, :])

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        cfg, m = ctx.cfg, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        kept, sets = self.kept_tokens(ctx), self.sets_per_layer(m)
        sparse = ctx.cost.kernel_s(4.0 * b * m.n_qo_heads * kept * d,
                                   b * sets * kept * 2 * d * dt + 2 * b * m.n_qo_heads * d * dt, 1)
        return layer_attention_s(ctx, sparse)

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Dense prefill of the prompt plus each sparse layer's vote."""
        parts = ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
        sets, budgets = self.sets_per_layer(ctx.model), self.layer_budgets(ctx.cfg, ctx.model)
        compressed = ctx.cfg.input_tokens > ctx.cfg.budget_tokens  # update_kv 218-219
        sparse = [layer for layer in range(ctx.model.n_layers) if layer not in ctx.cfg.dense_layers]
        votes = [prompt_vote_s(ctx, self.knobs.observation_tokens, float(budgets[i]), sets) for i in sparse]
        parts["prefill_vote"] = float(sum(votes)) if compressed else 0.0
        return parts

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """Each sparse layer's budget per kept set, the whole context on dense layers; no host."""
        d, dt = model.head_dim, cfg.dtype_bytes
        ctx_tokens = cfg.max_context_tokens
        budgets = np.minimum(self.layer_budgets(cfg, model), ctx_tokens)
        sparse = [layer for layer in range(model.n_layers) if layer not in cfg.dense_layers]
        _, n_dense = layer_split(cfg, model)
        gpu = float(budgets[sparse].sum()) * self.sets_per_layer(model) * 2 * d * dt
        gpu += n_dense * ctx_tokens * 2 * model.n_kv_heads * d * dt
        return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(round(gpu)), host_per_seq_bytes=0)
