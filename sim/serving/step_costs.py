"""Step-model costs one replica's scheduler asks for, cached per (model, hardware, method, knobs) config.

- decode step: the step model's per-token latency of `batch` sequences at a mean context rounded up to
  `CONTEXT_BUCKET_TOKENS`, simulated at powers of two of the batch and linearly interpolated between
  them, each point the mean of `STEPS_PER_POINT` steps (sim.engine.run_simulation, memory unbounded:
  admission has already checked it);
- prefill: the method's prefill of one prompt alone (`SimResult.prefill_s`: dense prefill plus what the
  method adds, e.g. ArkVale's exposed offload);
- prefill chunk (chunked scheduler): the extra time a prefill chunk of `c` tokens whose first `p` prompt
  tokens are already in the KV cache adds to an iteration that also decodes `b` sequences, per layer
  (sim.cost_model roofline primitives), times the layers:

      linear(b + c) - linear(b)                       QKV, output, gate+up and down GEMMs: the chunk's
                                                      tokens join the decode tokens' GEMMs (the weights
                                                      are read once for both: Sarathi-Serve's
                                                      piggybacking, arXiv 2403.02310 section 4)
    + attention(c over p + c keys)                    4 Hq d c (p + (c + 1) / 2) FLOPs (causal within
                                                      the chunk), reading the prefix's K and V once

  plus the method's prefill extras spread over the chunks in proportion to their tokens. Vidur prices
  the same two parts: linear operators on the iteration's total tokens, chunk attention on the prefix
  (`kv_cache_size`) and the squared chunk size (microsoft/vidur
  vidur/execution_time_predictor/sklearn_execution_time_predictor.py:559-570, 754-780, 852-869). Summed
  over the chunks of a prompt with no decode batch, the chunk costs equal the one-pass prefill up to
  kernel-launch overheads (tests/sim/test_serving_schedulers.py). The decode step and the chunk are
  added, not overlapped: a retrieval method's recall transfers could hide behind the chunk's compute,
  which this conservative sum does not credit;
- memory per sequence: the method's GPU and host bytes at the sequence's final context (sim.memory).
"""

from __future__ import annotations

import numpy as np

from sim.capacity import UNBOUNDED_MEMORY, memory_at, profile_of, software_of
from sim.config import SimConfig
from sim.cost_model import CostModel
from sim.demand import Demand
from sim.engine import run_simulation
from traces.models import get_model

__all__ = ["StepCosts", "CONTEXT_BUCKET_TOKENS", "STEPS_PER_POINT"]

CONTEXT_BUCKET_TOKENS = 1024
STEPS_PER_POINT = 8


class StepCosts:
    """Cached step-model costs for one (model, hardware, method, knobs) config (module docstring)."""

    def __init__(self, cfg: SimConfig, demand: Demand | None, seed: int = 0) -> None:
        self.cfg, self.demand, self.seed = cfg, demand, seed
        self._step: dict[tuple[int, int], float] = {}
        self._prefill: dict[int, float] = {}
        self._mem: dict[tuple[int, int], tuple[int, int]] = {}
        self._linear: dict[int, float] = {}
        self._decode: dict[tuple[int, int], float] = {}
        self._extra_per_token: dict[int, float] = {}
        one = memory_at(cfg.replace(batch_size=1), demand)
        self.gpu_capacity_bytes, self.host_capacity_bytes = one.gpu_capacity_bytes, one.host_capacity_bytes
        per_gpu, _ = self.per_seq_bytes(cfg.input_tokens, cfg.output_tokens)
        self.gpu_fixed_bytes = one.gpu_bytes - per_gpu  # weights, context, transient, fixed buffers
        self.cost = CostModel(get_model(cfg.model), profile_of(cfg), 1, cfg.dtype_bytes)

    def per_seq_bytes(self, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        """(GPU, host) bytes one sequence reserves at its final context."""
        key = (input_tokens, output_tokens)
        if key not in self._mem:
            cfg = self.cfg.replace(input_tokens=input_tokens, output_tokens=output_tokens)
            one = memory_at(cfg.replace(batch_size=1), self.demand)
            two = memory_at(cfg.replace(batch_size=2), self.demand)
            self._mem[key] = (two.gpu_bytes - one.gpu_bytes, two.host_bytes - one.host_bytes)
        return self._mem[key]

    def kv_bytes(self, input_tokens: int) -> int:
        """The method's KV state of one prompt as it keeps it (GPU + host bytes after prefill)."""
        gpu, host = self.per_seq_bytes(input_tokens, 1)
        return gpu + host

    def _point(self, batch: int, context: int) -> float:
        key = (batch, context)
        if key not in self._step:
            # admission already checked memory (per-sequence reservations); the step model's own fit
            # would see the bucketed context and a prefill transient that is not there during decode
            cfg = self.cfg.replace(
                batch_size=batch,
                input_tokens=context,
                output_tokens=STEPS_PER_POINT,
                hardware_overrides={**self.cfg.hardware_overrides, **UNBOUNDED_MEMORY},
            )
            res = run_simulation(
                cfg, self.demand, self.seed, profile=profile_of(cfg), software=software_of(cfg.software)
            )
            self._step[key] = float(res.step_latency_s.mean())
        return self._step[key]

    @staticmethod
    def bucket(mean_context: float) -> int:
        """The context a decode step is priced at: the mean context rounded up to the bucket."""
        return int(-(-int(np.ceil(mean_context)) // CONTEXT_BUCKET_TOKENS) * CONTEXT_BUCKET_TOKENS)

    def decode_s(self, batch: int, mean_context: float) -> float:
        """One decode step of `batch` sequences at `mean_context` tokens (bucketed, interpolated in batch)."""
        ctx = self.bucket(mean_context)
        key = (batch, ctx)
        if key not in self._decode:
            lo = 1 << (batch.bit_length() - 1)
            if lo == batch:
                self._decode[key] = self._point(batch, ctx)
            else:
                hi = lo * 2
                a, b = self._point(lo, ctx), self._point(hi, ctx)
                self._decode[key] = a + (b - a) * (batch - lo) / (hi - lo)
        return self._decode[key]

    def prefill_s(self, input_tokens: int) -> float:
        """The method's prefill of one prompt of `input_tokens`, alone on the GPU."""
        if input_tokens not in self._prefill:
            cfg = self.cfg.replace(batch_size=1, input_tokens=input_tokens, output_tokens=1)
            self._prefill[input_tokens] = float(run_simulation(cfg, self.demand, self.seed).prefill_s)
        return self._prefill[input_tokens]

    # ----- chunked prefill (module docstring) -----
    def _linear_s(self, tokens: int) -> float:
        """QKV, output and FFN GEMMs of one layer over `tokens` tokens (0 tokens: nothing)."""
        if tokens not in self._linear:
            if tokens == 0:
                self._linear[0] = 0.0
            else:
                c, m = self.cost, self.cost.model
                d = m.head_dim
                self._linear[tokens] = (
                    c.gemm_s(tokens, m.hidden_size, (m.n_qo_heads + 2 * m.n_kv_heads) * d)
                    + c.gemm_s(tokens, m.n_qo_heads * d, m.hidden_size)
                    + c.gemm_s(tokens, m.hidden_size, 2 * m.ffn_size)
                    + c.gemm_s(tokens, m.ffn_size, m.hidden_size)
                )
        return self._linear[tokens]

    def _chunk_attention_s(self, chunk_tokens: int, prefix_tokens: int | np.ndarray):
        """One layer's attention of a chunk over its prefix and itself (causal within the chunk); prefix
        tokens may be an array (then so is the result)."""
        c, m = self.cost, self.cost.model
        d, t, p = m.head_dim, chunk_tokens, np.asarray(prefix_tokens, dtype=np.float64)
        flops = 4.0 * m.n_qo_heads * d * t * (p + (t + 1) / 2)
        n_bytes = ((p + t) * 2 * m.n_kv_heads + 2 * t * m.n_qo_heads) * d * c.dtype_bytes
        out = c.kernel_s(flops, n_bytes, 1)
        return float(out) if np.ndim(out) == 0 else out

    def _extra_s_per_token(self, input_tokens: int) -> float:
        """The method's prefill beyond dense prefill, per prompt token."""
        if input_tokens not in self._extra_per_token:
            dense = sum(self.cost.dense_prefill_s(input_tokens).values())
            extra = max(0.0, self.prefill_s(input_tokens) - dense)
            self._extra_per_token[input_tokens] = extra / input_tokens
        return self._extra_per_token[input_tokens]

    def chunks_s(self, chunks: list[tuple[int, int, int]], decode_batch: int) -> float:
        """What prefill chunks add to an iteration decoding `decode_batch` sequences: chunks as
        (chunk tokens, prefix tokens already prefilled, the prompt's input tokens)."""
        total = sum(c for c, _, _ in chunks)
        if total == 0:
            return 0.0
        layers = self.cost.model.n_layers
        linear = self._linear_s(decode_batch + total) - self._linear_s(decode_batch)
        attention = sum(self._chunk_attention_s(c, p) for c, p, _ in chunks)
        extra = sum(c * self._extra_s_per_token(n) for c, _, n in chunks)
        return layers * (linear + attention) + extra

    def chunk_span_s(
        self, chunk_tokens: int, prefixes: np.ndarray, input_tokens: int, decode_batch: int
    ) -> np.ndarray:
        """`chunks_s` of one chunk of `chunk_tokens` at each of `prefixes`, vectorised."""
        layers = self.cost.model.n_layers
        linear = self._linear_s(decode_batch + chunk_tokens) - self._linear_s(decode_batch)
        attention = self._chunk_attention_s(chunk_tokens, np.asarray(prefixes))
        extra = chunk_tokens * self._extra_s_per_token(input_tokens)
        return layers * (linear + attention) + extra
