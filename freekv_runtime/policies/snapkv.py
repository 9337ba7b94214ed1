"""SnapKV: the prompt's last queries vote for the prompt tokens to keep, once, at prefill.

Li et al., "SnapKV: LLM Knows What You are Looking for Before Generation" (NeurIPS 2024, arXiv
2404.14469); public code FasterDecoding/SnapKV, snapkv/monkeypatch/snapkv_utils.py (SnapKVCluster:
window_size 64, kernel_size 5, pooling avgpool: the observation window's attention to the prefix, summed
over the window's queries, pooled along the tokens, top-k per head, the window itself kept). kvpress:
NVIDIA/kvpress kvpress/presses/snapkv_press.py (same rule, GQA by averaging the group).

Votes of a prefix token: the causal attention probability it receives from the last `observation_tokens`
prompt queries, summed over those queries, then pooled along the tokens (`pooling` over `kernel_size`
neighbours, zero-padded at the ends, stride 1) so that neighbours of a voted token survive with it.
`selection` (traces.catalogue.dropping.SnapKVKnobs):
- "per-query-head" (default, SnapKV's code: K/V repeated to every query head before the vote,
  llama_hijack_4_37.py:75-77; votes, pooling and top-k per query head, snapkv_utils.py:45-62): every query
  head keeps its own tokens and attends only them; a KV head holds the union of its group's (the code
  stores G copies instead, which the simulator prices);
- "per-kv-head": the votes summed over the group's query heads, one kept set per KV head (kvpress,
  snapkv_press.py:99-100, averages the group: the same ranking).
The votes are fixed after prefill. When a head holds more than budget_tokens tokens, dropped first are
generated tokens that left the recent window (they have no votes), then the prefix tokens with the fewest
votes; the observation window's tokens go last.
Budget adaptation: SnapKV compresses the prompt only and lets the generated tokens grow the cache; under
this project's convention (budget counts sink and window, and is never exceeded) generated tokens are
kept while in the recent window only. For a decode no longer than window_tokens the two agree.

Configuration: RuntimeConfig budget_tokens, sink_tokens (kept for good), window_tokens (recent window),
dense_layers (FreeKV baseline: layer 0); `config.knobs` (traces.catalogue.dropping.SnapKVKnobs):
selection, observation_tokens (int >= 1, default 64, SnapKV's window_size), kernel_size (odd int >= 1,
default 5), pooling ("avg" default, or "max").
Trace per KV head with per-query-head selection: evicted tokens and attention mass of the union; attended
tokens the most any of its query heads attends (each within the budget).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from freekv_runtime.policies._dropping import DroppingState, prompt_attention
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.timing import OpTimer

__all__ = ["SnapKVPolicy", "SnapKVState"]

_WINDOW_VOTES = 1e30  # the observation window's own tokens: kept before any prefix token
_GENERATED = -1.0  # generated tokens have no votes: dropped first once out of the recent window


def snap_votes(q: torch.Tensor, keys: torch.Tensor, observation_tokens: int, kernel_size: int,
               pooling: str) -> torch.Tensor:
    """Pooled votes (b, H, T) float32 of a prompt: q (b, Hq, T, d); keys (b, H, T, d), H = Hkv (the group's
    votes summed) or Hq (keys repeated to every query head: each head's own votes)."""
    b, hkv, t, _ = keys.shape
    obs = min(observation_tokens, t)
    votes = prompt_attention(q, keys, first_query=t - obs)  # (b, Hkv, T)
    prefix = votes[:, :, : t - obs].reshape(b * hkv, 1, t - obs)
    if t - obs:
        pad = kernel_size // 2
        pool = F.avg_pool1d if pooling == "avg" else F.max_pool1d
        if pooling == "max":
            prefix = F.pad(prefix, (pad, pad), value=0.0)
            prefix = pool(prefix, kernel_size, stride=1)
        else:
            prefix = pool(prefix, kernel_size, stride=1, padding=pad)
    out = torch.full((b, hkv, t), _WINDOW_VOTES, dtype=torch.float32, device=keys.device)
    out[:, :, : t - obs] = prefix.reshape(b, hkv, t - obs)
    return out


def _grow(t: torch.Tensor, n_tokens: int, fill: float | bool) -> torch.Tensor:
    """t (b, H, N') padded with `fill` to (b, H, n_tokens)."""
    if t.shape[2] >= n_tokens:
        return t
    return torch.cat([t, t.new_full((*t.shape[:2], n_tokens - t.shape[2]), fill)], dim=2)


class SnapKVState(DroppingState):
    """votes[l]: (b, H, N) float32, fixed at prefill (generated tokens: -1), H = Hkv, or Hq with
    per-query-head selection; then own[l] (b, Hq, N) bool: the tokens each query head keeps (the base's
    keep mask is their union per KV head)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.votes: list[torch.Tensor | None] = [None] * self.shape.n_layers
        self.per_query_head = self.config.knobs.selection == "per-query-head" and self.shape.group_size > 1
        self.own: list[torch.Tensor | None] = [None] * self.shape.n_layers

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        knobs = self.config.knobs
        if self.per_query_head:
            keys = keys.repeat_interleave(self.shape.group_size, dim=1)  # the code's repeat_kv, then the vote
            self.own[layer] = torch.ones(keys.shape[:3], dtype=torch.bool, device=keys.device)
        self.votes[layer] = snap_votes(q, keys, knobs.observation_tokens, knobs.kernel_size, knobs.pooling)

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        votes = self.votes[layer]
        assert votes is not None
        votes = self.votes[layer] = _grow(votes, n_tokens, _GENERATED)
        if not self.per_query_head:
            return self.drop_lowest(keep, votes, n_tokens)
        own = self.own[layer]
        assert own is not None
        own = self.own[layer] = self.drop_lowest(_grow(own, n_tokens, True), votes, n_tokens)
        b, hkv = keep.shape[:2]
        return own.view(b, hkv, -1, n_tokens).any(dim=2)  # a KV head holds its group's union

    def _attend(self, layer: int, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per query head: each attends its own kept tokens; attended per KV head = the most any of its
        query heads attends. Otherwise the base's attention over the KV head's kept tokens."""
        if not self.per_query_head:
            return super()._attend(layer, q, keys, values, keep)
        own = self.own[layer]
        assert own is not None
        b, hq, _, d = q.shape
        hkv, n = keys.shape[1], keys.shape[2]
        own = self.own[layer] = _grow(own, n, True).view(b, hkv, hq // hkv, n)
        scores = q.float().reshape(b, hkv, hq // hkv, d) @ keys.float().transpose(-1, -2) / math.sqrt(d)
        probs = torch.softmax(scores.masked_fill(~own, float("-inf")), dim=-1)  # (b, Hkv, G, N)
        out = (probs @ values.float()).reshape(b, hq, 1, d).to(q.dtype)
        self.own[layer] = own.view(b, hq, n)
        return out, probs, own.sum(-1).amax(-1)


class SnapKVPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> SnapKVState:
        return SnapKVState(self.config, shape, batch_size, torch.device(device), dtype, timer)
