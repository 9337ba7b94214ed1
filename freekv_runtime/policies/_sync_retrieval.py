"""Always-correct page retrieval (Quest, ArkVale): select with the current query, recall, then attend.

The whole KV stays on the host (FreeKV's `PagedKVStore`: every full page offloaded with its key summary,
sink and window pages on the device, a cache of `selected_pages` slots per KV head). At every decode step
of a sparse layer whose context exceeds the budget:
1. score the candidate pages with the current query (`kernels.page_scores` over the store's summaries,
   `config.knobs.group_pooling` over a GQA group; optionally pooled again over `heads_per_selection` KV heads,
   which then share one selection);
2. the top `top_pages` pages (default: every slot) must be on the device: `plan_reuse` marks the ones
   already resident (hits) and puts each miss into an empty slot or over the lowest-scoring resident page
   that is not selected (its host copy stays);
3. the misses are recalled synchronously (`RecallEngine`, as FreeKV's corrected heads), then attention
   runs over sink + every resident slot + window (`kernels.sparse_decode_attention`).
No speculation and no correction check: every head counts as `corrected`, similarity is NaN. While the
context fits the budget every page is resident and attention is dense (FreeKV's `_decode_within_budget`).

Trace per (sequence, layer, KV head): `selected` the top pages, `missed` the ones recalled,
`fetched_tokens` = misses x page size, `evicted_tokens` = resident pages replaced in the slot cache x page
size (a window page leaving the device is not counted: every paged method turns its window over alike).
The CUDA path (recall streams and events) is FreeKV's; nothing here ran on a GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.kv_store import PagedKVStore
from freekv_runtime.policies._reuse import ReusePlan, plan_reuse, replaced_pages
from freekv_runtime.policies.base import AttentionShape
from freekv_runtime.policies.freekv import FreeKVState
from freekv_runtime.timing import OpTimer

__all__ = ["SyncRetrievalState"]


class SyncRetrievalState(FreeKVState):
    """FreeKV's store, recall and reuse machinery with a synchronous, every-step selection (module doc).

    heads_per_selection: KV heads sharing one selection (1 = each KV head its own); their page scores
    are pooled with `config.knobs.group_pooling` (max -> max, otherwise the mean). top_pages: pages selected
    per step (None = every selected-page slot)."""

    def __init__(self, config: RuntimeConfig, shape: AttentionShape, batch_size: int, device: torch.device,
                 dtype: torch.dtype, timer: OpTimer, heads_per_selection: int = 1,
                 top_pages: int | None = None) -> None:
        if shape.n_kv_heads % heads_per_selection:
            raise RuntimeConfigError(
                f"{heads_per_selection} KV heads per selection do not divide the model's {shape.n_kv_heads} "
                "KV heads: choose a divisor")
        super().__init__(config, shape, batch_size, device, dtype, timer)
        self.heads_per_selection = heads_per_selection
        self.top_pages = top_pages

    def _page_scores(self, store: PagedKVStore, q: torch.Tensor, hi: int) -> torch.Tensor:
        scores = super()._page_scores(store, q, hi)
        g = self.heads_per_selection
        if g == 1:
            return scores
        b, hkv, n_pages = scores.shape
        grouped = scores.view(b, hkv // g, g, n_pages)
        pooled = grouped.amax(dim=2) if self.config.knobs.group_pooling == "max" else grouped.mean(dim=2)
        return pooled.repeat_interleave(g, dim=1)

    def _plan(self, store: PagedKVStore, q_t: torch.Tensor) -> ReusePlan:
        top, resident_scores = self._select(store, q_t)
        if self.top_pages is not None:
            top = top[:, :, : self.top_pages]  # best first
        return plan_reuse(top, store.resident, resident_scores)

    def _decode_sparse(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        with self.timer.op("select"):
            plan = self._plan(store, q_t)
        every_head = np.ones(plan.n_missed.shape, dtype=bool)
        evicted = replaced_pages(plan, store.resident) * store.p
        with self.timer.op("recall_sync"):
            # the replaced slots may still be read by this layer's attention of step t-1: order after it
            self.recaller.wait(self._recall(store, plan, every_head, convert_after=self.streams.record()))
        out = self._attend(layer, store, q_t)
        self.log.sparse(layer, np.full(every_head.shape, np.nan, np.float32), every_head, plan)
        self.log.moved(layer, fetched_tokens=plan.n_missed * store.p, evicted_tokens=evicted)
        return out[:, :, None]
