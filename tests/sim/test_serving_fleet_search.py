"""The fewest-GPUs searches: the two-pool (disaggregated) search finds the true minimum total where a greedy
coordinate search does not, on a monotone predicate and on simulated fleets."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sim import SimConfig
from sim.serving import Slos, StepCosts, fewest_gpus, poisson_requests, simulate
from sim.serving.fleet_search import decode_floor
from sim.serving.pool_search import fewest_total, smallest


def _brute_force(meets, floors: tuple[int, int], upto: int) -> tuple[int, int]:
    """The smallest total (then the fewest prefill GPUs) meeting, trying every split of every total."""
    p_floor, d_floor = floors
    for total in range(p_floor + d_floor, upto + 1):
        for p in range(p_floor, total - d_floor + 1):
            if meets(p, total - p):
                return p, total - p
    raise AssertionError("nothing meets up to the bound")


def _ttft_budget(pre: float, pre_exp: float, dec: float, dec_exp: float, slo: float):
    """A TTFT SLO on prefill queueing + decode wait, each falling with its pool: monotone in both pools,
    and a trade-off between them (fewer prefill GPUs can be made up by more decode GPUs)."""
    return lambda p, d: pre / p**pre_exp + dec / d**dec_exp <= slo


def test_two_pool_search_finds_the_minimum_a_greedy_search_misses() -> None:
    meets = _ttft_budget(4.9, 1.65, 25.58, 0.88, 5.46)
    # the greedy search this replaced (grow the pool with the longer wait, then bisect decode, then
    # prefill) stops at (2, 9); (3, 7) is smaller
    assert meets(2, 9) and not meets(2, 8) and not meets(1, 9)
    assert fewest_total(meets, (2, 9), (1, 1)) == (3, 7) == _brute_force(meets, (1, 1), 11)


@settings(max_examples=100, deadline=None)
@given(
    st.floats(1, 20), st.floats(0.8, 2), st.floats(1, 20), st.floats(0.8, 2), st.floats(2, 10),
    st.integers(1, 3), st.integers(1, 3),
)
def test_two_pool_search_is_exact_on_monotone_predicates(a, ea, b, eb, slo, p_floor, d_floor) -> None:
    meets = _ttft_budget(a, ea, b, eb, slo)
    start = next((p, p) for p in range(max(p_floor, d_floor), 1000) if meets(p, p))
    found = fewest_total(meets, start, (p_floor, d_floor))
    best = _brute_force(meets, (p_floor, d_floor), sum(start))
    assert meets(*found) and sum(found) == sum(best)


def test_one_pool_search_finds_the_smallest() -> None:
    calls: list[int] = []

    def meets(n: int) -> bool:
        calls.append(n)
        return n >= 37

    assert smallest(meets, 2, 5, 512) == 37 and smallest(meets, 2, 80, 512) == 37
    assert smallest(meets, 2, 5, 30) is None


def test_disaggregated_fleet_answer_is_the_brute_force_minimum() -> None:
    cfg = SimConfig(
        model="llama-3.1-8b", hardware="a100-40g-pcie4", method="dense", input_tokens=8192, output_tokens=64
    )
    costs = StepCosts(cfg, None)
    rate, slos = 4.0, Slos(0.05, 1.2 * costs.prefill_s(8192) + 0.05)
    ans = fewest_gpus(costs, "disaggregated", rate, 8192, 1024, slos, seeds=(0,), n_requests=50)
    (found,) = ans.met
    reqs = poisson_requests(rate, 50, 8192, 1024, 0)

    def meets(p: int, d: int) -> bool:
        return simulate(reqs, costs, "disaggregated", d, p, slos=slos, stop_early=True).meets(slos)

    floors = (math.ceil(rate * costs.prefill_s(8192)), decode_floor(costs, rate, 8192, 1024, 0.05)[0])
    assert (found.prefill_gpus, found.gpus) == _brute_force(meets, floors, found.total)
    assert ans.binding[0] is not None and not ans.binding[0].meets
