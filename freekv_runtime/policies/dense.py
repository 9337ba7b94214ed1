"""Dense attention: every layer attends the whole KV cache. The accuracy reference of every study.

The cache is one preallocated buffer pair per layer, (b, Hkv, capacity, d), grown to a quarter more than
it must hold, in whole `chunk_tokens` (amortised: no reallocation per step, O(1) copies per token).
Prefill uses SDPA with a causal mask; decode attends over all cached tokens. GQA is handled by SDPA's
`enable_gqa` (no repeated K/V copies).

Shapes: b = batch, Hq / Hkv = query / KV heads, T = new tokens, N = cached tokens, d = head dim,
L = layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from freekv_runtime.policies.base import (
    AttentionShape,
    KVPolicy,
    PolicyState,
    PrefillDecisions,
    StepDecisions,
)
from freekv_runtime.timing import OpTimer

__all__ = ["DensePolicy", "DenseState", "DenseKVCache"]

_EMPTY_PAGES = np.zeros(0, dtype=np.int32)


@dataclass
class DenseKVCache:
    """Per-layer K and V buffers (b, Hkv, capacity, d) and the number of tokens held per layer."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    lengths: list[int]
    chunk_tokens: int

    @classmethod
    def empty(
        cls, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
        chunk_tokens: int = 1024,
    ) -> DenseKVCache:
        size = (batch_size, shape.n_kv_heads, 0, shape.head_dim)
        return cls(
            keys=[torch.empty(size, device=device, dtype=dtype) for _ in range(shape.n_layers)],
            values=[torch.empty(size, device=device, dtype=dtype) for _ in range(shape.n_layers)],
            lengths=[0] * shape.n_layers,
            chunk_tokens=chunk_tokens,
        )

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v (b, Hkv, T, d); return views of all cached keys and values (b, Hkv, N, d)."""
        n_old, n_new = self.lengths[layer], k.shape[2]
        n_total = n_old + n_new
        if n_total > self.keys[layer].shape[2]:
            self._grow(layer, n_total)
        self.keys[layer][:, :, n_old:n_total] = k
        self.values[layer][:, :, n_old:n_total] = v
        self.lengths[layer] = n_total
        return self.keys[layer][:, :, :n_total], self.values[layer][:, :, :n_total]

    def _grow(self, layer: int, n_needed: int) -> None:
        chunks = -(-(n_needed + n_needed // 4) // self.chunk_tokens)  # 25% headroom: amortised O(1)
        old_k, old_v = self.keys[layer], self.values[layer]
        b, h, n_old, d = old_k.shape
        size = (b, h, chunks * self.chunk_tokens, d)
        self.keys[layer] = torch.empty(size, device=old_k.device, dtype=old_k.dtype)
        self.values[layer] = torch.empty(size, device=old_v.device, dtype=old_v.dtype)
        self.keys[layer][:, :, :n_old] = old_k
        self.values[layer][:, :, :n_old] = old_v


class DenseState(PolicyState):
    """Dense attention over the whole cache for a batch of equal-length sequences."""

    def __init__(
        self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
        timer: OpTimer, measure_attention_mass: bool,
    ) -> None:
        self.shape = shape
        self.batch_size = batch_size
        self.timer = timer
        self.measure_attention_mass = measure_attention_mass
        self.cache = DenseKVCache.empty(shape, batch_size, device, dtype)

    def prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (b, Hq, T, d); k, v (b, Hkv, T, d) -> (b, Hq, T, d), causal."""
        with self.timer.op("attention"):
            keys, values = self.cache.append(layer, k, v)  # (b, Hkv, T, d)
            return F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=True)

    def decode(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (b, Hq, 1, d); k, v (b, Hkv, 1, d) -> (b, Hq, 1, d) over all N cached tokens."""
        with self.timer.op("attention"):
            keys, values = self.cache.append(layer, k, v)  # (b, Hkv, N, d)
            return F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)

    def end_prefill(self) -> PrefillDecisions:
        empty_layers = [[_EMPTY_PAGES] * self.shape.n_kv_heads for _ in range(self.shape.n_layers)]
        return PrefillDecisions(initial_selected=[empty_layers for _ in range(self.batch_size)])

    def end_step(self) -> StepDecisions:
        """No selection: NaN similarity, nothing corrected, selected/missed empty, all tokens attended."""
        b, n_layers, hkv = self.batch_size, self.shape.n_layers, self.shape.n_kv_heads
        empty = [[[_EMPTY_PAGES] * hkv for _ in range(n_layers)] for _ in range(b)]
        attended = np.broadcast_to(
            np.asarray(self.cache.lengths, dtype=np.int32)[None, :, None], (b, n_layers, hkv)
        ).copy()
        mass = np.ones((b, n_layers, hkv), dtype=np.float32) if self.measure_attention_mass else None
        return StepDecisions(
            similarity=np.full((b, n_layers, hkv), np.nan, dtype=np.float32),
            corrected=np.zeros((b, n_layers, hkv), dtype=bool),
            selected=empty,
            missed=empty,
            attended_tokens=attended,
            attention_mass=mass,
        )


class DensePolicy(KVPolicy):
    """Dense attention in every layer (the retrieval knobs are ignored)."""

    def new_state(
        self, shape: AttentionShape, batch_size: int, device: torch.device, dtype: torch.dtype,
        timer: OpTimer,
    ) -> DenseState:
        return DenseState(shape, batch_size, device, dtype, timer, self.config.measure_attention_mass)
