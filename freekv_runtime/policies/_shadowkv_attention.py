"""What ShadowKV's decode attends (see shadowkv.py for the method): the selected chunks' keys rebuilt from
the low-rank factors and rotated at their positions, and, to measure the attention mass, the mask of the
attended tokens.

Shapes: b batch, Hkv KV heads, d head dim, p chunk size, k selected chunks, n tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from freekv_runtime.model import RopeTable, apply_rope
from freekv_runtime.policies._shadowkv_layer import ShadowKVLayer
from freekv_runtime.policies.base import ModelAccess

__all__ = ["RopeAt", "attended_mask", "rebuild_keys"]


class RopeAt:
    """cos/sin at absolute positions from the model's RoPE table, grown by doubling as positions grow."""

    def __init__(self, model: ModelAccess, device: torch.device) -> None:
        self.model, self.device = model, device
        self._table: RopeTable | None = None

    def __call__(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (*positions.shape, d)."""
        need = int(positions.max()) + 1 if positions.numel() else 1
        if self._table is None or self._table.n_positions < need:
            size = max(need, 2 * (self._table.n_positions if self._table is not None else 1024))
            self._table = self.model.rope_table(size)
        cos, sin = self._table.cos[0].to(self.device), self._table.sin[0].to(self.device)
        return cos[positions], sin[positions]


def rebuild_keys(ls: ShadowKVLayer, selected: np.ndarray,
                 rope_at: RopeAt) -> tuple[torch.Tensor, torch.Tensor]:
    """Post-RoPE keys of the selected chunks (b, Hkv, k) from U @ SV, rotated at their positions:
    keys (b, Hkv, k * p, d) and their absolute positions (b, Hkv, k * p)."""
    b, hkv, k = selected.shape
    p = ls.chunk_size
    first = ls.sink_k.shape[2] // p
    pos = torch.as_tensor(selected[..., None] * p + np.arange(p), device=ls.device)
    pos = pos.view(b, hkv, k * p)
    keys = ls.lowrank.keys(pos - first * p)
    cos, sin = rope_at(pos)
    return apply_rope(keys, cos.to(keys.dtype), sin.to(keys.dtype)), pos


def attended_mask(ls: ShadowKVLayer, selected_pos: torch.Tensor) -> torch.Tensor:
    """(b, Hkv, n) bool: the tokens attended (sink, outlier chunks, selected chunks at selected_pos
    (b, Hkv, k * p), recent window)."""
    b, hkv = selected_pos.shape[:2]
    mask = torch.zeros(b, hkv, ls.n_tokens, dtype=torch.bool, device=ls.device)
    sink = ls.sink_k.shape[2]
    mask[:, :, :sink] = True
    mask[:, :, ls.fact_end:] = True
    chunk_tokens = torch.arange(ls.chunk_size, device=ls.device)
    out_pos = (sink + ls.outliers[..., None] * ls.chunk_size + chunk_tokens).flatten(2)
    mask.scatter_(2, out_pos, True)
    return mask.scatter(2, selected_pos, True)
