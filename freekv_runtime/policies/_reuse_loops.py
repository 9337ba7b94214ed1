"""Compiled loops (Numba) behind `plan_reuse` and `apply_plans`; see _reuse.py for what they compute.

Each (sequence, KV head) holds k <= K selected pages and K slots, a few tens each: plain loops over
them (stable insertion sorts included) do in one call what the NumPy formulation (`plan_reuse_reference`,
`apply_plans_reference`) does in about twenty, each of which costs more than the work itself.
"""

from __future__ import annotations

import numpy as np

from kernels.cpu import cpu_loop

NO_PAGE = np.iinfo(np.int64).max  # sorts after every page id


@cpu_loop
def _before(a, b):
    """NumPy's sort order for floats: NaN after everything."""
    return a < b or (not np.isnan(a) and np.isnan(b))


@cpu_loop
def plan_loop(top, resident, resident_scores, selected, n_selected, missed, n_missed, miss_slots):
    """top (b, H, k) int; resident (b, H, K) int64; resident_scores (b, H, K) float -> the ReusePlan arrays,
    written in place: selected, missed (b, H, k) int64; n_selected, n_missed (b, H) int64; miss_slots
    (b, H, K) int64."""
    b, n_heads, k = top.shape
    n_slots = resident.shape[2]
    hit = np.zeros(k, np.bool_)
    held_selected = np.zeros(n_slots, np.bool_)
    evictable = np.zeros(n_slots, np.bool_)
    key = np.empty(n_slots, np.float64)
    for i in range(b):
        for h in range(n_heads):
            hit[:] = False
            held_selected[:] = False
            for j in range(k):
                if top[i, h, j] < 0:
                    continue
                for s in range(n_slots):
                    if top[i, h, j] == resident[i, h, s]:
                        hit[j] = True
                        held_selected[s] = True
            # selected ascending (insertion sort), then padding
            count = 0
            for j in range(k):
                page = np.int64(top[i, h, j])
                if page < 0:
                    continue
                pos = count
                while pos > 0 and selected[i, h, pos - 1] > page:
                    selected[i, h, pos] = selected[i, h, pos - 1]
                    pos -= 1
                selected[i, h, pos] = page
                count += 1
            n_selected[i, h] = count
            for j in range(count, k):
                selected[i, h, j] = NO_PAGE
            # the misses in selection order, then every other entry in order
            count = 0
            for j in range(k):
                if top[i, h, j] >= 0 and not hit[j]:
                    missed[i, h, count] = top[i, h, j]
                    count += 1
            n_missed[i, h] = count
            for j in range(k):
                if not (top[i, h, j] >= 0 and not hit[j]):
                    missed[i, h, count] = top[i, h, j]
                    count += 1
            # eviction order: evictable slots first; by key (empty = -inf, else the score); ties by slot
            for s in range(n_slots):
                evictable[s] = resident[i, h, s] < 0 or not held_selected[s]
                key[s] = -np.inf if resident[i, h, s] < 0 else resident_scores[i, h, s]
                pos = s
                while pos > 0:
                    prev = miss_slots[i, h, pos - 1]
                    if evictable[prev] and not evictable[s]:
                        break
                    if evictable[prev] == evictable[s] and not _before(key[s], key[prev]):
                        break
                    miss_slots[i, h, pos] = prev
                    pos -= 1
                miss_slots[i, h, pos] = s


@cpu_loop
def apply_loop(missed, n_missed, miss_slots, resident, heads):
    """Install the misses of the (i, h) with heads[i, h] into resident (in place); returns (seq, head,
    page, slot) int64 arrays in (sequence, head, miss) order."""
    b, n_heads = heads.shape
    total = 0
    for i in range(b):
        for h in range(n_heads):
            if heads[i, h]:
                total += n_missed[i, h]
    seq = np.empty(total, np.int64)
    head = np.empty(total, np.int64)
    page = np.empty(total, np.int64)
    slot = np.empty(total, np.int64)
    n = 0
    for i in range(b):
        for h in range(n_heads):
            if not heads[i, h]:
                continue
            for j in range(n_missed[i, h]):
                seq[n], head[n], page[n], slot[n] = i, h, missed[i, h, j], miss_slots[i, h, j]
                resident[i, h, slot[n]] = page[n]
                n += 1
    return seq, head, page, slot
