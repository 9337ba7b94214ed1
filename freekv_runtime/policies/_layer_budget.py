"""Dropping with a budget per layer (and per sequence): the methods that spread one total unevenly.

PyramidKV (a schedule decreasing with depth) and CAKE (each layer's attention dispersion and shift) give
every sparse layer its own number of tokens to keep; `LayerBudgetState` (a `DroppingState`) holds it,
`layer_budget[l]` a (b,) int64 tensor (CAKE's allocation differs per sequence), and drops, while a KV head
holds more than its layer's budget, the unprotected kept tokens with the lowest `votes[l]` (b, Hkv, N)
(generated tokens: -1 unless the method scores them). Sink and window tokens are never dropped, so no
layer's budget goes below sink + window + 1 (`floor_tokens`). Layers allotted more than budget_tokens
declare themselves in `unbudgeted_heads` (their trace shows what they attended).
"""

from __future__ import annotations

import numpy as np
import torch

from freekv_runtime.policies._dropping import DroppingState

__all__ = ["LayerBudgetState", "drop_to_budget"]

_GENERATED = -1.0  # generated tokens have no votes: dropped first once out of the recent window


def drop_to_budget(keep: torch.Tensor, score: torch.Tensor, candidate: torch.Tensor,
                   budget: torch.Tensor) -> torch.Tensor:
    """keep (b, Hkv, N) bool with the lowest-scoring `candidate` tokens dropped until each row holds at most
    budget (b,) tokens; ties go to the lower index (a stable sort)."""
    n_drop = (keep.sum(-1) - budget[:, None]).clamp(min=0)  # (b, Hkv)
    order = torch.sort(score.masked_fill(~candidate, float("inf")), dim=-1, stable=True).indices
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(order.shape[-1], device=order.device)
                                            .expand_as(order).contiguous())
    return keep & ~(candidate & (rank < n_drop[..., None]))


class LayerBudgetState(DroppingState):
    """A dropping state whose sparse layers keep `layer_budget[l]` (b,) tokens per KV head (module
    docstring); the subclass sets votes and budgets at prefill (`_after_prefill`) or before the first
    eviction (`_budgets_ready`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.votes: list[torch.Tensor | None] = [None] * self.shape.n_layers
        uniform = torch.full((self.b,), self.config.budget_tokens, dtype=torch.int64, device=self.device)
        self.layer_budget: list[torch.Tensor] = [uniform.clone() for _ in range(self.shape.n_layers)]

    @property
    def unbudgeted_heads(self) -> np.ndarray:
        """(L, Hkv) bool: layers whose own budget exceeds budget_tokens in some sequence."""
        over = np.array([bool((b > self.config.budget_tokens).any()) for b in self.layer_budget])
        return np.repeat(over[:, None], self.shape.n_kv_heads, axis=1)

    def kept_tokens(self, observation_tokens: int) -> int:
        """The tokens a layer keeps whatever its budget: the sink and the larger of the recent window and the
        method's observation window (the part of the budget the methods' own schedules call the window)."""
        return self.config.sink_tokens + max(self.config.window_tokens, observation_tokens)

    def floor_tokens(self) -> int:
        """The fewest tokens a layer may keep: sink + window (always kept) + the token just appended."""
        return self.config.sink_tokens + self.config.window_tokens + 1

    def _budgets_ready(self) -> None:
        """Called before each eviction; a subclass that allocates over all layers does it here."""

    def _evict(self, layer: int, keep: torch.Tensor, n_tokens: int) -> torch.Tensor:
        self._budgets_ready()
        votes = self.votes[layer]
        assert votes is not None
        if votes.shape[2] < n_tokens:
            grown = votes.new_full((*votes.shape[:2], n_tokens - votes.shape[2]), _GENERATED)
            votes = self.votes[layer] = torch.cat([votes, grown], dim=2)
        candidate = keep & ~self.protected(n_tokens)
        return drop_to_budget(keep, votes, candidate, self.layer_budget[layer])
