"""StreamingLLM: attention sinks plus a sliding window; every other token is dropped.

Xiao et al., "Efficient Streaming Language Models with Attention Sinks" (ICLR 2024, arXiv 2309.17453);
public code mit-han-lab/streaming-llm, streaming_llm/kv_cache.py (StartRecentKVCache: start_size sink
tokens + recent_size recent tokens, evicting the middle). kvpress: NVIDIA/kvpress kvpress/presses/
streaming_llm_press.py (prefill-time version of the same rule).

Configuration (RuntimeConfig; no runtime knobs of its own):
- sink_tokens: the first tokens, kept for good (the "attention sinks"; the paper uses 4);
- budget_tokens: tokens attended per KV head, sink included (the budget convention); the recent window
  is the rest of it, budget_tokens - sink_tokens, the newest tokens (window_tokens is not used beyond
  RuntimeConfig's validation: the whole non-sink budget is the window, as in StartRecentKVCache);
- dense_layers: layers that keep everything (the FreeKV paper's baseline setup: layer 0);
- page_size, tau, group_pooling, page_summary: unused.
Token granularity; all query heads of a KV head share its tokens. Positions are not re-indexed (our
keys are stored post-RoPE, the paper's "rolling" positions are not applied): noted in docs/methods.md.
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._dropping import DroppingState
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.timing import OpTimer

__all__ = ["StreamingLLMPolicy", "StreamingLLMState"]


class StreamingLLMState(DroppingState):
    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        """Drop the oldest tokens after the sink: sink + the newest budget - sink tokens remain."""
        age = torch.arange(n_tokens, device=keep.device, dtype=torch.float32).expand_as(keep)
        return self.drop_lowest(keep, age, n_tokens)


class StreamingLLMPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> StreamingLLMState:
        return StreamingLLMState(self.config, shape, batch_size, torch.device(device), dtype, timer)
