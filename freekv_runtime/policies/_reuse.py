"""GPU-cache reuse of selected pages: which selected pages miss, and which slots they replace.

FreeKV's selection marks the selected pages already resident on the GPU (hits) and evicts the
lowest-scoring resident pages for the misses. Empty slots are used first, then the resident pages that
were not selected, lowest score first; a selected page is never evicted. Host-side: the page ids are
read back once per layer and step anyway, to issue the copies. `plan_reuse` and `apply_plans` run as
compiled loops (_reuse_loops.py, one call each per layer and step); `plan_reuse_reference` and
`apply_plans_reference` are the same computations as whole-array NumPy, the executable specification
the loops are tested against.

Shapes: b = batch, H = KV heads, k = pages selected (<= K), K = selected-page slots per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from freekv_runtime.policies._reuse_loops import NO_PAGE as _NO_PAGE
from freekv_runtime.policies._reuse_loops import apply_loop, plan_loop

__all__ = ["ReusePlan", "apply_plans", "apply_plans_reference", "plan_reuse", "plan_reuse_reference",
           "replaced_pages"]


@dataclass(frozen=True)
class ReusePlan:
    """The plans of a batch, per (sequence, KV head) [i, h]:

    selected (b, H, k) int64: the selected page ids ascending, valid for j < n_selected[i, h];
    missed (b, H, k) int64: the selected pages not resident, best first, valid for j < n_missed[i, h];
    miss_slots (b, H, K) int64: eviction order of the slots (K-index); miss j goes to miss_slots[i, h, j].
    """

    selected: np.ndarray
    n_selected: np.ndarray
    missed: np.ndarray
    n_missed: np.ndarray
    miss_slots: np.ndarray

    def missed_ascending(self) -> np.ndarray:
        """(b, H, k) int64: the misses sorted by page id, valid for j < n_missed (then _NO_PAGE)."""
        valid = np.arange(self.missed.shape[-1]) < self.n_missed[..., None]
        return np.sort(np.where(valid, self.missed, _NO_PAGE), axis=-1)


def plan_reuse(top: np.ndarray, resident: np.ndarray, resident_scores: np.ndarray) -> ReusePlan:
    """top (b, H, k) page ids best first (-1 = none); resident (b, H, K) page ids (-1 = empty);
    resident_scores (b, H, K) scores of the resident pages under the same query (ignored where empty).
    The compiled form of `plan_reuse_reference` (same arrays)."""
    b, n_heads, k = top.shape
    n_slots = resident.shape[2]
    if resident.shape != resident_scores.shape or resident.shape[:2] != (b, n_heads) or k > n_slots:
        raise ValueError(f"plan_reuse: top {top.shape} (b, H, k <= K), resident {resident.shape} and scores "
                         f"{resident_scores.shape} (b, H, K) do not fit together")
    plan = ReusePlan(
        selected=np.empty((b, n_heads, k), np.int64), n_selected=np.empty((b, n_heads), np.int64),
        missed=np.empty((b, n_heads, k), np.int64), n_missed=np.empty((b, n_heads), np.int64),
        miss_slots=np.empty((b, n_heads, n_slots), np.int64),
    )
    plan_loop(top, resident, resident_scores, plan.selected, plan.n_selected, plan.missed, plan.n_missed,
              plan.miss_slots)
    return plan


def apply_plans(
    plan: ReusePlan, resident: np.ndarray, heads: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Install the misses of the (sequence, head) pairs where heads (b, H) is True into `resident` (in place).
    The compiled form of `apply_plans_reference` (same arrays, same order)."""
    if resident.shape != plan.miss_slots.shape or heads.shape != plan.n_missed.shape:
        raise ValueError(f"apply_plans: resident {resident.shape} and heads {heads.shape} do not fit the "
                         f"plan {plan.miss_slots.shape}")
    return apply_loop(plan.missed, plan.n_missed, plan.miss_slots, resident, heads)


def replaced_pages(plan: ReusePlan, resident: np.ndarray) -> np.ndarray:
    """(b, H) int: resident pages that the plan's misses overwrite (slots not empty before the plan is
    applied). resident (b, H, K) as it is before `apply_plans`."""
    n_slots = resident.shape[2]
    takes = np.arange(n_slots) < plan.n_missed[..., None]  # miss j goes to miss_slots[..., j]
    held = np.take_along_axis(resident, plan.miss_slots, axis=2) >= 0
    return (takes & held).sum(axis=2)


def plan_reuse_reference(top: np.ndarray, resident: np.ndarray, resident_scores: np.ndarray) -> ReusePlan:
    """top (b, H, k) page ids best first (-1 = none); resident (b, H, K) page ids (-1 = empty);
    resident_scores (b, H, K) scores of the resident pages under the same query (ignored where empty).

    Membership by one (b, H, k, K) comparison; the eviction order by one stable lexsort (evictable slots
    first; among them empty slots, then lowest score; ties by slot index); the misses packed to the front
    in selection order by one stable argsort.
    """
    sel_valid = top >= 0  # (b, H, k)
    hits = (top[..., :, None] == resident[..., None, :]) & sel_valid[..., :, None]  # (b, H, k, K)
    missed_mask = sel_valid & ~hits.any(axis=-1)  # (b, H, k): selected, not resident
    evictable = (resident < 0) | ~hits.any(axis=-2)  # (b, H, K): empty or resident but not selected
    order_key = np.where(resident < 0, -np.inf, resident_scores)
    top64 = top.astype(np.int64)
    return ReusePlan(
        selected=np.sort(np.where(sel_valid, top64, _NO_PAGE), axis=-1),
        n_selected=sel_valid.sum(axis=-1),
        missed=np.take_along_axis(top64, np.argsort(~missed_mask, axis=-1, kind="stable"), axis=-1),
        n_missed=missed_mask.sum(axis=-1),
        miss_slots=np.lexsort((order_key, ~evictable), axis=-1).astype(np.int64),
    )


def apply_plans_reference(
    plan: ReusePlan, resident: np.ndarray, heads: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Install the misses of the (sequence, head) pairs where heads (b, H) is True into `resident` (in place).

    Returns the recall list as arrays (seq, head, page, slot), slot = K-index within the head's cache,
    ordered by sequence, then head, then miss (best first).
    """
    take = heads[..., None] & (np.arange(plan.missed.shape[-1]) < plan.n_missed[..., None])  # (b, H, k)
    seq, head, j = np.nonzero(take)
    page = plan.missed[seq, head, j]
    slot = plan.miss_slots[seq, head, j]
    resident[seq, head, slot] = page
    return seq.astype(np.int64), head.astype(np.int64), page, slot
