"""Sparse decode attention as one masked SDPA over the slot span the page table covers (CPU reference path).

When the pages listed for a sequence fill most of one contiguous run of cache slots (the runtime's paged
store lists sink + selected + window slots, which are exactly the sequence's own slots), attending over
that whole run with a token mask gives the same softmax as gathering the listed pages: the same tokens,
summed in another order. It avoids the gather and runs as one fused, multi-threaded attention call
(`torch.nn.functional.scaled_dot_product_attention`) instead of a gather, two matmuls and a softmax.

`slot_span(...)` decides, on the host, whether a table qualifies and builds the token mask as an additive
float32 bias (0 attended, -inf not; SDPA on the CPU runs faster with it than with a boolean mask),
memoised by the table's values (a decode step's sparse layers share one table, and it changes once
per p tokens); `attend_slot_span(...)` runs the attention. A table qualifies when every sequence lists
at least one page, no (b, h) lists a slot twice, and each sequence's listed slots fit in a run of
R <= 2 * M slots (M = table width) where the runs start at evenly spaced slots (one strided view covers
the batch).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["SlotSpan", "attend_slot_span", "slot_span"]


@dataclass(frozen=True)
class SlotSpan:
    """Slots [first + i * step, first + i * step + n_slots) of sequence i, and the tokens to attend there:
    token_mask (b, Hkv, n_slots * p) bool (token t of the span's slot s is position s * p + t), and the
    same as an additive bias (b, Hkv, 1, n_slots * p) float32."""

    first: int
    step: int
    n_slots: int
    token_mask: torch.Tensor
    bias: torch.Tensor


def slot_span(page_table: np.ndarray, n_pages: np.ndarray, last_page_tokens: np.ndarray, page_size: int,
              n_cache_slots: int) -> SlotSpan | None:
    """The span and token mask of a page table (b, Hkv, M) with n_pages (b, Hkv) and last_page_tokens (b,)
    (int32 host arrays), or None when the table does not qualify (see the module docstring)."""
    return _slot_span(page_table.shape, page_table.tobytes(), n_pages.tobytes(), last_page_tokens.tobytes(),
                      page_size, n_cache_slots)


@functools.lru_cache(maxsize=64)
def _slot_span(shape: tuple[int, int, int], table_bytes: bytes, n_pages_bytes: bytes, last_bytes: bytes,
               page_size: int, n_cache_slots: int) -> SlotSpan | None:
    """`slot_span` of the arrays given by their int32 bytes (hashable: the memo key)."""
    b, hkv, m = shape
    page_table = np.frombuffer(table_bytes, dtype=np.int32).reshape(shape)
    n_pages = np.frombuffer(n_pages_bytes, dtype=np.int32).reshape(b, hkv)
    last_page_tokens = np.frombuffer(last_bytes, dtype=np.int32)
    listed = np.arange(m) < n_pages[..., None]  # (b, Hkv, M)
    per_seq = listed.reshape(b, -1)
    if b == 0 or not per_seq.any(axis=1).all():
        return None
    slots = page_table.astype(np.int64)
    lo = np.where(listed, slots, n_cache_slots).reshape(b, -1).min(axis=1)  # (b,)
    hi = np.where(listed, slots, -1).reshape(b, -1).max(axis=1)
    # sequence i's run starts at lo[0] + i * step, at or before its first listed slot
    step, uneven = divmod(int(lo[-1] - lo[0]), b - 1) if b > 1 else (0, 0)
    start = lo[0] + step * np.arange(b)
    if uneven or step < 0 or lo[0] < 0 or (start > lo).any():
        return None
    n_span = int((hi - start).max()) + 1
    if n_span > 2 * m or int(start[-1]) + n_span > n_cache_slots:
        return None
    pos = np.where(listed, slots - start[:, None, None], n_span)  # (b, Hkv, M) span slot; n_span: unlisted
    page_mask = np.zeros((b, hkv, n_span + 1), dtype=bool)
    np.put_along_axis(page_mask, pos, True, axis=2)
    if (page_mask[..., :n_span].sum(axis=2) != n_pages).any():  # a slot listed twice
        return None
    # the last listed page of each (b, h) holds last_page_tokens[b] tokens: mask the rest of its slot
    last_slot = np.take_along_axis(pos, np.maximum(n_pages - 1, 0)[..., None].astype(np.int64), axis=2)
    tokens = np.repeat(page_mask, page_size, axis=2)  # (b, Hkv, (R + 1) * p)
    offsets = np.arange(page_size)
    tail = last_slot * page_size + offsets  # (b, Hkv, p)
    keep = offsets < last_page_tokens[:, None, None]
    np.put_along_axis(tokens, tail, np.take_along_axis(tokens, tail, axis=2) & keep, axis=2)
    mask = torch.from_numpy(np.ascontiguousarray(tokens[..., : n_span * page_size]))
    bias = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(~mask, float("-inf"))[:, :, None]
    return SlotSpan(int(lo[0]), step, n_span, mask, bias)


def attend_slot_span(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, span: SlotSpan,
                     has_tokens: torch.Tensor | None) -> torch.Tensor:
    """q (b, Hq, d) float32; contiguous k_cache, v_cache (n_slots, p, Hkv, d) float32 -> (b, Hq, d).

    has_tokens (b, Hkv) bool, or None when every (b, h) lists tokens: rows listing nothing get zeros.
    """
    b, hq, d = q.shape
    _, page_size, hkv, _ = k_cache.shape
    n_tokens = span.n_slots * page_size
    row = page_size * hkv * d  # elements per slot
    size, stride = (b, hkv, n_tokens, d), (span.step * row, d, hkv * d, 1)
    keys = k_cache.as_strided(size, stride, k_cache.storage_offset() + span.first * row)
    values = v_cache.as_strided(size, stride, v_cache.storage_offset() + span.first * row)
    # the group's query heads as G query positions of their KV head: no key/value repeat for GQA
    out = F.scaled_dot_product_attention(q.reshape(b, hkv, hq // hkv, d), keys, values,
                                         attn_mask=span.bias)  # (b, Hkv, G, d)
    if has_tokens is not None:
        out = torch.where(has_tokens[:, :, None, None], out, 0.0)
    return out.reshape(b, hq, d)
