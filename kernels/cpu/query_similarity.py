"""Group-pooled query cosine similarity: the compiled CPU loop (`kernels.query_similarity_reference`'s
formula, dot / max(|q| |q_prev|, eps) per query head in float32, averaged over each KV head's group)."""

from __future__ import annotations

import numpy as np

from kernels.cpu._numba import cpu_loop


@cpu_loop
def query_similarity_loop(q, q_prev, group_size, eps, out):
    """q, q_prev (b, Hq, d) float32 -> out (b, Hq / G) float32, in place."""
    b, hq, d = q.shape
    for i in range(b):
        for h in range(hq // group_size):
            total = np.float32(0.0)
            for j in range(h * group_size, (h + 1) * group_size):
                dot = np.float32(0.0)
                nq = np.float32(0.0)
                npv = np.float32(0.0)
                for x in range(d):
                    a, c = q[i, j, x], q_prev[i, j, x]
                    dot += a * c
                    nq += a * a
                    npv += c * c
                total += dot / max(np.sqrt(nq) * np.sqrt(npv), np.float32(eps))
            out[i, h] = total / np.float32(group_size)
