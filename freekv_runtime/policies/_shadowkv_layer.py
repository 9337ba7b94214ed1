"""ShadowKV's state of one sparse layer and its factorisation (see shadowkv.py for the method).

A layer's tokens are the sink [0, S) (exact), the factorised region [S, fact_end) of whole chunks (low-rank
pre-RoPE keys, landmarks, outlier chunks kept exact, values on the host) and the recent tokens
[fact_end, n) (exact). `fold` moves whole chunks into the region; `refactorise` folds the chunks that
left the window.

Shapes: b batch, Hkv KV heads, d head dim, p chunk size, C factorised chunks, K value slots, m tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from freekv_runtime.policies._dropping import lowest_kept
from freekv_runtime.policies._lowrank import LowRankKeys, chunk_landmarks
from freekv_runtime.recall import host_empty

__all__ = ["ShadowKVLayer", "factorised_end"]


def factorised_end(n_tokens: int, sink_tokens: int, window_tokens: int, p: int) -> int:
    """The factorised region's end for n tokens: the first chunk boundary leaving <= window exact."""
    sink = min(sink_tokens, n_tokens)
    return sink + max(0, -(-(n_tokens - window_tokens - sink) // p)) * p


@dataclass
class ShadowKVLayer:
    """One sparse layer's device state (and its host values). Token positions are absolute."""

    sink_k: torch.Tensor  # (b, Hkv, S, d) exact
    sink_v: torch.Tensor
    recent_k: torch.Tensor  # (b, Hkv, m, d) exact, tokens [fact_end, n)
    recent_v: torch.Tensor
    recent_pre: torch.Tensor  # (b, Hkv, m, d) the recent tokens' pre-RoPE keys (folded at re-factorisation)
    fact_end: int  # the factorised region is [S, fact_end), whole chunks
    lowrank: LowRankKeys  # rows = the factorised tokens
    landmarks: torch.Tensor  # (b, Hkv, C, d)
    min_cos: torch.Tensor  # (b, Hkv, C) float32 outlier score (low = outlier)
    outliers: torch.Tensor  # (b, Hkv, n_out) int64 chunk index within the region, ascending
    outlier_k: torch.Tensor  # (b, Hkv, n_out * p, d) exact
    outlier_v: torch.Tensor
    host_v: torch.Tensor  # (b, Hkv, capacity, d) host values of the factorised tokens
    slots_v: torch.Tensor  # (b, Hkv, K, p, d) device values of the selected chunks
    resident: np.ndarray  # (b, Hkv, K) int64 chunk (page) id per slot, -1 empty
    chunk_size: int  # p tokens per chunk (= the page size)
    device: torch.device  # the compute device (host buffers are pinned when it is CUDA)
    since: int = 0  # decode steps since the last factorisation
    full_keys: torch.Tensor | None = None  # (b, Hkv, n, d) exact keys, only to measure attention mass

    @classmethod
    def from_prompt(cls, k: torch.Tensor, v: torch.Tensor, pre: torch.Tensor, sink: int, fact_end: int,
                    rank: int, n_slots: int, p: int, device: torch.device,
                    keep_full_keys: bool) -> ShadowKVLayer:
        """A layer holding the prompt's sink and recent tokens [fact_end, T) exact, an empty factorised
        region at [sink, sink) (the caller folds [sink, fact_end) in). k, v, pre (b, Hkv, T, d)."""
        b, hkv, _, d = k.shape
        host_v = host_empty((b, hkv, sink, d), v.dtype, device)  # grown and filled by `fold`
        none = k.new_zeros(b, hkv, 0, d)
        return cls(
            sink_k=k[:, :, :sink].clone(), sink_v=v[:, :, :sink].clone(),
            recent_k=k[:, :, fact_end:].clone(), recent_v=v[:, :, fact_end:].clone(),
            recent_pre=pre[:, :, fact_end:].clone(), fact_end=sink,
            lowrank=LowRankKeys.factorise(none, rank),
            landmarks=none, min_cos=k.new_zeros(b, hkv, 0, dtype=torch.float32),
            outliers=torch.zeros(b, hkv, 0, dtype=torch.int64, device=k.device),
            outlier_k=none, outlier_v=none,
            host_v=host_v, slots_v=k.new_zeros(b, hkv, n_slots, p, d),
            resident=np.full((b, hkv, n_slots), -1, np.int64), chunk_size=p, device=device,
            full_keys=k.clone() if keep_full_keys else None)

    @property
    def n_tokens(self) -> int:
        return self.fact_end + self.recent_k.shape[2]

    def fold(self, k: torch.Tensor, v: torch.Tensor, pre: torch.Tensor, n_outliers: int) -> np.ndarray:
        """Fold whole chunks k, v, pre (b, Hkv, m, d) at [fact_end, fact_end + m) into the factorised region:
        SVD, landmarks, outliers (the `n_outliers` lowest min-cosine chunks, recomputed over all chunks),
        host values. Returns the tokens the device gave up per (b, Hkv): the folded tokens not kept as
        outliers, and the demoted outliers' tokens."""
        b, hkv, m, d = k.shape
        p = self.chunk_size
        n_old_chunks = self.landmarks.shape[2]
        self.lowrank = self.lowrank.fold(pre)
        new_landmarks, new_cos = chunk_landmarks(k, p)
        self.landmarks = torch.cat([self.landmarks, new_landmarks], dim=2)
        self.min_cos = torch.cat([self.min_cos, new_cos], dim=2)
        n_out = min(n_outliers, self.landmarks.shape[2])
        everything = torch.ones_like(self.min_cos, dtype=torch.bool)
        outliers = torch.sort(lowest_kept(self.min_cos, everything, n_out), dim=-1).values  # (b, Hkv, n_out)
        demoted, kept_new = self._keep_outliers(outliers, k, v, n_old_chunks)
        self._store_values(v)
        return ((demoted + (m // p - kept_new)) * p).cpu().numpy().astype(np.int32)

    def _keep_outliers(self, outliers: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       n_old_chunks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep the exact keys and values of the new outlier chunks (b, Hkv, n_out) ascending, from the old
        outliers and the folded chunks k, v (b, Hkv, m, d). Returns per (b, Hkv) the old outliers demoted
        and the folded chunks kept."""
        b, hkv, _, d = k.shape
        p, n_chunks, n_out = self.chunk_size, self.landmarks.shape[2], outliers.shape[2]
        # the exact chunks on hand: the old outliers and the folded ones; every new outlier is among them
        pool_ids = torch.cat([self.outliers, torch.arange(n_old_chunks, n_chunks, device=k.device)
                              .expand(b, hkv, -1)], dim=2)
        pool_k = torch.cat([self.outlier_k, k], dim=2).view(b, hkv, -1, p, d)
        pool_v = torch.cat([self.outlier_v, v], dim=2).view(b, hkv, -1, p, d)
        if n_out:
            where = (pool_ids[:, :, None, :] == outliers[..., None]).int().argmax(dim=-1)  # (b, Hkv, n_out)
            index = where[..., None, None].expand(-1, -1, -1, p, d)
            self.outlier_k = pool_k.gather(2, index).view(b, hkv, n_out * p, d)
            self.outlier_v = pool_v.gather(2, index).view(b, hkv, n_out * p, d)
        kept_old = (self.outliers[:, :, :, None] == outliers[:, :, None, :]).any(-1).sum(-1)  # (b, Hkv)
        demoted = self.outliers.shape[2] - kept_old
        kept_new = (outliers >= n_old_chunks).sum(-1)
        self.outliers = outliers
        return demoted, kept_new

    def _store_values(self, v: torch.Tensor) -> None:
        """Append the folded values v (b, Hkv, m, d) to the host values (grown by doubling) and move the
        region's end past them."""
        b, hkv, m, d = v.shape
        start, end = self.fact_end, self.fact_end + m
        if self.host_v.shape[2] < end:
            capacity = max(end, 2 * self.host_v.shape[2])
            grown = host_empty((b, hkv, capacity, d), self.host_v.dtype, self.device)
            grown[:, :, :start].copy_(self.host_v[:, :, :start])
            self.host_v = grown
        self.host_v[:, :, start:end].copy_(v)
        self.fact_end = end

    def refactorise(self, target_end: int, n_outliers: int) -> np.ndarray:
        """Fold the recent tokens [fact_end, target_end) (whole chunks) into the region; `fold`'s return."""
        m = target_end - self.fact_end
        k, v, pre = self.recent_k[:, :, :m], self.recent_v[:, :, :m], self.recent_pre[:, :, :m]
        gave_up = self.fold(k, v, pre, n_outliers)
        self.recent_k, self.recent_v = self.recent_k[:, :, m:], self.recent_v[:, :, m:]
        self.recent_pre = self.recent_pre[:, :, m:]
        self.since = 0
        return gave_up
