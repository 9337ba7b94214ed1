"""Compiled loops (Numba) behind `plan_reuse` and `apply_plans`; see _reuse.py for what they compute.

Each (sequence, KV head) holds k <= K selected pages and K slots, a few tens each: plain loops over
them (stable insertion sorts included) do in one call what the NumPy formulation (`plan_reuse_reference`,
`apply_plans_reference`) does in about twenty, each of which costs more than the work itself. `plan_loop`
runs four per-head steps (`cpu_inline` helpers, inlined: as fast as one loop body).
"""

from __future__ import annotations

import numpy as np

from kernels.cpu import cpu_inline, cpu_loop

NO_PAGE = np.iinfo(np.int64).max  # sorts after every page id


@cpu_loop
def _before(a, b):
    """NumPy's sort order for floats: NaN after everything."""
    return a < b or (not np.isnan(a) and np.isnan(b))


@cpu_inline
def _mark_hits(top, resident, hit, held_selected):
    """One head: top (k,) page ids (-1 none), resident (K,) -> hit (k,) the selected page is resident,
    held_selected (K,) the slot holds a selected page (both written in place)."""
    hit[:] = False
    held_selected[:] = False
    for j in range(top.shape[0]):
        if top[j] < 0:
            continue
        for s in range(resident.shape[0]):
            if top[j] == resident[s]:
                hit[j] = True
                held_selected[s] = True


@cpu_inline
def _sort_selected(top, selected):
    """One head: selected (k,) = the valid pages of top (k,) ascending (insertion sort), then NO_PAGE
    padding; returns how many are valid."""
    count = 0
    for j in range(top.shape[0]):
        page = np.int64(top[j])
        if page < 0:
            continue
        pos = count
        while pos > 0 and selected[pos - 1] > page:
            selected[pos] = selected[pos - 1]
            pos -= 1
        selected[pos] = page
        count += 1
    for j in range(count, top.shape[0]):
        selected[j] = NO_PAGE
    return count


@cpu_inline
def _pack_misses(top, hit, missed):
    """One head: missed (k,) = the valid pages of top (k,) not hit, in selection order, then every other
    entry of top in order; returns how many missed."""
    count = 0
    for j in range(top.shape[0]):
        if top[j] >= 0 and not hit[j]:
            missed[count] = top[j]
            count += 1
    n_missed = count
    for j in range(top.shape[0]):
        if not (top[j] >= 0 and not hit[j]):
            missed[count] = top[j]
            count += 1
    return n_missed


@cpu_inline
def _eviction_order(resident, resident_scores, held_selected, evictable, key, miss_slots):
    """One head: miss_slots (K,) = the slots, evictable ones first (empty, or not holding a selected page);
    by key (empty = -inf, else the score); ties by slot (a stable insertion sort). evictable and key (K,)
    are scratch."""
    for s in range(resident.shape[0]):
        evictable[s] = resident[s] < 0 or not held_selected[s]
        key[s] = -np.inf if resident[s] < 0 else resident_scores[s]
        pos = s
        while pos > 0:
            prev = miss_slots[pos - 1]
            if evictable[prev] and not evictable[s]:
                break
            if evictable[prev] == evictable[s] and not _before(key[s], key[prev]):
                break
            miss_slots[pos] = prev
            pos -= 1
        miss_slots[pos] = s


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
            _mark_hits(top[i, h], resident[i, h], hit, held_selected)
            n_selected[i, h] = _sort_selected(top[i, h], selected[i, h])
            n_missed[i, h] = _pack_misses(top[i, h], hit, missed[i, h])
            _eviction_order(resident[i, h], resident_scores[i, h], held_selected, evictable, key,
                            miss_slots[i, h])


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
