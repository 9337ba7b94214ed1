"""H2O (Heavy-Hitter Oracle): keep the tokens with the largest accumulated attention plus the recent ones.

Source: Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language
Models" (NeurIPS 2023, arXiv 2306.14048) and its code (FMInference/H2O). Assumptions (docs/methods.md has
the discussion):

- All on the GPU, no host memory, no link traffic. Each KV head keeps min(context, budget_tokens)
  tokens (sink + recent window + heavy hitters, the runtime policy freekv_runtime/policies/h2o.py); the
  shared budgeted cache of sim/methods/dropping.py.
- Every decode step and sparse layer: the attention over the kept tokens also yields its probabilities
  (written out: one fp32 per kept token and query head); "score" adds them, summed over the group's
  query heads, to the accumulated score of every kept token (H2OKVCache_LayerWise._update_hh_score,
  h2o_hf/utils_real_drop/modify_llama.py 317-326). Once the budget is full, every step evicts one token:
  "evict" finds the lowest score outside the recent window (a pass over the scores); in "ideal" mode the
  new token then overwrites that slot (no compaction).
- Group-consistent (one kept set and score per KV head, as the runtime policy); `group_consistent=False`
  keeps them per query head.

As published (FMInference/H2O h2o_hf/utils_real_drop/modify_llama.py, `H2OLlamaAttention` 333-535 in a
stock HF eager decoder): causal mask rebuilt per layer (`_make_causal_mask` 217-229, 453: ~4 ops), the
torch.cat of the new K/V (478-479), repeat_kv (484-485), eager attention (matmul, scale, mask add, fp32
softmax, cast, matmul: 487-511; priced by sim/methods/dropping.py `eager_attention_s`); the probabilities
cloned (509) and summed into hh_score (317-326: clone, sum, sum, slice add: 4 kernels, 3 passes over the
probabilities). Past the budget, every step and layer `__call__` (258-287): topk over the heavy-hitter
region and sort (272-273), arange + repeat + cat of the kept indices (276-277), zeros + scatter of a
boolean mask (279-280), and the compaction: K, V and hh_score indexed by the boolean mask (282-285),
which copies the whole kept cache (read and write) and makes the host wait for the GPU three times
(boolean-mask indexing reads the number of kept entries back: 3 read-backs, so "evict" is a host sync).
"ideal" charges no host cost, a fused attention and no compaction.
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

__all__ = ["H2O"]

# modify_llama.py (module docstring): attention 453-511, score update 317-326, eviction 258-287
H2O_ATTENTION = HostOps(torch_ops=4 + 2 + 6, python_ops=8)
H2O_SCORE = HostOps(torch_ops=4, python_ops=2)
H2O_EVICT = HostOps(torch_ops=11, python_ops=8, readbacks=3)


@dataclass(frozen=True)
class H2O(GroupOptionMethod):
    """H2O (module docstring). group_consistent: one kept set per KV head (else per query head)."""


    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Zhang et al., H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language "
        "Models (NeurIPS 2023, arXiv 2306.14048): greedy eviction by accumulated attention, recent kept",
        "FMInference/H2O h2o_hf/utils_real_drop/modify_llama.py (H2OKVCache_LayerWise: score update, "
        "top-k, boolean-mask compaction per step; eager attention)",
    )

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(H2O_ATTENTION)

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(after_attention=(
            OpSpec("score", ("compute",), category="select"),
            OpSpec("evict", ("compute",), host_sync=ctx.as_published, category="select"),
        ))

    def _bytes(self, ctx: CostContext) -> tuple[np.ndarray, np.ndarray]:
        """(S,) bytes of one step's fp32 probabilities and of the fp32 accumulated scores."""
        b, m = ctx.cfg.batch_size, ctx.model
        kept = kept_tokens(ctx)
        return b * m.n_qo_heads * kept * 4, b * self.sets_per_layer(m) * kept * 4

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        sets = self.sets_per_layer(ctx.model)
        if ctx.as_published:
            return np.asarray(eager_attention_s(ctx, attended_tokens(ctx), sets), dtype=np.float64)
        probs, _ = self._bytes(ctx)
        written = ctx.full(ctx.cost.kernel_s(0.0, probs, 0))  # the fused kernel also writes probabilities
        return budget_attention_s(ctx, sets) + np.where(ctx.demand.dense_layer[None, :], 0.0, written)

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, cost, m = ctx.cfg, ctx.cost, ctx.model
        b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
        sets, kept = self.sets_per_layer(m), kept_tokens(ctx)
        probs, scores = self._bytes(ctx)
        full = ctx.demand.context_tokens > cfg.budget_tokens  # one token evicted per step from here on
        if ctx.as_published:
            score = cost.kernel_s(0.0, 3 * 2 * probs + 2 * scores, 4)
            compaction = 2 * b * sets * kept * 2 * d * dt + 2 * scores  # K, V and scores copied
            evict = np.where(full, cost.kernel_s(0.0, 3 * scores + compaction, 11), 0.0)
        else:
            score = cost.kernel_s(0.0, probs + 2 * scores, 1)
            evict = np.where(full, cost.kernel_s(0.0, scores, 1), 0.0)
        return own_kernels(ctx, {"score": score, "evict": evict}, {"score": H2O_SCORE, "evict": H2O_EVICT})

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """Budget tokens (+ an fp32 score each) per kept set on sparse layers, whole KV on dense layers."""
        return budget_memory(cfg, model, self.sets_per_layer(model), 4 * min(cfg.budget_tokens,
                                                                             cfg.max_context_tokens))
