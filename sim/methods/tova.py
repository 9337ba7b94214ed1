"""TOVA: the budgeted GPU cache of a dropping method; each step the least-attended token is dropped.

Source: Oren et al., "Transformers are Multi-State RNNs" (arXiv 2401.06104) and its code
(schwartz-lab-NLP/TOVA at 9c7d09b). Assumptions:

- All on the GPU, no host memory, no link traffic. Each KV head keeps min(context, budget_tokens) tokens
  (one kept set per layer shared by its KV heads, the runtime policy freekv_runtime/policies/tova.py);
  the shared budgeted cache of sim/methods/dropping.py.
- Every decode step and sparse layer, once the budget is full: "reduce" averages the step's attention
  probabilities (fp32, one per kept token and query head, written by the attention) over the query heads,
  takes the top budget - 1 and gathers the kept K and V (src/tova_cache.py:44-51: mean, topk, sort, two
  gathers). In "ideal" mode the mean and the top-k are one pass over the probabilities and the new token
  overwrites the dropped slot (no gather).

As published: a stock HF Llama in eager mode with TOVA's attention forward (src/convert_models/
llama_custom.py:72-113: repeat_kv, matmul, scale, mask, fp32 softmax, cast, matmul; priced by
sim/methods/dropping.py `eager_attention_s`) and `reduce` per layer and step (tova_cache.py:44-51: mean,
topk, sort, 2 gathers: 5 kernels; the gathers copy the whole kept cache, read and write). "ideal"
charges no host cost and a fused attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed, OpSpec, Work
from sim.methods.decoder_layer import GroupOptionMethod, OwnOps
from sim.methods.dropping import (
    attended_tokens,
    budget_attention_s,
    budget_memory,
    eager_attention_s,
    kept_tokens,
    own_kernels,
)
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.host_costs import HostOps
from traces.models import ModelSpec

__all__ = ["TOVA"]

# llama_custom.py:72-113: repeat_kv (2), matmul, div, mask add, softmax, cast, matmul (6); views
TOVA_ATTENTION = HostOps(torch_ops=2 + 6, python_ops=6)
TOVA_REDUCE = HostOps(torch_ops=5, python_ops=6)  # tova_cache.py:38-51: mean, topk, sort, 2 gathers


@dataclass(frozen=True)
class TOVA(GroupOptionMethod):
    """TOVA (module docstring). group_consistent: one kept set per KV head (else per query head)."""

    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Oren et al., Transformers are Multi-State RNNs (arXiv 2401.06104): TOVA drops the token the "
        "current query attends least, averaged over the layer's heads",
        "schwartz-lab-NLP/TOVA src/tova_cache.py (TOVACache.reduce), src/convert_models/llama_custom.py "
        "(eager attention calling reduce per layer)",
    )

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(TOVA_ATTENTION)

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(after_attention=(OpSpec("reduce", ("compute",), category="select"),))

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        sets = self.sets_per_layer(ctx.model)
        if ctx.as_published:
            return np.asarray(eager_attention_s(ctx, attended_tokens(ctx), sets), dtype=np.float64)
        return budget_attention_s(ctx, sets)

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, m = ctx.cfg, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        kept = kept_tokens(ctx)
        probs = b * m.n_qo_heads * kept * 4  # fp32 probabilities of the step's attention
        full = ctx.demand.context_tokens > cfg.budget_tokens  # one token dropped per step from here on
        if ctx.as_published:
            gather = 2 * b * self.sets_per_layer(m) * kept * 2 * d * dt  # K and V read and written
            reduce = np.where(full, ctx.cost.kernel_s(0.0, probs + 3 * b * kept * 4 + gather, 5), 0.0)
        else:
            reduce = np.where(full, ctx.cost.kernel_s(0.0, probs, 1), 0.0)
        return own_kernels(ctx, {"reduce": reduce}, {"reduce": TOVA_REDUCE})

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """Budget tokens per kept set on sparse layers, the whole context on dense layers; no host."""
        return budget_memory(cfg, model, self.sets_per_layer(model))
