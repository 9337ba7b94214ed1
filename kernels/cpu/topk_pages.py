"""Top-k page selection: the compiled CPU loop (same result as `kernels.topk_pages_reference`).

One scan per (b, KV head) row in page order keeps the k best (value, page) pairs sorted, best first. A
page enters only if it beats the current k-th value strictly or the list is short, and it goes after
every kept page of equal value, so among equal values the lower page index comes first. -inf and NaN
are never candidates; a short list is padded with -1. Work O(P + insertions * k), with few insertions
for rows in no particular order.
"""

from __future__ import annotations

import numpy as np

from kernels.cpu._numba import cpu_loop


@cpu_loop
def topk_pages_loop(scores, k, out):
    """scores (b, Hkv, P) float -> out (b, Hkv, k) int32, in place."""
    b, hkv, n_pages = scores.shape
    if k == 0:
        return
    best = np.empty(k, np.float64)
    for i in range(b):
        for h in range(hkv):
            count = 0
            for page in range(n_pages):
                v = np.float64(scores[i, h, page])
                if not v > -np.inf:  # -inf or NaN: not a candidate
                    continue
                if count == k and not v > best[k - 1]:
                    continue
                pos = count if count < k else k - 1
                while pos > 0 and v > best[pos - 1]:
                    best[pos] = best[pos - 1]
                    out[i, h, pos] = out[i, h, pos - 1]
                    pos -= 1
                best[pos] = v
                out[i, h, pos] = page
                if count < k:
                    count += 1
            for j in range(count, k):
                out[i, h, j] = -1
