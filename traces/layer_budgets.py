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

__all__ = ["pyramid_layer_budgets"]


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
