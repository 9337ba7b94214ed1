"""Dense attention: every token of the context is attended, the KV on the GPU (dense) or streamed from
the host every step (full offload)."""

from __future__ import annotations

from dataclasses import dataclass

from traces.catalogue.entry import MethodEntry
from traces.catalogue.knobs import MethodKnobs, knob

__all__ = ["ENTRIES", "DenseKnobs", "FullOffloadKnobs"]


@dataclass(frozen=True)
class DenseKnobs(MethodKnobs):
    runtime: str = knob("hf", "the code priced as published: a stock Hugging Face eager decoder "
                        "(hf) or the official FreeKV runtime's full-KV path (freekv)", side="simulator",
                        choices=("hf", "freekv"))


@dataclass(frozen=True)
class FullOffloadKnobs(MethodKnobs):
    """Full offload: every layer's KV streamed every step; `runtime` picks the code priced as published."""

    runtime: str = knob("hf", "the code priced as published: a stock Hugging Face eager decoder with "
                        "OffloadedCache (hf) or FlexGen's loop with the cache in pageable host memory and "
                        "--overlap false (flexgen, InfiniGen's baseline)", side="simulator",
                        choices=("hf", "flexgen"))


ENTRIES = (
    MethodEntry("dense", "dense", "full KV cache on the GPU, dense attention", DenseKnobs,
                policy="freekv_runtime.policies.dense:DensePolicy", model="sim.methods.dense:Dense",
                aliases=("full",), source="the standard decode loop (gpt-fast generate.py)"),
    MethodEntry("full-offload", "dense", "whole KV in host memory, streamed layer by layer every step",
                FullOffloadKnobs, model="sim.methods.full_offload:FullOffload",
                source="Sheng et al., FlexGen (ICML 2023); transformers OffloadedCache"),
)
