"""The paged-retrieval mechanism FreeKV, Quest and ArkVale share; each method supplies its selection.

Mechanism (here, no method in it): per layer a `PagedKVStore` (the whole KV on the host in HND with page
summaries; sink, window and `selected_pages` slots per KV head on the device in NHD) or, for
`config.dense_layers`, a `DenseKVStore`; the `RecallEngine` on the request's `DeviceStreams`; GPU-cache
reuse planning (`plan_reuse`: hits stay, misses replace empty slots, then the lowest-scoring resident pages
that are not selected); and the shared skeleton of prefill and decode:
- prefill: causal attention, the prompt stored (full pages offloaded with summaries), then the slots get
  the top pages under the last prompt query (`page_scores`), placed from the prompt;
- decode, per layer: append the token (a full page is offloaded); a dense layer attends densely; a paged
  layer waits on its pending recall (issued at step t-1), then either the context still fits the budget
  (`config.fits_budget`: every page is resident, attention is dense over it, nothing checked, selected or
  recalled) or the method's `decode_sparse` runs; after each attention `remember_query` sees the query;
- attention over sink + resident selected pages + window (`attend`), and the step log (`StepLog`).
On CUDA recalls run on the recall streams and a layer's attention waits only on its own recall events
(freekv_runtime.recall); on the CPU the same decisions run synchronously. The CUDA path was not run on a
GPU here.

Selection hooks (shapes: b batch, Hq / Hkv query / KV heads, d head dim, k pages, K selected-page slots):
- `page_scores(store, q, hi)`: scores of pages [0, hi) under q; default `kernels.page_scores` over the
  store's min/max or box summaries with `config.knobs.group_pooling`;
- `step_selection(top)`: which of a decode step's ranked candidates are made resident; default all
  (as many as there are slots);
- `decode_sparse(layer, store, q_t)`: a decode step while the context exceeds the budget (required);
  building blocks: `plan_step` (select and plan reuse), `recall` (install and copy misses), `attend`,
  the `pending` recall of each layer, `log` (StepLog);
- `remember_query(layer, q)`: the query each attention ran with; default ignored.

Per-query-head selection (a state with `selects_per_query_head` whose knobs say selection
"per-query-head", on a GQA model): every query head takes its own top pages (`kernels.query_page_scores`,
`topk_pages`), the KV head's slot cache (G x the selected pages) holds and recalls the union of its
group's pages, and each query head attends only its own (see _query_head_selection.py). The step log's
selection and misses are the union's; its attended tokens the most any query head of the group attends.

Adding a page-selection method (one small policy file, e.g. quest.py):
1. a catalogue entry (traces/catalogue/retrieval.py, kind "retrieval", `policy="freekv_runtime.policies.
   <file>:<Policy>"`) whose knobs extend `PageRetrievalKnobs` (group_pooling, page_summary, staging_pages,
   pool_chunk_pages: the mechanism reads them), and the simulator's model it names (sim/methods);
2. a state class: `PagedRetrievalState` with `decode_sparse` (or `SynchronousRetrievalState`,
   _sync_retrieval.py: select with q_t, recall synchronously, attend, every step), overriding
   `page_scores` / `step_selection` where the method scores or keeps pages its own way;
3. a policy class: `class MyPolicy(PagedRetrievalPolicy): state_class = MyState`;
4. the conformance suite (tests/freekv_runtime/test_policy_conformance.py) picks it up from the catalogue.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.kv_store import DenseKVStore, PagedKVStore, PageTable
from freekv_runtime.policies._dense import attention_mass, dense_decode, token_mask
from freekv_runtime.policies._query_head_selection import group_union
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
from kernels import page_scores, query_page_scores, sparse_decode_attention, topk_pages

__all__ = ["PagedRetrievalPolicy", "PagedRetrievalState"]


class PagedRetrievalState(PolicyState):
    """Per-request state of a page-retrieval method for a batch of b sequences (module doc).

    stores[l]: PagedKVStore (sparse layer) or DenseKVStore (dense layer).
    pending[l]: the background recall of layer l issued at step t-1; layer l's attention waits on it.
    tables[l]: the PageTable of layer l's last attention (attended pages, for tests and traces).
    per_query_head: each query head selects and attends its own pages (module doc).
    """

    selects_per_query_head: ClassVar[bool] = False  # the method's knobs may choose per-query-head selection

    def __init__(self, config: RuntimeConfig, shape: AttentionShape, batch_size: int, device: torch.device,
                 dtype: torch.dtype, timer: OpTimer) -> None:
        self.config, self.shape, self.b, self.timer = config, shape, batch_size, timer
        knobs = config.knobs
        self.per_query_head = (self.selects_per_query_head and knobs.selection == "per-query-head"
                               and shape.group_size > 1)
        slots = config.selected_pages * (shape.group_size if self.per_query_head else 1)
        self.streams = DeviceStreams(device)
        self.recaller = RecallEngine(self.streams, shape.n_kv_heads, config.page_size, shape.head_dim, dtype,
                                     staging_pages=knobs.staging_pages or slots)
        self.stores: list[PagedKVStore | DenseKVStore] = [
            DenseKVStore(device, dtype) if layer in config.dense_layers else PagedKVStore(
                batch_size, shape.n_kv_heads, shape.head_dim, config.page_size, config.sink_pages,
                config.window_pages, slots, device, dtype, self.streams,
                pool_chunk_pages=knobs.pool_chunk_pages, keep_full_keys=config.measure_attention_mass,
                page_summary=knobs.page_summary)
            for layer in range(shape.n_layers)
        ]
        self.pending: list[torch.cuda.Event | None] = [None] * shape.n_layers
        self.tables: list[PageTable | None] = [None] * shape.n_layers
        empty = [np.zeros(0, np.int32)] * shape.n_kv_heads
        self._initial = [[list(empty) for _ in range(shape.n_layers)] for _ in range(batch_size)]
        self.log = StepLog(batch_size, shape.n_layers, shape.n_kv_heads, config.measure_attention_mass)

    @property
    def recall_stats(self) -> RecallStats:
        return self.recaller.stats

    # ---- selection hooks ----
    def page_scores(self, store: PagedKVStore, q: torch.Tensor, hi: int) -> torch.Tensor:
        """(b, Hkv, hi) float32 scores of pages [0, hi) under q (b, Hq, d), -inf outside the candidates.
        Default: the store's summaries (min/max or box) scored with `config.knobs.group_pooling`."""
        page_lo, page_hi = store.candidate_bounds()
        return page_scores(q, store.kmin[:, :, :hi], store.kmax[:, :, :hi], page_lo, page_hi,
                           self.config.knobs.group_pooling)

    def step_selection(self, top: np.ndarray) -> np.ndarray:
        """The pages a decode step makes resident: top (b, Hkv, k) candidate ids best first (k = the slots,
        or fewer candidates) -> (b, Hkv, k') best first, k' <= k. Default: all of them. (Prefill places
        every top page.)"""
        return top

    @abstractmethod
    def decode_sparse(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        """One decode step of a paged layer whose context exceeds the budget, after the token was appended
        and the layer's pending recall waited on: select (`plan_step`), recall (`recall`), attend
        (`attend`), log (`log.sparse`, `log.moved`). q_t (b, Hq, d) -> (b, Hq, d)."""

    def remember_query(self, layer: int, q: torch.Tensor) -> None:
        """Called after each attention of a paged layer with its query q (b, Hq, d): the last prompt
        position at prefill, the step's query at decode (may alias the layer's input: clone to keep).
        Default: ignored."""
        return

    # ---- prefill ----
    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (b, Hq, T, d); k, v (b, Hkv, T, d) -> (b, Hq, T, d): causal SDPA, then store the prompt and
        place the top pages under the last prompt query."""
        with self.timer.op("attention"):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        store = self.stores[layer]
        q_last = q[:, :, -1].clone()
        with self.timer.op("append_offload"):
            store.prefill(k, v)
        if isinstance(store, PagedKVStore):
            self.remember_query(layer, q_last)
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
        if self.config.fits_budget(store.n_tokens):
            out = self._decode_within_budget(layer, store, q_t)
        else:
            out = self.decode_sparse(layer, store, q_t)
        self.remember_query(layer, q_t)
        return out[:, :, None]

    def _decode_within_budget(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        """The context fits the budget (traces.retrieval_knobs: the official runtime's `kvc.n_pages >
        budget` test): every candidate page is already resident (the prompt's are placed at prefill, a page
        leaving the window is kept on the device by `store.append`), so attention is dense over the
        context. No check (similarity NaN, nothing corrected: the trace's "not checked"), no selection, no
        recall; the trace's selection is the resident pages, none missed. q_t (b, Hq, d) -> (b, Hq, d)."""
        store.query_pages = None
        out = self.attend(layer, store, q_t)
        b, hkv, n_slots = store.resident.shape
        plan = plan_reuse(store.resident, store.resident, np.zeros((b, hkv, n_slots)))
        self.log.sparse(layer, np.full((b, hkv), np.nan, np.float32), np.zeros((b, hkv), bool), plan)
        return out

    def end_step(self) -> StepDecisions:
        return self.log.finish()

    # ---- building blocks ----
    def _select(self, store: PagedKVStore, q: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Top pages for q (b, Hq, d) among the candidates: (b, Hkv, k) page ids best first, and the scores
        of the resident pages (b, Hkv, K) under q (-inf where a slot is empty)."""
        lo, hi = store.candidate_range()
        b, hkv, n_slots = store.resident.shape
        if hi - lo == 0:
            store.query_pages = None
            return np.zeros((b, hkv, 0), np.int64), np.full((b, hkv, n_slots), -np.inf)
        if self.per_query_head:
            page_lo, page_hi = store.candidate_bounds()
            query_scores = query_page_scores(q, store.kmin[:, :, :hi], store.kmax[:, :, :hi], page_lo,
                                             page_hi)  # (b, Hq, hi)
            query_top = topk_pages(query_scores, min(self.config.selected_pages, hi - lo)).cpu().numpy()
            store.query_pages = query_top.astype(np.int64)
            top = group_union(store.query_pages, hkv)  # (b, Hkv, G * k)
            scores = query_scores.view(b, hkv, -1, hi).amax(dim=2)  # a page's best score in the group
        else:
            scores = self.page_scores(store, q, hi)
            top = topk_pages(scores, min(n_slots, hi - lo)).cpu().numpy()
        if not scores.is_cuda:  # the scores are on the host already: look the resident ones up there
            rows = np.arange(b * hkv)[:, None]  # (b * Hkv, 1) against resident (b * Hkv, K)
            slots = np.maximum(store.resident, 0).reshape(b * hkv, n_slots)
            held = scores.numpy().reshape(b * hkv, -1)[rows, slots].reshape(b, hkv, n_slots)
            return top, np.where(store.resident < 0, np.float32(-np.inf), held)
        resident = torch.as_tensor(store.resident).to(scores.device)
        resident_scores = scores.gather(2, resident.clamp(min=0)).masked_fill(resident < 0, float("-inf"))
        return top, resident_scores.cpu().numpy()

    def plan_step(self, store: PagedKVStore, q_t: torch.Tensor) -> ReusePlan:
        """Select for q_t (b, Hq, d) (`page_scores`, top-k, `step_selection`) and plan the reuse of the
        resident pages: which selected pages miss and which slots they replace."""
        top, resident_scores = self._select(store, q_t)
        return plan_reuse(self.step_selection(top), store.resident, resident_scores)

    def recall(self, store: PagedKVStore, plans: ReusePlan, heads: np.ndarray,
               convert_after: torch.cuda.Event | None) -> torch.cuda.Event | None:
        """Install and recall the misses of the (sequence, head) pairs where heads (b, Hkv) is True; the
        conversion into the slots starts after `convert_after`. Returns the recall's event (None: nothing
        to wait for)."""
        if not heads.any():
            return None
        seq, head, page, slot = apply_plans(plans, store.resident, heads)
        slots = store.global_slots(seq, store.selected_slot(slot))
        return self.recaller.recall(store.pool, store.k_slots, store.v_slots, seq, head, page, slots,
                                    after=[store.offload_event], convert_after=convert_after)

    def attend(self, layer: int, store: PagedKVStore, q_t: torch.Tensor) -> torch.Tensor:
        """Sparse attention over sink + resident selected + window pages: q_t (b, Hq, d) -> (b, Hq, d).
        Logs the attended tokens (and the attention mass where measured)."""
        with self.timer.op("attention"):
            table = store.page_table()
            rows, n_rows, attended = table.table, table.n_pages, table.attended_tokens
            if store.query_pages is not None:  # per query head: each reads its own pages only
                rows, n_rows, per_query_head = store.query_head_table(store.query_pages)
                # logged per KV head: the most any of its query heads attends (each within the budget)
                attended = per_query_head.reshape(self.b, store.n_kv, -1).max(axis=2)
            # the store builds the table itself: value checks would only cost host time per layer
            out = sparse_decode_attention(q_t, store.k_slots, store.v_slots, rows, n_rows,
                                          table.last_page_tokens, validate=False)
        self.tables[layer] = table
        mass = None
        if store.full_keys is not None:
            mass = self._attention_mass(store, q_t, table).cpu().numpy()
        self.log.attended(layer, attended, mass)
        return out

    def _attention_mass(self, store: PagedKVStore, q_t: torch.Tensor, table: PageTable) -> torch.Tensor:
        """(b, Hkv) dense attention probability on the attended tokens, mean over each group's query heads
        (per query head on its own pages when it selects its own)."""
        assert store.full_keys is not None
        if store.query_pages is None:
            return attention_mass(q_t, store.full_keys, token_mask(table.pages, store.n_tokens, store.p,
                                                                   q_t.device))
        b, hkv = store.resident.shape[:2]
        group = q_t.shape[1] // hkv
        sink, window = list(store.sink_page_ids()), list(store.window_page_ids())
        pages = [[np.concatenate((sink, row[row >= 0], window)).astype(np.int64) for row in seq]
                 for seq in store.query_pages]
        mask = token_mask(pages, store.n_tokens, store.p, q_t.device)  # (b, Hq, n)
        keys = store.full_keys.repeat_interleave(group, dim=1)
        return attention_mass(q_t, keys, mask).view(b, hkv, group).mean(-1)


class PagedRetrievalPolicy(KVPolicy):
    """A page-retrieval method: checks the dense layers against the model, makes its `state_class`."""

    state_class: ClassVar[type[PagedRetrievalState]]

    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> PagedRetrievalState:
        check_dense_layers(self.config, shape)
        return self.state_class(self.config, shape, batch_size, torch.device(device), dtype, timer)
