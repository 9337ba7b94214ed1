"""Every inter-token gap (TBT) a serving run records: a hand-computed schedule, exact percentiles, and SLOs
bound to a TBT percentile."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import SimConfig
from sim.serving import Request, Slos, StepCosts, max_rate, poisson_requests, simulate
from sim.serving.token_gaps import weighted_percentile


@pytest.fixture(scope="module")
def h100_dense() -> StepCosts:
    cfg = SimConfig(
        model="llama-3.1-8b", hardware="h100-sxm", method="dense", input_tokens=4096, output_tokens=8
    )
    return StepCosts(cfg, None)


def test_gaps_of_a_hand_computed_blocking_schedule(h100_dense: StepCosts) -> None:
    c = h100_dense
    p0, d1 = c.prefill_s(4096), c.decode_s(1, 4097)
    # r0 (3 tokens) prefills alone, then decodes; r1 (2 tokens) arrives during r0's first decode step, so
    # its prefill runs after that step and stalls r0's next token; then both decode one step together
    reqs = [Request(0.0, 4096, 3), Request(p0 + d1 / 2, 4096, 2)]
    res = simulate(reqs, c, "blocking")
    p1, d2 = c.prefill_s(4096), c.decode_s(2, (4098 + 4097) / 2)
    assert res.tbt.of_request(0) == pytest.approx([d1, p1 + d2], rel=1e-12)
    assert res.tbt.of_request(1) == pytest.approx([d2], rel=1e-12)
    assert sorted(res.tbt.expanded()) == pytest.approx(sorted([d1, p1 + d2, d2]), rel=1e-12)
    assert res.tbt.count == 3
    # TPOT averages the stall over r0's tokens; the TBT tail shows it whole
    assert res.tpot_s[0] == pytest.approx((d1 + p1 + d2) / 2, rel=1e-12)
    assert res.tbt.percentile(100) == pytest.approx(p1 + d2, rel=1e-12)


@pytest.mark.parametrize("scheduler", ["blocking", "prefill-first", "chunked", "disaggregated"])
def test_each_request_has_one_gap_per_token_after_the_first(h100_dense: StepCosts, scheduler: str) -> None:
    reqs = poisson_requests(4.0, 30, 2048, 40, seed=2)
    res = simulate(reqs, h100_dense, scheduler, 1, 1)
    assert res.tbt.count == sum(r.output_tokens - 1 for r in reqs)
    for i in (0, 11, 29):
        gaps = res.tbt.of_request(i)
        assert len(gaps) == reqs[i].output_tokens - 1 and np.all(gaps > 0)
        first_token_s = reqs[i].arrival_s + res.ttft_s[i]
        assert gaps.sum() == pytest.approx(res.finish_s[i] - first_token_s, rel=1e-9)
    assert res.tbt.percentile(99) == np.percentile(res.tbt.expanded(), 99)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=1, max_size=12),
    st.lists(st.integers(1, 9), min_size=12, max_size=12),
    st.floats(0.0, 100.0),
)
def test_weighted_percentile_is_numpys_on_the_expanded_values(values, weights, q) -> None:
    v, w = np.array(values), np.array(weights[: len(values)])
    assert weighted_percentile(v, w, q) == np.percentile(np.repeat(v, w), q)


def test_a_tbt_slo_binds_the_stalls_a_tpot_slo_averages_away(h100_dense: StepCosts) -> None:
    reqs = poisson_requests(3.0, 60, 4096, 64, seed=0)
    res = simulate(reqs, h100_dense, "blocking")
    limit = float(np.percentile(res.tpot_s, 99)) * 1.01  # every request's mean gap is under it
    assert res.meets(Slos(limit))
    tbt = Slos(limit, token_stat="tbt-p99")
    fails = res.failures(tbt)
    assert [f.slo for f in fails] == ["TBT"] and fails[0].value_s == res.tbt.percentile(99) > limit
    assert "p99 inter-token (TBT)" in fails[0].text() and fails[0].count == res.tbt.count
    stopped = simulate(reqs, h100_dense, "blocking", slos=tbt, stop_early=True)
    assert stopped.stopped_by == "TBT" and not np.isfinite(stopped.finish_s).all()
    # the highest rate under a TBT SLO is never above the one under the same TPOT limit
    def run_at(rate: float):
        return simulate(poisson_requests(rate, 40, 4096, 64, seed=0), h100_dense, "blocking")

    assert max_rate(run_at, tbt).rate_per_s <= max_rate(run_at, Slos(limit)).rate_per_s
