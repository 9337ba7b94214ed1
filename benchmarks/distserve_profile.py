"""DistServe's profiled per-iteration latency of OPT-13B on one A100 80GB, as step costs the serving model can
run instead of our step model: a diagnostic that separates the scheduler and criterion from the step
costs in benchmarks/validate_serving.py. Not a calibration: nothing in sim/ reads it.

Source: LLMServe/DistServe simdistserve/estimators/time_estimator.py:26-75 (the model), the OPT-13B TP1
coefficients of simdistserve/estimators/profile_data/profiler-a100-80g.vllm.json (vLLM, the engine of
DistServe's baselines) and profiler-a100-80g.distserve.json (DistServe's own engine), at commit 82831f1.
They were fitted (least squares on relative error, evaluation/1-fit-time-usage/main.py) to single
forward passes timed by evaluation/0-test-single-forward-performance, and re-fitted ("Realign the curve",
commit 4c68ed9, May 2024, reason not stated): per-iteration measurements, not the papers' end-to-end
goodputs, but not proven independent of them either. In milliseconds:

    prefill of prompts n_1..n_k in one iteration  a + b * sum(n) + c * sum(n^2)
    decode of B sequences with contexts t_1..t_B  a + b * sum(t + 1) + c * B   (one fit for B < 95, one
                                                                                for B >= 95)

plus DistServe's simulator's per-iteration Ray overhead, 2 + 0.0001 * (the batch's context tokens) ms
(simdistserve/base/worker.py:145-149, added at 324-325 and 346-348). A mixed iteration (chunked) is not
in the model and is refused. Memory per sequence stays the step model's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ENGINES", "profiled_costs"]

Coefficients = tuple[float, float, float]
# engine -> (prefill, decode for batches under 95, decode for 95 and over): (a, b, c), OPT-13B, TP 1, ms
ENGINES: dict[str, tuple[Coefficients, Coefficients, Coefficients]] = {
    "vllm": (
        (22.052204789310185, 0.14050923870128956, 8.076584822611088e-06),
        (23.475041008414784, 0.000592934466077393, 0.060726861260369455),
        (20.206356173691958, 0.0004907727036234946, 0.1200031385587413),
    ),
    "distserve": (
        (18.10254647486372, 0.1019122572698738, 7.122264314252114e-06),
        (19.934702624895458, 0.0006269356524350583, 0.03850697740828398),
        (7.1661889468253595, 0.0005798000403396046, 0.15831096191764046),
    ),
}
_LARGE_BATCH = 95
_RAY_MS, _RAY_MS_PER_TOKEN = 2.0, 0.0001


def _prefill_ms(engine: str, inputs: list[int]) -> float:
    a, b, c = ENGINES[engine][0]
    n = np.asarray(inputs, dtype=np.float64)
    return a + b * n.sum() + c * (n**2).sum() + _RAY_MS + _RAY_MS_PER_TOKEN * n.sum()


def _decode_ms(engine: str, batch: int, mean_context: float) -> float:
    a, b, c = ENGINES[engine][1 if batch < _LARGE_BATCH else 2]
    tokens = batch * (mean_context + 1)
    return a + b * tokens + c * batch + _RAY_MS + _RAY_MS_PER_TOKEN * batch * mean_context


def profiled_costs(base: Any, engine: str) -> Any:
    """A copy of StepCosts `base` (its memory model) whose decode, prefill and prefill-iteration times are
    DistServe's profile of `engine` ("vllm" or "distserve")."""
    from sim.serving import StepCosts

    class ProfiledStepCosts(StepCosts):
        def __init__(self) -> None:
            self.__dict__.update(base.__dict__)
            self.engine = engine

        def decode_s(self, batch: int, mean_context: float) -> float:
            return _decode_ms(engine, batch, mean_context) / 1e3

        def prefill_s(self, input_tokens: int) -> float:
            return _prefill_ms(engine, [input_tokens]) / 1e3

        def iteration_s(self, decode_batch: int, mean_context: float, chunks: list) -> float:
            if decode_batch and chunks:
                raise ValueError("DistServe's profile has no mixed (decode + prefill) iteration")
            if chunks and any(p for _, p, _ in chunks):
                raise ValueError("DistServe's profile has no chunked prefill")
            if chunks:
                return _prefill_ms(engine, [c for c, _, _ in chunks]) / 1e3
            return self.decode_s(decode_batch, mean_context) if decode_batch else 0.0

    return ProfiledStepCosts()
