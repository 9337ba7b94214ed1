"""RazorAttention: retrieval heads keep their whole KV cache, the other heads only sink + recent window.

Source: Tang et al., "RazorAttention: Efficient KV Cache Compression Through Retrieval Heads"
(arXiv 2407.15891). Assumptions (docs/methods.md has the discussion):

- Static, decided once after prefill: a fraction `retrieval_fraction` of the KV heads of every layer
  (echo and induction heads; 0.15 in the FreeKV paper's setup, its "sparsity 0.15") keeps the full
  KV cache; every other KV head keeps `budget_tokens` tokens (the sink plus the most recent tokens)
  and one compensation token that summarises the dropped ones. Dropped tokens are gone for good.
- All on the GPU: no selection, no recall, no host memory, no link traffic.
- Per step and layer: one attention pass; retrieval heads attend the whole context, the others
  budget + 1 tokens. The attention kernel is memory bound, so its time follows the bytes read:
  per KV head on average f * context + (1 - f) * (budget + 1) tokens.
- Memory: exactly what is kept: f * context + (1 - f) * (budget + 1) tokens per KV head and layer.

As published: RazorAttention has no public code; the FreeKV paper's re-implementation (rooikeee/FreeKV
accuracy/kvc/patch/llama.py `llama_dyn_attention_forward` 39-260, a DuoAttention-style split of the KV
heads into full and streaming ones inside a stock HF eager decoder) is what is priced: the HF decoder
(sim/methods/eager.py HF_*) with its attention replaced by head slicing (~6 views, 115-129), torch.cat of
the new K/V onto the full and the streaming caches (4 kernels, 176-196), sink/recent re-slicing and cat
(~2), two flash-attention calls (2, 219-254) and the output cat (1): ~9 kernel-launching ops.
"ideal" charges no host cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.errors import SimInputError
from sim.methods.base import CostContext, Kernel, MemoryNeed, Method, OpSpec, Work
from sim.methods.dense import DENSE_LAYER_OPS
from sim.methods.eager import decoder_host_s, with_host
from sim.methods.host_costs import HostOps
from traces.models import ModelSpec

__all__ = ["RazorAttention", "RAZOR_ATTENTION"]

# accuracy/kvc/patch/llama.py 115-254 (module docstring)
RAZOR_ATTENTION = HostOps(torch_ops=9, python_ops=6)


@dataclass(frozen=True)
class RazorAttention(Method):
    """RazorAttention (module docstring). retrieval_fraction: share of KV heads that keep everything."""

    retrieval_fraction: float = 0.15

    name: ClassVar[str] = "razorattention"
    replays: ClassVar[str | None] = "razorattention"
    summary: ClassVar[str] = "retrieval heads keep full KV, other heads sink + window (static drop)"
    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Tang et al., RazorAttention: Efficient KV Cache Compression Through Retrieval Heads "
        "(arXiv 2407.15891): full cache for echo/induction heads, sink + window + compensation token "
        "for the rest",
        "Liu et al., FreeKV (arXiv 2505.13109), evaluation setup: RazorAttention with sparsity 0.15",
    )

    def __post_init__(self) -> None:
        f = self.retrieval_fraction
        if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 <= f <= 1:
            raise SimInputError(f"method_options.retrieval_fraction must be in [0, 1], got {f!r}")

    def template(self, ctx: CostContext) -> tuple[OpSpec, ...]:
        return DENSE_LAYER_OPS  # same layer as dense: only the attended tokens differ

    def kept_tokens(self, context: np.ndarray | int, budget_tokens: int) -> np.ndarray:
        """Tokens kept per KV head on average at `context` tokens (retrieval heads keep all)."""
        ctx = np.asarray(context, dtype=np.float64)
        f = float(self.retrieval_fraction)
        return f * ctx + (1.0 - f) * np.minimum(ctx, budget_tokens + 1)

    def work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, cost, dem = ctx.cfg, ctx.cost, ctx.demand
        dense = dem.dense_layer[None, :]
        kept = self.kept_tokens(dem.context_tokens, cfg.budget_tokens)
        tokens = np.where(dense, dem.context_tokens[:, None].astype(np.float64), kept[:, None])
        return with_host({
            "qkv": Kernel(ctx.full(cost.qkv_s())),
            "attention": Kernel(np.asarray(cost.attention_s(tokens), dtype=np.float64)),
            "out_proj": Kernel(ctx.full(cost.out_proj_s())),
            "ffn": Kernel(ctx.full(cost.ffn_s())),
            "lm_head": Kernel(ctx.last_layer_only(cost.lm_head_s())),
        }, decoder_host_s(ctx, "hf", RAZOR_ATTENTION))

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        ctx_tokens = cfg.max_context_tokens
        n_dense = len([x for x in cfg.dense_layers if x < model.n_layers])
        n_sparse = model.n_layers - n_dense
        per_token_layer = 2 * model.n_kv_heads * model.head_dim * cfg.dtype_bytes
        kept = float(self.kept_tokens(ctx_tokens, cfg.budget_tokens))
        gpu = per_token_layer * (n_sparse * kept + n_dense * ctx_tokens)
        return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(round(gpu)), host_per_seq_bytes=0)
