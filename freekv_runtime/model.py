"""Model adapter: our own forward over a HF Llama / Qwen2 causal LM, attention delegated to a policy.

This is the only file that touches transformers internals. It reuses the HF module's submodules
(embed_tokens, per layer input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp; the
final norm, lm_head and the model's rotary embedding, which knows the RoPE scaling) and runs the layer
loop itself, so that each layer's attention is `state.prefill(...)` or `state.decode(...)` of a KV
policy. Qwen2's q/k/v bias lives inside its Linear modules, so both families share one path.

Shapes: b = batch, T = new tokens, D = hidden size, Hq / Hkv = query / KV heads, d = head dim,
V = vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.policies.base import AttentionShape
from freekv_runtime.timing import OpTimer

__all__ = ["ModelAdapter", "RopeTable", "Attend", "Observe", "apply_rope"]

# attend(layer, q, k, v) -> o: a policy state's `prefill` or `decode`.
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# observe(layer, hidden, k_pre_rope, start): a policy state's `layer_inputs` hook.
Observe = Callable[[int, torch.Tensor, torch.Tensor, int], None]

_SUPPORTED = ("llama", "qwen2")


@dataclass(frozen=True)
class RopeTable:
    """cos, sin: (1, P, d) for positions 0..P-1, in the model dtype (as the HF rotary module makes them)."""

    cos: torch.Tensor
    sin: torch.Tensor

    @property
    def n_positions(self) -> int:
        return int(self.cos.shape[1])

    def at(self, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (1, 1, length, d) for positions start..start+length-1, broadcastable over heads."""
        end = start + length
        if end > self.n_positions:
            raise ValueError(f"position {end - 1} beyond the RoPE table of {self.n_positions} positions")
        return self.cos[:, None, start:end], self.sin[:, None, start:end]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (b, H, T, d), cos/sin (1, 1, T, d) -> (b, H, T, d) (rotate-half convention of HF Llama/Qwen2)."""
    return x * cos + _rotate_half(x) * sin


class ModelAdapter:
    """Runs a HF causal LM layer by layer with attention delegated to a `PolicyState`."""

    def __init__(self, hf_model: Any) -> None:
        config = hf_model.config
        if config.model_type not in _SUPPORTED:
            raise RuntimeInputError(
                f"model type {config.model_type!r} is not supported by the runtime adapter: "
                f"supported are {', '.join(_SUPPORTED)}"
            )
        if "sliding_attention" in (getattr(config, "layer_types", None) or []):
            raise RuntimeInputError(
                "the model config enables sliding-window attention layers, which the runtime does not "
                "model; use a config with use_sliding_window false"
            )
        self.hf = hf_model
        self._core = hf_model.model
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.shape = AttentionShape(
            n_layers=config.num_hidden_layers,
            n_qo_heads=config.num_attention_heads,
            n_kv_heads=config.num_key_value_heads,
            head_dim=head_dim,
        )
        self.vocab_size = config.vocab_size

    @property
    def device(self) -> torch.device:
        return self._core.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self._core.embed_tokens.weight.dtype

    def q_proj(self, layer: int) -> torch.nn.Linear:
        """Layer `layer`'s query projection (`ModelAccess`)."""
        return self._core.layers[layer].self_attn.q_proj

    def k_proj(self, layer: int) -> torch.nn.Linear:
        """Layer `layer`'s key projection (`ModelAccess`)."""
        return self._core.layers[layer].self_attn.k_proj

    @torch.inference_mode()
    def run_prefill(self, tokens: torch.Tensor, state: Any) -> torch.Tensor:
        """A probe prompt tokens (b, T) through every layer with `state` (a PolicyState) attending by its
        `prefill`; logits (b, V) of the last position (`ModelAccess`). Nothing is timed or recorded."""
        from freekv_runtime.timing import OpTimer

        observe = state.layer_inputs if state.wants_layer_inputs else None
        return self.forward(tokens, 0, self.rope_table(tokens.shape[1]), state.prefill,
                            OpTimer(torch.device("cpu"), enabled=False), observe=observe)

    def rope_table(self, n_positions: int) -> RopeTable:
        """cos/sin for positions 0..n_positions-1 from the model's own rotary module (scaling included)."""
        positions = torch.arange(n_positions, device=self.device)[None]  # (1, P)
        probe = torch.empty(0, device=self.device, dtype=self.dtype)
        cos, sin = self._core.rotary_emb(probe, positions)  # (1, P, d) each
        return RopeTable(cos, sin)

    def forward(
        self,
        tokens: torch.Tensor,
        start: int,
        rope: RopeTable,
        attend: Attend,
        timer: OpTimer,
        all_logits: bool = False,
        observe: Observe | None = None,
        hidden: bool = False,
    ) -> torch.Tensor:
        """Run T new tokens at positions start..start+T-1 through every layer.

        tokens (b, T) int64. `attend(layer, q, k, v)` is the policy state's `prefill` or `decode`
        (q (b, Hq, T, d), k/v (b, Hkv, T, d) post-RoPE -> (b, Hq, T, d)). `observe`, if given, sees
        each layer's normed input and pre-RoPE keys first (`PolicyState.layer_inputs`). Returns logits
        (b, T, V) if all_logits else (b, V) of the last token; with `hidden`, the final-normed hidden
        states (b, T, D) of every position instead (the output of the HF base model, what DuoAttention's
        gate training compares, freekv_runtime.duo_gates).
        """
        b, n_new = tokens.shape
        hq, hkv, d = self.shape.n_qo_heads, self.shape.n_kv_heads, self.shape.head_dim
        cos, sin = rope.at(start, n_new)  # (1, 1, T, d)
        with timer.op("embed"):
            x = self._core.embed_tokens(tokens)  # (b, T, D)
        for layer_idx, layer in enumerate(self._core.layers):
            attn = layer.self_attn
            with timer.op("qkv"):
                h = layer.input_layernorm(x)  # (b, T, D)
                q = attn.q_proj(h).view(b, n_new, hq, d).transpose(1, 2)  # (b, Hq, T, d)
                k = attn.k_proj(h).view(b, n_new, hkv, d).transpose(1, 2)  # (b, Hkv, T, d)
                v = attn.v_proj(h).view(b, n_new, hkv, d).transpose(1, 2)  # (b, Hkv, T, d)
                if observe is not None:
                    observe(layer_idx, h, k, start)
                q = apply_rope(q, cos, sin)
                k = apply_rope(k, cos, sin)
            o = attend(layer_idx, q, k, v)  # (b, Hq, T, d)
            with timer.op("o_proj"):
                x = x + attn.o_proj(o.transpose(1, 2).reshape(b, n_new, hq * d))  # (b, T, D)
            with timer.op("ffn"):
                x = x + layer.mlp(layer.post_attention_layernorm(x))  # (b, T, D)
        if hidden:
            return self._core.norm(x)  # (b, T, D)
        with timer.op("lm_head"):
            x = x if all_logits else x[:, -1]  # (b, T, D) or (b, D)
            logits = self.hf.lm_head(self._core.norm(x))  # (b, T, V) or (b, V)
        return logits
