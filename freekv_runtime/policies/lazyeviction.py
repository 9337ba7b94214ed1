"""LazyEviction: lagged eviction every W decode steps, tokens ranked by how their attention recurs.

Zhang, Zhang, Ma, Zhang, Guo, "LazyEviction: Lagged KV Eviction with Attention Pattern Observation for
Efficient Long Reasoning" (arXiv 2506.15969); public code Halo-949/LazyEviction, read at its copy in
WeianMao/triattention e7a0eb1 (directory LazyEviction/; the upstream repository is not in the index).
What this policy follows, per layer (file:line of that code):
- K/V are repeated to every query head before they are cached (model/llama_model.py:64-65, 176-177;
  model/qwen_model.py:65-66, 175-176), so each query head keeps its own tokens: `selection`
  per-query-head (the default). per-kv-head is a variant: one set per KV head, a token's attention the
  mean over the group's query heads.
- Prefill keeps the whole prompt (model/kv_utils.py:39-45 returns the states unchanged) and records
  nothing. Decode step c (c = 1, 2, ...; the counter of llama_model.py:81-84, reset per request
  eval/utils.py:60 `TempCache.reset`) appends the new token, then `record_recurrence`
  (model/temp_cacheobs.py:12-47) over the step's attention probabilities (fp32 softmax of
  q.K^T/sqrt(d) over the cached tokens, kv_utils.py:59-60): every token starts with last = 0 and
  MRI = 0 (:26-28; a token appended at step c > 1 with last = c - 1, MRI = 0, :29-35); a token whose
  probability is >= alpha (:40) gets last = c (:43), and MRI = max(MRI, last - last_before) (:46-47), its
  maximum recurrence interval.
- Eviction (kv_utils.py:65-98): only when the head holds more than max_kv_capacity tokens (:65) and
  c % W == 0 (:68; W = obs_size = decoding_recent_size, evaluation.py:97-100). Importance
  s = 0 if MRI == 0 else 2 / (1 + exp(MRI - 1)) (:72), plus 2 / (1 + exp(1 + (c - last) / (MRI + 1e-5)))
  (:73); the W newest tokens are kept (:94-98) and the top max_kv_capacity - W of the others by
  importance (:75-80). The step's attention reads the cache before this eviction (the SDPA forward
  attends the full `key_states` of llama_model.py:190, 218-225; the eager one returns the probabilities
  over the full history, :87-101), so the eviction takes effect from step c + 1.
Here (freekv_runtime.policies._dropping): the eviction decided after step c's attention is applied to the
keep mask at once (the next step attends what the code's cache would hold). W = window_tokens (the recent
tokens kept and the eviction period are one number in the code). sink_tokens are kept as well (the code
keeps none: sink 0 is its rule). Ties go to the newer token (`lowest_kept` drops the older first; the
code's torch.topk breaks them arbitrarily). Step numbers are exact (float64); the code holds them in fp16
(zeros_like of the fp16 probabilities, temp_cacheobs.py:27-28, evaluation.py:84), past 2048 they round.
Differences, from knob `budget_rule` (traces.catalogue.dropping.LazyEvictionKnobs):
- "published": max_kv_capacity = budget_tokens, as the code names its budget: a head holds
  max_kv_capacity tokens after an eviction and up to max_kv_capacity + W before the next, and the whole
  prompt until step W (lagged: a short answer is decoded over the full prompt).
- "peak" (default): max_kv_capacity = budget_tokens - W, so a head attends at most budget_tokens tokens
  (this project's budget convention: what must be provisioned). If a head would exceed it before the next
  W-th step (a prompt longer than the budget, only at step 1), it evicts after that step by the same
  rule; step 1 attends the prompt + 1 as the prefill did.
Its eviction period is the code's default window-wise schedule; its prompt is not protected (the code's
"eval" setup; the rebuttal re-implementations that protect it are not this rule).

Trace: as every dropping policy (_dropping.py): nothing fetched, `evicted_tokens` the tokens dropped at a
step (per KV head: of the group's union with per-query-head selection), `attended_tokens` the most any
query head of the KV head attends.

Shapes: b batch, Hq / Hkv query / KV heads, G = Hq / Hkv, H the selecting heads (Hq or Hkv), N cached
tokens, d head dim.
"""

from __future__ import annotations

import math

import torch

from freekv_runtime.policies._dropping import DroppingState, lowest_kept
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.timing import OpTimer
from traces.lazy_schedule import lazy_attended_tokens, lazy_capacity, lazy_due

__all__ = ["LazyEvictionPolicy", "LazyEvictionState", "lazy_importance", "record_recurrence"]


def record_recurrence(last: torch.Tensor, mri: torch.Tensor, probs: torch.Tensor, step: int,
                      alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One observation (temp_cacheobs.py:37-47): last, mri (b, H, N) float64 (a new token's entries already
    appended), probs (b, H, N) the step's attention -> the updated (last, mri)."""
    new_last = torch.where(probs >= alpha, torch.full_like(last, float(step)), last)
    return new_last, torch.maximum(mri, new_last - last)


def lazy_importance(last: torch.Tensor, mri: torch.Tensor, step: int) -> torch.Tensor:
    """MRI-centric importance (kv_utils.py:72-73) of every token at step `step`: (b, H, N) float64."""
    s = torch.where(mri == 0, torch.zeros_like(mri), 2.0 / (1.0 + torch.exp(mri - 1.0)))
    return 2.0 / (1.0 + torch.exp(1.0 + (step - last) / (mri + 1e-5))) + s


def _grow(t: torch.Tensor, n_tokens: int, fill: float | bool) -> torch.Tensor:
    """t (b, H, N') padded with `fill` to (b, H, n_tokens)."""
    if t.shape[2] >= n_tokens:
        return t
    return torch.cat([t, t.new_full((*t.shape[:2], n_tokens - t.shape[2]), fill)], dim=2)


class LazyEvictionState(DroppingState):
    """last[l], mri[l]: (b, H, N) float64, the recurrence statistics of layer l's tokens; own[l]: (b, H, N)
    bool the tokens each selecting head holds (the base's keep mask is their union per KV head)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        knobs, c = self.config.knobs, self.config
        self.alpha = float(knobs.alpha)
        self.per_query_head = knobs.selection == "per-query-head" and self.shape.group_size > 1
        self.rule = knobs.budget_rule  # W = window_tokens: the eviction period and the newest tokens kept
        self.capacity = lazy_capacity(c.budget_tokens, c.window_tokens, self.rule)
        self.prompt_tokens = 0
        n = self.shape.n_layers
        self.last: list[torch.Tensor | None] = [None] * n
        self.mri: list[torch.Tensor | None] = [None] * n
        self.own: list[torch.Tensor | None] = [None] * n

    def _heads(self) -> int:
        return self.shape.n_qo_heads if self.per_query_head else self.shape.n_kv_heads

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        shape = (keys.shape[0], self._heads(), keys.shape[2])
        self.prompt_tokens = keys.shape[2]
        self.last[layer] = torch.zeros(shape, dtype=torch.float64, device=keys.device)
        self.mri[layer] = torch.zeros(shape, dtype=torch.float64, device=keys.device)
        self.own[layer] = torch.ones(shape, dtype=torch.bool, device=keys.device)

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        return keep  # lagged: the eviction follows the step's attention (_observe)

    def _attend(self, layer: int, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each selecting head over its own tokens -> (out (b, Hq, 1, d), probs (b, Hkv, G, N), tokens
        attended per KV head: the most any of its query heads attends)."""
        own = self.own[layer]
        assert own is not None
        b, hq, _, d = q.shape
        hkv, n = keys.shape[1], keys.shape[2]
        own = self.own[layer] = _grow(own, n, True)
        mask = own.view(b, hkv, -1, n) if self.per_query_head else own[:, :, None]
        scores = q.float().reshape(b, hkv, hq // hkv, d) @ keys.float().transpose(-1, -2) / math.sqrt(d)
        probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (b, Hkv, G, N)
        out = (probs @ values.float()).reshape(b, hq, 1, d).to(q.dtype)
        return out, probs, mask.expand(b, hkv, hq // hkv, n).sum(-1).amax(-1)

    def _observe(self, layer: int, probs: torch.Tensor, keep: torch.Tensor) -> None:
        step, n = self.step + 1, keep.shape[2]
        last, mri, own = self.last[layer], self.mri[layer], self.own[layer]
        assert last is not None and mri is not None and own is not None
        last, mri = _grow(last, n, float(step - 1)), _grow(mri, n, 0.0)
        b, hkv, group, _ = probs.shape
        seen = probs.reshape(b, hkv * group, n) if self.per_query_head else probs.mean(dim=2)
        last, mri = record_recurrence(last, mri, seen.double(), step, self.alpha)
        self.last[layer], self.mri[layer] = last, mri
        held = int(own[0, 0].sum())  # every head holds the same count
        c = self.config
        if held <= self.capacity or not lazy_due(step, held, c.budget_tokens, c.window_tokens, self.rule):
            return
        candidate = own & ~self.protected(n)
        drop = lowest_kept(lazy_importance(last, mri, step), candidate, held - self.capacity)
        own = self.own[layer] = own.scatter(2, drop, False)
        union = own.view(b, hkv, -1, n).any(dim=2) if self.per_query_head else own
        self.log.moved(layer, evicted_tokens=(keep.sum(-1) - union.sum(-1)).cpu().numpy())
        self.keep[layer] = union

    def attend_limit(self, n_tokens: int) -> int:
        """Tokens a head attends when `n_tokens` are cached (traces.lazy_schedule): the prompt + 1 at the
        first step when it overflows, at most the budget after it (peak), or up to max_kv_capacity + W
        (published)."""
        c, step = self.config, n_tokens - self.prompt_tokens
        return int(lazy_attended_tokens(self.prompt_tokens, step, c.budget_tokens, c.window_tokens,
                                        self.rule)[-1])


class LazyEvictionPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> LazyEvictionState:
        return LazyEvictionState(self.config, shape, batch_size, torch.device(device), dtype, timer)
