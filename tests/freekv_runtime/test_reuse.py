"""GPU-cache reuse planning: the compiled loops equal the whole-array NumPy specification."""

from __future__ import annotations

import numpy as np
import pytest

from freekv_runtime.policies._reuse import (
    apply_plans,
    apply_plans_reference,
    plan_reuse,
    plan_reuse_reference,
)

FIELDS = ("selected", "n_selected", "missed", "n_missed", "miss_slots")


def _case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random top (b, H, k) int32 with -1 holes, resident (b, H, K) int64 with empty slots, and scores
    with many ties (and a NaN now and then)."""
    b, n_heads, n_slots = (int(x) for x in rng.integers(1, [3, 4, 9]))
    k = int(rng.integers(0, n_slots + 1))
    n_pages = int(rng.integers(n_slots, 20))
    top = np.array([[rng.permutation(n_pages)[:k] for _ in range(n_heads)] for _ in range(b)],
                   dtype=np.int32).reshape(b, n_heads, k)
    top[rng.random(top.shape) < 0.2] = -1
    resident = np.array([[rng.permutation(n_pages)[:n_slots] for _ in range(n_heads)] for _ in range(b)],
                        dtype=np.int64)
    resident[rng.random(resident.shape) < 0.3] = -1
    scores = rng.integers(0, 4, resident.shape).astype(np.float32)
    if rng.random() < 0.2:
        scores[0, 0, 0] = np.nan
    return top, resident, scores


@pytest.mark.parametrize("seed", range(4))
def test_plan_and_apply_equal_the_numpy_specification(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        top, resident, scores = _case(rng)
        plan, ref = plan_reuse(top, resident, scores), plan_reuse_reference(top, resident, scores)
        for field in FIELDS:
            assert np.array_equal(getattr(plan, field), getattr(ref, field)), field
        heads = rng.random(resident.shape[:2]) < 0.6
        mine, theirs = resident.copy(), resident.copy()
        got, want = apply_plans(plan, mine, heads), apply_plans_reference(ref, theirs, heads)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
        assert np.array_equal(mine, theirs)


def test_plan_semantics_on_a_small_case() -> None:
    """Hits stay, misses go to empty slots first, then to the lowest-scoring unselected resident pages."""
    top = np.array([[[7, 3, 9, 1]]], dtype=np.int32)  # best first
    resident = np.array([[[3, -1, 5, 8, 1]]], dtype=np.int64)
    scores = np.array([[[0.9, 0.0, 0.2, 0.1, 0.5]]], dtype=np.float32)
    plan = plan_reuse(top, resident, scores)
    assert plan.n_selected[0, 0] == 4 and list(plan.selected[0, 0]) == [1, 3, 7, 9]
    assert plan.n_missed[0, 0] == 2 and list(plan.missed[0, 0, :2]) == [7, 9]
    assert list(plan.miss_slots[0, 0, :3]) == [1, 3, 2]  # empty, then page 8 (0.1), then page 5 (0.2)
    seq, head, page, slot = apply_plans(plan, resident, np.array([[True]]))
    assert list(page) == [7, 9] and list(slot) == [1, 3]
    assert list(resident[0, 0]) == [3, 7, 5, 9, 1]


def test_shapes_that_do_not_fit_are_refused() -> None:
    """The compiled loops index without bounds checks: mismatched arrays are refused before they run."""
    top = np.zeros((1, 2, 3), np.int32)
    resident = np.full((1, 2, 3), -1, np.int64)
    with pytest.raises(ValueError, match="plan_reuse"):
        plan_reuse(np.zeros((1, 2, 4), np.int32), resident, np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="plan_reuse"):
        plan_reuse(top, resident, np.zeros((1, 2, 2), np.float32))
    plan = plan_reuse(top, resident, np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="apply_plans"):
        apply_plans(plan, resident, np.ones((1, 3), bool))
