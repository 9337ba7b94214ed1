"""Per-layer KV budgets of the methods that spread one total budget unevenly over the layers.

PyramidKV's schedule (Cai et al., arXiv 2406.02069; Zefan-Cai/PyramidKV pyramidkv/pyramidkv_utils.py at
5d4e2e1, `PyramidKVCluster.update_kv` 205-220): with C = the uniform capacity (window included), W = the
observation window and B = C - W the selected tokens of a uniform layer, the first layer selects
max_num = 2B - B // beta tokens and each deeper layer `steps` = (max_num - min_num) // (L - 1) fewer, down to
min_num = B // beta, an arithmetic series whose mean is about B; when the prompt's T - W tokens are fewer
than max_num, max_num = T - W and min_num = 2B - max_num. Prompts shorter than C are not compressed, and
prompts shorter than 2B fall back to SnapKV's uniform C (218-220). Both halves read this module (the
runtime policy keeps these budgets, the simulator prices them). Plain Python.
"""

from __future__ import annotations

__all__ = ["pyramid_layer_budgets", "cake_layer_budgets"]


def pyramid_layer_budgets(budget_tokens: int, window_tokens: int, n_layers: int, prompt_tokens: int,
                          beta: int, floor_tokens: int = 0) -> list[int]:
    """Tokens each layer keeps after the prefill of a `prompt_tokens` prompt (window included):
    PyramidKV's schedule (module docstring) for a uniform capacity `budget_tokens` and an observation
    window `window_tokens`; no layer below `floor_tokens` (this project always keeps sink + window)."""
    c, w, t = budget_tokens, window_tokens, prompt_tokens
    if t < c or t < 2 * (c - w) or n_layers < 2 or c <= w:
        return [max(c, floor_tokens)] * n_layers
    selected = c - w
    min_num = selected // beta
    max_num = 2 * selected - min_num
    if max_num >= t - w:
        max_num = t - w
        min_num = 2 * selected - max_num
    steps = (max_num - min_num) // (n_layers - 1)
    return [max(max_num - layer * steps + w, floor_tokens) for layer in range(n_layers)]


def cake_layer_budgets(preferences: list[float], total_tokens: int, cap_tokens: int) -> list[int]:
    """CAKE's allocation of `total_tokens` over layers in proportion to their preference scores
    (qtris123/cakekv cake/cake_cache.py `CakeprefillKVCache.__call__` 224-225, cake/utils.py
    `adjust_budgets` 21-67): each share truncated to an int and capped at `cap_tokens` (the prompt's
    tokens before the window), the excess spread evenly over the uncapped layers (remainder to the first),
    then the total restored the same way (added to layers below the cap, or taken from layers above 1)."""
    n = len(preferences)
    whole = sum(preferences)
    shares = [p / whole * total_tokens if whole > 0 else total_tokens / n for p in preferences]
    budgets = [min(int(s), cap_tokens) for s in shares]
    excess = sum(max(int(s) - cap_tokens, 0) for s in shares)
    if excess > 0:
        _spread(budgets, excess, [i for i, b in enumerate(budgets) if b < cap_tokens])
    diff = total_tokens - sum(budgets)
    if diff > 0:
        _spread(budgets, diff, [i for i, b in enumerate(budgets) if b < cap_tokens])
    elif diff < 0:
        _spread(budgets, diff, [i for i, b in enumerate(budgets) if b > 1])
    return budgets


def _spread(budgets: list[int], amount: int, layers: list[int]) -> None:
    """Add `amount` (negative: take) evenly over `layers`, the remainder one each to the first ones."""
    if not layers:
        return
    each, rest = divmod(abs(amount), len(layers))
    sign = 1 if amount > 0 else -1
    for k, i in enumerate(layers):
        budgets[i] += sign * (each + (1 if k < rest else 0))
