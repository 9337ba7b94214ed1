"""RaaS: decoded pages carry the timestamp of the last step they were important; the stalest is dropped.

Hu et al., "Efficient Long-Decoding Inference with Reasoning-Aware Attention Sparsity" / "RaaS:
Reasoning-Aware Attention Sparsity for Efficient LLM Reasoning" (arXiv 2502.11147, ACL 2025). As
published: the KV of every prefill (prompt) token is kept (it holds the "phoenix" tokens that come back
late), and the O(L) budget applies to the DECODED tokens: a decoded page's timestamp is refreshed whenever
its attention exceeds a threshold alpha, and when the decoded budget is full the page with the oldest
timestamp is evicted; a new page starts as fresh as the step that made it.

Here (knob `prompt` = "keep", the default), per sparse layer and KV head: every prompt token [0, T) is
kept; decoded tokens are grouped in pages of page_size tokens starting at T; the newest `window_tokens`
tokens (and the current partial page) are always kept; at most K = (budget - S - W) / p other whole decoded
pages are held (the same K as the harness's page budget), fewer when the window cuts a page (the pages
held must fit in budget - S beside the always-held tail), so the decoded tokens held never exceed
budget_tokens - sink_tokens and a head attends at most T + budget_tokens - sink_tokens tokens
(`prompt_outside_budget`; traces/kept_tokens.py `raas_kept_tokens`, the count the simulator prices).
After each decode attention, a decoded page's importance is its attention mass (the probabilities of its
tokens summed over the page, pooled over the group's query heads by `group`, default mean); pages with
importance > alpha get timestamp = the step (1, 2, ...); a page entering the candidates keeps the
timestamp of the step it was completed. When more candidate pages are held than fit,
the oldest-stamped are dropped (ties: the lower page id).

Variant `prompt` = "harness" (the FreeKV accuracy harness's RaaS, rooikeee/FreeKV
accuracy/kvc/patch/dynamic_attention.py `raas_attn` 326-485, and this policy's behaviour before the
published rule was followed): the budget covers the prompt too; sink pages [0, S/p) and the window pages
are kept, at most K other pages; at prefill the candidate pages get timestamps in [-1, 0) ordered by the
last prompt query's page mass (the harness keeps the top tokens of the last query's group-mean raw scores,
dynamic_attention.py:354-370), so any importance seen during decode outranks them. It cuts the prompt
to K pages chosen by one query: a retrieval task then depends on that one query's choice.

Reference harness settings (rooikeee/FreeKV accuracy/eval/util.py:70 `--raas_alpha` default 1e-4;
dynamic_attention.py:476-485: page scores softmaxed per query head, MEAN over the group, compared with
alpha): alpha 1e-4 and group "mean" are the defaults here.
Remaining difference from the harness: importance from the exact probabilities of the attention just
computed (the harness estimates it from Quest min/max page bounds, dynamic_attention.py:466-481; the paper
only says a representative score per page): noted in docs/methods.md.

Configuration: RuntimeConfig budget_tokens, page_size, sink_tokens, window_tokens, dense_layers (FreeKV
baseline: layer 0, budget 2048, page 32); `config.knobs` (traces.catalogue.dropping.RaaSKnobs): alpha
(float in (0, 1), default 1e-4, the harness's), group ("mean" default, the harness's; "max", the FreeKV
paper's group-consistent setup), prompt ("keep" default, the paper's; "harness").
"""

from __future__ import annotations

import torch

from freekv_runtime.policies._dropping import DroppingState, lowest_kept, prompt_attention
from freekv_runtime.policies.base import AttentionShape, KVPolicy
from freekv_runtime.timing import OpTimer
from traces.kept_tokens import raas_kept_tokens

__all__ = ["RaaSPolicy", "RaaSState"]



class RaaSState(DroppingState):
    """stamp[l]: (b, Hkv, P) float32 timestamps of layer l's pages (grown as pages appear): pages of the
    whole sequence with prompt "harness", pages of the decoded tokens (from T on) with prompt "keep"."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        knobs = self.config.knobs
        self.alpha, self.group, self.keep_prompt = knobs.alpha, knobs.group, knobs.prompt == "keep"
        self.p = self.config.page_size
        self.stamp: list[torch.Tensor | None] = [None] * self.shape.n_layers
        self.prompt_tokens = 0  # T, set at prefill

    @property
    def prompt_outside_budget(self) -> bool:
        """True when every prompt token is kept and budget_tokens bounds the decoded tokens only (the
        paper's RaaS): a head attends at most T + budget_tokens - sink_tokens tokens."""
        return self.keep_prompt

    def attend_limit(self, n_tokens: int) -> int:
        """The most tokens a head attends at n_tokens: min(N, budget_tokens), or with the prompt kept,
        the prompt plus budget_tokens - sink_tokens decoded tokens (traces/kept_tokens.py, the rule the
        simulator's RaaS model prices)."""
        c = self.config
        return raas_kept_tokens(n_tokens, self.prompt_tokens, c.budget_tokens, c.sink_tokens,
                                "keep" if self.keep_prompt else "harness")

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
        self.prompt_tokens = t
        if self.keep_prompt:  # no prompt page is ever a candidate: no prompt scoring
            self.stamp[layer] = torch.zeros(*keys.shape[:2], 0, device=keys.device)
            return
        probs = prompt_attention(q, keys, first_query=t - 1)[:, :, None]  # (b, Hkv, 1, T), group summed
        mass = self._page_mass(probs, t)
        self.stamp[layer] = mass / (mass.amax(-1, keepdim=True) + 1.0) - 1.0  # in [-1, 0), same order

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        if self.keep_prompt:
            return self._evict_decoded(layer, keep, n_tokens)
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

    def _evict_decoded(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        """The paper's rule: prompt kept; among the whole decoded pages outside the window, at most K held."""
        p, t = self.p, self.prompt_tokens
        n_decoded = n_tokens - t
        stamp = self._stamps(layer, n_decoded)
        # decoded page j = tokens [t + j p, t + (j + 1) p); candidates: whole pages wholly before the window
        n_cand = min(n_decoded // p, max(0, n_tokens - self.config.window_tokens - t) // p)
        if n_cand == 0:
            return keep
        held = keep[:, :, t:t + n_cand * p].reshape(*keep.shape[:2], n_cand, p).any(-1)  # (b, Hkv, n_cand)
        # the decoded tokens after the candidates (window, the page it cuts, the current page) are always
        # held; whole pages fill what is left of budget - sink, so a head never holds more decoded tokens
        c = self.config
        room = min(c.selected_pages, max(0, c.budget_tokens - c.sink_tokens - (n_decoded - n_cand * p)) // p)
        n_drop = int(held[0, 0].sum()) - room  # same count in every row
        if n_drop <= 0:
            return keep
        drop = lowest_kept(stamp[:, :, :n_cand], held, n_drop)  # (b, Hkv, n_drop) decoded page ids
        tokens = (t + drop[..., None] * p + torch.arange(p, device=keep.device)).flatten(2)
        return keep.scatter(2, tokens, False)

    def _observe(self, layer: int, probs: torch.Tensor, keep: torch.Tensor) -> None:
        n = keep.shape[2]
        if self.keep_prompt:
            t = self.prompt_tokens
            stamp = self._stamps(layer, n - t)
            important = self._page_mass(probs[..., t:], n - t) > self.alpha
        else:
            stamp = self._stamps(layer, n)
            important = self._page_mass(probs, n) > self.alpha
        self.stamp[layer] = torch.where(important, float(self.step + 1), stamp)


class RaaSPolicy(KVPolicy):
    def new_state(self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
                  timer: OpTimer) -> RaaSState:
        return RaaSState(self.config, shape, batch_size, torch.device(device), dtype, timer)
