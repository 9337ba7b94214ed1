"""Dense attention with the whole KV cache on the GPU (the "full KV" baseline).

Assumptions: a plain decoder layer (QKV + RoPE + append, attention over the whole context, output
projection, FFN), LM head and a host sync per step (the sampled token is read back); nothing crosses the
host link. Memory: the full KV of every sequence at the longest context on the GPU; when it does not
fit, `SimResult.memory["fits"]` is False and the CLI says "out of memory" (the latency is still
reported as what the GPU would take if it fitted, labelled as such).
Source: the standard decode loop (e.g. gpt-fast `decode_one_token`); FreeKV paper's "full KV" baseline.

As published (SimConfig.implementation): option `runtime` picks the code that runs it: "hf" (default) a
stock Hugging Face transformers Llama decoder in eager PyTorch (per-op dispatch of every kernel:
sim/methods/eager.py HF_* recipes, modeling_llama.py; one read-back per step in `generate`), or
"freekv" the official FreeKV runtime with no budget (rooikeee/FreeKV source/freekv/adapter/modeling.py
289-291: the same patched decoder as FreeKV, flashinfer full-context decode; eager.py FREEKV_*).
"ideal" charges no host cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, MemoryNeed
from sim.methods.decoder_layer import DecoderMethod, context_attention_s
from sim.methods.eager import FREEKV_DECODER, HF_DECODER, DecoderRecipe
from traces.models import ModelSpec

__all__ = ["Dense"]


@dataclass(frozen=True)
class Dense(DecoderMethod):
    """The shared decoder layer alone, attending the whole context (module docstring)."""

    needs_demand: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = (
        "standard transformer decode loop (gpt-fast generate.py decode_one_token)",
        "FreeKV paper (arXiv 2505.13109): full-KV baseline",
    )

    def recipe(self) -> DecoderRecipe:
        return FREEKV_DECODER if self.knobs.runtime == "freekv" else HF_DECODER

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        return context_attention_s(ctx)

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        return MemoryNeed(
            gpu_fixed_bytes=0,
            gpu_per_seq_bytes=cfg.max_context_tokens * model.kv_bytes_per_token(cfg.dtype_bytes),
            host_per_seq_bytes=0,
        )
