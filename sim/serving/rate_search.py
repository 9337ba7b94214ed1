"""The highest Poisson arrival rate whose SLOs hold on one fleet (by default one GPU): halve from a
start rate until one meets them, double until one fails, then bisect to a relative tolerance, as
Vidur's capacity search does (microsoft/vidur vidur/config_optimizer/config_explorer/capacity_search.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.serving.result import ServingResult
from sim.serving.slos import Failure, Slos

__all__ = ["RateSearch", "max_rate", "highest_passing"]


@dataclass(frozen=True)
class RateSearch:
    rate_per_s: float  # highest rate found meeting the SLOs (0: none, even at the lowest tried)
    stats: dict[str, Any] | None  # at that rate
    tried: dict[float, bool]
    failures: tuple[Failure, ...] = ()  # when none meets: what broke at the lowest rate tried


def max_rate(
    run_at: Callable[[float], ServingResult],
    slos: Slos,
    start_rate: float = 0.1,
    rel_tol: float = 0.05,
    max_evals: int = 24,
) -> RateSearch:
    """Highest rate meeting `slos` (the per-token statistic, p99 TTFT or, without a TTFT SLO, p99
    queueing: sim/serving/slos.py): at most 8 halvings from `start_rate`, then doubling and bisection to
    `rel_tol`."""
    tried: dict[float, bool] = {}
    stats: dict[float, dict] = {}
    broke: dict[float, tuple[Failure, ...]] = {}

    def ok(rate: float) -> bool:
        res = run_at(rate)
        stats[rate] = res.stats(slos.ttft_s, slos.token_s if slos.token_slo == "TPOT" else None)
        broke[rate] = tuple(res.failures(slos))
        tried[rate] = not broke[rate]
        return tried[rate]

    lo = highest_passing(ok, start_rate, rel_tol, max_evals, tried)
    if lo == 0.0:
        lowest = min(tried)
        return RateSearch(0.0, stats[lowest], tried, broke[lowest])
    return RateSearch(lo, stats[lo], tried)


def highest_passing(ok: Callable[[float], bool], start_rate: float, rel_tol: float, max_evals: int,
                    tried: dict[float, bool]) -> float:
    """The highest rate `ok` passes (0.0 when none does): at most 8 halvings from `start_rate` until one
    passes, doubling until one fails, then geometric bisection to `rel_tol`, at most `max_evals` calls
    counted by `tried` (the rates `ok` has recorded)."""
    lo = start_rate
    for _ in range(8):
        if ok(lo):
            break
        lo /= 2
    else:
        return 0.0
    hi = lo * 2
    while ok(hi) and len(tried) < max_evals:
        lo, hi = hi, hi * 2
    while hi / lo > 1 + rel_tol and len(tried) < max_evals:
        mid = (lo * hi) ** 0.5
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
