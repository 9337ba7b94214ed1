"""sim.serving: analytic cases, monotonicity in the arrival rate, memory admission, the rate search."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim import SimConfig, SimInputError, synthetic_demand
from sim.serving import Request, Slos, StepCosts, load_requests, max_rate, poisson_requests, serve

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def dense_costs() -> StepCosts:
    cfg = SimConfig(
        model=MODEL, hardware="a100-40g-pcie4", method="dense", input_tokens=16384, output_tokens=64
    )
    return StepCosts(cfg, None)


def test_one_request_alone_ttft_is_its_prefill(dense_costs: StepCosts) -> None:
    res = serve([Request(3.0, 16384, 64)], dense_costs)
    assert res.ttft_s[0] == pytest.approx(dense_costs.prefill_s(16384))
    assert res.tpot_s[0] == pytest.approx(dense_costs.decode_s(1, 16384 + 32), rel=0.05)
    assert res.max_batch == 1


def test_arrivals_spaced_wider_than_service_never_queue(dense_costs: StepCosts) -> None:
    one = serve([Request(0.0, 16384, 64)], dense_costs)
    service = float(one.finish_s[0])
    reqs = [Request(i * service * 1.5, 16384, 64) for i in range(5)]
    res = serve(reqs, dense_costs)
    assert np.allclose(res.ttft_s, one.ttft_s[0])
    assert np.allclose(res.tpot_s, one.tpot_s[0])
    assert res.max_batch == 1


@pytest.fixture(scope="module")
def freekv_costs() -> StepCosts:
    demand = synthetic_demand("correction=0.59,hit=0.79", model=MODEL, seed=0)
    cfg = SimConfig(
        model=MODEL, hardware="a100-40g-pcie4", method="freekv", input_tokens=16384, output_tokens=64
    )
    return StepCosts(cfg, demand)


@pytest.mark.parametrize("which", ["dense_costs", "freekv_costs"])
def test_higher_rate_never_lowers_ttft_p99(which: str, request) -> None:
    costs = request.getfixturevalue(which)
    p99 = []
    for rate in (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 3.0):
        res = serve(poisson_requests(rate, 60, 16384, 64, seed=3), costs)
        p99.append(res.stats()["ttft_p99_s"])
    assert all(b >= a - 1e-9 for a, b in zip(p99, p99[1:], strict=False)), p99


def test_admission_never_exceeds_what_fits(dense_costs: StepCosts) -> None:
    from sim.capacity import memory_at

    fit = memory_at(dense_costs.cfg).max_batch
    res = serve([Request(0.0, 16384, 64) for _ in range(3 * fit)], dense_costs)
    assert res.max_batch == fit
    assert np.all(np.isfinite(res.finish_s))


def test_a_request_that_cannot_fit_alone_is_refused(dense_costs: StepCosts) -> None:
    with pytest.raises(SimInputError, match="does not fit memory"):
        serve([Request(0.0, 250000, 64)], dense_costs)


def test_rate_search_brackets_the_slo() -> None:
    demand = synthetic_demand("correction=0.5,hit=0.8", model=MODEL, seed=0)
    cfg = SimConfig(model=MODEL, hardware="h100-pcie5", method="freekv", input_tokens=8192, output_tokens=64)
    costs = StepCosts(cfg, demand)

    def run_at(rate):
        return serve(poisson_requests(rate, 40, 8192, 64, seed=0), costs)

    found = max_rate(run_at, Slos(0.05, 3.0))
    assert found.rate_per_s > 0
    assert found.stats["ttft_p99_s"] <= 3.0 and found.stats["tpot_p99_s"] <= 0.05
    failing = [r for r, ok in found.tried.items() if not ok and r > found.rate_per_s]
    assert failing and min(failing) <= found.rate_per_s * 1.06  # the next rate up fails


def test_load_requests_csv_and_json(tmp_path) -> None:
    csv_path = tmp_path / "r.csv"
    csv_path.write_text("arrival_s,input_tokens,output_tokens\n2.0,100,5\n1.0,200,3\n")
    assert [r.arrival_s for r in load_requests(csv_path)] == [1.0, 2.0]
    js = tmp_path / "r.json"
    js.write_text(json.dumps([{"arrival_s": 0, "input_tokens": 10, "output_tokens": 2}]))
    assert load_requests(js)[0].input_tokens == 10
    bad = tmp_path / "b.csv"
    bad.write_text("when,in,out\n1,2,3\n")
    with pytest.raises(SimInputError, match="arrival_s,input_tokens,output_tokens"):
        load_requests(bad)


def test_poisson_same_seed_scales_in_time() -> None:
    a = [r.arrival_s for r in poisson_requests(1.0, 10, 10, 10, seed=5)]
    b = [r.arrival_s for r in poisson_requests(2.0, 10, 10, 10, seed=5)]
    assert np.allclose(np.array(a) / 2, b)
