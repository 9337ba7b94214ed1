"""Recall straight from the host pool into the NHD cache: the compiled CPU loop.

On a GPU a recall copies host runs into a staging buffer over PCIe and a kernel scatters them into the
NHD cache (`kernels.recall_hnd_to_nhd`). On the CPU both sides are host memory, so one pass does both:
run run_ids[i] of the pool (its p keys, then its p values, each (p, d)) lands in slot slot_ids[i] of KV
head head_ids[i].
"""

from __future__ import annotations

from kernels.cpu._numba import cpu_loop


@cpu_loop
def recall_runs_loop(runs, run_ids, head_ids, slot_ids, k_cache, v_cache):
    """runs (R, 2, p, d); run_ids, head_ids, slot_ids (n,) int; k_cache, v_cache (n_slots, p, Hkv, d)."""
    _, _, page_size, d = runs.shape
    for i in range(run_ids.shape[0]):
        run, slot, head = run_ids[i], slot_ids[i], head_ids[i]
        for t in range(page_size):
            for x in range(d):
                k_cache[slot, t, head, x] = runs[run, 0, t, x]
                v_cache[slot, t, head, x] = runs[run, 1, t, x]
