"""ShadowKV: low-rank pre-RoPE keys on the GPU, values on the host, sparse recall of chunks' values.

Sun et al., "ShadowKV: KV Cache in Shadows for High-Throughput Long-Context LLM Inference" (ICML 2025,
arXiv 2410.21465); public code bytedance/ShadowKV, models/kv_cache.py (ShadowKVCache: get_svd 195-213,
prefill_kv_cache 225-281, get_retrieval_position_ids 283-304, get_key_cache 314-334; ShadowKVCache_CPU:
outlier count 398, prefill-time selection 591-599, the cached copy of only the changed chunks
`gather_copy_with_offsets` 647-653, kernels/gather_copy.cu) and models/llama.py (the decode order).

Per sparse layer (layers not in `config.dense_layers`; those attend densely over an exact cache):
- prefill: dense causal attention. The prompt is cut into the sink [0, S), the factorised region
  [S, F) of whole chunks (chunk = `page_size` tokens, so chunk ids are page ids) and the recent window
  [F, T) of at most window_tokens exact tokens (F is the first chunk boundary that leaves <= W tokens).
  The region's PRE-RoPE keys (the `layer_inputs` hook) are factorised, all KV heads in one
  (F - S, Hkv d) matrix, to rank min(`rank`, F - S, Hkv d) (`_lowrank.LowRankKeys`): the factors stay
  on the device. The region's values go to the host. Landmarks: per chunk and KV head the mean
  post-RoPE key; the `outlier_chunks` chunks of lowest min-cosine of their keys to their landmark are
  kept whole (exact post-RoPE keys and values) on the device and are never candidates. The last prompt
  query selects the first chunks (ShadowKV_CPU does), whose values are placed from the prompt.
- decode: the new token joins the recent window (exact). Every `refactor_interval` steps the layer
  re-factorises: the whole chunks that left the window are folded into the SVD (incremental SVD of
  [U SV; K_new], `LowRankKeys.fold`), their landmarks are added, the outlier set is recomputed over all
  chunks, their values go to the host. Then: landmark scores of the query (per query head softmax of
  q . landmark / sqrt(128), ShadowKV's fixed scale whatever d, over the candidate chunks, the max over the
  GQA group: ShadowKV's pooling),
  the top-k chunks, k = (budget - sink - recent) // p - outliers (so sink + window + outliers +
  selected <= budget_tokens, the project's convention; the recent window grows between
  re-factorisations, so k shrinks with it). Only the VALUES of the selected chunks the device does not
  hold from the previous step move host -> device (ShadowKV's offsets copy); their keys are rebuilt
  from U @ SV and rotated (RoPE) at their positions; attention over sink + outliers + selected + recent.

Trace (StepLog): `selected` = the top-k chunk ids (page granularity = chunk); `missed` = the selected
chunks whose values were fetched; `fetched_tokens` = VALUE tokens fetched (only values move: keys are
rebuilt on the device); `evicted_tokens` = tokens the device cache gave up (selected chunks' values
replaced, outlier chunks demoted at a re-factorisation, recent tokens folded into the low-rank keys);
`refactorised` = the layer re-factorised at this step. The fetch is needed by this step's attention, so
every sparse head counts as `corrected` (synchronous); similarity is NaN (no correction check).
On CUDA the value copy runs on its own stream (pinned host buffer) while the keys are rebuilt, and the
attention waits on its event; on the CPU the same decisions run synchronously. Not run on a GPU here.

Knobs (RuntimeConfig): page_size = ShadowKV's chunk_size (its default 8; the FreeKV paper's baseline
setup: page 32), budget_tokens (counts sink, window, outliers and selected; FreeKV baseline 2048),
sink_tokens (exact first tokens; 0 is ShadowKV's own), window_tokens (exact recent tokens; ShadowKV
keeps 4 local chunks plus every generated token), dense_layers (FreeKV baseline: layer 0).
`group_pooling` / `page_summary` do not apply (ShadowKV pools softmaxes by max; landmarks are means).
`config.knobs` (traces.catalogue.retrieval.ShadowKVKnobs):
- `rank` (default null: ShadowKV's share of the key width, 160 of Hkv d = 8 x 128 = 1024 on Llama-3-8B,
  bytedance/ShadowKV models/llama.py:86 and kv_cache.py:212, i.e. round(160/1024 Hkv d): 30 of 192 on
  smollm2-135m, 160 on Llama-3.1-8B; `traces.catalogue.retrieval.shadowkv_rank`): SVD rank, capped at the
  matrix rank min(tokens, Hkv d) (a short region caps it at its tokens). A fixed 160 on a model whose keys
  are narrower than 1024 keeps them almost exact and overstates ShadowKV's accuracy;
- `outlier_chunks` (default: 3/16 of the selectable tokens (budget - sink - window) in chunks, ShadowKV_CPU's
  share: 24 chunks of 8 per 1024 sparse-budget tokens, kv_cache.py:398; ShadowKVCache fixes 48,
  kv_cache.py:136): outlier chunks per KV head, capped so that they always fit the budget;
- `refactor_interval` (default window_tokens, the FreeKV paper's baseline setting): decode steps between
  re-factorisations (ShadowKV's own code never re-factorises). budget_tokens must hold sink + window +
  max(refactor_interval, page_size), the most the exact tokens reach.

Modules: this file (the policy, the prefill and decode order), _shadowkv_layer.py (a sparse layer's
state and its factorisation), _shadowkv_chunks.py (chunk selection, the value cache), _shadowkv_attention.py
(rebuilt keys, attended tokens), _lowrank.py (the low-rank keys and landmarks).

Shapes: b batch, Hq / Hkv query / KV heads, G = Hq / Hkv, d head dim, p chunk size, C factorised
chunks, k selected chunks, K value slots.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.kv_store import DenseKVStore
from freekv_runtime.policies._dense import attention_mass, dense_decode
from freekv_runtime.policies._reuse import apply_plans
from freekv_runtime.policies._shadowkv_attention import RopeAt, attended_mask, rebuild_keys
from freekv_runtime.policies._shadowkv_chunks import install_values, keep_selected, plan_chunks
from freekv_runtime.policies._shadowkv_layer import ShadowKVLayer, factorised_end
from freekv_runtime.policies._step_log import StepLog
from freekv_runtime.policies.base import (
    AttentionShape,
    KVPolicy,
    ModelAccess,
    PolicyState,
    PrefillDecisions,
    StepDecisions,
    check_dense_layers,
)
from freekv_runtime.recall import DeviceStreams
from freekv_runtime.timing import OpTimer
from traces.catalogue.retrieval import shadowkv_rank

__all__ = ["ShadowKVPolicy", "ShadowKVState"]


class ShadowKVPolicy(KVPolicy):
    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        knobs = config.knobs
        p = config.page_size
        self.rank = knobs.rank
        self.refactor_interval = knobs.refactor_interval or config.window_tokens
        exact_max = config.sink_tokens + config.window_tokens + max(self.refactor_interval, p)
        room_chunks = (config.budget_tokens - exact_max) // p  # >= 0: ShadowKVKnobs.check_retrieval
        share = (config.budget_tokens - config.sink_tokens - config.window_tokens) * 3 // 16 // p
        wanted = share if knobs.outlier_chunks is None else knobs.outlier_chunks
        self.outlier_chunks = min(wanted, room_chunks)
        self._rope: ModelAccess | None = None

    def prepare(self, model: ModelAccess) -> None:
        """ShadowKV rotates the rebuilt keys itself: it reads the model's RoPE table."""
        self._rope = model

    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> ShadowKVState:
        if self._rope is None:
            raise RuntimeConfigError("method shadowkv needs the model's RoPE: call prepare(model) first")
        check_dense_layers(self.config, shape)
        return ShadowKVState(self, shape, batch_size, torch.device(device), dtype, timer)


class ShadowKVState(PolicyState):
    """Per-request ShadowKV state of a batch of b equal-length sequences (see the module docstring).

    layers[l]: the ShadowKVLayer of sparse layer l (None for dense layers, kept in `dense`)."""

    wants_layer_inputs = True

    def __init__(self, policy: ShadowKVPolicy, shape: AttentionShape, batch_size: int, device: torch.device,
                 dtype: torch.dtype, timer: OpTimer) -> None:
        self.policy, self.config, self.shape, self.b = policy, policy.config, shape, batch_size
        self.timer = timer
        self.device, self.dtype, self.p = device, dtype, policy.config.page_size
        self.streams = DeviceStreams(device)
        self.dense: dict[int, DenseKVStore] = {
            layer: DenseKVStore(device, dtype) for layer in self.config.dense_layers}
        self.layers: list[ShadowKVLayer | None] = [None] * shape.n_layers
        self._pre: list[torch.Tensor | None] = [None] * shape.n_layers  # pre-RoPE keys from layer_inputs
        assert policy._rope is not None  # ShadowKVPolicy.new_state checked it
        self._rope_at = RopeAt(policy._rope, device)
        empty = [np.zeros(0, np.int32)] * shape.n_kv_heads
        self._initial = [[list(empty) for _ in range(shape.n_layers)] for _ in range(batch_size)]
        self.log = StepLog(batch_size, shape.n_layers, shape.n_kv_heads, self.config.measure_attention_mass)
        self.n_slots = (self.config.budget_tokens - self.config.sink_tokens) // self.p
        self.rank = shadowkv_rank(policy.rank, shape.n_kv_heads, shape.head_dim)

    # ---- inputs ----
    def layer_inputs(self, layer: int, hidden: torch.Tensor, k_pre_rope: torch.Tensor, start: int) -> None:
        if layer not in self.dense:
            self._pre[layer] = k_pre_rope

    def _take_pre(self, layer: int, n_new: int) -> torch.Tensor:
        pre = self._pre[layer]
        if pre is None or pre.shape[2] != n_new:
            raise RuntimeError(f"shadowkv layer {layer}: the model gave no pre-RoPE keys for these {n_new} "
                               "tokens (layer_inputs must run before each sparse layer attends)")
        self._pre[layer] = None
        return pre

    def _fact_target(self, n_tokens: int) -> int:
        return factorised_end(n_tokens, self.config.sink_tokens, self.config.window_tokens, self.p)

    # ---- prefill ----
    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with self.timer.op("attention"):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if layer in self.dense:
            with self.timer.op("append_offload"):
                self.dense[layer].prefill(k, v)
            return out
        pre = self._take_pre(layer, k.shape[2])
        t = k.shape[2]
        sink, fact_end = min(self.config.sink_tokens, t), self._fact_target(t)
        ls = ShadowKVLayer.from_prompt(k, v, pre, sink, fact_end, self.rank, self.n_slots, self.p,
                                       self.device, self.config.measure_attention_mass)
        self.layers[layer] = ls
        with self.timer.op("refactorise"):
            ls.fold(k[:, :, sink:fact_end], v[:, :, sink:fact_end], pre[:, :, sink:fact_end],
                    self.policy.outlier_chunks)
        with self.timer.op("select"):
            plan = plan_chunks(ls, q[:, :, -1], self.config.budget_tokens)
            seq, head, page, slot = apply_plans(plan, ls.resident, np.ones(plan.n_missed.shape, bool))
            # from the prompt's values, already on the device
            install_values(ls, v, seq, head, page, slot, self.streams)
        for i in range(self.b):
            self._initial[i][layer] = [plan.selected[i, h, : plan.n_selected[i, h]].astype(np.int32)
                                       for h in range(k.shape[1])]
        return out

    def end_prefill(self) -> PrefillDecisions:
        return PrefillDecisions(initial_selected=[[list(heads) for heads in seq] for seq in self._initial])

    # ---- decode ----
    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if layer in self.dense:
            store = self.dense[layer]
            store.append(k, v)
            with self.timer.op("attention"):
                out = dense_decode(q, store.keys(), store.values())
            self.log.dense(layer, store.n_tokens)
            return out
        ls = self.layers[layer]
        assert ls is not None
        self._append(ls, k, v, self._take_pre(layer, 1))
        b, hkv = self.b, self.shape.n_kv_heads
        gave_up, refactorised = self._refactorise_when_due(ls)
        with self.timer.op("select"):
            q_t = q[:, :, 0]
            plan = plan_chunks(ls, q_t, self.config.budget_tokens)
            held_before = (ls.resident >= 0).sum(-1)
        with self.timer.op("recall_sync"):
            seq, head, page, slot = apply_plans(plan, ls.resident, np.ones((b, hkv), bool))
            fetched = install_values(ls, ls.host_v, seq, head, page, slot, self.streams)
            slot_of = keep_selected(ls, plan.selected)
        gave_up += ((held_before - (plan.n_selected - plan.n_missed)) * self.p).astype(np.int32)
        out = self._attend(layer, ls, q, plan.selected, slot_of, fetched)
        self.log.sparse(layer, np.full((b, hkv), np.nan, np.float32), np.ones((b, hkv), bool), plan)
        fetched_tokens = (plan.n_missed * self.p).astype(np.int32)  # values only: keys are rebuilt
        self.log.moved(layer, fetched_tokens=fetched_tokens, evicted_tokens=gave_up,
                       refactorised=refactorised)
        return out

    def _append(self, ls: ShadowKVLayer, k: torch.Tensor, v: torch.Tensor, pre: torch.Tensor) -> None:
        """The new token (k, v, pre (b, Hkv, 1, d)) joins the recent window."""
        with self.timer.op("append_offload"):
            ls.recent_k = torch.cat([ls.recent_k, k], dim=2)
            ls.recent_v = torch.cat([ls.recent_v, v], dim=2)
            ls.recent_pre = torch.cat([ls.recent_pre, pre], dim=2)
            if ls.full_keys is not None:
                ls.full_keys = torch.cat([ls.full_keys, k], dim=2)
        ls.since += 1

    def _refactorise_when_due(self, ls: ShadowKVLayer) -> tuple[np.ndarray, np.ndarray]:
        """Every `refactor_interval` steps, when whole chunks left the window, fold them in. Returns the
        tokens the device gave up (b, Hkv) int32 and whether each head re-factorised (b, Hkv) bool."""
        b, hkv = self.b, self.shape.n_kv_heads
        gave_up = np.zeros((b, hkv), np.int32)
        refactorised = np.zeros((b, hkv), bool)
        target = self._fact_target(ls.n_tokens)
        if ls.since >= self.policy.refactor_interval and target > ls.fact_end:
            with self.timer.op("refactorise"):
                gave_up += ls.refactorise(target, self.policy.outlier_chunks)
            refactorised[:] = True
        return gave_up, refactorised

    def _attend(self, layer: int, ls: ShadowKVLayer, q: torch.Tensor, selected: np.ndarray,
                slot_of: np.ndarray, fetched: torch.cuda.Event | None) -> torch.Tensor:
        """Attention over sink, outliers, selected (rebuilt keys, fetched values), recent: (b, Hq, 1, d)."""
        b, hkv, k = selected.shape
        p, d = self.p, self.shape.head_dim
        with self.timer.op("rebuild_keys"):
            keys, pos = rebuild_keys(ls, selected, self._rope_at)
        self.streams.wait(fetched)
        slots = torch.as_tensor(slot_of, device=self.device)[..., None, None].expand(b, hkv, k, p, d)
        values = ls.slots_v.gather(2, slots).view(b, hkv, k * p, d)
        all_k = torch.cat([ls.sink_k, ls.outlier_k, keys, ls.recent_k], dim=2)
        all_v = torch.cat([ls.sink_v, ls.outlier_v, values, ls.recent_v], dim=2)
        with self.timer.op("attention"):
            out = F.scaled_dot_product_attention(q, all_k, all_v, enable_gqa=True)
        mass = None
        if ls.full_keys is not None:
            mass = attention_mass(q[:, :, 0], ls.full_keys, attended_mask(ls, pos)).cpu().numpy()
        self.log.attended(layer, np.full((b, hkv), all_k.shape[2], np.int32), mass)
        return out

    def end_step(self) -> StepDecisions:
        return self.log.finish()
