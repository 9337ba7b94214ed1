"""ShadowKV's key compression: a low-rank factorisation of the pre-RoPE keys, and chunk landmarks.

Pre-RoPE keys of a layer are one (T, Hkv * d) matrix per sequence (all KV heads together, as ShadowKV's
`get_svd`, bytedance/ShadowKV models/kv_cache.py:195-213). Its truncated SVD K ~= U (S Vh) is kept as
U (b, T, r) and SV (b, Hkv, r, d) (S Vh cut into the KV heads' column blocks), so that a token's keys
are U[token] @ SV[h]. `fold` adds new rows without re-reading the old keys: the stacked matrix
[U SV; K_new] = blockdiag(U, I) [SV; K_new], and blockdiag(U, I) has orthonormal columns, so the SVD of
the small matrix [SV; K_new] ((r + m) x Hkv d) gives the SVD of the whole (an incremental SVD, Brand
2006); then it is truncated to rank r again.

Landmarks (post-RoPE keys, kv_cache.py:245-254): per chunk of p tokens and KV head, the mean key; a
chunk's outlier score is the lowest cosine similarity of its keys to that mean (low = the mean
represents the chunk badly: ShadowKV keeps those chunks whole on the GPU).

Shapes: b batch, T tokens, Hkv KV heads, d head dim, D = Hkv * d, r rank, C chunks, p chunk size.
SVDs run in float32 (as ShadowKV's); the factors are returned in the keys' dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["LowRankKeys", "chunk_landmarks"]


class LowRankKeys:
    """U (b, T, r) and SV (b, Hkv, r, d) of one layer's factorised pre-RoPE keys, rank <= `max_rank`."""

    def __init__(self, u: torch.Tensor, sv: torch.Tensor, max_rank: int) -> None:
        self.u, self.sv, self.max_rank = u, sv, max_rank

    @property
    def rank(self) -> int:
        return int(self.u.shape[2])

    @property
    def n_tokens(self) -> int:
        return int(self.u.shape[1])

    @classmethod
    def factorise(cls, keys_pre: torch.Tensor, max_rank: int) -> LowRankKeys:
        """keys_pre (b, Hkv, T, d) -> the rank-min(max_rank, T, D) truncated SVD of each (T, D) matrix."""
        b, hkv, _, d = keys_pre.shape
        u = keys_pre.new_zeros(b, 0, 0)
        sv = keys_pre.new_zeros(b, 0, hkv * d)
        return cls(u, sv.view(b, 0, hkv, d).transpose(1, 2), max_rank).fold(keys_pre)

    def fold(self, keys_pre: torch.Tensor) -> LowRankKeys:
        """The factorisation of the old rows followed by keys_pre (b, Hkv, m, d), truncated to max_rank."""
        b, hkv, m, d = keys_pre.shape
        dtype = keys_pre.dtype
        if m == 0:
            return self
        r_old = self.rank
        sv_flat = self.sv.transpose(1, 2).reshape(b, r_old, hkv * d).float()  # (b, r, D)
        new_rows = keys_pre.transpose(1, 2).reshape(b, m, hkv * d).float()  # (b, m, D)
        u2, s2, vh2 = torch.linalg.svd(torch.cat([sv_flat, new_rows], dim=1), full_matrices=False)
        r = min(self.max_rank, s2.shape[1])
        u2, s2, vh2 = u2[:, :, :r], s2[:, :r], vh2[:, :r]
        u = torch.cat([self.u.float() @ u2[:, :r_old], u2[:, r_old:]], dim=1)  # (b, T + m, r)
        sv = (s2[:, :, None] * vh2).view(b, r, hkv, d).transpose(1, 2)  # (b, Hkv, r, d)
        return LowRankKeys(u.to(dtype), sv.to(dtype).contiguous(), self.max_rank)

    def keys(self, rows: torch.Tensor) -> torch.Tensor:
        """Pre-RoPE keys of factorised rows: rows (b, Hkv, n) int64 -> (b, Hkv, n, d), accumulated in
        float32 and returned in the factors' dtype."""
        b, hkv, n = rows.shape
        r = self.rank
        u_rows = self.u[:, None].expand(b, hkv, -1, r).gather(2, rows[..., None].expand(b, hkv, n, r))
        return (u_rows.float() @ self.sv.float()).to(self.sv.dtype)


def chunk_landmarks(keys: torch.Tensor, chunk_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """keys (b, Hkv, C * p, d) post-RoPE -> (landmarks (b, Hkv, C, d) the chunk means, min_cos (b, Hkv, C)
    float32 the lowest cosine similarity of a chunk's keys to its mean)."""
    b, hkv, n, d = keys.shape
    chunks = keys.float().view(b, hkv, n // chunk_size, chunk_size, d)
    mean = chunks.mean(dim=3)
    cos = F.cosine_similarity(chunks, mean[:, :, :, None], dim=-1)  # (b, Hkv, C, p)
    return mean.to(keys.dtype), cos.min(dim=-1).values
