"""CAKE (Cascading and Adaptive KV cache Eviction): layer budgets from each layer's attention dispersion
and shift; tokens ranked by the mean plus the variance of the attention they receive.

Qin et al., "CAKE: Cascading and Adaptive KV Cache Eviction with Layer Preferences" (ICLR 2025, arXiv
2503.12491); public code read at qtris123/cakekv 351be14 (a copy of the official implementation), what this
policy follows:
- per layer at prefill (cake/model/modify_llama.py 90-123): the last W = `observation_tokens` prompt
  queries (window_size, 32: experiments/LongBench/pred_cake.py 34) attend the prompt (causal mask on the
  window, fp32 softmax); on the prefix part P = probs[..., :T-W] of every query head:
  dispersion H = -sum P log(P + 1e-10) (cake/utils.py 15-19; modify_llama.py 105),
  shift V = sum over heads and tokens of the variance over the W queries (106),
  preference = H^(1/tau1) * V^(1/tau2) (108; tau1 = tau2 = 1.0 for models without tuned values,
  pred_cake.py 35-36 and 198-203);
  eviction indicator per token = mean + gamma * variance of its attention over the W queries (111-115;
  gamma 200, pred_cake.py 37), the prefix part avg-pooled (kernel 5, padding 2, stride 1: 117) and
  averaged over the group's query heads (119-120);
- allocation (cake/cake_cache.py `CakeprefillKVCache.__call__` 218-246): the total (budget - W) * L is
  split in proportion to the preferences, capped at T - W and rebalanced (cake/utils.py `adjust_budgets`
  21-67; traces.layer_budgets `cake_layer_budgets`); each layer keeps the top-budget prefix tokens by the
  indicator plus its window (248-273). Cascading (use_cascading) re-allocates after every layer's prefill
  among the layers seen so far and evicts at once; the budgets only shrink as layers arrive and the
  indicator is fixed, so the final kept sets are the non-cascading allocation's, which is what this
  policy computes (the cascade saves prefill memory, not a different choice);
- decode (`CakeDecodingKVCache_LayerWise` 276-323, called from modify_llama.py 129-135 after the new
  token is cached): once a layer holds more than its budget + W, the step's attention of the new query is
  averaged over the group, the tokens before the last W avg-pooled (kernel 5), and the top budget kept with
  the last W.

Here (freekv_runtime.policies._layer_budget): the statistics are taken per sequence at prefill; at the
first eviction (every layer's preference known) each sequence's sparse layers get their budgets,
budget_l = hh_l + K with sum hh_l = (budget_tokens - K) * sparse layers, K = sink_tokens + max(window_tokens,
W) the tokens every layer keeps anyway (CAKE's K is its window W; dense layers keep everything and take no
share), never below sink + window + 1; prompts of at most budget_tokens tokens are not compressed
(CAKE's threshold is budget + W, cake_cache.py 219). At each decode step a layer holding more than its
budget drops, among unprotected tokens (sink_tokens and the newest window_tokens), the lowest by the
indicator: the prefill indicator at the first step, then the previous step's attention (this step's new
token is in the window), pooled over the kept tokens in position order excluding the newest W (the code
pools its cache in top-k order, the gathers being unsorted, cake_cache.py 258 and 314). The budget counts
the token just appended (the budget convention), so a layer attends budget_l tokens where the code attends
budget_l + 1 before evicting.

Configuration: RuntimeConfig budget_tokens (CAKE's cache_size), sink_tokens, window_tokens, dense_layers;
`config.knobs` (traces.catalogue.dropping.CAKEKnobs): observation_tokens (32), tau1 (1.0), tau2 (1.0),
gamma (200.0).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from freekv_runtime.policies._layer_budget import LayerBudgetState
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.timing import OpTimer
from traces.layer_budgets import cake_layer_budgets

__all__ = ["CAKEPolicy", "CAKEState", "cake_statistics"]

_KERNEL = 5  # modify_llama.py 117, cake_cache.py 306
_KEPT = 1e30  # the observation window: kept before any prefix token


def cake_statistics(q: torch.Tensor, keys: torch.Tensor, window: int, tau1: float, tau2: float,
                    gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(preference (b,) float64, indicator (b, Hkv, T) float32 with the window's tokens at +1e30) of a
    prompt: q (b, Hq, T, d), keys (b, Hkv, T, d) (module docstring)."""
    b, hq, t, d = q.shape
    hkv = keys.shape[1]
    w = min(window, t)
    qw = q[:, :, t - w:].float().reshape(b, hkv, hq // hkv, w, d)
    scores = qw @ keys.float()[:, :, None].transpose(-1, -2) / math.sqrt(d)  # (b, Hkv, G, W, T)
    rows = torch.arange(t - w, t, device=q.device)[:, None]
    scores = scores.masked_fill(torch.arange(t, device=q.device)[None, :] > rows, float("-inf"))
    probs = torch.softmax(scores, dim=-1).reshape(b, hq, w, t)
    prefix = probs[..., : t - w]
    dispersion = -(prefix * torch.log(prefix + 1e-10)).sum(dim=(1, 2, 3)).double()
    shift = prefix.var(dim=-2).sum(dim=(1, 2)).double() if w > 1 else torch.zeros(b, dtype=torch.float64)
    preference = dispersion.clamp(min=0) ** (1 / tau1) * shift.clamp(min=0) ** (1 / tau2)
    indicator = probs.mean(dim=-2) + gamma * (probs.var(dim=-2) if w > 1 else 0.0)  # (b, Hq, T)
    pooled = F.avg_pool1d(indicator[..., : t - w].reshape(b * hq, 1, t - w), _KERNEL, stride=1,
                          padding=_KERNEL // 2) if t > w else indicator[..., :0].reshape(b * hq, 1, 0)
    out = torch.full((b, hkv, t), _KEPT, dtype=torch.float32, device=q.device)
    out[..., : t - w] = pooled.reshape(b, hkv, hq // hkv, t - w).mean(dim=2)
    return preference, out


def pooled_kept(score: torch.Tensor, keep: torch.Tensor, window: int) -> torch.Tensor:
    """score (b, Hkv, N) avg-pooled (kernel 5, zero padding) along the kept tokens in position order,
    excluding each row's newest `window` kept tokens (scored +1e30); dropped tokens score 0."""
    rank = keep.long().cumsum(-1) - 1  # position of a kept token in its row's compacted cache
    n_kept = keep.sum(-1, keepdim=True)
    region = keep & (rank < n_kept - window)
    compact = torch.zeros_like(score).scatter_add_(-1, torch.where(region, rank, 0),
                                                   torch.where(region, score, 0.0))
    b, h, n = score.shape
    pooled = F.avg_pool1d(compact.reshape(b * h, 1, n), _KERNEL, stride=1, padding=_KERNEL // 2)
    pooled = pooled.reshape(b, h, n)
    out = torch.where(region, pooled.gather(-1, rank.clamp(min=0)), torch.zeros_like(score))
    return torch.where(keep & ~region, torch.full_like(score, _KEPT), out)


class CAKEState(LayerBudgetState):
    """preference[l] (b,) float64 per sparse layer; votes[l] the eviction indicator; budgets allocated
    once at the first eviction."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.preference: dict[int, torch.Tensor] = {}
        self.prompt_tokens = 0
        self.allocated = False

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        k = self.config.knobs
        self.preference[layer], self.votes[layer] = cake_statistics(q, keys, k.observation_tokens, k.tau1,
                                                                    k.tau2, k.gamma)
        self.prompt_tokens = keys.shape[2]

    def _budgets_ready(self) -> None:
        if self.allocated:
            return
        self.allocated = True
        cfg, t = self.config, self.prompt_tokens
        w = self.kept_tokens(cfg.knobs.observation_tokens)
        if t <= cfg.budget_tokens or t <= w:
            return  # not compressed: the uniform budget
        layers = sorted(self.preference)
        total = (cfg.budget_tokens - w) * len(layers)
        for i in range(self.b):
            prefs = [float(self.preference[layer][i]) for layer in layers]
            for layer, hh in zip(layers, cake_layer_budgets(prefs, total, t - w), strict=True):
                self.layer_budget[layer][i] = max(hh + w, self.floor_tokens())

    def _observe(self, layer: int, probs: torch.Tensor, keep: torch.Tensor) -> None:
        if self.is_dense(layer):
            return
        score = pooled_kept(probs.mean(dim=2), keep, self.config.knobs.observation_tokens)
        self.votes[layer] = score


class CAKEPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> CAKEState:
        return CAKEState(self.config, shape, batch_size, torch.device(device), dtype, timer)
