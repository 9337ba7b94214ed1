"""LazyEviction's cache size at every decode step: the one rule the runtime policy and the simulator share.

LazyEviction (Halo-949/LazyEviction model/kv_utils.py:65-98) keeps the whole prompt at prefill, attends
the cache as it stands at decode step c (the new token appended), and only then, when the head holds more
than max_kv_capacity tokens and c is a multiple of W, evicts down to max_kv_capacity (the W newest tokens
and the top of the others). So a head attends prompt + c tokens until the first eviction, then between
max_kv_capacity + 1 and max_kv_capacity + W. `budget_rule` (traces.catalogue.dropping.LazyEvictionKnobs):
"published" max_kv_capacity = budget; "peak" max_kv_capacity = budget - W and an extra eviction after any
step from which the head would pass the budget before the next W-th step (only step 1, when the prompt
is longer than the budget allows), so every step after the first attends at most the budget.
Plain Python and numpy: no torch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["lazy_capacity", "lazy_due", "lazy_attended_tokens"]


def lazy_capacity(budget_tokens: int, window_tokens: int, budget_rule: str) -> int:
    """max_kv_capacity: the tokens a head holds right after an eviction."""
    return budget_tokens - window_tokens if budget_rule == "peak" else budget_tokens


def lazy_due(step: int, held: int, budget_tokens: int, window_tokens: int, budget_rule: str) -> bool:
    """Whether a head holding `held` tokens (more than max_kv_capacity) evicts after decode step `step`
    (1-based): every W-th step (kv_utils.py:68); with budget_rule peak also when it would pass
    budget_tokens before the next W-th step."""
    if step % window_tokens == 0:
        return True
    next_due = (step // window_tokens + 1) * window_tokens
    return budget_rule == "peak" and held + next_due - step > budget_tokens


def lazy_attended_tokens(prompt_tokens: int, decode_steps: int, budget_tokens: int, window_tokens: int,
                         budget_rule: str) -> np.ndarray:
    """(decode_steps,) int64: the tokens a head attends at decode steps 1..decode_steps (module
    docstring), the new token included."""
    capacity = lazy_capacity(budget_tokens, window_tokens, budget_rule)
    out = np.empty(decode_steps, dtype=np.int64)
    held = prompt_tokens
    for i in range(decode_steps):
        held += 1
        out[i] = held
        if held > capacity and lazy_due(i + 1, held, budget_tokens, window_tokens, budget_rule):
            held = capacity
    return out
