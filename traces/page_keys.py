"""Per-head page lists as one sorted int64 array of *keys* per record, key = (l * H + h) << 32 | page_id,
so set operations over all L x H heads are a few vectorised numpy calls (numpy only)."""

from __future__ import annotations

import numpy as np

__all__ = [
    "ID_LIMIT",
    "LOW32",
    "EMPTY_KEYS",
    "member",
    "diff_sorted",
    "heads_of",
    "counts_per_head",
    "keys_from_ids",
    "keys_to_nested",
]

ID_LIMIT = 1 << 31  # page ids are int32
LOW32 = np.int64(0xFFFFFFFF)  # key & LOW32 = page id
EMPTY_KEYS = np.zeros(0, dtype=np.int64)


def member(x: np.ndarray, sorted_ref: np.ndarray) -> np.ndarray:
    """(n,) bool: x[i] in sorted_ref (both int64; sorted_ref ascending and unique)."""
    if sorted_ref.size == 0 or x.size == 0:
        return np.zeros(x.shape, dtype=bool)
    idx = np.searchsorted(sorted_ref, x)
    idx[idx == sorted_ref.size] = 0
    return sorted_ref[idx] == x


def diff_sorted(prev: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(removed = prev - cur, added = cur - prev) for sorted unique int64 arrays, one searchsorted."""
    if prev.size == 0 or cur.size == 0:
        return prev, cur
    idx = np.minimum(np.searchsorted(cur, prev), cur.size - 1)
    kept = cur[idx] == prev
    cur_in_prev = np.zeros(cur.size, dtype=bool)
    cur_in_prev[idx[kept]] = True
    return prev[~kept], cur[~cur_in_prev]


def heads_of(keys: np.ndarray) -> np.ndarray:
    """The flat head index l * H + h of each key."""
    return keys >> np.int64(32)


def counts_per_head(keys: np.ndarray, n_heads: int) -> np.ndarray:
    """(n_heads,) int64: how many keys each head has."""
    return np.bincount(heads_of(keys), minlength=n_heads).astype(np.int64)


def keys_from_ids(counts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Keys of page ids listed head after head, counts[head] of them each."""
    return (np.repeat(np.arange(counts.size, dtype=np.int64), counts) << np.int64(32)) | ids


def keys_to_nested(keys: np.ndarray, n_layers: int, n_kv_heads: int) -> tuple[tuple[np.ndarray, ...], ...]:
    """Sorted key array -> selected[l][h] int32 arrays."""
    counts = counts_per_head(keys, n_layers * n_kv_heads)
    ids = (keys & LOW32).astype(np.int32)
    ends = np.cumsum(counts).tolist()
    parts = [ids[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    return tuple(tuple(parts[i * n_kv_heads:(i + 1) * n_kv_heads]) for i in range(n_layers))
