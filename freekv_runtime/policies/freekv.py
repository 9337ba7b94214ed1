"""FreeKV: speculative retrieval with fine-grained correction over a paged hybrid-layout KV store.

Decode, per sparse layer (see /work/shared/reference/freekv.md, "Algorithm" and "Facts from the code"):
append K/V (offload on fill); C = group-mean cos(q_t, q_{t-1}) per KV head; heads with C < tau are
corrected: selection with q_t for all heads, synchronous recall of the corrected heads' misses, attention,
then background recall of the other heads' new selections (used at t+1). No head corrected: attention
with the pages recalled during step t-1, then selection with q_t and background recall for step t+1.
Layers in `config.dense_layers` keep their whole KV on the device and attend densely.

The store, recalls, reuse planning, prefill and the shared decode skeleton are the paged-retrieval
mechanism (freekv_runtime.policies._paged_retrieval); FreeKV supplies the sparse decode step (correction
check, speculative background recall) and keeps each layer's previous query. Its pages are scored by
the mechanism's default (`page_scores` with `group_pooling`), every slot selected.

Host read-backs per sparse layer and step (as FreeKV's controller does): the correction flags, and the
selected page ids (the host issues one copy per missed head-page). On CUDA the recalls run on their own
streams (see freekv_runtime.recall) and each layer's attention waits only on its own recall events; on
the CPU everything runs synchronously with the same decisions. The CUDA path was not run on a GPU here.

Knobs (`config.knobs`, traces.catalogue.retrieval.FreeKVKnobs): `tau`; the selection design
`group_pooling` (default softmax_mean, the official accuracy harness's avgSM; mean = the official runtime)
and `page_summary` (default minmax; box = the official runtime's ArkVale-style boxes), see
kernels.page_scores and kernels.summarize_pages for the official file references; `staging_pages`
(head-pages per recall staging buffer, 0: one head's selected pages) and `pool_chunk_pages` (host-pool
growth step).
"""

from __future__ import annotations

import torch

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.kv_store import PagedKVStore
from freekv_runtime.policies._paged_retrieval import PagedRetrievalPolicy, PagedRetrievalState
from freekv_runtime.policies.base import AttentionShape
from freekv_runtime.timing import OpTimer
from kernels import query_similarity

__all__ = ["FreeKVPolicy", "FreeKVState"]


class FreeKVState(PagedRetrievalState):
    """Per-request FreeKV state of a batch of b sequences (the mechanism's, plus:)

    q_prev[l]: (b, Hq, d) the query of the previous step (the last prompt query before step 0).
    """

    def __init__(self, config: RuntimeConfig, shape: AttentionShape, batch_size: int, device: torch.device,
                 dtype: torch.dtype, timer: OpTimer) -> None:
        super().__init__(config, shape, batch_size, device, dtype, timer)
        self.q_prev: list[torch.Tensor | None] = [None] * shape.n_layers

    def remember_query(self, layer: int, q: torch.Tensor) -> None:
        """Keep q (b, Hq, d) for the next step's correction check."""
        self.q_prev[layer] = q.clone()

    def decode_sparse(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        """Correction check, selection, recalls, attention (module doc). q_t (b, Hq, d) -> (b, Hq, d)."""
        with self.timer.op("correction_check"):
            sim = query_similarity(q_t, self.q_prev[layer], self.shape.group_size).cpu().numpy()
            corrected = sim < self.config.knobs.tau  # (b, Hkv); one small read-back per layer, as in FreeKV
        if corrected.any():
            with self.timer.op("select"):
                plans = self.plan_step(store, q_t)
            with self.timer.op("recall_sync"):
                # the evicted slots may still be read by this layer's attention of step t-1: order after it
                done = self.recall(store, plans, corrected, convert_after=self.streams.record())
                self.recaller.wait(done)
            out = self.attend(layer, store, q_t)
            attention_done = self.streams.record()
        else:
            out = self.attend(layer, store, q_t)
            attention_done = self.streams.record()
            with self.timer.op("select"):
                plans = self.plan_step(store, q_t)
        with self.timer.op("recall_background"):
            self.pending[layer] = self.recall(store, plans, ~corrected, attention_done)
        self.log.sparse(layer, sim, corrected, plans)
        return out


class FreeKVPolicy(PagedRetrievalPolicy):
    state_class = FreeKVState
