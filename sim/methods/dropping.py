"""Shared pieces of the dropping methods' models (StreamingLLM, H2O, SnapKV, RaaS): a budgeted GPU cache.

A dropping method keeps at most `budget_tokens` tokens (sink and window included, the budget convention)
per retained set on every sparse layer, all on the GPU; what it drops is gone for good: no host memory,
no link traffic, no recall. The runtime policies (freekv_runtime/policies/_dropping.py) keep exactly
min(context, budget_tokens) tokens per KV head (per query head when not group-consistent). Dense layers
keep and attend the whole context. The helpers here price that cache: the attention over it (a fused
flash-style kernel, or the public codes' eager attention), its bytes, and the per-step eviction of one
token once the budget is full. Each method adds its own scoring on top (H2O's accumulated attention,
RaaS's timestamps, SnapKV's prefill votes) as its own ops after the shared attention of the decoder-layer
skeleton (sim/methods/decoder_layer.py), on sparse layers only (`own_kernels`).
"""

from __future__ import annotations

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, Kernel, MemoryNeed
from sim.methods.decoder_layer import layer_attention_s, layer_split
from sim.methods.host_costs import HostOps
from traces.models import ModelSpec

__all__ = ["kept_tokens", "budget_attention_s", "eager_attention_s", "budget_memory", "attended_tokens",
           "own_kernels"]


def own_kernels(
    ctx: CostContext, seconds: dict[str, np.ndarray], host: dict[str, HostOps]
) -> dict[str, Kernel]:
    """Kernels of a dropping method's own ops: each op's `seconds` (scalar, (S,) or (S, L)) on sparse
    layers, 0 on dense ones; as published, each op's HostOps `host[op]` wherever that op does work."""
    dense = ctx.demand.dense_layer[None, :]
    own = {op: np.where(dense, 0.0, ctx.full(s)) for op, s in seconds.items()}
    if not ctx.as_published:
        return {op: Kernel(s) for op, s in own.items()}
    sw = ctx.software
    assert sw is not None
    return {op: Kernel(s, host_s=np.where(s > 0, host[op].seconds(sw), 0.0)) for op, s in own.items()}


def kept_tokens(ctx: CostContext) -> np.ndarray:
    """(S,) float64 tokens kept (and attended) per retained set at each step: min(context, budget)."""
    return np.minimum(ctx.demand.context_tokens, ctx.cfg.budget_tokens).astype(np.float64)


def attended_tokens(ctx: CostContext) -> np.ndarray:
    """(S, L) float64 tokens attended per set: the kept ones on sparse layers, the context on dense ones."""
    context = ctx.demand.context_tokens.astype(np.float64)
    return np.where(ctx.demand.dense_layer[None, :], context[:, None], kept_tokens(ctx)[:, None])


def budget_attention_s(ctx: CostContext, sets: int, kept: np.ndarray | None = None) -> np.ndarray:
    """(S, L) fused decode attention: sparse layers over the kept tokens (`kept` (S,), default
    `kept_tokens`) of `sets` retained sets per sequence and layer (each read once: KV heads if
    group-consistent, else query heads), dense layers over the whole context (sim.cost_model.attention_s)."""
    cfg, cost, m = ctx.cfg, ctx.cost, ctx.model
    b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
    kept = kept_tokens(ctx) if kept is None else np.asarray(kept, dtype=np.float64)
    sparse = cost.kernel_s(
        4.0 * b * m.n_qo_heads * kept * d,
        b * sets * kept * 2 * d * dt + 2 * b * m.n_qo_heads * d * dt,
        1,
    )
    return layer_attention_s(ctx, sparse)


def eager_attention_s(ctx: CostContext, tokens: np.ndarray, sets: int) -> np.ndarray:
    """GPU seconds of an eager HF attention over `tokens` (any shape, e.g. (S, L)) per set, as the public
    StreamingLLM and H2O codes run it (mit-han-lab/streaming-llm streaming_llm/pos_shift/modify_llama.py
    107-131; FMInference/H2O h2o_hf/utils_real_drop/modify_llama.py 484-511): repeat_kv copies K and V
    to every query head (2 kernels: read `sets` sets, write n_qo), QK^T matmul writing the scores,
    scale, mask add, fp32 softmax and its cast back (4 passes over the scores, fp32), PV matmul
    reading the scores and the repeated V: 8 kernels."""
    cfg, cost, m = ctx.cfg, ctx.cost, ctx.model
    b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
    tokens = np.asarray(tokens, dtype=np.float64)
    kv = tokens * 2 * d * dt  # K and V of one head
    repeat = b * (sets + m.n_qo_heads) * kv
    scores = b * m.n_qo_heads * tokens * 4
    matmuls = b * m.n_qo_heads * kv + 2 * scores
    flops = 4.0 * b * m.n_qo_heads * tokens * d
    return cost.kernel_s(flops, repeat + matmuls + 4 * 2 * scores, 8)


def budget_memory(
    cfg: SimConfig, model: ModelSpec, sets: int, extra_per_set_bytes: float = 0.0, kept: int | None = None
) -> MemoryNeed:
    """GPU bytes per sequence: `kept` tokens (default min(context, budget)) of K and V (+
    `extra_per_set_bytes` of the method's own state) per retained set on sparse layers, the whole context
    on dense layers; no host."""
    d, dt = model.head_dim, cfg.dtype_bytes
    ctx_tokens = cfg.max_context_tokens
    n_sparse, n_dense = layer_split(cfg, model)
    kept = min(cfg.budget_tokens, ctx_tokens) if kept is None else kept
    per_set = kept * 2 * d * dt + extra_per_set_bytes
    dense_bytes = n_dense * ctx_tokens * 2 * model.n_kv_heads * d * dt
    gpu = n_sparse * sets * per_set + dense_bytes
    return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(round(gpu)), host_per_seq_bytes=0)
