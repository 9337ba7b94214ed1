"""Searches for the fewest GPUs on a `meets` predicate that is monotone (more GPUs never break an SLO a
smaller fleet met), each simulation being one call:

- `smallest(meets, floor, guess, cap)`: one pool (blocking, prefill-first, chunked): grow from the guess
  by half until one meets, then bisect;
- `fewest_total(meets, start, floors)`: two pools (disaggregated: prefill GPUs p, decode GPUs d): the
  smallest p + d meeting the SLOs, from a fleet `start` known to meet them. Exact under monotonicity in
  each pool (a search of every split of every total below the incumbent, pruned by bounds that hold for
  any fleet smaller than it):
    B = the incumbent's total; any fleet with p + d < B has p < B and d < B, so if (p, d) meets then
    (B, d) and (p, B) meet. Hence d >= d_lo = min{d : meets(B, d)} and p >= p_lo = min{p : meets(p, B)}.
    For p = p_lo, p_lo + 1, ... while p + d_lo < B: the most decode GPUs an improving fleet may have is
    B - p - 1; if (p, B - p - 1) meets, bisect its fewest decode GPUs over [d_lo, B - p - 1] and make
    that the incumbent (B shrinks), else no fleet with p prefill GPUs improves on B.
  Cost: two bisections for the bounds, then one simulation per prefill count in the slack
  B - p_lo - d_lo, plus a bisection per improvement.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["smallest", "bisect_smallest", "fewest_total"]


def bisect_smallest(meets: Callable[[int], bool], lo: int, hi: int) -> int:
    """Smallest n in (lo, hi] with meets(n), given meets(hi) and lo failing (or below the floor)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def smallest(meets: Callable[[int], bool], floor: int, guess: int, cap: int) -> int | None:
    """Smallest n in [floor, cap] with meets(n) (None: not even cap): grow from the guess by half until
    one meets, then bisect."""
    guess = min(max(floor, guess), cap)
    if meets(guess):
        return bisect_smallest(meets, floor - 1, guess)
    lo = guess
    while lo < cap:
        n = min(cap, max(lo + 1, math.ceil(lo * 1.5)))
        if meets(n):
            return bisect_smallest(meets, lo, n)
        lo = n
    return None


def fewest_total(
    meets: Callable[[int, int], bool], start: tuple[int, int], floors: tuple[int, int]
) -> tuple[int, int]:
    """(prefill GPUs, decode GPUs) of the smallest total meeting the SLOs (module docstring); `start` meets
    them, `floors` are counts below which a pool cannot keep up (never tried)."""
    (p_best, d_best), (p_floor, d_floor) = start, floors
    total = p_best + d_best
    d_lo = bisect_smallest(lambda d: meets(total, d), d_floor - 1, d_best)
    p_lo = bisect_smallest(lambda p: meets(p, total), p_floor - 1, p_best)
    p = p_lo
    while p + d_lo < total:
        d_hi = total - p - 1
        if d_hi >= d_lo and meets(p, d_hi):
            d = bisect_smallest(lambda k, p=p: meets(p, k), d_lo - 1, d_hi)
            p_best, d_best, total = p, d, p + d
        p += 1
    return p_best, d_best
