"""Host-side cost recipes of eager PyTorch decoders, shared by the as-published method models.

A recipe counts what the host thread does for one piece of a decoder layer (eager torch ops that launch
a kernel, Python-level calls that launch nothing, calls into a C++ extension, launches from C++, copy
calls by API, syncs, read-backs, thread hand-offs) as a `HostOps` (sim/methods/host_costs.py, the one
pricing of host-op counts with a software profile). Counts are read from the public code named at each
recipe; where a count is approximate the comment says so. The "ideal" implementation mode never uses these.

A `DecoderRecipe` gathers the recipes of the shared decoder-layer ops (qkv, attention, out_proj, ffn, the
per-step LM head and sampling, an optional per-step preparation) that the decoder-layer skeleton
(sim/methods/decoder_layer.py) charges as published. Two decoders are described here:
- `HF_*`, `HF_DECODER`: a stock Hugging Face transformers Llama decoder in eager mode (transformers
  models/llama/modeling_llama.py, v4.4x: LlamaRMSNorm, LlamaAttention with apply_rotary_pos_emb,
  DynamicCache.update, repeat_kv, sdpa; generation/utils.py `_sample` loop).
- `FREEKV_*`, `FREEKV_DECODER`: the official FreeKV runtime (rooikeee/FreeKV at 074f14d, `source/`): the
  same HF model with its attention, RMSNorm, MLP and LM head forwards patched
  (source/freekv/adapter/modeling.py `enable_offload` 315-390) to call the C++/CUDA extension
  `freekv_cpp` and flashinfer.
Decoders patched by a method's own code (Quest, ArkVale, ShadowKV, FlexGen for InfiniGen) have their
recipe in that method's module, built from the pieces here where they are the same (`EXT_*`, `HF_OUT_PROJ`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.methods.host_costs import HostOps

__all__ = [
    "DecoderRecipe",
    "HF_DECODER",
    "FREEKV_DECODER",
    "HF_QKV",
    "HF_ATTENTION",
    "HF_OUT_PROJ",
    "HF_FFN",
    "HF_STEP",
    "FREEKV_QKV",
    "FREEKV_ATTENTION",
    "FREEKV_OUT_PROJ",
    "FREEKV_FFN",
    "FREEKV_STEP",
    "FREEKV_STEP_PREPARE",
    "EXT_KERNEL",
    "EXT_HF_FFN",
    "ext_hf_decoder",
]


@dataclass(frozen=True)
class DecoderRecipe:
    """Host ops of the shared decoder-layer operations (sim/methods/decoder_layer.py) as one public code
    runs them: qkv, attention, out_proj and ffn per layer; `step` once per step at the last layer (final
    norm, LM head, sampling glue and the token's read-back: the `lm_head` op); `prepare` once per step at
    layer 0, charged on `qkv`, plus `prepare_per_layer` times the model's layers (Python loops over the
    layers' caches)."""

    qkv: HostOps
    attention: HostOps
    out_proj: HostOps
    ffn: HostOps
    step: HostOps
    prepare: HostOps = HostOps()
    prepare_per_layer: HostOps = HostOps()

    def with_attention(self, attention: HostOps) -> DecoderRecipe:
        """The same decoder with the attention recipe replaced (a method's own attention forward)."""
        return replace(self, attention=attention)

    def step_prepare(self, n_layers: int) -> HostOps:
        """The once-per-step preparation at layer 0 on a model of `n_layers` layers."""
        return self.prepare + self.prepare_per_layer * n_layers


# ---- stock HF transformers Llama decoder, eager (modeling_llama.py, v4.4x) ----
# LlamaRMSNorm.forward: to(fp32), pow, mean, add eps, rsqrt, mul, to(dtype), mul weight: 8 kernels.
_HF_RMSNORM = HostOps(torch_ops=8)
# input_layernorm; q/k/v_proj (3); view+transpose x3 (6 views); apply_rotary_pos_emb: q*cos,
# rotate_half (2 slices, neg, cat), *sin, add for q and for k (10 kernels, 4 slices);
# DynamicCache.update: torch.cat for K and V (2). One decoder-layer module overhead.
HF_QKV = _HF_RMSNORM + HostOps(torch_ops=3 + 10 + 2, python_ops=6 + 4, python_layers=1)
# repeat_kv for K and V (expand view + reshape copy: 1 kernel each), sdpa (1), transpose + contiguous
# (1), reshape (view).
HF_ATTENTION = HostOps(torch_ops=4, python_ops=4)
# o_proj + residual add.
HF_OUT_PROJ = HostOps(torch_ops=2)
# post_attention_layernorm, LlamaMLP (gate, up, act, mul, down), residual add.
HF_FFN = _HF_RMSNORM + HostOps(torch_ops=6)
# Once per step (generation/utils.py `_sample` + LlamaModel.forward): embedding (1), rotary cos/sin
# (~6), final norm (8), lm_head (1), logits[:, -1, :] float (1), argmax (1), cat input_ids (1),
# unfinished_sequences update (~3), stopping criteria (~2), cache_position/position ids (~5): ~29 ops,
# ~10 views, and one read-back (`unfinished_sequences.max() == 0`; huggingface/transformers issue
# #43089 counts 3.25 GPU syncs per generated token in HF generation).
HF_STEP = HostOps(torch_ops=29, python_ops=10, readbacks=1)


# ---- HF Llama with RMSNorm and attention patched to call a C++ extension (Quest, ArkVale) ----
# One Python call into the extension that launches one kernel (patched RMSNorm, FlashInfer decode).
EXT_KERNEL = HostOps(ext_calls=1, cpp_launches=1)
# Patched post_attention_layernorm + HF LlamaMLP (gate, up, act, mul, down) + residual add.
EXT_HF_FFN = EXT_KERNEL + HostOps(torch_ops=6)


def ext_hf_decoder(qkv: HostOps, step: HostOps) -> DecoderRecipe:
    """An HF Llama whose RMSNorm and attention call a C++ extension (one launch each: EXT_KERNEL), with the
    HF output projection and MLP; `qkv` and the per-step `step` are the method's (Quest, ArkVale)."""
    return DecoderRecipe(qkv, EXT_KERNEL, HF_OUT_PROJ, EXT_HF_FFN, step)


# ---- official FreeKV runtime (rooikeee/FreeKV source/, decode path) ----
# modeling.py 73-80: RMSNorm -> `with torch.cuda.stream(...)` + kernels.rms_norm (1 extension call,
# 1 launch).
_FREEKV_RMSNORM = HostOps(python_ops=1, ext_calls=1, cpp_launches=1)
# modeling.py 117-176 (per layer): input_layernorm; q/k/v_proj torch linears (133-135); 3 views
# (138-142); flashinfer apply_llama31_rope_inplace (152-161: 1 call, 1 launch); append_paged_kv_cache
# (176 -> infer_state.py 802-821: 1 call, 1 launch); nvtx range push/pop (~4 Python calls); one
# decoder-layer module overhead (HF LlamaDecoderLayer around the patched modules).
FREEKV_QKV = _FREEKV_RMSNORM + HostOps(
    torch_ops=3, python_ops=3 + 4, ext_calls=2, cpp_launches=2, python_layers=1
)
# decode_sdpa (infer_state.py 1463-1470): flashinfer decode wrapper forward (Python wrapper: ~2 calls,
# 1 extension call, 1 launch) + nvtx (2).
FREEKV_ATTENTION = HostOps(python_ops=4, ext_calls=1, cpp_launches=1)
# modeling.py 295-301: reshape (view), o_proj torch linear, nvtx (2); HF residual add.
FREEKV_OUT_PROJ = HostOps(torch_ops=2, python_ops=3)
# post_attention_layernorm (patched RMSNorm) + modeling.py 82-90 `_mlp_forward_streamed`: stream
# context + HF LlamaMLP (gate, up, act, mul, down: 5 torch ops); HF residual add.
FREEKV_FFN = _FREEKV_RMSNORM + HostOps(torch_ops=6, python_ops=1)
# Once per step, at layer 0 (modeling.py 119-120 -> infer_state.py 790-794 `_prepare_decode` 640-774):
# Python loops over the layers' caches (decode_alloc_1_token over kv_caches and cpu_kv_caches, all_eq:
# ~3 iterations per layer: FREEKV_DECODER's prepare_per_layer, L is model-dependent), torch.tensor of
# the last page lengths (1 host->device copy), arange + full for RoPE (2 ops), flashinfer
# handler.begin_forward per budget group (~5 Python calls, 1 host->device copy of the index pointers).
FREEKV_STEP_PREPARE = HostOps(torch_ops=2, python_ops=5, torch_copies=2)
# Once per step at the last layer: final norm (patched), lm_head (modeling.py 92-99: 1 torch linear),
# end_forward (infer_state.py 796-800, handler end_forward), HF `_sample` glue as HF_STEP without
# the norm and the LM head (~20 ops, ~10 views, 1 read-back).
FREEKV_STEP = _FREEKV_RMSNORM + HostOps(torch_ops=1 + 20, python_ops=2 + 10, readbacks=1)


# A stock HF decoder (dense, full offload and the dropping methods' public codes).
HF_DECODER = DecoderRecipe(HF_QKV, HF_ATTENTION, HF_OUT_PROJ, HF_FFN, HF_STEP)
# The official FreeKV runtime (FreeKV and its full-KV path, modeling.py 289-291): `_prepare_decode` at
# layer 0 with ~3 Python iterations per layer of the model (FREEKV_STEP_PREPARE above).
FREEKV_DECODER = DecoderRecipe(
    FREEKV_QKV, FREEKV_ATTENTION, FREEKV_OUT_PROJ, FREEKV_FFN, FREEKV_STEP,
    prepare=FREEKV_STEP_PREPARE, prepare_per_layer=HostOps(python_ops=3),
)
