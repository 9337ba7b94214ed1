"""RaaS: pages carry the timestamp of the last step they were important; the stalest page is dropped.

Hu et al., "Efficient Long-Decoding Inference with Reasoning-Aware Attention Sparsity" (arXiv
2502.11147): O(L) memory; a page's timestamp is refreshed whenever its attention exceeds a threshold
alpha, and when the cache is full the page with the oldest timestamp is evicted. Reference
implementation read: rooikeee/FreeKV accuracy/kvc/patch/dynamic_attention.py, raas_attn (page_timestamp,
alpha, "look for the oldest timestamp"; importance there is estimated from Quest min/max page bounds,
softmax per head, mean over the group). The FreeKV paper's evaluation makes RaaS group-consistent with
max pooling (sim/methods/raas.py cites it).

Here, per sparse layer and KV head: pages of page_size tokens; sink pages [0, S/p) and the window pages
(the newest W/p, the current partial page included, as in FreeKV's store) are always kept; at most
K = (budget - S - W) / p other pages are held, so attention never exceeds the budget. After each decode
attention, a page's importance is its exact attention mass (the probabilities of the kept tokens summed
over the page, pooled over the group's query heads by `group` = max or mean); pages with importance >
alpha get timestamp = the step (1, 2, ...). At prefill, the candidate pages get timestamps in [-1, 0)
ordered by the last prompt query's attention mass (the harness also starts from the last prompt query),
so any importance seen during decode outranks them. When a page leaves the window and K pages are held,
the page(s) with the oldest timestamp are dropped (ties: the lower page id).
Difference from the harness: importance from the exact probabilities of the attention just computed (no
separate page-bound estimate): noted in docs/methods.md.

Configuration: RuntimeConfig budget_tokens, page_size, sink_tokens, window_tokens, dense_layers (FreeKV
baseline: layer 0, budget 2048, page 32); `config.knobs` (traces.catalogue.dropping.RaaSKnobs): alpha
(float in (0, 1), default 0.01, estimate: a page holding at least 1% of its group's attention counts as
attended; no value is given in the code read), group ("max" default, the FreeKV paper's setup; "mean",
the harness's).
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._dropping import DroppingState, lowest_kept, prompt_attention
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.timing import OpTimer

__all__ = ["RaaSPolicy", "RaaSState"]



class RaaSState(DroppingState):
    """stamp[l]: (b, Hkv, P) float32 timestamps of layer l's pages (grown as pages appear)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.alpha, self.group = self.config.knobs.alpha, self.config.knobs.group
        self.p = self.config.page_size
        self.stamp: list[torch.Tensor | None] = [None] * self.shape.n_layers

    def _page_mass(self, probs: torch.Tensor, n_tokens: int) -> torch.Tensor:
        """probs (b, Hkv, G, N) -> (b, Hkv, P) page mass pooled over the group."""
        n_pages = -(-n_tokens // self.p)
        padded = torch.nn.functional.pad(probs, (0, n_pages * self.p - n_tokens))
        mass = padded.reshape(*probs.shape[:3], n_pages, self.p).sum(-1)  # (b, Hkv, G, P)
        return mass.amax(2) if self.group == "max" else mass.mean(2)

    def _stamps(self, layer: int, n_tokens: int) -> torch.Tensor:
        stamp = self.stamp[layer]
        assert stamp is not None
        n_pages = -(-n_tokens // self.p)
        if stamp.shape[2] < n_pages:  # new pages are as fresh as this step
            grown = stamp.new_full((*stamp.shape[:2], n_pages - stamp.shape[2]), float(self.step))
            stamp = self.stamp[layer] = torch.cat([stamp, grown], dim=2)
        return stamp

    def _after_prefill(self, layer: int, q: torch.Tensor, keys: torch.Tensor) -> None:
        t = keys.shape[2]
        probs = prompt_attention(q, keys, first_query=t - 1)[:, :, None]  # (b, Hkv, 1, T), group summed
        mass = self._page_mass(probs, t)
        self.stamp[layer] = mass / (mass.amax(-1, keepdim=True) + 1.0) - 1.0  # in [-1, 0), same order

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        p = self.p
        stamp = self._stamps(layer, n_tokens)
        cur = (n_tokens - 1) // p
        first_window = max(self.config.sink_pages, cur - self.config.window_pages + 1)
        pages = torch.arange(stamp.shape[2], device=keep.device)
        held = keep[:, :, : cur * p].reshape(*keep.shape[:2], cur, p).any(-1)  # (b, Hkv, cur) full pages
        candidate = held & (pages[:cur] >= self.config.sink_pages) & (pages[:cur] < first_window)
        n_drop = int(candidate[0, 0].sum()) - self.config.selected_pages  # same count in every row
        if n_drop <= 0:
            return keep
        drop = lowest_kept(stamp[:, :, :cur], candidate, n_drop)  # (b, Hkv, n_drop) page ids
        tokens = (drop[..., None] * p + torch.arange(p, device=keep.device)).flatten(2)
        return keep.scatter(2, tokens, False)

    def _observe(self, layer: int, probs: torch.Tensor, keep: torch.Tensor) -> None:
        n = keep.shape[2]
        stamp = self._stamps(layer, n)
        important = self._page_mass(probs, n) > self.alpha
        self.stamp[layer] = torch.where(important, float(self.step + 1), stamp)


class RaaSPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> RaaSState:
        return RaaSState(self.config, shape, batch_size, torch.device(device), dtype, timer)
