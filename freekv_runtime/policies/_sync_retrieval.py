"""Always-correct page retrieval (Quest, ArkVale): select with the current query, recall, then attend.

The paged-retrieval mechanism (freekv_runtime.policies._paged_retrieval: the whole KV on the host, every
full page offloaded with its key summary, sink and window pages on the device, a cache of
`selected_pages` slots per KV head) with this sparse decode step, at every step of a sparse layer whose
context exceeds the budget:
1. score the candidate pages with the current query (the state's `page_scores` hook: by default
   `kernels.page_scores` over the store's summaries, `config.knobs.group_pooling` over a GQA group);
2. the pages of the state's `step_selection` (default: every slot) must be on the device: `plan_reuse`
   marks the ones already resident (hits) and puts each miss into an empty slot or over the
   lowest-scoring resident page that is not selected (its host copy stays);
3. the misses are recalled synchronously (`RecallEngine`, as FreeKV's corrected heads), then attention
   runs over sink + every resident slot + window (`kernels.sparse_decode_attention`).
No speculation and no correction check: every head counts as `corrected`, similarity is NaN. While the
context fits the budget every page is resident and attention is dense (the mechanism's).

Trace per (sequence, layer, KV head): `selected` the step's selection, `missed` the ones recalled,
`fetched_tokens` = misses x page size, `evicted_tokens` = resident pages replaced in the slot cache x page
size (`replaced_pages`; a window page leaving the device is not counted: every paged method turns its
window over alike). The CUDA path (recall streams and events) is the mechanism's; nothing here ran on a GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from freekv_runtime.kv_store import PagedKVStore
from freekv_runtime.policies._paged_retrieval import PagedRetrievalState
from freekv_runtime.policies._reuse import replaced_pages

__all__ = ["SynchronousRetrievalState"]


class SynchronousRetrievalState(PagedRetrievalState):
    """The mechanism with a synchronous, every-step selection (module doc); Quest and ArkVale are its
    subclasses, supplying `page_scores` / `step_selection` where they differ from the defaults."""

    def decode_sparse(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        """Select with q_t (b, Hq, d), recall every head's misses synchronously, attend -> (b, Hq, d)."""
        with self.timer.op("select"):
            plan = self.plan_step(store, q_t)
        every_head = np.ones(plan.n_missed.shape, dtype=bool)
        evicted = replaced_pages(plan, store.resident) * store.p
        with self.timer.op("recall_sync"):
            # the replaced slots may still be read by this layer's attention of step t-1: order after it
            self.recaller.wait(self.recall(store, plan, every_head, convert_after=self.streams.record()))
        out = self.attend(layer, store, q_t)
        self.log.sparse(layer, np.full(every_head.shape, np.nan, np.float32), every_head, plan)
        self.log.moved(layer, fetched_tokens=plan.n_missed * store.p, evicted_tokens=evicted)
        return out
