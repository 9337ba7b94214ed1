"""sim.sensitivity: a capacity answer with one hardware number at each end of its range, and priced both
ways (real simulator runs on InfiniGen at 16K context, a few hundredths of a second per search)."""

from __future__ import annotations

import pytest

from sim import SimConfig, synthetic_demand
from sim.capacity import capacity, profile_of
from sim.errors import SimInputError
from sim.sensitivity import DEFAULT_RANGES, Knob, knob_values, pricing_spread, sensitivity

MODEL = "llama-3.1-8b"
SLO = 0.045


@pytest.fixture(scope="module")
def demand():
    return synthetic_demand("correction=0.5,hit=0.8", model=MODEL, seed=0)


def _cfg(**changes) -> SimConfig:
    base = SimConfig(model=MODEL, hardware="h100-pcie5", method="infinigen", input_tokens=16384,
                     output_tokens=32, implementation="ideal")
    return base.replace(**changes)


def test_default_ranges_cover_hbm_efficiency_link_bandwidth_and_per_copy_cost() -> None:
    fields = {f for knob in DEFAULT_RANGES for f in knob.fields}
    assert {"gpu.achievable_bandwidth_fraction", "link.h2d_effective_gbps", "link.copy_issue_s",
            "link.dma_latency_s"} <= fields
    assert all(knob.why and knob.low_factor < 1.0 < knob.high_factor for knob in DEFAULT_RANGES)


def test_ends_are_the_stated_factors_capped_to_a_valid_profile() -> None:
    profile = profile_of(_cfg())
    hbm, link, per_copy = DEFAULT_RANGES
    assert knob_values(profile, hbm, 1.2) == {"gpu.achievable_bandwidth_fraction": 1.0}  # 0.85 x 1.2 > peak
    assert knob_values(profile, hbm, 0.8)["gpu.achievable_bandwidth_fraction"] == pytest.approx(0.68)
    high = knob_values(profile, link, 1.2)
    assert high["link.h2d_effective_gbps"] == pytest.approx(1.2 * profile.link.h2d_effective_gbps)
    assert high["link.h2d_effective_gbps"] <= profile.link.h2d_peak_gbps
    assert knob_values(profile, link, 2.0)["link.d2h_effective_gbps"] == profile.link.d2h_peak_gbps
    ln = profile.link
    halved = {"link.copy_issue_s": ln.copy_issue_s / 2, "link.dma_latency_s": ln.dma_latency_s / 2}
    assert knob_values(profile, per_copy, 0.5) == pytest.approx(halved)


def test_sensitivity_moves_the_answer_the_way_the_hardware_moves(demand) -> None:
    cfg = _cfg()
    base = capacity(cfg, demand, SLO)
    assert base.binds.startswith("SLO (host link (bandwidth)")
    rows = {row.knob: row for row in sensitivity(cfg, demand, SLO)}
    assert list(rows) == [k.name for k in DEFAULT_RANGES]
    link = rows["host link bandwidth"]
    assert link.field == "link.h2d_effective_gbps, link.d2h_effective_gbps"
    assert link.base["link.h2d_effective_gbps"] == profile_of(cfg).link.h2d_effective_gbps
    assert link.low.tokens_per_s < base.point.tokens_per_s < link.high.tokens_per_s
    assert link.low.batch <= base.batch <= link.high.batch
    for row in rows.values():  # every end is a capacity answer of its own, nothing else moved
        for end in (row.low, row.high):
            assert end.answer.point is None or end.answer.point.mean_s <= SLO
            assert set(end.values) == set(row.fields)
    per_copy = rows["per-copy cost"]  # cheaper copies never hurt
    assert per_copy.low.tokens_per_s >= per_copy.high.tokens_per_s
    hbm = rows["HBM bandwidth efficiency"]
    assert hbm.low.tokens_per_s <= hbm.high.tokens_per_s
    d = link.to_dict()
    assert d["low"]["batch"] == link.low.batch and d["high"]["values"] == link.high.values and d["why"]


def test_a_set_override_is_the_base_of_the_range(demand) -> None:
    cfg = _cfg(hardware_overrides={"link.h2d_effective_gbps": 20.0})
    (row,) = sensitivity(cfg, demand, SLO, knobs=(DEFAULT_RANGES[1],))
    assert row.base["link.h2d_effective_gbps"] == 20.0
    assert row.low.values["link.h2d_effective_gbps"] == pytest.approx(16.0)
    assert row.high.values["link.h2d_effective_gbps"] == pytest.approx(24.0)


def test_a_knob_on_a_field_that_is_not_a_number_is_refused(demand) -> None:
    with pytest.raises(SimInputError, match="link.kind"):
        sensitivity(_cfg(), demand, SLO, knobs=(Knob("kind", ("link.kind",), 0.5, 2.0, "test"),))
    with pytest.raises(ValueError):
        Knob("backwards", ("link.dma_latency_s",), 2.0, 0.5, "test")


def test_pricing_spread_answers_both_modes(demand) -> None:
    # as published, InfiniGen's batch 1 takes ~58 ms here (FlexGen's whole-cache loads of layers 0-1):
    # an SLO both modes can meet
    slo = 0.1
    cfg = _cfg(implementation="as-published")
    own = capacity(cfg, demand, slo)
    spread = pricing_spread(cfg, demand, slo, answered=own)
    assert spread.as_published is own  # reused, not searched again
    assert spread.answer("ideal").batch == capacity(_cfg(), demand, slo).batch
    assert spread.ideal.point.tokens_per_s >= spread.as_published.point.tokens_per_s  # no software costs
    d = spread.to_dict()
    assert set(d) == {"as-published", "ideal"} and d["ideal"]["batch"] == spread.ideal.batch
    assert d["as-published"]["binds"] == own.binds
    with pytest.raises(SimInputError):
        spread.answer("fast")
