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
  q . landmark / sqrt(d) over the candidate chunks, the max over the GQA group: ShadowKV's pooling),
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
- `rank` (default 160, ShadowKV's for d = 128 models): SVD rank, capped at the matrix rank
  min(tokens, Hkv d) (e.g. smollm2-135m has Hkv d = 192; a short region caps it at its tokens);
- `outlier_chunks` (default: 3/16 of the selectable tokens (budget - sink - window) in chunks, ShadowKV_CPU's
  share: 24 chunks of 8 per 1024 sparse-budget tokens, kv_cache.py:398; ShadowKVCache fixes 48,
  kv_cache.py:136): outlier chunks per KV head, capped so that they always fit the budget;
- `refactor_interval` (default window_tokens, the FreeKV paper's baseline setting): decode steps between
  re-factorisations (ShadowKV's own code never re-factorises). budget_tokens must hold sink + window +
  max(refactor_interval, page_size), the most the exact tokens reach.

Shapes: b batch, Hq / Hkv query / KV heads, G = Hq / Hkv, d head dim, p chunk size, C factorised
chunks, k selected chunks, K value slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.kv_store import DenseKVStore
from freekv_runtime.model import RopeTable, apply_rope
from freekv_runtime.policies._dense import attention_mass, dense_decode
from freekv_runtime.policies._dropping import lowest_kept
from freekv_runtime.policies._lowrank import LowRankKeys, chunk_landmarks
from freekv_runtime.policies._reuse import apply_plans, plan_reuse
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
from freekv_runtime.recall import DeviceStreams, _on, host_empty
from freekv_runtime.timing import OpTimer

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


@dataclass
class _Layer:
    """One sparse layer's device state (and its host values). Token positions are absolute."""

    sink_k: torch.Tensor  # (b, Hkv, S, d) exact
    sink_v: torch.Tensor
    recent_k: torch.Tensor  # (b, Hkv, m, d) exact, tokens [fact_end, n)
    recent_v: torch.Tensor
    recent_pre: torch.Tensor  # (b, Hkv, m, d) the recent tokens' pre-RoPE keys (folded at re-factorisation)
    fact_end: int  # the factorised region is [S, fact_end), whole chunks
    lowrank: LowRankKeys  # rows = the factorised tokens
    landmarks: torch.Tensor  # (b, Hkv, C, d)
    min_cos: torch.Tensor  # (b, Hkv, C) float32 outlier score (low = outlier)
    outliers: torch.Tensor  # (b, Hkv, n_out) int64 chunk index within the region, ascending
    outlier_k: torch.Tensor  # (b, Hkv, n_out * p, d) exact
    outlier_v: torch.Tensor
    host_v: torch.Tensor  # (b, Hkv, capacity, d) host values of the factorised tokens
    slots_v: torch.Tensor  # (b, Hkv, K, p, d) device values of the selected chunks
    resident: np.ndarray  # (b, Hkv, K) int64 chunk (page) id per slot, -1 empty
    since: int = 0  # decode steps since the last factorisation
    full_keys: torch.Tensor | None = None  # (b, Hkv, n, d) exact keys, only to measure attention mass

    @property
    def n_tokens(self) -> int:
        return self.fact_end + self.recent_k.shape[2]


class ShadowKVState(PolicyState):
    """Per-request ShadowKV state of a batch of b equal-length sequences (see the module docstring)."""

    wants_layer_inputs = True

    def __init__(self, policy: ShadowKVPolicy, shape: AttentionShape, batch_size: int, device: torch.device,
                 dtype: torch.dtype, timer: OpTimer) -> None:
        self.policy, self.config, self.shape, self.b = policy, policy.config, shape, batch_size
        self.timer = timer
        self.device, self.dtype, self.p = device, dtype, policy.config.page_size
        self.streams = DeviceStreams(device)
        self.dense: dict[int, DenseKVStore] = {
            layer: DenseKVStore(device, dtype) for layer in self.config.dense_layers}
        self.layers: list[_Layer | None] = [None] * shape.n_layers
        self._pre: list[torch.Tensor | None] = [None] * shape.n_layers  # pre-RoPE keys from layer_inputs
        self._rope: RopeTable | None = None
        empty = [np.zeros(0, np.int32)] * shape.n_kv_heads
        self._initial = [[list(empty) for _ in range(shape.n_layers)] for _ in range(batch_size)]
        self.log = StepLog(batch_size, shape.n_layers, shape.n_kv_heads, self.config.measure_attention_mass)
        self.n_slots = (self.config.budget_tokens - self.config.sink_tokens) // self.p

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

    def _rope_at(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (*positions.shape, d) for absolute positions (the model's table, grown by doubling)."""
        need = int(positions.max()) + 1 if positions.numel() else 1
        if self._rope is None or self._rope.n_positions < need:
            size = max(need, 2 * (self._rope.n_positions if self._rope is not None else 1024))
            self._rope = self.policy._rope.rope_table(size)  # type: ignore[union-attr]
        cos, sin = self._rope.cos[0].to(self.device), self._rope.sin[0].to(self.device)
        return cos[positions], sin[positions]

    def _fact_target(self, n_tokens: int) -> int:
        """The factorised region's end for n tokens: the first chunk boundary leaving <= window exact."""
        sink = min(self.config.sink_tokens, n_tokens)
        return sink + max(0, -(-(n_tokens - self.config.window_tokens - sink) // self.p)) * self.p

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
        b, hkv, _, d = k.shape
        host_v = host_empty((b, hkv, sink, d), v.dtype, self.device)  # grown and filled by _fold
        none = k.new_zeros(b, hkv, 0, d)
        ls = _Layer(
            sink_k=k[:, :, :sink].clone(), sink_v=v[:, :, :sink].clone(),
            recent_k=k[:, :, fact_end:].clone(), recent_v=v[:, :, fact_end:].clone(),
            recent_pre=pre[:, :, fact_end:].clone(), fact_end=sink,
            lowrank=LowRankKeys.factorise(none, self.policy.rank),
            landmarks=none, min_cos=k.new_zeros(b, hkv, 0, dtype=torch.float32),
            outliers=torch.zeros(b, hkv, 0, dtype=torch.int64, device=k.device),
            outlier_k=none, outlier_v=none,
            host_v=host_v, slots_v=k.new_zeros(b, hkv, self.n_slots, self.p, d),
            resident=np.full((b, hkv, self.n_slots), -1, np.int64),
            full_keys=k.clone() if self.config.measure_attention_mass else None)
        self.layers[layer] = ls
        with self.timer.op("refactorise"):
            self._fold(ls, k[:, :, sink:fact_end], v[:, :, sink:fact_end], pre[:, :, sink:fact_end])
        with self.timer.op("select"):
            plan = self._plan(ls, q[:, :, -1])
            seq, head, page, slot = apply_plans(plan, ls.resident, np.ones(plan.n_missed.shape, bool))
            self._install(ls, v, seq, head, page, slot)  # from the prompt's values, already on the device
        for i in range(self.b):
            self._initial[i][layer] = [plan.selected[i, h, : plan.n_selected[i, h]].astype(np.int32)
                                       for h in range(hkv)]
        return out

    def end_prefill(self) -> PrefillDecisions:
        return PrefillDecisions(initial_selected=[[list(heads) for heads in seq] for seq in self._initial])

    # ---- factorisation ----
    def _fold(self, ls: _Layer, k: torch.Tensor, v: torch.Tensor, pre: torch.Tensor) -> np.ndarray:
        """Fold whole chunks k, v, pre (b, Hkv, m, d) at [fact_end, fact_end + m) into the factorised region:
        SVD, landmarks, outliers (recomputed over all chunks), host values. Returns the tokens the device
        gave up per (b, Hkv): the folded tokens not kept as outliers, and the demoted outliers' tokens."""
        b, hkv, m, d = k.shape
        p, start = self.p, ls.fact_end
        n_old_chunks = ls.landmarks.shape[2]
        ls.lowrank = ls.lowrank.fold(pre)
        new_landmarks, new_cos = chunk_landmarks(k, p)
        ls.landmarks = torch.cat([ls.landmarks, new_landmarks], dim=2)
        ls.min_cos = torch.cat([ls.min_cos, new_cos], dim=2)
        n_chunks = ls.landmarks.shape[2]
        n_out = min(self.policy.outlier_chunks, n_chunks)
        everything = torch.ones_like(ls.min_cos, dtype=torch.bool)
        outliers = torch.sort(lowest_kept(ls.min_cos, everything, n_out), dim=-1).values  # (b, Hkv, n_out)
        # the exact chunks on hand: the old outliers and the folded ones; every new outlier is among them
        pool_ids = torch.cat([ls.outliers, torch.arange(n_old_chunks, n_chunks, device=k.device)
                              .expand(b, hkv, -1)], dim=2)
        pool_k = torch.cat([ls.outlier_k, k], dim=2).view(b, hkv, -1, p, d)
        pool_v = torch.cat([ls.outlier_v, v], dim=2).view(b, hkv, -1, p, d)
        if n_out:
            where = (pool_ids[:, :, None, :] == outliers[..., None]).int().argmax(dim=-1)  # (b, Hkv, n_out)
            index = where[..., None, None].expand(-1, -1, -1, p, d)
            ls.outlier_k = pool_k.gather(2, index).view(b, hkv, n_out * p, d)
            ls.outlier_v = pool_v.gather(2, index).view(b, hkv, n_out * p, d)
        kept_old = (ls.outliers[:, :, :, None] == outliers[:, :, None, :]).any(-1).sum(-1)  # (b, Hkv)
        demoted = ls.outliers.shape[2] - kept_old
        kept_new = (outliers >= n_old_chunks).sum(-1)
        ls.outliers = outliers
        end = start + m
        if ls.host_v.shape[2] < end:
            grown = host_empty((b, hkv, max(end, 2 * ls.host_v.shape[2]), d), ls.host_v.dtype, self.device)
            grown[:, :, :start].copy_(ls.host_v[:, :, :start])
            ls.host_v = grown
        ls.host_v[:, :, start:end].copy_(v)
        ls.fact_end = end
        return ((demoted + (m // p - kept_new)) * p).cpu().numpy().astype(np.int32)

    def _refactorise(self, ls: _Layer) -> np.ndarray:
        m = self._fact_target(ls.n_tokens) - ls.fact_end
        k, v, pre = ls.recent_k[:, :, :m], ls.recent_v[:, :, :m], ls.recent_pre[:, :, :m]
        gave_up = self._fold(ls, k, v, pre)
        ls.recent_k, ls.recent_v = ls.recent_k[:, :, m:], ls.recent_v[:, :, m:]
        ls.recent_pre = ls.recent_pre[:, :, m:]
        ls.since = 0
        return gave_up

    # ---- selection and recall ----
    def _n_select(self, ls: _Layer) -> int:
        """k: the chunks the budget leaves after sink, recent and outliers (at most the candidates)."""
        room = (self.config.budget_tokens - ls.sink_k.shape[2] - ls.recent_k.shape[2]) // self.p
        n_out, n_chunks = ls.outliers.shape[2], ls.landmarks.shape[2]
        return max(0, min(room - n_out, n_chunks - n_out))

    def _scores(self, ls: _Layer, q: torch.Tensor) -> torch.Tensor:
        """(b, Hkv, C) float32: per query head softmax of q . landmark / sqrt(d) over the candidates, max over
        the group (ShadowKV's pooling, kv_cache.py:289-293); -inf on outlier chunks."""
        b, hq, d = q.shape
        hkv, n_chunks = ls.landmarks.shape[1], ls.landmarks.shape[2]
        qg = q.float().reshape(b, hkv, hq // hkv, d)
        raw = qg @ ls.landmarks.float().transpose(-1, -2) / math.sqrt(d)  # (b, Hkv, G, C)
        outlier = torch.zeros(b, hkv, n_chunks, dtype=torch.bool, device=q.device)
        outlier.scatter_(2, ls.outliers, True)
        probs = torch.softmax(raw.masked_fill(outlier[:, :, None], float("-inf")), dim=-1).amax(dim=2)
        return probs.masked_fill(outlier, float("-inf"))

    def _plan(self, ls: _Layer, q: torch.Tensor):  # noqa: ANN202 (a ReusePlan)
        """Top-k chunks for q (b, Hq, d) and their reuse plan against the chunks the device holds."""
        k = self._n_select(ls)
        first = ls.sink_k.shape[2] // self.p  # chunk id of the region's first chunk
        if k == 0:  # nothing to select (no candidate chunks, or no room): the device keeps no chunk
            top = np.zeros((*ls.resident.shape[:2], 0), np.int64)
            return plan_reuse(top, ls.resident, np.full(ls.resident.shape, -np.inf))
        scores = self._scores(ls, q)
        top = torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k].cpu().numpy() + first
        held = np.maximum(ls.resident - first, 0)  # resident chunks are always candidates (never outliers)
        resident_scores = np.take_along_axis(scores.cpu().numpy(), held, axis=-1)
        resident_scores = np.where(ls.resident < 0, -np.inf, resident_scores)
        return plan_reuse(top, ls.resident, resident_scores)

    def _install(self, ls: _Layer, source_v: torch.Tensor, seq: np.ndarray, head: np.ndarray,
                 page: np.ndarray, slot: np.ndarray) -> torch.cuda.Event | None:
        """Copy chunks' values (absolute token positions in source_v (b, Hkv, N, d), host or device) into
        their slots. From the host on CUDA: one gather into a pinned buffer, one copy on the copy stream;
        returns the event the attention waits on."""
        if len(seq) == 0:
            return None
        tok = torch.as_tensor(page[:, None] * self.p + np.arange(self.p)[None, :])
        s, h = torch.as_tensor(seq)[:, None], torch.as_tensor(head)[:, None]
        rows = source_v[s.to(source_v.device), h.to(source_v.device), tok.to(source_v.device)]  # (n, p, d)
        dev_s, dev_h = torch.as_tensor(seq, device=self.device), torch.as_tensor(head, device=self.device)
        dev_slot = torch.as_tensor(slot, device=self.device)
        if rows.device == ls.slots_v.device:
            ls.slots_v[dev_s, dev_h, dev_slot] = rows
            return None
        self.streams.wait(self.streams.record(), self.streams.copy)  # the slots' last readers ran first
        with _on(self.streams.copy):
            ls.slots_v[dev_s, dev_h, dev_slot] = rows.pin_memory().to(self.device, non_blocking=True)
        return self.streams.record(self.streams.copy)

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
        pre = self._take_pre(layer, 1)
        with self.timer.op("append_offload"):
            ls.recent_k = torch.cat([ls.recent_k, k], dim=2)
            ls.recent_v = torch.cat([ls.recent_v, v], dim=2)
            ls.recent_pre = torch.cat([ls.recent_pre, pre], dim=2)
            if ls.full_keys is not None:
                ls.full_keys = torch.cat([ls.full_keys, k], dim=2)
        ls.since += 1
        b, hkv = self.b, self.shape.n_kv_heads
        gave_up = np.zeros((b, hkv), np.int32)
        refactorised = np.zeros((b, hkv), bool)
        if ls.since >= self.policy.refactor_interval and self._fact_target(ls.n_tokens) > ls.fact_end:
            with self.timer.op("refactorise"):
                gave_up += self._refactorise(ls)
            refactorised[:] = True
        with self.timer.op("select"):
            q_t = q[:, :, 0]
            plan = self._plan(ls, q_t)
            held_before = (ls.resident >= 0).sum(-1)
        with self.timer.op("recall_sync"):
            seq, head, page, slot = apply_plans(plan, ls.resident, np.ones((b, hkv), bool))
            fetched = self._install(ls, ls.host_v, seq, head, page, slot)
            slot_of = self._keep_selected(ls, plan.selected)
        gave_up += ((held_before - (plan.n_selected - plan.n_missed)) * self.p).astype(np.int32)
        out = self._attend(layer, ls, q, plan.selected, slot_of, fetched)
        self.log.sparse(layer, np.full((b, hkv), np.nan, np.float32), np.ones((b, hkv), bool), plan)
        fetched_tokens = (plan.n_missed * self.p).astype(np.int32)  # values only: keys are rebuilt
        self.log.moved(layer, fetched_tokens=fetched_tokens, evicted_tokens=gave_up,
                       refactorised=refactorised)
        return out

    def _keep_selected(self, ls: _Layer, selected: np.ndarray) -> np.ndarray:
        """The device holds exactly this step's chunks (as ShadowKV's buffer): free the other slots.
        selected (b, Hkv, k) ascending ids -> (b, Hkv, k) the slot of each."""
        match = ls.resident[..., None, :] == selected[..., :, None]  # (b, Hkv, k, K)
        ls.resident[~match.any(axis=-2)] = -1
        return match.argmax(axis=-1)

    def _attend(self, layer: int, ls: _Layer, q: torch.Tensor, selected: np.ndarray, slot_of: np.ndarray,
                fetched: torch.cuda.Event | None) -> torch.Tensor:
        """Attention over sink, outliers, selected (rebuilt keys, fetched values), recent: (b, Hq, 1, d)."""
        b, hkv, k = selected.shape
        p, d = self.p, self.shape.head_dim
        first = ls.sink_k.shape[2] // p
        with self.timer.op("rebuild_keys"):
            pos = torch.as_tensor(selected[..., None] * p + np.arange(p), device=self.device)
            pos = pos.view(b, hkv, k * p)
            keys = ls.lowrank.keys(pos - first * p)
            cos, sin = self._rope_at(pos)
            keys = apply_rope(keys, cos.to(keys.dtype), sin.to(keys.dtype))
        self.streams.wait(fetched)
        slots = torch.as_tensor(slot_of, device=self.device)[..., None, None].expand(b, hkv, k, p, d)
        values = ls.slots_v.gather(2, slots).view(b, hkv, k * p, d)
        all_k = torch.cat([ls.sink_k, ls.outlier_k, keys, ls.recent_k], dim=2)
        all_v = torch.cat([ls.sink_v, ls.outlier_v, values, ls.recent_v], dim=2)
        with self.timer.op("attention"):
            out = F.scaled_dot_product_attention(q, all_k, all_v, enable_gqa=True)
        mass = None
        if ls.full_keys is not None:
            mass = attention_mass(q[:, :, 0], ls.full_keys, self._attended_mask(ls, pos)).cpu().numpy()
        self.log.attended(layer, np.full((b, hkv), all_k.shape[2], np.int32), mass)
        return out

    def _attended_mask(self, ls: _Layer, selected_pos: torch.Tensor) -> torch.Tensor:
        """(b, Hkv, n) bool: the tokens attended (sink, outlier chunks, selected chunks, recent window)."""
        b, hkv = selected_pos.shape[:2]
        mask = torch.zeros(b, hkv, ls.n_tokens, dtype=torch.bool, device=self.device)
        sink = ls.sink_k.shape[2]
        mask[:, :, :sink] = True
        mask[:, :, ls.fact_end:] = True
        chunk_tokens = torch.arange(self.p, device=self.device)
        out_pos = (sink + ls.outliers[..., None] * self.p + chunk_tokens).flatten(2)
        mask.scatter_(2, out_pos, True)
        return mask.scatter(2, selected_pos, True)

    def end_step(self) -> StepDecisions:
        return self.log.finish()
