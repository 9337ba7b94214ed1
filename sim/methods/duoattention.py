"""DuoAttention: retrieval heads keep their whole KV cache, streaming heads sink + recent tokens; all on GPU.

Source: Xiao et al., "DuoAttention: Efficient Long-Context LLM Inference with Retrieval and Streaming
Heads" (ICLR 2025, arXiv 2410.10819) and its code (mit-han-lab/duo-attention at fe93c31). Assumptions:

- Static head split, per KV head: a share f_l of layer l's KV heads retrieve (whole context), the others
  stream (budget_tokens = sink_size + recent_size tokens). f_l is, in this order (`notes()` says which):
  the trace's recorded split (meta.extra["policy_probe"], from a released pattern or the runtime's
  deviation probe, freekv_runtime/policies/duoattention.py), else 1 - sparsity in every layer.
- No selection, no recall, no host memory, no link traffic.
- Attention: memory bound, its bytes are f_l * context + (1 - f_l) * min(context, budget) tokens per KV
  head of layer l; dense layers attend the whole context. Memory: exactly what is kept.
- As published: the static-KV-cache decoder of the efficiency runs (duo_attn/patch/llama.py
  `llama_duo_attention_forward_one_way_reordered_static` 309-435 with static_kv_cache.py): FlashInfer
  rope in place (1), `put_full_kv` (2 copy_, static_kv_cache.py 109-123), torch.cat of the cached
  streaming K and V with the new token (2, llama.py 381-386: the streaming cache read and written), two
  flash-attention calls (391-409), the output cat (1, 417), and `compress_and_replace_streaming_kv`
  (static_kv_cache.py 127-165: the streaming cache copied back, sink and a cloned recent window: ~6): the
  two streaming-cache copies are priced as the op "streaming_copy". "ideal": a ring buffer (no copies),
  no host cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from sim.errors import SimInputError
from sim.methods.base import CostContext, OpSpec, Work
from sim.methods.decoder_layer import OwnOps
from sim.methods.dropping import own_kernels
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.head_split import HeadSplitMethod
from sim.methods.host_costs import HostOps

if TYPE_CHECKING:
    from sim.demand import Demand

__all__ = ["DuoAttention"]

# llama.py 309-435 + static_kv_cache.py: rope, 2 copy_, 2 cat, 2 flash-attention, 1 cat (views aside)
DUO_ATTENTION = HostOps(torch_ops=8, python_ops=10)
DUO_COMPRESS = HostOps(torch_ops=6, python_ops=6)  # static_kv_cache.py 127-165


@dataclass(frozen=True)
class DuoAttention(HeadSplitMethod):
    """DuoAttention (module docstring). `measured_per_layer` and `source` are set by `for_demand`."""

    measured_per_layer: tuple[float, ...] | None = field(default=None, metadata={"option": False})
    source: str = field(default="", metadata={"option": False})

    needs_demand: ClassVar[bool] = False
    own_demand_optional: ClassVar[bool] = True  # its own trace's head split replaces 1 - sparsity
    sources: ClassVar[tuple[str, ...]] = (
        "Xiao et al., DuoAttention: Efficient Long-Context LLM Inference with Retrieval and Streaming Heads "
        "(ICLR 2025, arXiv 2410.10819): retrieval heads full KV, streaming heads sink + recent",
        "mit-han-lab/duo-attention duo_attn/patch/llama.py (static-cache forward), "
        "duo_attn/patch/static_kv_cache.py (streaming cache compress and replace)",
    )

    def for_demand(self, demand: Demand | None, transplant: bool = False) -> DuoAttention:
        """Take the head split the trace recorded (module docstring)."""
        if demand is None:
            return replace(self, source="no trace")
        share, per_layer = demand.retrieval_share, demand.retrieval_share_per_layer
        if share is None or per_layer is None:
            return replace(self, source="synthetic demand" if demand.synthetic
                           else "the trace records no head split")
        traced = demand.mapped_from or demand.model
        return replace(self, measured_per_layer=tuple(float(x) for x in per_layer),
                       source=f"the trace's head split: {share:.1%} of {traced}'s KV heads retrieve")

    def notes(self) -> tuple[str, ...]:
        if self.measured_per_layer is not None:
            return (f"duoattention retrieval heads: {self.source}",)
        return (f"duoattention retrieval heads: 1 - sparsity = {1 - self.knobs.sparsity:g} of every layer's "
                f"KV heads ({self.source or 'no trace'})",)

    def fractions(self, n_layers: int) -> np.ndarray:
        """(L,) share of retrieval KV heads per layer (module docstring)."""
        if self.measured_per_layer is not None:
            if len(self.measured_per_layer) != n_layers:
                raise SimInputError(
                    f"duoattention: the trace's head split gives {len(self.measured_per_layer)} layers, the "
                    f"simulated model has {n_layers}; build the demand for the simulated model")
            return np.asarray(self.measured_per_layer, dtype=np.float64)
        return np.full(n_layers, 1.0 - float(self.knobs.sparsity))

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(DUO_ATTENTION)

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(after_attention=(OpSpec("streaming_copy", ("compute",), category="select"),))

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        """The streaming-cache copies as published; none in "ideal" (a ring buffer)."""
        if not ctx.as_published:
            return own_kernels(ctx, {"streaming_copy": 0.0}, {})
        cfg, m = ctx.cfg, ctx.model
        f = self.fractions(m.n_layers)[None, :]
        streaming = np.minimum(ctx.demand.context_tokens.astype(np.float64), cfg.budget_tokens)[:, None]
        # cat (read + write) and compress-and-replace (read + write) of the streaming K and V
        n_bytes = 4 * cfg.batch_size * (1.0 - f) * m.n_kv_heads * streaming * 2 * m.head_dim * cfg.dtype_bytes
        copy = ctx.cost.kernel_s(0.0, n_bytes, 8)
        return own_kernels(ctx, {"streaming_copy": copy}, {"streaming_copy": DUO_COMPRESS})
