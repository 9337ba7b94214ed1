"""Dense attention helpers shared by policies: decode over a whole cache, and the attention-mass metric.

Shapes: b = batch, Hq = query heads, Hkv = KV heads, G = Hq / Hkv, n = cached tokens, d = head dim.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["dense_decode", "attention_mass", "token_mask"]


def dense_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q (b, Hq, 1, d); k, v (b, Hkv, n, d) -> (b, Hq, 1, d): one query attends every cached token."""
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def attention_mass(q: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Share of dense attention probability on the attended tokens, mean over each group's query heads.

    q (b, Hq, d); keys (b, Hkv, n, d); mask (b, Hkv, n) bool (True = attended). Computed in float32 from
    q . K over the whole context. Returns (b, Hkv) float32.
    """
    b, hq, d = q.shape
    hkv = keys.shape[1]
    qg = q.float().reshape(b, hkv, hq // hkv, d)
    probs = torch.softmax(qg @ keys.float().transpose(-1, -2) / math.sqrt(d), dim=-1)  # (b, Hkv, G, n)
    return (probs * mask[:, :, None, :]).sum(-1).mean(-1)


def token_mask(
    pages: list[list[np.ndarray]], n_tokens: int, page_size: int, device: torch.device
) -> torch.Tensor:
    """(b, Hkv, n_tokens) bool: True on the tokens of the listed pages; pages[i][h] int page ids."""
    b, hkv = len(pages), len(pages[0])
    mask = np.zeros((b, hkv, n_tokens), dtype=bool)
    for i in range(b):
        for h in range(hkv):
            tok = (pages[i][h][:, None] * page_size + np.arange(page_size)[None, :]).ravel()
            mask[i, h, tok[tok < n_tokens]] = True
    return torch.as_tensor(mask).to(device)
