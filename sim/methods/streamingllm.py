"""StreamingLLM: attention sinks plus the most recent tokens on the GPU; everything else is dropped.

Source: Xiao et al., "Efficient Streaming Language Models with Attention Sinks" (ICLR 2024, arXiv
2309.17453) and its code (mit-han-lab/streaming-llm). Assumptions (docs/methods.md has the discussion):

- All on the GPU, no host memory, no link traffic, nothing selected or recalled. Each KV head keeps
  min(context, budget_tokens) tokens: the sink plus the newest budget - sink tokens (the runtime policy
  freekv_runtime/policies/streamingllm.py; StartRecentKVCache start_size + recent_size,
  streaming_llm/kv_cache.py 24-38). The model is the shared budgeted cache of sim/methods/dropping.py.
- Every decode step and layer: one attention over the kept tokens (O(budget), independent of the
  context). Eviction costs nothing in "ideal" mode (the newest token overwrites the oldest non-sink
  slot of a ring buffer).
- Group-consistent (one kept set per KV head, as both the runtime policy and the public code, whose cache
  is per KV head); `group_consistent=False` keeps one per query head.

As published (mit-han-lab/streaming-llm at the stored snapshot): a stock HF Llama in eager mode with its
attention replaced by the position-shift forward (streaming_llm/pos_shift/modify_llama.py
`llama_pos_shift_attention_forward` 31-160) and the cache trimmed by `StartRecentKVCache.evict_for_space`
(kv_cache.py 66-92: two torch.cat of sink and recent slices per layer), which examples/
run_streaming_llama.py 61-71 calls once per prompt with room for the whole generation, so decode steps
pay no trimming. Per step and layer it pays: the torch.cat of the new K/V onto the cache (96-97, counted
in the HF decoder recipe), the RoPE of EVERY cached key at its cache position (102-103: arange + the
rotary ops over the whole kept cache, ~6 passes over the keys: estimate from apply_rotary_pos_emb_single
21-28 and rotate_half), repeat_kv of K and V (107-108) and an eager attention (matmul, scale, mask,
fp32 softmax, cast, matmul: 110-131), priced by sim/methods/dropping.py `eager_attention_s`.
"ideal" charges no host cost and a fused attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed
from sim.methods.decoder_layer import GroupOptionMethod
from sim.methods.dropping import attended_tokens, budget_attention_s, budget_memory, eager_attention_s
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.host_costs import HostOps
from traces.models import ModelSpec

__all__ = ["StreamingLLM", "POS_SHIFT_ATTENTION"]

# pos_shift/modify_llama.py 102-131: arange (1), key RoPE over the cache (~6), repeat_kv (2), matmul,
# div, mask add, softmax, cast, matmul (6); transposes/reshapes (views)
POS_SHIFT_ATTENTION = HostOps(torch_ops=1 + 6 + 2 + 6, python_ops=6)
_ROPE_PASSES = 6  # passes over the cached keys of the rotary re-application (estimate, docstring)


@dataclass(frozen=True)
class StreamingLLM(GroupOptionMethod):
    """StreamingLLM (module docstring). group_consistent: one kept set per KV head (else per query head)."""


    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Xiao et al., Efficient Streaming Language Models with Attention Sinks (ICLR 2024, arXiv "
        "2309.17453): keep the first tokens (attention sinks) and a window of recent tokens",
        "mit-han-lab/streaming-llm streaming_llm/kv_cache.py (StartRecentKVCache, evict_for_space), "
        "streaming_llm/pos_shift/modify_llama.py (eager attention re-applying RoPE to every cached key)",
    )

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(POS_SHIFT_ATTENTION)

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        cost, m = ctx.cost, ctx.model
        sets = self.sets_per_layer(m)
        if not ctx.as_published:
            return budget_attention_s(ctx, sets)
        # position-shift eager attention on every layer (module docstring)
        tokens = attended_tokens(ctx)
        b, d, dt = ctx.cfg.batch_size, m.head_dim, ctx.cfg.dtype_bytes
        rope = cost.kernel_s(0.0, _ROPE_PASSES * 2 * b * m.n_kv_heads * tokens * d * dt, _ROPE_PASSES)
        return np.asarray(eager_attention_s(ctx, tokens, sets) + rope, dtype=np.float64)

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """Budget tokens per kept set on sparse layers, the whole context on dense layers; no host."""
        return budget_memory(cfg, model, self.sets_per_layer(model))
