"""The decode loop, gpt-fast style: prefill -> decode_one_token -> generate / teacher_forced.

Every function takes a `DecodeContext` (model adapter, policy state, RoPE table, timer, recorder). After
the prefill the loop calls `state.end_prefill()`, after each decode step `state.end_step()`, and hands
the decisions with the step's timings to the recorder. Sampled tokens stay on the device: the loop
itself adds no host sync (the policy's decisions and `OpTimer.collect` sync once per step on CUDA).
Generation runs the requested number of tokens; stopping at EOS is left to the caller (truncating
afterwards costs nothing, checking each step would sync).

Shapes: b = batch, T = prompt tokens, N = new tokens, V = vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from freekv_runtime.model import ModelAdapter, RopeTable
from freekv_runtime.policies.base import PolicyState, PrefillDecisions, StepDecisions
from freekv_runtime.timing import OpTimer

__all__ = [
    "DecisionSink", "DecodeContext", "Sampling", "sample", "prefill", "decode_one_token", "generate",
    "teacher_forced",
]


class DecisionSink(Protocol):
    """Receives what the policy decided (see `freekv_runtime.recorder.TraceRecorder`)."""

    def on_prefill(
        self, decisions: PrefillDecisions, prompt_tokens: int, timings_s: dict[str, float]
    ) -> None:
        ...

    def on_step(self, decisions: StepDecisions, context_tokens: int, timings_s: dict[str, float]) -> None:
        ...


@dataclass(frozen=True)
class Sampling:
    """temperature 0 means greedy (argmax); otherwise softmax(logits / temperature) restricted to the
    smallest set of tokens whose probability reaches top_p."""

    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class DecodeContext:
    """What every step needs. `recorder` may be None (nothing recorded)."""

    adapter: ModelAdapter
    state: PolicyState
    rope: RopeTable
    timer: OpTimer
    recorder: DecisionSink | None = None


Generators = torch.Generator | list[torch.Generator] | None


def sample(logits: torch.Tensor, sampling: Sampling, generator: Generators) -> torch.Tensor:
    """logits (b, V) -> next tokens (b,) int64, without a host sync.

    generator: one for the batch, or a list of b (row i draws from generator[i] alone, so a sequence's
    samples do not depend on the batch it runs in)."""
    if sampling.temperature == 0:
        return logits.argmax(dim=-1)
    if isinstance(generator, list):
        if len(generator) != logits.shape[0]:
            raise ValueError(f"{len(generator)} generators for a batch of {logits.shape[0]}")
        return torch.cat([sample(logits[i : i + 1], sampling, g) for i, g in enumerate(generator)])
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)  # (b, V)
    if sampling.top_p < 1:
        sorted_probs, order = probs.sort(dim=-1, descending=True)  # (b, V)
        # keep a token if the mass before it is still below top_p (the first token is always kept)
        drop = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= sampling.top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        choice = torch.multinomial(sorted_probs, 1, generator=generator)  # (b, 1) index into order
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _observer(ctx: DecodeContext):  # noqa: ANN202 - the state's layer_inputs hook or None
    return ctx.state.layer_inputs if ctx.state.wants_layer_inputs else None


def prefill(ctx: DecodeContext, tokens: torch.Tensor) -> torch.Tensor:
    """tokens (b, T) -> logits (b, V) of the last prompt position; ends the prefill and records it."""
    with ctx.timer.op("prefill_total"):
        logits = ctx.adapter.forward(tokens, 0, ctx.rope, ctx.state.prefill, ctx.timer,
                                     observe=_observer(ctx))  # (b, V)
        decisions = ctx.state.end_prefill()
    timings_s = ctx.timer.collect()
    if ctx.recorder is not None:
        ctx.recorder.on_prefill(decisions, tokens.shape[1], timings_s)
    return logits


def decode_one_token(ctx: DecodeContext, token: torch.Tensor, position: int) -> torch.Tensor:
    """token (b, 1) at `position` (= tokens already cached) -> logits (b, V); ends the step and records it."""
    with ctx.timer.op("step_total"):
        logits = ctx.adapter.forward(token, position, ctx.rope, ctx.state.decode, ctx.timer,
                                     observe=_observer(ctx))  # (b, V)
        decisions = ctx.state.end_step()
    timings_s = ctx.timer.collect()
    if ctx.recorder is not None:
        ctx.recorder.on_step(decisions, position + 1, timings_s)
    return logits


@torch.inference_mode()
def generate(
    ctx: DecodeContext,
    prompt: torch.Tensor,
    max_new_tokens: int,
    sampling: Sampling = Sampling(),
    generator: Generators = None,
    step_logits: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """prompt (b, T) -> new tokens (b, N) with N = max_new_tokens (prefill + N - 1 decode steps).

    step_logits: if a list is given, each decode step's logits (b, V) float32 are appended to it (the
    N - 1 distributions the policy's decode attention produced; the prefill's are not included)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    n_prompt = prompt.shape[1]
    logits = prefill(ctx, prompt)  # (b, V)
    tokens = [sample(logits, sampling, generator)]  # N x (b,)
    for i in range(max_new_tokens - 1):
        logits = decode_one_token(ctx, tokens[-1][:, None], n_prompt + i)
        if step_logits is not None:
            step_logits.append(logits.float())
        tokens.append(sample(logits, sampling, generator))
    return torch.stack(tokens, dim=1)


@torch.inference_mode()
def teacher_forced(ctx: DecodeContext, prompt: torch.Tensor, forced: torch.Tensor) -> torch.Tensor:
    """prompt (b, T), forced (b, N) -> logits (b, N, V) float32.

    Row i is the next-token distribution after decode step i fed forced[:, i] (the prefill's own
    prediction is not returned: every returned row went through the policy's decode attention).
    """
    n_prompt, n_forced = prompt.shape[1], forced.shape[1]
    prefill(ctx, prompt)
    rows = [
        decode_one_token(ctx, forced[:, i : i + 1], n_prompt + i).float() for i in range(n_forced)
    ]  # N x (b, V)
    return torch.stack(rows, dim=1)
