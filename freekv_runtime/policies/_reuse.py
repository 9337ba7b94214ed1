"""GPU-cache reuse of selected pages: which selected pages miss, and which slots they replace.

FreeKV's selection marks the selected pages already resident on the GPU (hits) and evicts the
lowest-scoring resident pages for the misses. Empty slots are used first, then the resident pages that
were not selected, lowest score first; a selected page is never evicted. Host-side (numpy): the page ids
are read back once per layer and step anyway, to issue the copies.

Shapes: b = batch, H = KV heads, k = pages selected (<= K), K = selected-page slots per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["HeadPlan", "plan_reuse", "apply_plans"]


@dataclass(frozen=True)
class HeadPlan:
    """One (sequence, KV head): selected (sorted int32), misses (int64, best first), their slots (K-index)."""

    selected: np.ndarray
    missed_pages: np.ndarray
    miss_slots: np.ndarray

    @property
    def missed_sorted(self) -> np.ndarray:
        return np.sort(self.missed_pages).astype(np.int32)


def plan_reuse(top: np.ndarray, resident: np.ndarray, resident_scores: np.ndarray) -> list[list[HeadPlan]]:
    """Plans [b][h]. top (b, H, k) page ids best first (-1 = none); resident (b, H, K) page ids (-1 = empty);
    resident_scores (b, H, K) scores of the resident pages under the same query (ignored where empty).

    Vectorised over (b, H): membership by one (b, H, k, K) comparison, the eviction order by one stable
    lexsort (evictable slots first; among them empty slots, then lowest score; ties by slot index).
    """
    sel_valid = top >= 0  # (b, H, k)
    hits = (top[..., :, None] == resident[..., None, :]) & sel_valid[..., :, None]  # (b, H, k, K)
    missed_mask = sel_valid & ~hits.any(axis=-1)  # (b, H, k): selected, not resident
    evictable = (resident < 0) | ~hits.any(axis=-2)  # (b, H, K): empty or resident but not selected
    order_key = np.where(resident < 0, -np.inf, resident_scores)
    eviction_order = np.lexsort((order_key, ~evictable), axis=-1)  # (b, H, K) slot indices
    top64 = top.astype(np.int64)
    n_selected = sel_valid.sum(axis=-1)
    n_missed = missed_mask.sum(axis=-1)
    selected_sorted = np.sort(np.where(sel_valid, top64, np.iinfo(np.int64).max), axis=-1).astype(np.int32)
    plans: list[list[HeadPlan]] = []
    for i in range(top.shape[0]):
        row = []
        for h in range(top.shape[1]):
            n = int(n_missed[i, h])
            row.append(HeadPlan(selected_sorted[i, h, : n_selected[i, h]], top64[i, h][missed_mask[i, h]],
                                eviction_order[i, h, :n].astype(np.int64)))
        plans.append(row)
    return plans


def apply_plans(
    plans: list[list[HeadPlan]], resident: np.ndarray, heads: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Install the misses of the (sequence, head) pairs where heads (b, H) is True into `resident` (in place).

    Returns the recall list as arrays (seq, head, page, slot), slot = K-index within the head's cache.
    """
    seqs, hs, pages, slots = [], [], [], []
    for i, h in zip(*np.nonzero(heads), strict=True):
        plan = plans[i][h]
        if len(plan.missed_pages) == 0:
            continue
        resident[i, h, plan.miss_slots] = plan.missed_pages
        n = len(plan.missed_pages)
        seqs.append(np.full(n, i))
        hs.append(np.full(n, h))
        pages.append(plan.missed_pages)
        slots.append(plan.miss_slots)
    if not seqs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    return tuple(np.concatenate(a).astype(np.int64) for a in (seqs, hs, pages, slots))  # type: ignore[return-value]
