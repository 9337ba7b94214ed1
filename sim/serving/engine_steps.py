"""Whole-step engine profiles: an engine's measured time of a whole iteration (model forward, its own host
work and messaging), fitted per iteration shape, which replaces the step model's price of that iteration
(sim/serving/engine.py describes the file; `step_time:` in a profile).

    prefill of prompts n_1..n_k in one iteration    fixed + per_token * sum(n) + per_token_squared * sum(n^2)
                                                    + constant
    decode of B sequences with contexts t_1..t_B    fixed + per_token * sum(t + 1) + per_sequence * B
                                                    (the first segment whose `below_batch` exceeds B)
    every iteration adds                            per_iteration.fixed + per_context_token * (its context
                                                    tokens: the prompts' for a prefill, sum(t) for decode)

in milliseconds. This is the form of DistServe's simulator's estimator (LLMServe/DistServe simdistserve/
estimators/time_estimator.py:26-75) and its Ray overhead (simdistserve/base/worker.py:145-149). Such a
profile is measured on one model, GPU, method (dense) and tensor-parallel degree (the profile's
`tensor_parallel`; its times include the collectives): it prices only that combination, and it has no
mixed (decode + prefill chunk) iteration, so the chunked scheduler refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.errors import SimInputError

__all__ = ["DecodeSegment", "StepTime", "StepTimeRefused"]


class StepTimeRefused(SimInputError):
    """An engine profile asked to price what it was not measured on (a whole-step profile's model, GPU,
    method or mixed iterations; any profile's tensor-parallel degree)."""


@dataclass(frozen=True)
class DecodeSegment:
    """One decode fit, valid for batches below `below_batch` (None: every larger batch)."""

    fixed_ms: float
    per_token_ms: float
    per_sequence_ms: float
    below_batch: int | None = None


@dataclass(frozen=True)
class StepTime:
    """An engine's whole-iteration times for one model, GPU and method (module docstring)."""

    model: str
    hardware: str
    method: str
    source: str
    prefill_fixed_ms: float
    prefill_per_token_ms: float
    prefill_per_token_squared_ms: float
    prefill_constant_ms: float
    decode: tuple[DecodeSegment, ...]
    iteration_fixed_ms: float
    iteration_per_context_token_ms: float

    def _overhead_ms(self, context_tokens: float) -> float:
        return self.iteration_fixed_ms + self.iteration_per_context_token_ms * context_tokens

    def prefill_s(self, inputs: Sequence[int]) -> float:
        """One prefill-only iteration of whole prompts of `inputs` tokens each."""
        total = float(sum(inputs))
        squares = float(sum(n * n for n in inputs))
        ms = (
            self.prefill_fixed_ms
            + self.prefill_per_token_ms * total
            + self.prefill_per_token_squared_ms * squares
            + self.prefill_constant_ms
        )
        return (ms + self._overhead_ms(total)) / 1e3

    def decode_s(self, batch: int, mean_context: float) -> float:
        """One decode-only iteration of `batch` sequences at `mean_context` tokens each."""
        if batch <= 0:
            return 0.0
        seg = next(s for s in self.decode if s.below_batch is None or batch < s.below_batch)
        ms = seg.fixed_ms + seg.per_token_ms * batch * (mean_context + 1) + seg.per_sequence_ms * batch
        return (ms + self._overhead_ms(batch * mean_context)) / 1e3

    def check(self, profile: str, model: str, hardware: str, method: str) -> None:
        """Refuse a model, GPU or method this profile was not measured on (one line naming them)."""
        wrong = [
            f"{what} {got!r} (it was measured on {want!r})"
            for what, got, want in (("model", model, self.model), ("hardware", hardware, self.hardware),
                                    ("method", method, self.method))
            if got != want
        ]
        if wrong:
            raise StepTimeRefused(
                f"--engine {profile}: prices whole steps of {self.model} on {self.hardware} with "
                f"{self.method} only, not {', '.join(wrong)}; use an engine profile of host time per "
                "iteration (e.g. sarathi-serve-a100) or none"
            )

    def refuse_mixed(self, profile: str) -> StepTimeRefused:
        return StepTimeRefused(
            f"--engine {profile}: a whole-step profile has no mixed (decode + prefill chunk) iteration or "
            "partial prompt, so it cannot price the chunked scheduler; use blocking, prefill-first or "
            "disaggregated, or an engine profile of host time per iteration"
        )
