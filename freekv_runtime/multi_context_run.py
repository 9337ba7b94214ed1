"""Running multi-context prompts: the document pass, then the decode loop, with every position's logits.

`run_with_logits(ctx, prompt, n_tokens, forced)` runs the prefill and n_tokens - 1 decode steps and
returns the n_tokens next-token distributions: row 0 is the prefill's (the first answer token, the one a
multi-context method's joined cache decides most), row i the one after decode step i. Greedy when
`forced` is None, else teacher-forced on forced[:, :n_tokens] (fidelity against a reference's tokens).
`continue_with_logits` runs the decode steps after a prefill (a forked multi-context state continues
both greedily and teacher-forced from one prefill).
`document_pass(adapter, ctx, ids, seg)` runs a multi-context policy's document prefill
(freekv_runtime/policies/_multi_context.py) before the decode loop's prefill.

Shapes: b = batch, T = prompt tokens, N = tokens, V = vocabulary.
"""

from __future__ import annotations

import torch

from freekv_runtime.decode import DecodeContext, decode_one_token, prefill
from freekv_runtime.model import ModelAdapter
from freekv_runtime.policies._multi_context import MultiContextState, Segments

__all__ = ["run_with_logits", "continue_with_logits", "document_pass"]


@torch.inference_mode()
def run_with_logits(
    ctx: DecodeContext, prompt: torch.Tensor, n_tokens: int, forced: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """prompt (b, T) -> (tokens (b, N) int64, logits (b, N, V) float32): greedy, or forced tokens."""
    if n_tokens < 1:
        raise ValueError(f"n_tokens must be at least 1, got {n_tokens}")
    return continue_with_logits(ctx, prefill(ctx, prompt), prompt.shape[1], n_tokens, forced)


@torch.inference_mode()
def continue_with_logits(
    ctx: DecodeContext, logits: torch.Tensor, n_prompt: int, n_tokens: int, forced: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decode steps after a prefill whose last logits (b, V) are given -> (tokens (b, N), logits
    (b, N, V))."""
    rows = [logits.float()]
    tokens = [forced[:, 0] if forced is not None else logits.argmax(-1)]
    for i in range(n_tokens - 1):
        logits = decode_one_token(ctx, tokens[-1][:, None], n_prompt + i)
        rows.append(logits.float())
        tokens.append(forced[:, i + 1] if forced is not None else logits.argmax(-1))
    return torch.stack(tokens, dim=1), torch.stack(rows, dim=1)


@torch.inference_mode()
def document_pass(adapter: ModelAdapter, ctx: DecodeContext, ids: torch.Tensor, seg: Segments) -> None:
    """The document caches of `seg`'s documents (each prefilled alone) into the multi-context state."""
    state = ctx.state
    assert isinstance(state, MultiContextState)
    state.set_segments(seg)
    if state.plan.needs_document_pass:
        adapter.forward(ids, 0, ctx.rope, state.document_prefill, ctx.timer)
