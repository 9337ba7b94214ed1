"""Group pooling of page bounds: the compiled CPU loop behind `kernels.page_scores_cpu`.

The bounds themselves come from one GEMM (torch/BLAS reads the summaries faster than a loop); this loop
does the rest of `kernels.page_scores_reference` in one call: per (b, KV head), each query head's softmax
over its sequence's candidate pages, averaged over the group ("mean"), or the group's largest bound
("max"); -inf outside the candidates.
"""

from __future__ import annotations

import numpy as np

from kernels.cpu._numba import cpu_loop


@cpu_loop
def pool_page_bounds_loop(bounds, first_page, page_lo, page_hi, pool_max, out):
    """bounds (b * Hkv, G, n) float32 of pages [first_page, first_page + n); page_lo, page_hi (b,) int;
    -> out (b, Hkv, P) float32, in place."""
    b, hkv, n_pages = out.shape
    group = bounds.shape[1]
    for i in range(b):
        lo = min(max(page_lo[i], 0), n_pages)
        hi = min(max(page_hi[i], lo), n_pages)
        for h in range(hkv):
            row = bounds[i * hkv + h]
            out[i, h, :] = -np.inf
            if hi <= lo:
                continue
            if pool_max:
                for page in range(lo, hi):
                    best = row[0, page - first_page]
                    for j in range(1, group):
                        best = max(best, row[j, page - first_page])
                    out[i, h, page] = best
                continue
            out[i, h, lo:hi] = 0.0
            for j in range(group):
                top = -np.inf
                for page in range(lo, hi):
                    top = max(top, row[j, page - first_page])
                total = np.float32(0.0)
                for page in range(lo, hi):
                    total += np.exp(row[j, page - first_page] - top)
                scale = np.float32(1.0) / (total * np.float32(group))
                for page in range(lo, hi):
                    out[i, h, page] += np.exp(row[j, page - first_page] - top) * scale
