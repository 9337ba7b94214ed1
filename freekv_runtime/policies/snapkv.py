"""SnapKV: the prompt's last queries vote for the prompt tokens to keep, once, at prefill.

Li et al., "SnapKV: LLM Knows What You are Looking for Before Generation" (NeurIPS 2024, arXiv
2404.14469); public code FasterDecoding/SnapKV, snapkv/monkeypatch/snapkv_utils.py (SnapKVCluster:
window_size 64, kernel_size 5, pooling avgpool: the observation window's attention to the prefix, summed
over the window's queries, pooled along the tokens, top-k per head, the window itself kept). kvpress:
NVIDIA/kvpress kvpress/presses/snapkv_press.py (same rule, GQA by averaging the group).

Votes of a prefix token (per KV head): the causal attention probability it receives from the last
`observation_tokens` prompt queries, summed over those queries and the group's query heads, then pooled
along the tokens (`pooling` over `kernel_size` neighbours, zero-padded at the ends, stride 1) so that
neighbours of a voted token survive with it. The votes are fixed after prefill. When a KV head holds more
than budget_tokens tokens, dropped first are generated tokens that left the recent window (they have no
votes), then the prefix tokens with the fewest votes; the observation window's tokens go last.
Budget adaptation: SnapKV compresses the prompt only and lets the generated tokens grow the cache; under
this project's convention (budget counts sink and window, and is never exceeded) generated tokens are
kept while in the recent window only. For a decode no longer than window_tokens the two agree.

Configuration: RuntimeConfig budget_tokens, sink_tokens (kept for good), window_tokens (recent window),
dense_layers (FreeKV baseline: layer 0); `config.knobs` (traces.catalogue.dropping.SnapKVKnobs):
observation_tokens (int >= 1, default 64, SnapKV's
window_size), kernel_size (odd int >= 1, default 5), pooling ("avg" default, or "max").
"""

from __future__ import annotations

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
    """Pooled votes (b, Hkv, T) float32 of a prompt: q (b, Hq, T, d); keys (b, Hkv, T, d)."""
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


class SnapKVState(DroppingState):
    """votes[l]: (b, Hkv, N) float32, fixed at prefill (generated tokens: -1)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.votes: list[torch.Tensor | None] = [None] * self.shape.n_layers

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        knobs = self.config.knobs
        self.votes[layer] = snap_votes(q, keys, knobs.observation_tokens, knobs.kernel_size, knobs.pooling)

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        votes = self.votes[layer]
        assert votes is not None
        if votes.shape[2] < n_tokens:
            grown = votes.new_full((*votes.shape[:2], n_tokens - votes.shape[2]), _GENERATED)
            votes = self.votes[layer] = torch.cat([votes, grown], dim=2)
        return self.drop_lowest(keep, votes, n_tokens)


class SnapKVPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> SnapKVState:
        return SnapKVState(self.config, shape, batch_size, torch.device(device), dtype, timer)
