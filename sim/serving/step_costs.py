"""Step-model costs one replica's scheduler asks for, cached per (model, hardware, method, knobs) config.

- decode step: the step model's per-token latency of `batch` sequences at a mean context rounded up to
  `CONTEXT_BUCKET_TOKENS`, simulated at powers of two of the batch and linearly interpolated between
  them, each point the mean of `STEPS_PER_POINT` steps (sim.engine.run_simulation, memory unbounded:
  admission has already checked it);
- prefill: the method's prefill of one prompt alone (`SimResult.prefill_s`: dense prefill plus what the
  method adds, e.g. ArkVale's exposed offload);
- mixed iteration (chunked and prefill-first schedulers): one batch of a decode token of each of `b`
  running sequences and prefill chunks of `c_j` tokens whose first `p_j` prompt tokens are already in the
  KV cache (C = sum c_j), priced as one batch from the same cost model (sim.cost_model):

      decode_s(b, ctx) - L * linear(b)        the decode step's own attention, LM head, host sync and
                                              the method's work, without its token-parallel ops
    + L * linear(b + C)                       norm, QKV GEMM, RoPE, KV append, output GEMM, residual,
                                              norm, gate+up GEMM, activation, down GEMM, residual over
                                              all b + C tokens at once (the weights are read once for
                                              decode and chunk tokens: Sarathi-Serve's piggybacking,
                                              arXiv 2403.02310 section 4)
    + L * sum_j attention(c_j over p_j + c_j) 4 Hq d c (p + (c + 1) / 2) FLOPs each (causal within the
                                              chunk), reading the prefix's K and V once
    + lm_head(b + k) - lm_head(b)             the prompts whose last chunk is in the batch (k) sample
                                              their first token
    + the method's prefill extras             what its prefill costs beyond dense, by chunk tokens

  (L layers). `linear(n)` is the decode step's own per-layer price at batch n, so with no chunk this is
  the decode step itself and with no decode batch the chunks of one prompt sum to its one-pass prefill
  within kernel-launch overheads (tests/sim/test_serving_schedulers.py). Vidur prices a batch the same
  way: every token-parallel operator on the batch's total tokens, decode attention on the decode batch
  and its mean KV, prefill attention on the chunks' prefixes and squared chunk sizes, summed per layer
  (microsoft/vidur vidur/execution_time_predictor/sklearn_execution_time_predictor.py:782-809 (linear
  operators on `_total_num_tokens_rounded`), 836-869 (decode and prefill attention), 559-570 (the
  prefill attention model's features); vidur/entities/execution_time.py:60-94). What is not credited:
  a retrieval method's recall transfers hiding behind the chunk's extra compute;
- memory per sequence: the method's GPU and host bytes at the sequence's final context (sim.memory);
- the serving engine's host time per iteration (sim/serving/engine.py; `none` by default: kernels alone),
  added once to every iteration by the number of sequences in it: a decode step of `b` sequences pays
  it at `b`, a prefill of one prompt alone at 1, a mixed iteration at `b` + its chunks' prompts, as
  Vidur adds its CPU-overhead terms to each batch by `batch.size` (vidur/entities/execution_time.py:
  87-94, 197-199);
- or, with a whole-step engine profile (sim/serving/engine_steps.py), that engine's measured time of each
  decode and prefill iteration in place of the step model's (its model, GPU and method only; no mixed
  iteration). Memory per sequence stays the step model's.

With tensor parallelism (`tensor_parallel` t > 1, sim/serving/tensor_parallel.py) every cost above is one
GPU's shard of the model (its heads, FFN and vocabulary slice; memory: the shard's weights and KV against
one GPU's memory) and every iteration adds the collectives of its tokens (2 all-reduces per layer and the
logits gather), priced from measured NCCL all-reduce times; at t = 1 nothing is added.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from sim.capacity import UNBOUNDED_MEMORY, memory_at, profile_of, software_of
from sim.config import SimConfig
from sim.cost_model import CostModel
from sim.demand import Demand
from sim.engine import run_simulation
from sim.serving.engine import EngineProfile, load_engine
from sim.serving.engine_steps import StepTimeRefused
from sim.serving.tensor_parallel import TensorParallel, shard_demand
from traces.models import get_model, use_model

__all__ = ["StepCosts", "CONTEXT_BUCKET_TOKENS", "STEPS_PER_POINT"]

CONTEXT_BUCKET_TOKENS = 1024
STEPS_PER_POINT = 8


class StepCosts:
    """Cached step-model costs for one (model, hardware, method, knobs) config (module docstring)."""

    def __init__(
        self,
        cfg: SimConfig,
        demand: Demand | None,
        seed: int = 0,
        engine: str | EngineProfile | None = None,
        tensor_parallel: int = 1,
        tensor_parallel_flag: str = "--tensor-parallel",
    ) -> None:
        self.engine_profile = load_engine(engine)
        self.step_time = self.engine_profile.step_time
        if self.step_time is not None:
            self.step_time.check(self.engine_profile.name, cfg.model, cfg.hardware, cfg.method)
        self.engine_profile.check_tensor_parallel(tensor_parallel, tensor_parallel_flag)
        self.model = get_model(cfg.model)  # the whole model; cfg below names one GPU's shard of it
        self.tp = TensorParallel.of(
            self.model, profile_of(cfg).name, tensor_parallel, cfg.dtype_bytes, tensor_parallel_flag,
            collectives=self.step_time is None,  # a whole-step profile's times include them
        )
        if self.tp.degree > 1:
            use_model(self.tp.shard)
            cfg, demand = cfg.replace(model=self.tp.shard.name), shard_demand(demand, self.tp.shard)
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

    def with_host_engine(self, profile: EngineProfile) -> StepCosts:
        """These costs priced with another host-time engine profile, sharing the step-model caches: they
        hold kernel times only, the engine's host time being added on top of them (`engine_s`). A whole-step
        profile replaces the step model's iterations, so neither side may be one."""
        if self.step_time is not None or profile.step_time is not None:
            raise StepTimeRefused(
                f"engine {profile.name}: only host-time engine profiles can be swapped into these costs "
                f"(engine {self.engine_profile.name}); a whole-step profile needs costs of its own"
            )
        profile.check_tensor_parallel(self.tp.degree)
        out = copy.copy(self)
        out.engine_profile = profile
        return out

    def engine_s(self, sequences: int) -> float:
        """The engine's host time of one iteration of `sequences` sequences (0 for `none`)."""
        return self.engine_profile.iteration_s(sequences)

    def decode_s(self, batch: int, mean_context: float) -> float:
        """One decode step of `batch` sequences at `mean_context` tokens (bucketed, interpolated in batch),
        the engine's host time included; a whole-step engine's own time)."""
        if self.step_time is not None:
            return self.step_time.decode_s(batch, mean_context)
        comm = self.tp.collectives_s(batch, batch)
        return self._model_decode_s(batch, mean_context) + comm + self.engine_s(batch)

    def _model_decode_s(self, batch: int, mean_context: float) -> float:
        """The step model's decode step alone (no engine host time)."""
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
        """The method's prefill of one prompt of `input_tokens`, alone on the GPU, as one iteration (the
        engine's host time of one sequence included; a whole-step engine's own time)."""
        return self.prefill_batch_s([input_tokens])

    def prefill_batch_s(self, inputs: list[int]) -> float:
        """One prefill-only iteration of whole prompts of `inputs` tokens: a whole-step engine's measured
        batched prefill; on the step model each prompt's prefill alone, summed (a prompt of a few hundred
        tokens or more is compute-bound, so sharing the weights' reads saves little; no saving is
        credited), with the engine's host time paid once at all the prompts."""
        if self.step_time is not None:
            return self.step_time.prefill_s(inputs)
        return sum(self._model_prefill_s(n) + self.tp.collectives_s(n, 1) for n in inputs) + self.engine_s(
            len(inputs)
        )

    def _model_prefill_s(self, input_tokens: int) -> float:
        if input_tokens not in self._prefill:
            cfg = self.cfg.replace(batch_size=1, input_tokens=input_tokens, output_tokens=1)
            self._prefill[input_tokens] = float(run_simulation(cfg, self.demand, self.seed).prefill_s)
        return self._prefill[input_tokens]

    # ----- mixed iterations: decode tokens and prefill chunks in one batch (module docstring) -----
    def _linear_s(self, tokens: int) -> float:
        """One layer's token-parallel ops over `tokens` tokens, as the decode step prices them at that
        batch (sim.cost_model: norm, QKV GEMM, RoPE, KV append; output GEMM, residual; norm, gate+up GEMM,
        activation, down GEMM, residual); 0 for no tokens."""
        if tokens not in self._linear:
            c = replace(self.cost, batch=tokens)
            self._linear[tokens] = 0.0 if tokens == 0 else c.qkv_s() + c.out_proj_s() + c.ffn_s()
        return self._linear[tokens]

    def _lm_head_s(self, tokens: int) -> float:
        return 0.0 if tokens == 0 else replace(self.cost, batch=tokens).lm_head_s()

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
            extra = max(0.0, self._model_prefill_s(input_tokens) - dense)
            self._extra_per_token[input_tokens] = extra / input_tokens
        return self._extra_per_token[input_tokens]

    def _decode_rest_s(self, decode_batch: int, mean_context: float) -> float:
        """The decode step of `decode_batch` sequences less its token-parallel ops: its attention, LM
        head, host sync and the method's own work (0 without decode)."""
        if decode_batch == 0:
            return 0.0
        linear = self.cost.model.n_layers * self._linear_s(decode_batch)
        return self._model_decode_s(decode_batch, mean_context) - linear

    def iteration_s(
        self, decode_batch: int, mean_context: float, chunks: list[tuple[int, int, int]]
    ) -> float:
        """One iteration: a decode token of each of `decode_batch` sequences at `mean_context` and the
        prefill chunks `chunks` as (chunk tokens, prefix tokens already prefilled, the prompt's input
        tokens), priced as one batch, plus the engine's host time at all its sequences (module
        docstring)."""
        b, total = decode_batch, sum(c for c, _, _ in chunks)
        if total == 0:
            return self.decode_s(b, mean_context) if b else 0.0
        if self.step_time is not None:
            if b or any(p or c < n for c, p, n in chunks):
                raise self.step_time.refuse_mixed(self.engine_profile.name)
            return self.step_time.prefill_s([n for _, _, n in chunks])
        finishing = sum(1 for c, p, n in chunks if p + c >= n)
        layers = self.cost.model.n_layers
        attention = sum(self._chunk_attention_s(c, p) for c, p, _ in chunks)
        extra = sum(c * self._extra_s_per_token(n) for c, _, n in chunks)
        return (
            self._decode_rest_s(b, mean_context)
            + layers * (self._linear_s(b + total) + attention)
            + self._lm_head_s(b + finishing) - self._lm_head_s(b)
            + extra
            + self.tp.collectives_s(b + total, b + finishing)
            + self.engine_s(b + len(chunks))
        )

    def chunk_span_s(
        self,
        chunk_tokens: int,
        prefixes: np.ndarray,
        input_tokens: int,
        decode_batch: int,
        mean_context: float,
    ) -> np.ndarray:
        """`iteration_s` of iterations each carrying one chunk of `chunk_tokens` (not the prompt's last) at
        each of `prefixes`, beside the same decode batch, vectorised."""
        if self.step_time is not None:
            raise self.step_time.refuse_mixed(self.engine_profile.name)
        layers = self.cost.model.n_layers
        attention = self._chunk_attention_s(chunk_tokens, np.asarray(prefixes))
        fixed = self._decode_rest_s(decode_batch, mean_context) + layers * self._linear_s(
            decode_batch + chunk_tokens
        )
        host = self.engine_s(decode_batch + 1)
        comm = self.tp.collectives_s(decode_batch + chunk_tokens, decode_batch)
        return fixed + layers * attention + chunk_tokens * self._extra_s_per_token(input_tokens) + comm + host
