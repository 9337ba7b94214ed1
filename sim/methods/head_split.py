"""Methods that split each layer's KV heads into full heads (keep every token) and bounded heads (keep a
fixed number of tokens): RazorAttention's retrieval vs non-retrieval heads, DuoAttention's retrieval vs
streaming heads. A subclass gives `fractions(n_layers)` (the share of full KV heads per layer) and
either `BOUNDED_EXTRA_TOKENS` (what a bounded head keeps beyond the budget) or its own
`bounded_tokens(context, cfg)`; attention and memory follow from them. Never imports torch."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed
from sim.methods.decoder_layer import DecoderMethod, attention_over
from traces.models import ModelSpec

__all__ = ["HeadSplitMethod"]


class HeadSplitMethod(DecoderMethod):
    """A decoder method whose KV heads are full or bounded (module docstring)."""

    BOUNDED_EXTRA_TOKENS: ClassVar[int] = 0

    def fractions(self, n_layers: int) -> np.ndarray:
        raise NotImplementedError

    def bounded_tokens(self, context: np.ndarray | int, cfg: SimConfig) -> np.ndarray:
        """Tokens a bounded head keeps at `context` (default: min(context, budget +
        BOUNDED_EXTRA_TOKENS)); a method with its own rule overrides this."""
        ctx = np.asarray(context, dtype=np.float64)
        return np.minimum(ctx, cfg.budget_tokens + self.BOUNDED_EXTRA_TOKENS)

    def kept_per_layer(self, context: np.ndarray | int, cfg: SimConfig, n_layers: int) -> np.ndarray:
        """Tokens kept per KV head on average, shape context.shape + (L,): full heads keep the context,
        bounded heads `bounded_tokens`."""
        ctx = np.asarray(context, dtype=np.float64)[..., None]
        f = np.asarray(self.fractions(n_layers), dtype=np.float64)
        bounded = np.asarray(self.bounded_tokens(context, cfg), dtype=np.float64)[..., None]
        return f * ctx + (1.0 - f) * bounded

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        """The dense layer's attention over the kept tokens."""
        kept = self.kept_per_layer(ctx.demand.context_tokens, ctx.cfg, ctx.model.n_layers)
        return attention_over(ctx, kept)

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        ctx_tokens = cfg.max_context_tokens
        dense = np.isin(np.arange(model.n_layers), [x for x in cfg.dense_layers if x < model.n_layers])
        per_token_layer = 2 * model.n_kv_heads * model.head_dim * cfg.dtype_bytes
        kept = self.kept_per_layer(ctx_tokens, cfg, model.n_layers)  # (L,)
        gpu = per_token_layer * float(np.where(dense, ctx_tokens, kept).sum())
        return MemoryNeed(gpu_fixed_bytes=0, gpu_per_seq_bytes=int(round(gpu)), host_per_seq_bytes=0)
