"""Shared machinery of the dropping policies (StreamingLLM, H2O, SnapKV, RaaS): evicted tokens are gone.

Every layer's K/V stay in one dense device buffer (`DenseKVCache`, as `full` keeps them); a per-layer
`keep` mask (b, Hkv, N) bool says which tokens a KV head still holds. An evicted token is never attended
again, so the decisions, outputs and accuracy are those of a cache that really deleted it (the buffer only
saves the copies a compacting cache would make). Nothing is offloaded: nothing crosses the host link.

Decode of a sparse layer (a layer not in `config.dense_layers`), per step:
1. append the new token (kept: it is in the recent window);
2. while a KV head holds more than `budget_tokens` tokens, the method's `_evict` drops some (the budget
   counts sink and window, as everywhere in this project), so attention never exceeds the budget;
3. attention over the kept tokens, computed explicitly (q . K^T / sqrt(d), masked softmax, in float32)
   so that the attention probabilities are at hand for methods that learn from them (H2O, RaaS): no
   second pass over the keys;
4. the method's `_observe` updates its per-token statistics from those probabilities.
Prefill is dense causal attention over the prompt (as in every method's own code); `_after_prefill` lets
the method score the prompt (H2O: accumulated attention, SnapKV: observation-window votes).

Kept sets: `DroppingState.kept_token_indices(layer)` / `kept_mask(layer)` give the token positions each
sequence's KV head holds after the last step, so a comparison with a reference implementation (kvpress on
the same token ids) needs no internal access.

Trace: similarity NaN and nothing corrected (no correction check: correction rates are not applicable),
`selected` and `missed` empty (nothing is selected from or recalled over the host link; the hit rate is
then undefined), `attended_tokens` the tokens attended per layer and KV head, `evicted_tokens` the tokens
dropped at this step, nothing fetched, attention mass (optional) the dense probability mass on the kept
tokens. The per-step page lists of `initial_selected`
are empty.

Shapes: b batch, Hq / Hkv query / KV heads, G = Hq / Hkv, N cached tokens, T prompt tokens, d head dim.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.config import RuntimeConfig
from freekv_runtime.policies._dense import dense_decode
from freekv_runtime.policies._step_log import StepLog
from freekv_runtime.policies.base import AttentionShape, PolicyState, PrefillDecisions, StepDecisions
from freekv_runtime.policies.dense import DenseKVCache
from freekv_runtime.timing import OpTimer

__all__ = ["DroppingState", "masked_decode", "prompt_attention", "lowest_kept"]

_EMPTY = np.zeros(0, dtype=np.int32)
_PROMPT_CHUNK = 256  # prompt queries per block when the prompt's attention probabilities are needed


def masked_decode(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, keep: torch.Tensor,
                  extra: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """One query over the kept tokens. q (b, Hq, 1, d); keys, values (b, Hkv, N, d); keep (b, Hkv, N)
    bool -> (out (b, Hq, 1, d) in q's dtype, probs (b, Hkv, G, N) float32, 0 on dropped tokens).
    extra: one more token per KV head outside the cache, (key, value (b, Hkv, d), logit bias (b, Hkv)
    float, -inf where a head has none), attended in the same softmax (RazorAttention's compensation
    token); probs then leave its probability out."""
    b, hq, _, d = q.shape
    hkv = keys.shape[1]
    qg = q.float().reshape(b, hkv, hq // hkv, d)
    scores = qg @ keys.float().transpose(-1, -2) / math.sqrt(d)  # (b, Hkv, G, N)
    scores = scores.masked_fill(~keep[:, :, None], float("-inf"))
    if extra is None:
        probs = torch.softmax(scores, dim=-1)
        out = probs @ values.float()  # (b, Hkv, G, d)
        return out.reshape(b, hq, 1, d).to(q.dtype), probs
    extra_k, extra_v, bias = extra
    extra_score = (qg @ extra_k.float()[..., None])[..., 0] / math.sqrt(d) + bias[:, :, None]  # (b, Hkv, G)
    probs = torch.softmax(torch.cat([scores, extra_score[..., None]], dim=-1), dim=-1)
    out = probs[..., :-1] @ values.float() + probs[..., -1:] * extra_v.float()[:, :, None]
    return out.reshape(b, hq, 1, d).to(q.dtype), probs[..., :-1]


def prompt_attention(q: torch.Tensor, keys: torch.Tensor, first_query: int = 0) -> torch.Tensor:
    """Causal attention probabilities of prompt queries [first_query, T) summed over those queries and the
    group's heads: (b, Hkv, T) float32. q (b, Hq, T, d); keys (b, Hkv, T, d). Blocks of queries bound
    the memory to (b, Hq, block, T)."""
    b, hq, t, d = q.shape
    hkv = keys.shape[1]
    kf = keys.float()
    total = torch.zeros(b, hkv, t, dtype=torch.float32, device=q.device)
    for start in range(first_query, t, _PROMPT_CHUNK):
        stop = min(t, start + _PROMPT_CHUNK)
        qg = q[:, :, start:stop].float().reshape(b, hkv, hq // hkv, stop - start, d)
        scores = qg @ kf[:, :, None].transpose(-1, -2) / math.sqrt(d)  # (b, Hkv, G, n, T)
        rows = torch.arange(start, stop, device=q.device)[:, None]
        scores = scores.masked_fill(torch.arange(t, device=q.device)[None, :] > rows, float("-inf"))
        total += torch.softmax(scores, dim=-1).sum(dim=(2, 3))
    return total


def lowest_kept(score: torch.Tensor, candidate: torch.Tensor, n_drop: int) -> torch.Tensor:
    """(b, Hkv, n_drop) int64 indices of the n_drop lowest-scoring candidates of every row; ties go to
    the lower index (a stable sort: deterministic, batch-independent). score (b, Hkv, N) float;
    candidate (b, Hkv, N) bool, at least n_drop True per row."""
    ranked = score.masked_fill(~candidate, float("inf"))
    order = torch.sort(ranked, dim=-1, stable=True).indices
    return order[..., :n_drop]



class DroppingState(PolicyState):
    """Per-request state of a dropping policy for a batch of b equal-length sequences.

    cache: every layer's K/V; keep[l]: (b, Hkv, N) bool, the tokens layer l still holds (None for dense
    layers). Subclasses implement `_evict` and may override `_after_prefill`, `_observe` and `_attend`."""

    needs_prompt_probs = False  # subclasses that score the prompt from its attention set this

    def __init__(self, config: RuntimeConfig, shape: AttentionShape, batch_size: int, device: torch.device,
                 dtype: torch.dtype, timer: OpTimer) -> None:
        self.config, self.shape, self.b, self.timer = config, shape, batch_size, timer
        self.device = device
        self.cache = DenseKVCache.empty(shape, batch_size, device, dtype)
        self.keep: list[torch.Tensor | None] = [None] * shape.n_layers
        self.log = StepLog(batch_size, shape.n_layers, shape.n_kv_heads, config.measure_attention_mass)
        self.step = 0  # decode steps finished

    def is_dense(self, layer: int) -> bool:
        return layer in self.config.dense_layers

    # ---- the method's hooks ----
    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        """Score the prompt of a sparse layer. q (b, Hq, T, d); keys (b, Hkv, T, d)."""

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        """keep (b, Hkv, N) with more than budget_tokens True per row -> the mask after dropping."""
        raise NotImplementedError

    def _observe(self, layer: int, probs: torch.Tensor, keep: torch.Tensor) -> None:
        """After a sparse layer's attention: probs (b, Hkv, G, N) over the kept tokens."""

    def _attend(self, layer: int, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A sparse layer's attention over its kept tokens -> (out (b, Hq, 1, d), probs (b, Hkv, G, N),
        tokens attended per KV head (b, Hkv)). RazorAttention adds its compensation token here."""
        out, probs = masked_decode(q, keys, values, keep)
        return out, probs, keep.sum(-1)

    # ---- PolicyState ----
    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with self.timer.op("attention"):
            keys, values = self.cache.append(layer, k, v)
            out = F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=True)
        if not self.is_dense(layer):
            self.keep[layer] = torch.ones(keys.shape[:3], dtype=torch.bool, device=keys.device)
            with self.timer.op("select"):
                self._after_prefill(layer, q, keys)
        return out

    def end_prefill(self) -> PrefillDecisions:
        layers = [[_EMPTY] * self.shape.n_kv_heads for _ in range(self.shape.n_layers)]
        return PrefillDecisions(initial_selected=[[list(h) for h in layers] for _ in range(self.b)])

    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keys, values = self.cache.append(layer, k, v)
        n = keys.shape[2]
        if self.is_dense(layer):
            with self.timer.op("attention"):
                out = dense_decode(q, keys, values)
            self.log.dense(layer, n)
            return out
        keep = torch.cat([self.keep[layer], torch.ones_like(self.keep[layer][:, :, :1])], dim=2)
        held = keep.sum(-1)
        if n > self.config.budget_tokens:
            with self.timer.op("select"):
                keep = self._evict(layer, keep, n)
        self.log.moved(layer, evicted_tokens=(held - keep.sum(-1)).cpu().numpy())
        self.keep[layer] = keep
        with self.timer.op("attention"):
            out, probs, attended = self._attend(layer, q, keys, values, keep)
        self._observe(layer, probs, keep)
        mass = None
        if self.config.measure_attention_mass:
            dense_probs = masked_decode(q, keys, values, torch.ones_like(keep))[1]
            mass = (dense_probs * keep[:, :, None]).sum(-1).mean(-1).cpu().numpy()
        self.log.attended(layer, attended.cpu().numpy().astype(np.int32), mass)
        return out

    def end_step(self) -> StepDecisions:
        self.step += 1
        return self.log.finish()

    # ---- what is kept ----
    def kept_mask(self, layer: int) -> torch.Tensor:
        """(b, Hkv, N) bool: the tokens layer `layer` holds after the last step (all True on a dense
        layer), N the tokens cached so far. A copy: changing it changes nothing."""
        keep = self.keep[layer]
        if keep is None:
            n = self.cache.lengths[layer]
            return torch.ones(self.b, self.shape.n_kv_heads, n, dtype=torch.bool, device=self.device)
        return keep.clone()

    def kept_token_indices(self, layer: int) -> list[list[np.ndarray]]:
        """[sequence][KV head] -> sorted int64 positions of the tokens layer `layer` holds after the last
        step: the kept set a reference implementation is compared with (e.g. kvpress's kept indices on
        the same token ids), with no access to the policy's internals. The same set every query head of
        the KV head attends (plus RazorAttention's compensation token, which is no cached token)."""
        mask = self.kept_mask(layer).cpu().numpy()
        return [[np.flatnonzero(mask[i, h]).astype(np.int64) for h in range(mask.shape[1])]
                for i in range(mask.shape[0])]

    # ---- helpers for subclasses ----
    def protected(self, n_tokens: int) -> torch.Tensor:
        """(N,) bool: the sink tokens [0, S) and the recent window [N - W, N), never dropped."""
        pos = torch.arange(n_tokens, device=self.device)
        return (pos < self.config.sink_tokens) | (pos >= n_tokens - self.config.window_tokens)

    def drop_lowest(self, keep: torch.Tensor, score: torch.Tensor, n_tokens: int) -> torch.Tensor:
        """Drop the lowest-scoring unprotected kept tokens until every row holds budget_tokens."""
        n_drop = int(keep[0, 0].sum()) - self.config.budget_tokens  # every row holds the same count
        candidate = keep & ~self.protected(n_tokens)
        drop = lowest_kept(score, candidate, n_drop)
        return keep.scatter(2, drop, False)
