"""FreeKV: speculative retrieval with fine-grained correction over a paged hybrid-layout KV store.

Decode, per sparse layer (see /work/shared/reference/freekv.md, "Algorithm" and "Facts from the code"):
append K/V (offload on fill); C = group-mean cos(q_t, q_{t-1}) per KV head; heads with C < tau are
corrected: selection with q_t for all heads, synchronous recall of the corrected heads' misses, attention,
then background recall of the other heads' new selections (used at t+1). No head corrected: attention
with the pages recalled during step t-1, then selection with q_t and background recall for step t+1.
Layers in `config.dense_layers` keep their whole KV on the device and attend densely.

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

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.kv_store import DenseKVStore, PagedKVStore, PageTable
from freekv_runtime.policies._dense import attention_mass, dense_decode, token_mask
from freekv_runtime.policies._reuse import ReusePlan, apply_plans, plan_reuse
from freekv_runtime.policies._step_log import StepLog
from freekv_runtime.policies.base import (
    AttentionShape,
    KVPolicy,
    PolicyState,
    PrefillDecisions,
    StepDecisions,
    check_dense_layers,
)
from freekv_runtime.recall import DeviceStreams, RecallEngine, RecallStats
from freekv_runtime.timing import OpTimer
from kernels import page_scores, query_similarity, sparse_decode_attention, topk_pages

__all__ = ["FreeKVPolicy", "FreeKVState"]


class FreeKVPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> FreeKVState:
        check_dense_layers(self.config, shape)
        return FreeKVState(self.config, shape, batch_size, torch.device(device), dtype, timer)


class FreeKVState(PolicyState):
    """Per-request FreeKV state of a batch of b sequences.

    stores[l]: PagedKVStore (sparse layer) or DenseKVStore (dense layer).
    q_prev[l]: (b, Hq, d) the query of the previous step (the last prompt query before step 0).
    pending[l]: the background recall of layer l issued at step t-1; layer l's attention waits on it.
    tables[l]: the PageTable of layer l's last attention (attended pages, for tests and traces).
    """

    def __init__(self, config: RuntimeConfig, shape: AttentionShape, batch_size: int, device: torch.device,
                 dtype: torch.dtype, timer: OpTimer) -> None:
        self.config, self.shape, self.b, self.timer = config, shape, batch_size, timer
        knobs = config.knobs
        self.streams = DeviceStreams(device)
        self.recaller = RecallEngine(self.streams, shape.n_kv_heads, config.page_size, shape.head_dim, dtype,
                                     staging_pages=knobs.staging_pages or config.selected_pages)
        self.stores: list[PagedKVStore | DenseKVStore] = [
            DenseKVStore(device, dtype) if layer in config.dense_layers else PagedKVStore(
                batch_size, shape.n_kv_heads, shape.head_dim, config.page_size, config.sink_pages,
                config.window_pages, config.selected_pages, device, dtype, self.streams,
                pool_chunk_pages=knobs.pool_chunk_pages, keep_full_keys=config.measure_attention_mass,
                page_summary=knobs.page_summary)
            for layer in range(shape.n_layers)
        ]
        self.q_prev: list[torch.Tensor | None] = [None] * shape.n_layers
        self.pending: list[torch.cuda.Event | None] = [None] * shape.n_layers
        self.tables: list[PageTable | None] = [None] * shape.n_layers
        empty = [np.zeros(0, np.int32)] * shape.n_kv_heads
        self._initial = [[list(empty) for _ in range(shape.n_layers)] for _ in range(batch_size)]
        self.log = StepLog(batch_size, shape.n_layers, shape.n_kv_heads, config.measure_attention_mass)

    @property
    def recall_stats(self) -> RecallStats:
        return self.recaller.stats

    # ---- prefill ----
    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (b, Hq, T, d); k, v (b, Hkv, T, d) -> (b, Hq, T, d): causal SDPA, then store the prompt."""
        with self.timer.op("attention"):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        store = self.stores[layer]
        q_last = q[:, :, -1].clone()
        self.q_prev[layer] = q_last
        with self.timer.op("append_offload"):
            store.prefill(k, v)
        if isinstance(store, PagedKVStore):
            with self.timer.op("select"):
                top, _ = self._select(store, q_last)
                pages = np.full(store.resident.shape, -1, dtype=np.int64)
                pages[:, :, : top.shape[2]] = top
                store.place_from_prompt(k, v, pages)
            for i in range(self.b):
                self._initial[i][layer] = [np.sort(r[r >= 0]).astype(np.int32) for r in pages[i]]
        return out

    def end_prefill(self) -> PrefillDecisions:
        return PrefillDecisions(initial_selected=[[list(heads) for heads in seq] for seq in self._initial])

    # ---- decode ----
    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (b, Hq, 1, d); k, v (b, Hkv, 1, d) -> (b, Hq, 1, d)."""
        store = self.stores[layer]
        with self.timer.op("append_offload"):
            store.append(k, v)
        if isinstance(store, DenseKVStore):
            with self.timer.op("attention"):
                out = dense_decode(q, store.keys(), store.values())
            self.log.dense(layer, store.n_tokens)
            return out
        q_t = q[:, :, 0]
        self.recaller.wait(self.pending[layer])  # the background recall of step t-1 for this layer
        if self._fits_budget(store):
            return self._decode_within_budget(layer, store, q_t)
        return self._decode_sparse(layer, store, q_t)

    def _decode_sparse(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        """The context exceeds the budget: correction check, selection, recalls, attention (module doc).
        q_t (b, Hq, d) -> (b, Hq, 1, d)."""
        with self.timer.op("correction_check"):
            sim = query_similarity(q_t, self.q_prev[layer], self.shape.group_size).cpu().numpy()
            corrected = sim < self.config.knobs.tau  # (b, Hkv); one small read-back per layer, as in FreeKV
        if corrected.any():
            with self.timer.op("select"):
                plans = self._plan(store, q_t)
            with self.timer.op("recall_sync"):
                # the evicted slots may still be read by this layer's attention of step t-1: order after it
                done = self._recall(store, plans, corrected, convert_after=self.streams.record())
                self.recaller.wait(done)
            out = self._attend(layer, store, q_t)
            attention_done = self.streams.record()
            with self.timer.op("recall_background"):
                self.pending[layer] = self._recall(store, plans, ~corrected, attention_done)
        else:
            out = self._attend(layer, store, q_t)
            attention_done = self.streams.record()
            with self.timer.op("select"):
                plans = self._plan(store, q_t)
            with self.timer.op("recall_background"):
                self.pending[layer] = self._recall(store, plans, ~corrected, attention_done)
        self.log.sparse(layer, sim, corrected, plans)
        self.q_prev[layer] = q_t.clone()
        return out[:, :, None]

    def _fits_budget(self, store: PagedKVStore) -> bool:
        """True while the layer's context fits its budget (traces.retrieval_knobs: the official runtime's
        `kvc.n_pages > budget` test): no correction check, selection or recall then."""
        return self.config.fits_budget(store.n_tokens)

    def _decode_within_budget(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        """The context fits the budget: every candidate page is already resident (the prompt's are placed
        at prefill, a page leaving the window is kept on the device by `store.append`), so attention is
        dense over the context. No check (similarity NaN, nothing corrected: the trace's "not checked"),
        no selection, no recall; the trace's selection is the resident pages, none missed."""
        out = self._attend(layer, store, q_t)
        b, hkv, n_slots = store.resident.shape
        plan = plan_reuse(store.resident, store.resident, np.zeros((b, hkv, n_slots)))
        self.log.sparse(layer, np.full((b, hkv), np.nan, np.float32), np.zeros((b, hkv), bool), plan)
        self.q_prev[layer] = q_t.clone()
        return out[:, :, None]

    def end_step(self) -> StepDecisions:
        return self.log.finish()

    # ---- the pieces ----
    def _select(self, store: PagedKVStore, q: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Top pages for q (b, Hq, d) among the candidates: (b, Hkv, k) page ids best first, and the scores
        of the resident pages (b, Hkv, K) under q (-inf where a slot is empty)."""
        lo, hi = store.candidate_range()
        b, hkv, n_slots = store.resident.shape
        if hi - lo == 0:
            return np.zeros((b, hkv, 0), np.int64), np.full((b, hkv, n_slots), -np.inf)
        scores = self._page_scores(store, q, hi)
        top = topk_pages(scores, min(n_slots, hi - lo)).cpu().numpy()
        if not scores.is_cuda:  # the scores are on the host already: look the resident ones up there
            rows = np.arange(b * hkv)[:, None]  # (b * Hkv, 1) against resident (b * Hkv, K)
            slots = np.maximum(store.resident, 0).reshape(b * hkv, n_slots)
            held = scores.numpy().reshape(b * hkv, -1)[rows, slots].reshape(b, hkv, n_slots)
            return top, np.where(store.resident < 0, np.float32(-np.inf), held)
        resident = torch.as_tensor(store.resident).to(scores.device)
        resident_scores = scores.gather(2, resident.clamp(min=0)).masked_fill(resident < 0, float("-inf"))
        return top, resident_scores.cpu().numpy()

    def _page_scores(self, store: PagedKVStore, q: torch.Tensor, hi: int) -> torch.Tensor:
        """(b, Hkv, hi) float32 scores of pages [0, hi) under q (b, Hq, d), -inf outside the candidates."""
        page_lo, page_hi = store.candidate_bounds()
        return page_scores(q, store.kmin[:, :, :hi], store.kmax[:, :, :hi], page_lo, page_hi,
                           self.config.knobs.group_pooling)

    def _plan(self, store: PagedKVStore, q_t: torch.Tensor) -> ReusePlan:
        top, resident_scores = self._select(store, q_t)
        return plan_reuse(top, store.resident, resident_scores)

    def _recall(self, store: PagedKVStore, plans: ReusePlan, heads: np.ndarray,
                convert_after: torch.cuda.Event | None) -> torch.cuda.Event | None:
        """Install and recall the misses of the (sequence, head) pairs where heads (b, Hkv) is True."""
        if not heads.any():
            return None
        seq, head, page, slot = apply_plans(plans, store.resident, heads)
        slots = store.global_slots(seq, store.selected_slot(slot))
        return self.recaller.recall(store.pool, store.k_slots, store.v_slots, seq, head, page, slots,
                                    after=[store.offload_event], convert_after=convert_after)

    def _attend(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        """Sparse attention over sink + resident selected + window pages: (b, Hq, d)."""
        with self.timer.op("attention"):
            table = store.page_table()
            # the store builds the table itself: value checks would only cost host time per layer
            out = sparse_decode_attention(q_t, store.k_slots, store.v_slots, table.table, table.n_pages,
                                          table.last_page_tokens, validate=False)
        self.tables[layer] = table
        mass = None
        if store.full_keys is not None:
            mask = token_mask(table.pages, store.n_tokens, store.p, q_t.device)
            mass = attention_mass(q_t, store.full_keys, mask).cpu().numpy()
        self.log.attended(layer, table.attended_tokens, mass)
        return out
