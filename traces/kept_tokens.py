"""Kept-token rules of the dropping methods whose size is not simply min(context, budget), read by both
halves: the runtime's policies (freekv_runtime/policies/raas.py, razorattention.py) bound what a head
attends with them, and the simulator's models (sim/methods/raas.py, razorattention.py) price attention
and memory with them, so the two agree on the kept count for the same knobs.

RaaS as published (Hu et al., arXiv 2502.11147; knob `prompt` = "keep"): every prompt token is kept and
the budget applies to the decoded tokens, so a head holds at most T + (budget - sink) tokens at context N
(T the prompt length): `raas_kept_tokens`. The FreeKV harness variant (`prompt` = "harness") keeps
min(N, budget).

RazorAttention (Tang et al., arXiv 2407.15891, Algorithm 1): a non-retrieval head keeps the sink, the
newest L_h = max(S0, ceil(N / C)) tokens (window rule "paper"; S0 = budget - sink - 1, the budget's room
after the sink and the compensation token) and one compensation token: `razor_window_tokens`,
`razor_bounded_tokens`. Window rule "budget" keeps L_h = S0. Retrieval heads keep all N tokens.

Every function takes ints or numpy arrays (elementwise). Plain Python + numpy: no torch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["raas_kept_tokens", "razor_s0", "razor_window_tokens", "razor_bounded_tokens"]

RAAS_PROMPT_RULES = ("keep", "harness")
RAZOR_WINDOW_RULES = ("paper", "budget")


def raas_kept_tokens(context_tokens, prompt_tokens, budget_tokens: int, sink_tokens: int,
                     prompt: str = "keep"):
    """Tokens a RaaS head holds (and attends) at `context_tokens`: prompt "keep" (the paper): at most the
    prompt plus budget - sink decoded tokens, and never fewer than min(N, budget); "harness":
    min(N, budget)."""
    if prompt not in RAAS_PROMPT_RULES:
        raise ValueError(f"raas prompt rule must be one of {RAAS_PROMPT_RULES}, got {prompt!r}")
    n = np.asarray(context_tokens)
    if prompt == "harness":
        out = np.minimum(n, budget_tokens)
    else:
        limit = np.maximum(budget_tokens, np.asarray(prompt_tokens) + budget_tokens - sink_tokens)
        out = np.minimum(n, limit)
    return out if out.ndim else int(out)


def razor_s0(budget_tokens: int, sink_tokens: int) -> int:
    """S0: the recent tokens a non-retrieval head keeps below the compression threshold (budget - sink -
    1: the budget less the sink and the compensation token)."""
    return budget_tokens - sink_tokens - 1


def razor_window_tokens(context_tokens, budget_tokens: int, sink_tokens: int, window_rule: str = "paper",
                        compression_ratio: float = 5.0):
    """L_h at context N: max(S0, ceil(N / C)) (rule "paper"), or S0 (rule "budget")."""
    if window_rule not in RAZOR_WINDOW_RULES:
        raise ValueError(f"razorattention window_rule must be one of {RAZOR_WINDOW_RULES}, got "
                         f"{window_rule!r}")
    s0 = razor_s0(budget_tokens, sink_tokens)
    n = np.asarray(context_tokens)
    out = np.full(n.shape, s0, dtype=np.int64) if window_rule == "budget" else np.maximum(
        s0, np.ceil(n / compression_ratio).astype(np.int64))
    return out if out.ndim else int(out)


def razor_bounded_tokens(context_tokens, budget_tokens: int, sink_tokens: int, window_rule: str = "paper",
                         compression_ratio: float = 5.0, compensation: bool = True):
    """Tokens a non-retrieval head attends at context N: all N while N <= sink + L_h (nothing dropped
    yet), else sink + L_h plus the compensation token (when one is kept)."""
    c = 1 if compensation else 0
    n = np.asarray(context_tokens)
    local = sink_tokens + np.asarray(razor_window_tokens(n, budget_tokens, sink_tokens, window_rule,
                                                         compression_ratio))
    out = np.where(n > local, local + c, n)
    return out if out.ndim else int(out)
