"""Per-query-head page selection on the paged-retrieval mechanism (Quest's own rule).

Quest's code selects per query head: K is repeated to every query head (mit-han-lab/Quest
evaluation/quest_attention.py:139-140), each head scores the chunks from their per-channel maxima of
sign(q) * k (:146-184) and takes its own top chunks (:211-215, `local_heavy_hitter_mask` :55-57), and
each head attends its own chunks. On the paged store (freekv_runtime.kv_store) this is:
- scores (b, Hq, P) per query head (`kernels.query_page_scores`), top-k per row (`kernels.topk_pages`)
  with k = the budget's selected pages: `query_pages` (b, Hq, k);
- the KV head's slot cache holds the union of its group's pages (`group_union`, up to G * k pages: the
  store has G * k selected slots per KV head in this mode), recalled as one set per KV head;
- attention reads, for query head j, sink + the slots holding j's own pages + window
  (`PagedKVStore.query_head_table`, `kernels.sparse_decode_attention` with a per-query-head table).
The trace records, per KV head, the union (selected pages, misses) and the most tokens any query head of
the group attends (each within the budget).

Shapes: b batch, Hq / Hkv query / KV heads, G = Hq / Hkv, k pages per query head, P pages.
"""

from __future__ import annotations

import numpy as np

__all__ = ["group_union"]


def group_union(query_pages: np.ndarray, n_kv_heads: int) -> np.ndarray:
    """query_pages (b, Hq, k) page ids best first per query head (-1 = none) -> (b, Hkv, G * k) the union of
    each group's pages, rank-major (every head's best page, then every head's second, ...) without repeats,
    padded with -1."""
    b, hq, k = query_pages.shape
    group = hq // n_kv_heads
    ranked = query_pages.reshape(b, n_kv_heads, group, k).transpose(0, 1, 3, 2).reshape(b, n_kv_heads, -1)
    out = np.full(ranked.shape, -1, dtype=np.int64)
    for i in range(b):
        for h in range(n_kv_heads):
            row = ranked[i, h]
            row = row[row >= 0]
            pages, first = np.unique(row, return_index=True)
            out[i, h, : len(pages)] = pages[np.argsort(first)]
    return out
