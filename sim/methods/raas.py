"""RaaS: a fixed budget of KV pages on the GPU, evicted by timestamp; nothing is ever recalled.

Source: Hu et al., "Efficient Long-Decoding Inference with Reasoning-Aware Attention Sparsity"
(arXiv 2502.11147). Assumptions (docs/methods.md has the discussion):

- All on the GPU, no host memory, no link traffic. As published (knob `prompt` "keep", the runtime's
  default): every prompt token is kept and the budget bounds the decoded tokens, so a head holds at most
  input_tokens + budget - sink tokens; with `prompt` "harness" (FreeKV's harness) at most
  `budget_tokens` (sink + retained pages + the current page). The count is the runtime's own rule
  (traces/kept_tokens.py `raas_kept_tokens`). Everything else is dropped for good.
- Every decode step and layer: attention over the retained set, then a timestamp update: every
  retained decoded page (every retained page with "harness") whose estimated attention (Quest-style
  score from its per-page min/max keys) passes the threshold gets the current step as timestamp. The
  page scores are computed by a small kernel over the retained pages only, not over the context.
- When the current page fills and the budget is full, the page with the oldest timestamp is evicted
  (a small kernel over the retained pages; the freed slot takes the new page: no copy).
- Group-consistent by default (one retained set per KV head, as in the FreeKV paper's setup, where
  RaaS is made group-consistent with max pooling); `group_consistent=False` keeps one set per query
  head (G times the memory and attention traffic of a GQA group).

As published: RaaS has no public code; the FreeKV paper's re-implementation (rooikeee/FreeKV
accuracy/kvc/patch/dynamic_attention.py `raas_attn` 326-500, run inside a stock HF eager decoder) is
priced: the HF decoder (sim/methods/eager.py HF_*) whose attention gathers the retained pages (3 torch.cat,
428-442) and attends (1 flash call); the timestamp update per step (page scores q*min, q*max, maximum,
sum, softmax, cast, group mean, threshold and the masked timestamp write, with repeat_kv of the
min/max keys: ~11 kernels, 466-486); on a page fill the eviction
(torch.min over timestamps, unsqueeze, gathers and the slot writes: ~8 kernels, 395-418).
"ideal" charges no host cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed, OpSpec, Work
from sim.methods.decoder_layer import GroupOptionMethod, OwnOps
from sim.methods.dropping import budget_attention_s, budget_memory, own_kernels
from sim.methods.eager import HF_DECODER, DecoderRecipe
from sim.methods.host_costs import HostOps
from traces.kept_tokens import raas_kept_tokens
from traces.models import ModelSpec

__all__ = ["RaaS"]

# accuracy/kvc/patch/dynamic_attention.py (module docstring): attention, timestamp update, eviction
RAAS_ATTENTION = HostOps(torch_ops=4 + 4, python_ops=8)  # HF repeat_kv/sdpa part + 3 cats + flash
RAAS_STAMP = HostOps(torch_ops=11, python_ops=3)
RAAS_EVICT = HostOps(torch_ops=8, python_ops=4)


@dataclass(frozen=True)
class RaaS(GroupOptionMethod):
    """RaaS (module docstring). group_consistent: one retained set per KV head (else per query head)."""


    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "Hu et al., Efficient Long-Decoding Inference with Reasoning-Aware Attention Sparsity (RaaS, "
        "arXiv 2502.11147): O(L) memory and time, timestamps refreshed by estimated attention, "
        "oldest-timestamp page evicted",
        "Liu et al., FreeKV (arXiv 2505.13109), evaluation setup: RaaS made group-consistent (max pooling)",
    )

    def recipe(self) -> DecoderRecipe:
        return HF_DECODER.with_attention(RAAS_ATTENTION)

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(after_attention=(
            OpSpec("stamp", ("compute",), category="select"),
            OpSpec("evict", ("compute",), category="select"),
        ))

    def kept(self, context_tokens: np.ndarray | int, cfg: SimConfig) -> np.ndarray | int:
        """Tokens a retained set holds at `context_tokens` (traces/kept_tokens.py, the runtime's rule)."""
        return raas_kept_tokens(context_tokens, cfg.input_tokens, cfg.budget_tokens, cfg.sink_tokens,
                                self.knobs.prompt)

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        return budget_attention_s(ctx, self.sets_per_layer(ctx.model), self.kept(ctx.demand.context_tokens,
                                                                                   ctx.cfg))

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        cfg, cost, dem, m = ctx.cfg, ctx.cost, ctx.demand, ctx.model
        b, d, dt, p = cfg.batch_size, m.head_dim, cfg.dtype_bytes, cfg.page_size
        sets = self.sets_per_layer(m)
        context = dem.context_tokens.astype(np.float64)
        kept = np.asarray(self.kept(dem.context_tokens, cfg), dtype=np.float64)
        # the stamped pages: the retained decoded pages ("keep": the prompt is never a candidate), else all
        scored = kept - cfg.input_tokens if self.knobs.prompt == "keep" else kept
        kept_pages = np.ceil(np.clip(scored, 0, None) / p)
        # page scores of the retained pages from their min/max (2*d per page), timestamps written
        stamp = cost.kernel_s(
            4.0 * b * m.n_qo_heads * kept_pages * d,
            b * sets * kept_pages * (2 * d * dt + 8) + b * m.n_qo_heads * kept_pages * 4,
            1,
        )
        full = (context > kept) & ((dem.context_tokens % p) == 0)
        evict = np.where(full, cost.kernel_s(0.0, b * sets * kept_pages * 8, 1), 0.0)
        return own_kernels(ctx, {"stamp": stamp, "evict": evict}, {"stamp": RAAS_STAMP, "evict": RAAS_EVICT})

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """GPU: the kept tokens at the longest context (+ page min/max, timestamps of the budgeted pages)
        per retained set on sparse layers, whole KV on dense layers. Nothing on the host."""
        kept = int(self.kept(cfg.max_context_tokens, cfg))
        pages = -(-min(cfg.budget_tokens, cfg.max_context_tokens) // cfg.page_size)
        per_page = 2 * model.head_dim * cfg.dtype_bytes + 8
        return budget_memory(cfg, model, self.sets_per_layer(model), pages * per_page, kept=kept)
