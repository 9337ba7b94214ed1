"""Searches for the fewest GPUs on a `meets` predicate (does this fleet meet the SLOs: one simulation per
call), monotone in the pool a search bisects (more GPUs there never break an SLO a smaller pool met):

- `smallest(meets, floor, guess, cap)`: one pool (blocking, prefill-first, chunked): grow from the guess
  by half until one meets, then bisect;
- `fewest_total(meets, start, floors)`: two pools (disaggregated: prefill GPUs p, decode GPUs d; with
  tensor parallelism p and d count replicas of `weights` GPUs each and the GPUs are minimised): the
  smallest p + d meeting the SLOs, from a fleet `start` known to meet them. First it is shrunk pool by
  pool (the fewest decode GPUs with its prefill GPUs, then the fewest prefill GPUs with those: the greedy
  answer, total B). Then every prefill count p from the prefill floor while p + (decode floor) < B is
  tried with the most decode GPUs a smaller fleet with p prefill GPUs may have, B - p - 1; where that
  meets, its fewest decode GPUs are bisected and it becomes the incumbent (B shrinks), else no fleet
  with p prefill GPUs is smaller than B. Exact when meeting the SLOs is monotone in the decode pool (more
  decode GPUs never break an SLO fewer met). Nothing is assumed of the prefill pool, where it fails:
  more prefill GPUs hand prompts to the decode GPUs in bursts (on the L40S, dense Llama-3.1-8B, 64K + 1K
  tokens at 2 req/s, seed 1 of benchmarks/bench_fleet.py: 23 + 84 GPUs meet the SLOs, 59 + 84 do
  not), so prefill counts are scanned, not bisected. Cost: the two bisections, one simulation per
  prefill count in the slack B - floors, and a bisection per improvement.
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
    meets: Callable[[int, int], bool],
    start: tuple[int, int],
    floors: tuple[int, int],
    weights: tuple[int, int] = (1, 1),
) -> tuple[int, int]:
    """(prefill replicas, decode replicas) of the fewest GPUs meeting the SLOs (module docstring), a
    replica of each pool counting `weights` GPUs (its tensor-parallel degree; 1 and 1: replicas are
    GPUs); `start` meets them, `floors` are counts below which a pool cannot keep up (never tried)."""
    (p_best, d_best), (p_floor, d_floor), (wp, wd) = start, floors, weights
    d_best = bisect_smallest(lambda d: meets(p_best, d), d_floor - 1, d_best)
    p_best = bisect_smallest(lambda p: meets(p, d_best), p_floor - 1, p_best)  # an incumbent, not proof
    total = wp * p_best + wd * d_best
    p = p_floor
    while wp * p + wd * d_floor < total:
        d_hi = (total - wp * p - 1) // wd  # the most decode replicas a fleet of fewer GPUs may have
        if meets(p, d_hi):
            d = bisect_smallest(lambda k, p=p: meets(p, k), d_floor - 1, d_hi)
            p_best, d_best, total = p, d, wp * p + wd * d
        p += 1
    return p_best, d_best
