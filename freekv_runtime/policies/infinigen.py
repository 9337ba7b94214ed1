"""InfiniGen: speculate the next layer's attention from a partial query/key projection, prefetch its tokens.

Lee et al., "InfiniGen: Efficient Generative Inference of Large Language Models with Dynamic KV Cache
Management" (OSDI 2024); public code snu-comparch/InfiniGen, read for semantics (nothing copied):
accuracy/src/modeling_llama_ours.py (Llama: speculation from the previous layer's input, `kv_cache_mask`
threshold rule, alpha = 5), accuracy/setup/gen_llama_skewing_matrix.py and
accuracy/src/modeling_llama_ours_setup.py (skewing, partial columns: see `_infinigen_skew`),
speedup/infinigen/infinigen/kv_selection_controller.py (`speculate_attention`: count of scores above
max - alpha per head, mean over heads, top-k capped by max_num_kv; `select_kv`: gather of the selected
tokens from the host cache), speedup/scripts/figure14/run.sh (--alpha 4 --partial-weight-ratio 0.2).

Runtime policy (b batch, Hq / Hkv heads, G = Hq / Hkv, N tokens, d head dim, S / W sink / window tokens):
- `prepare(model)`: per sparse layer, the skew A (Hkv, d, d) and the partial columns, from a seeded
  calibration prompt run through the model (`_infinigen_skew.calibrate`).
- Where the KV lives: dense layers (`dense_layers`, which must include layer 0: it has no previous layer
  to speculate from; layer 1 too with `dense_layer_1`, the default: InfiniGen's code speculates from
  layer 2 on, accuracy/src/modeling_llama_ours.py:703-704 and speedup/flexgen/infinigen/flex_opt.py:287)
  whole on the device; every sparse layer's full K/V on the host, and on the device
  only the sink tokens, the recent window (a ring of W slots), the partial key cache (the skewed post-RoPE
  keys' partial columns of every token) and a prefetch buffer.
- Speculation (decode, in `layer_inputs(l - 1, hidden)`, before layer l - 1 attends): layer l's query
  from layer l - 1's normed input (layer l's full q_proj, RoPE at the current position, skewed, cut to
  the partial columns, as InfiniGen's Llama path does), scored against layer l's partial key cache:
  s = q_part . k_part / sqrt(d), (b, Hkv, G, N). Per query head, the tokens with s > max(s) - alpha
  outside sink and window are counted; the count's mean over the sequence's query heads (InfiniGen
  fetches the same number for every head, modeling_llama_ours.py:225), floored, capped, is the number
  selected per head. The cap: budget - S - W (this project's equal-budget convention), or with
  `fetch_fraction` f, int(f x context) (InfiniGen's accuracy code: 0.2, modeling_llama_ours.py:194, 226).
  `selection` per-query-head (default; the code's top-k per head, modeling_llama_ours.py:234, 238): each
  query head takes its own top tokens by its own s and attends them; the KV head's prefetch is the union of
  its group's tokens. per-kv-head: each KV head takes its top tokens by the group's max-pooled s (one set
  serves the whole group). While the context fits the budget (N + 1 <= budget_tokens) every token outside
  sink and window is selected without scoring (so a budget covering the context is dense).
- Prefetch: the selected tokens' K/V are gathered on the host and copied to the device prefetch buffer on
  the copy stream (CUDA; synchronous on the CPU; per query head the runtime copies each query head's rows,
  a group's shared tokens once per head, while the trace counts the union, what fetching each token once
  moves); layer l's attention waits on that event and attends
  sink + prefetched + window (masked softmax in fp32). Nothing is kept between steps: InfiniGen
  re-fetches every step's selection (no reuse).
- New tokens: K/V to the host store (a blocking copy), the partial key to the device cache, into the ring.

Trace (StepLog): `attended(...)` sink + window + selected tokens per (sequence, layer, KV head) (per query
head: what each of its query heads attends); `moved(fetched_tokens = tokens prefetched this step (all of
them: none is resident beforehand; per query head the union of the group's),
evicted_tokens = the previous step's prefetched tokens, replaced in the buffer)`; similarity NaN,
`corrected` False (the prefetch is background), `selected` / `missed` empty (token granular: no page
mapping), prefill decisions empty. Dense layers: all tokens, nothing moved.

Configuration: RuntimeConfig budget_tokens (counts sink and window; FreeKV paper baseline 2048),
sink_tokens, window_tokens, dense_layers (must include 0; FreeKV baseline: layer 0; layer 1 is dense as
well unless dense_layer_1 is false); page_size only validates the others (token granular). `config.knobs`
(traces.catalogue.retrieval.InfiniGenKnobs):
- partial_ratio (float in (0, 1], default 0.2: the scripts' --partial-weight-ratio): int(d * ratio)
  columns from the queries and as many from the keys, their union;
- alpha (float > 0, default 5.0: modeling_llama_ours.py; the speedup scripts use 4): logit margin below
  each head's maximum for a token to count;
- calib_tokens (int >= 16, default 512; the code calibrates on 2048 tokens of pg19), calib_seed (int >=
  0, default 0): the seeded random-token calibration prompt;
- selection ("per-query-head" default, or "per-kv-head"), dense_layer_1 (bool, default true),
  fetch_fraction (null: the budget's cap, or a share of the context in (0, 1]).
Differences from the accuracy code that remain: its threshold is max - alpha of the FIRST head's row for
every head (`torch.max(...)[0][0]`, modeling_llama_ours.py:220), here each head's own maximum (as the
speedup code, kv_selection_controller.py:53-54); its model is multi-head Llama-2 (no GQA group to pool).
The CUDA path (copy stream, events, pinned staging) was not run on a GPU here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
from freekv_runtime.model import apply_rope
from freekv_runtime.policies._dense import attention_mass, dense_decode
from freekv_runtime.policies._dropping import masked_decode
from freekv_runtime.policies._infinigen_skew import LayerSkew, calibrate
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
from freekv_runtime.policies.dense import DenseKVCache
from freekv_runtime.recall import DeviceStreams, host_empty
from freekv_runtime.timing import OpTimer

__all__ = ["InfiniGenPolicy", "InfiniGenState"]

_EMPTY = np.zeros(0, dtype=np.int32)




class _Prepared:
    """What `prepare` read of the model: per sparse layer its skew tables and query projection."""

    def __init__(self, model: ModelAccess, skews: dict[int, LayerSkew]) -> None:
        self.skews = skews
        self.q_proj = {layer: model.q_proj(layer) for layer in skews}
        self.rope_table = model.rope_table


class InfiniGenPolicy(KVPolicy):
    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        self.knobs = config.knobs
        if 0 not in config.dense_layers:
            raise RuntimeConfigError(
                "dense_layers must include layer 0 for method infinigen: layer l is speculated from layer "
                f"l - 1's input, and layer 0 has none (got dense_layers={list(config.dense_layers)})")
        self._prepared: _Prepared | None = None

    def prepare(self, model: ModelAccess) -> None:
        check_dense_layers(self.config, model.shape)
        n_layers = model.shape.n_layers
        dense = {*self.config.dense_layers, *((1,) if self.knobs.dense_layer_1 else ())}
        sparse = [layer for layer in range(n_layers) if layer not in dense]
        skews = calibrate(model, sparse, self.knobs.partial_ratio, self.knobs.calib_tokens,
                          self.knobs.calib_seed)
        self._prepared = _Prepared(model, skews)

    def prepared_metadata(self) -> dict[str, Any]:
        """The calibration's summary for the trace metadata (traces.probe): calibration prompt tokens,
        partial_ratio, skewed layers, and the mean count of partial columns per (layer, KV head) (the
        union of the query's and the key's top int(d * ratio) columns, so between int(d * ratio) and
        twice that) with the head dim; {} before `prepare`."""
        if self._prepared is None:
            return {}
        skews = self._prepared.skews
        cols = [float(t.col_mask.sum(dim=1).mean()) for t in skews.values()]
        head_dim = next(iter(skews.values())).skew.shape[-1] if skews else 0
        return {"calibration_tokens": self.knobs.calib_tokens,
                "partial_ratio": self.knobs.partial_ratio, "skewed_layers": len(skews),
                "partial_columns_mean": float(np.mean(cols)) if cols else 0.0, "head_dim": int(head_dim)}

    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> InfiniGenState:
        if self._prepared is None:
            raise RuntimeConfigError("method infinigen must be prepared with the model before new_state")
        return InfiniGenState(self.config, self.knobs.alpha, self._prepared, shape, batch_size,
                              torch.device(device), dtype, timer)


def _union_sizes(idx: torch.Tensor, n_sel: np.ndarray) -> np.ndarray:
    """(b, Hkv) distinct tokens among the first n_sel[i] of every row of idx (b, Hkv, R, k) of sequence i."""
    b, hkv = idx.shape[:2]
    out = np.zeros((b, hkv), dtype=np.int64)
    for i in range(b):
        rows = idx[i, :, :, : int(n_sel[i])].reshape(hkv, -1)
        out[i] = [len(torch.unique(r)) for r in rows]
    return out


class _Prefetch:
    """One sparse layer's selection for the coming attention: idx (b, Hkv, R, k) token ids (host int64;
    R = G rows per KV head when each query head selects, else 1), n_sel (b,) tokens selected per head of
    each sequence, keys/values (b, Hkv, R, k, d) on the device, ready after `event` (CUDA; None on the
    CPU)."""

    def __init__(self, idx: torch.Tensor, n_sel: np.ndarray, keys: torch.Tensor, values: torch.Tensor,
                 event: torch.cuda.Event | None) -> None:
        self.idx, self.n_sel, self.keys, self.values, self.event = idx, n_sel, keys, values, event
        self.staged: torch.Tensor | None = None


class InfiniGenState(PolicyState):
    """Per-request state. dense: device KV of the dense layers; host: full KV of the sparse layers (CPU);
    ring_k/ring_v[l] (b, Hkv, S + W, d): sink slots [0, S) and window slots, token n >= S in slot
    S + (n - S) % W; partial[l] (b, Hkv, cap, c) float32 skewed partial keys; n_tokens[l] tokens held."""

    wants_layer_inputs = True

    def __init__(self, config: RuntimeConfig, alpha: float, prepared: _Prepared, shape: AttentionShape,
                 batch_size: int, device: torch.device, dtype: torch.dtype, timer: OpTimer) -> None:
        self.config, self.alpha, self.prep, self.shape = config, alpha, prepared, shape
        self.per_query_head = config.knobs.selection == "per-query-head" and shape.group_size > 1
        self.b, self.device, self.timer = batch_size, device, timer
        self.streams = DeviceStreams(device)
        self.dense = DenseKVCache.empty(shape, batch_size, device, dtype)
        self.host = DenseKVCache.empty(shape, batch_size, torch.device("cpu"), dtype)
        s, w = config.sink_tokens, config.window_tokens
        ring = (batch_size, shape.n_kv_heads, s + w, shape.head_dim)
        self.ring_k = {layer: torch.zeros(ring, device=device, dtype=dtype) for layer in prepared.skews}
        self.ring_v = {layer: torch.zeros(ring, device=device, dtype=dtype) for layer in prepared.skews}
        self.partial = {layer: torch.zeros(*ring[:2], 0, t.cols.shape[1], device=device)
                        for layer, t in prepared.skews.items()}
        self.n_tokens = [0] * shape.n_layers
        self.pending: dict[int, _Prefetch] = {}
        self.prev_fetched = {layer: np.zeros((batch_size, shape.n_kv_heads), np.int32)
                             for layer in prepared.skews}
        self._rope = prepared.rope_table(1)
        self._decoding = False
        self.log = StepLog(batch_size, shape.n_layers, shape.n_kv_heads, config.measure_attention_mass)

    def is_sparse(self, layer: int) -> bool:
        return layer in self.prep.skews

    @property
    def unbudgeted_heads(self) -> np.ndarray:
        """(L, Hkv) bool: the heads of layers the method keeps dense beyond `dense_layers` (layer 1 with
        `dense_layer_1`, as InfiniGen's code): they attend the whole context."""
        extra = [layer not in self.config.dense_layers and not self.is_sparse(layer)
                 for layer in range(self.shape.n_layers)]
        return np.repeat(np.asarray(extra, dtype=bool)[:, None], self.shape.n_kv_heads, axis=1)

    # ---- storing tokens ----
    def _store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append k, v (b, Hkv, T, d) post-RoPE of a sparse layer: host, partial keys, sink/window slots."""
        n_old, n_new = self.n_tokens[layer], k.shape[2]
        self.host.append(layer, k.to("cpu"), v.to("cpu"))
        part = self.prep.skews[layer].partial(k)
        held = self.partial[layer]
        if n_old + n_new > held.shape[2]:  # grow with a quarter of headroom: amortised O(1) per token
            grown = held.new_zeros(*held.shape[:2], (n_old + n_new) * 5 // 4 + 64, held.shape[3])
            grown[:, :, :n_old] = held[:, :, :n_old]
            self.partial[layer] = held = grown
        held[:, :, n_old:n_old + n_new] = part
        s, w = self.config.sink_tokens, self.config.window_tokens
        pos = torch.arange(n_old, n_old + n_new)
        pos = pos[(pos < s) | (pos >= n_old + n_new - w)]  # the ones that are sink or stay in the window
        slots = torch.where(pos < s, pos, s + (pos - s) % w).to(self.device)
        local = (pos - n_old).to(self.device)
        self.ring_k[layer][:, :, slots] = k[:, :, local]
        self.ring_v[layer][:, :, slots] = v[:, :, local]
        self.n_tokens[layer] = n_old + n_new

    def _ring_valid(self, n: int) -> torch.Tensor:
        """(S + W,) bool: the ring slots holding a token of a context of n tokens."""
        s, w = self.config.sink_tokens, self.config.window_tokens
        slot = torch.arange(s + w, device=self.device)
        return torch.where(slot < s, slot < n, slot - s < min(w, max(0, n - s)))

    # ---- PolicyState ----
    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with self.timer.op("attention"):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        with self.timer.op("append_offload"):
            if self.is_sparse(layer):
                self._store(layer, k, v)
            else:
                self.dense.append(layer, k, v)
                self.n_tokens[layer] += k.shape[2]
        return out

    def end_prefill(self) -> PrefillDecisions:
        self._decoding = True
        layers = [[_EMPTY] * self.shape.n_kv_heads for _ in range(self.shape.n_layers)]
        return PrefillDecisions(initial_selected=[[list(h) for h in layers] for _ in range(self.b)])

    def layer_inputs(self, layer: int, hidden: torch.Tensor, k_pre_rope: torch.Tensor, start: int) -> None:
        """Decode: speculate layer + 1 from this layer's input hidden (b, 1, D) and start its prefetch."""
        target = layer + 1
        if not self._decoding or not self.is_sparse(target):
            return
        with self.timer.op("select"):
            idx, n_sel = self._speculate(target, hidden, start)
        with self.timer.op("recall_background"):
            self.pending[target] = self._prefetch(target, idx, n_sel)

    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if not self.is_sparse(layer):
            keys, values = self.dense.append(layer, k, v)
            self.n_tokens[layer] += 1
            with self.timer.op("attention"):
                out = dense_decode(q, keys, values)
            self.log.dense(layer, keys.shape[2])
            return out
        fetch = self.pending.pop(layer, None)
        if fetch is None:
            raise RuntimeError(f"infinigen: layer {layer} decoded without the speculation of layer_inputs"
                               f"({layer - 1}); the model must call layer_inputs (wants_layer_inputs)")
        with self.timer.op("append_offload"):
            self._store(layer, k, v)
        n = self.n_tokens[layer]
        self.streams.wait(fetch.event)
        ring = self._ring_valid(n)
        b, hkv, r, k, d = fetch.keys.shape
        picked = torch.arange(k, device=self.device)[None, :] < torch.as_tensor(
            fetch.n_sel, device=self.device)[:, None]  # (b, k)
        keep = torch.cat([ring.expand(b, hkv * r, -1), picked[:, None].expand(-1, hkv * r, -1)], dim=2)
        with self.timer.op("attention"):  # rows: the KV heads, or each query head with its own tokens
            ring_rows = (-1, -1, r, -1, -1)
            keys = torch.cat([self.ring_k[layer][:, :, None].expand(*ring_rows), fetch.keys], dim=3)
            values = torch.cat([self.ring_v[layer][:, :, None].expand(*ring_rows), fetch.values], dim=3)
            out, _ = masked_decode(q, keys.reshape(b, hkv * r, -1, d), values.reshape(b, hkv * r, -1, d),
                                   keep)
        attended = np.broadcast_to((int(ring.sum()) + fetch.n_sel)[:, None], (self.b, self.shape.n_kv_heads))
        mass = self._mass(layer, q, fetch, n) if self.config.measure_attention_mass else None
        self.log.attended(layer, attended.astype(np.int32), mass)
        heads = (self.b, self.shape.n_kv_heads)
        fetched = (_union_sizes(fetch.idx, fetch.n_sel) if r > 1 else
                   np.broadcast_to(fetch.n_sel[:, None], heads)).astype(np.int32)
        evicted = np.broadcast_to(self.prev_fetched[layer], heads).astype(np.int32)
        self.log.moved(layer, fetched_tokens=fetched, evicted_tokens=evicted)
        self.prev_fetched[layer] = fetched
        return out

    def end_step(self) -> StepDecisions:
        return self.log.finish()

    # ---- speculation and prefetch ----
    def candidates(self, n_after: int) -> tuple[int, int]:
        """Token range [lo, hi) outside sink and window once the context holds n_after tokens."""
        s, w = self.config.sink_tokens, self.config.window_tokens
        return s, max(s, n_after - w)

    def speculative_scores(self, layer: int, hidden: torch.Tensor, start: int) -> torch.Tensor:
        """Layer `layer`'s approximate scores (b, Hkv, G, N) of its N held tokens for the query at position
        `start` made from hidden (b, 1, D), the previous layer's normed input."""
        b, hq, hkv, d = self.b, self.shape.n_qo_heads, self.shape.n_kv_heads, self.shape.head_dim
        if start + 1 > self._rope.n_positions:
            self._rope = self.prep.rope_table(2 * (start + 1))
        q = self.prep.q_proj[layer](hidden).view(b, 1, hq, d).transpose(1, 2)  # (b, Hq, 1, d)
        q = apply_rope(q, *self._rope.at(start, 1))
        q_part = self.prep.skews[layer].partial(q.reshape(b, hkv, hq // hkv, d))  # (b, Hkv, G, c)
        keys = self.partial[layer][:, :, : self.n_tokens[layer]]
        return q_part @ keys.transpose(-1, -2) / math.sqrt(d)

    def fetch_cap(self, n_after: int) -> int:
        """Most tokens one head fetches: budget - sink - window, or int(fetch_fraction x context)."""
        fraction = self.config.knobs.fetch_fraction
        if fraction is None:
            return self.config.budget_tokens - self.config.sink_tokens - self.config.window_tokens
        return int(n_after * fraction)

    def _speculate(self, layer: int, hidden: torch.Tensor, start: int) -> tuple[torch.Tensor, np.ndarray]:
        """(idx (b, Hkv, R, k) int64 token ids best first, n_sel (b,)): layer's tokens to prefetch; R = G
        (each query head its own) or 1 (one set per KV head)."""
        n_after = self.n_tokens[layer] + 1
        lo, hi = self.candidates(n_after)
        hkv, rows = self.shape.n_kv_heads, self.shape.group_size if self.per_query_head else 1
        if n_after <= self.config.budget_tokens:  # the context fits the budget: every candidate
            idx = torch.arange(lo, hi, device=self.device).expand(self.b, hkv, rows, -1)
            return idx, np.full(self.b, hi - lo, dtype=np.int64)
        scores = self.speculative_scores(layer, hidden, start)  # (b, Hkv, G, N)
        top = scores.amax(dim=-1, keepdim=True)
        count = (scores[..., lo:hi] > top - self.alpha).sum(-1).float().mean(dim=(1, 2))  # (b,)
        cap = self.fetch_cap(n_after)
        n_sel = np.minimum(np.floor(count.cpu().numpy()).astype(np.int64), min(cap, hi - lo))
        ranked = scores[..., lo:hi] if self.per_query_head else scores[..., lo:hi].amax(dim=2, keepdim=True)
        order = torch.sort(ranked, dim=-1, descending=True, stable=True).indices  # (b, Hkv, R, candidates)
        return order[..., : int(n_sel.max())] + lo, n_sel

    def _prefetch(self, layer: int, idx: torch.Tensor, n_sel: np.ndarray) -> _Prefetch:
        """Gather the selected tokens' K/V on the host and copy them to the device (copy stream on CUDA)."""
        idx_host = idx.to("cpu")
        b, hkv, r, k = idx_host.shape
        n, d = self.n_tokens[layer], self.shape.head_dim
        gather = idx_host.reshape(b, hkv, r * k, 1).expand(b, hkv, r * k, d)
        host_k, host_v = self.host.keys[layer][:, :, :n], self.host.values[layer][:, :, :n]
        if not self.streams.is_cuda:
            return _Prefetch(idx_host, n_sel, host_k.gather(2, gather).view(b, hkv, r, k, d),
                             host_v.gather(2, gather).view(b, hkv, r, k, d), None)
        staged = host_empty((2, b, hkv, r, k, d), host_k.dtype, self.device)  # pinned
        torch.gather(host_k, 2, gather, out=staged[0].view(b, hkv, r * k, d))
        torch.gather(host_v, 2, gather, out=staged[1].view(b, hkv, r * k, d))
        ready = self.streams.record()
        with torch.cuda.stream(self.streams.copy):
            self.streams.wait(ready, self.streams.copy)
            on_device = staged.to(self.device, non_blocking=True)
        on_device.record_stream(torch.cuda.current_stream(self.device))  # used by the layer's attention
        fetch = _Prefetch(idx_host, n_sel, on_device[0], on_device[1], self.streams.record(self.streams.copy))
        fetch.staged = staged  # the pinned source stays alive until the copy is done
        return fetch

    def _mass(self, layer: int, q: torch.Tensor, fetch: _Prefetch, n: int) -> np.ndarray:
        """Dense attention probability on the attended tokens (from the host's full keys), each query head
        on the tokens it attends, mean over the group: (b, Hkv)."""
        b, hkv, r = fetch.idx.shape[:3]
        mask = self._ring_valid(n).new_zeros(b, hkv * r, n)
        lo, hi = self.candidates(n)
        mask[:, :, :lo] = True
        mask[:, :, hi:] = True
        for i in range(b):
            picked = fetch.idx[i, :, :, : fetch.n_sel[i]].reshape(hkv * r, -1)
            mask[i].scatter_(1, picked.to(self.device), True)
        keys = self.host.keys[layer][:, :, :n].to(self.device).repeat_interleave(r, dim=1)
        mass = attention_mass(q[:, :, 0], keys, mask)  # (b, Hkv * R)
        return mass.view(b, hkv, r).mean(-1).cpu().numpy()
