"""95% intervals (Wilson, bootstrap) and sample-size estimates."""

from __future__ import annotations

import math

import pytest

from freekv_runtime.stats import (
    ANSWER_CHARS,
    Estimate,
    SampleScore,
    bootstrap_mean,
    estimate,
    proportion,
    sample_scores,
    samples_needed_means,
    samples_needed_proportions,
    wilson,
)


def test_wilson_matches_textbook_values() -> None:
    # Wilson score interval, z = 1.96: 5/10 -> [0.2366, 0.7634]; 0/10 -> [0, 0.2775]; 10/10 -> [0.7225, 1]
    e = wilson(5, 10)
    assert (e.value, round(e.low, 4), round(e.high, 4), e.method) == (0.5, 0.2366, 0.7634, "wilson")
    assert (wilson(0, 10).low, round(wilson(0, 10).high, 4)) == (0.0, 0.2775)
    assert (round(wilson(10, 10).low, 4), round(wilson(10, 10).high, 9)) == (0.7225, 1.0)
    assert math.isnan(wilson(0, 0).value)


def test_bootstrap_is_seeded_and_covers_the_mean() -> None:
    values = [0.1, 0.5, 0.2, 0.9, 0.4, 0.3]
    a, b, c = bootstrap_mean(values, seed=1), bootstrap_mean(values, seed=1), bootstrap_mean(values, seed=2)
    assert a == b and (a.low, a.high) != (c.low, c.high)
    assert a.value == pytest.approx(0.4)
    assert a.low < a.value < a.high and a.method == "bootstrap" and a.n == 6
    assert a.sd == pytest.approx(0.2828, abs=1e-4)
    one = bootstrap_mean([0.3])
    assert one.value == 0.3 and math.isnan(one.low) and one.method == "none"


def test_estimate_picks_wilson_for_binary_values() -> None:
    assert estimate([1, 0, 1, 1]).method == "wilson"
    assert estimate([1, 0.5, 1]).method == "bootstrap"
    assert estimate([float("nan"), 1.0, 0.0]).n == 2


def test_estimate_round_trips_through_json_dict() -> None:
    e = bootstrap_mean([0.2, 0.4, 0.9])
    assert Estimate.from_dict(e.to_dict()) == e
    nan = Estimate.from_dict(bootstrap_mean([]).to_dict())
    assert math.isnan(nan.value) and nan.to_dict()["value"] is None


def test_samples_needed() -> None:
    # classic example: 0.5 vs 0.6 needs ~385-390 per arm at 5% / 80%
    assert 380 <= samples_needed_proportions(0.5, 0.6) <= 395
    assert samples_needed_proportions(0.5, 0.5) == math.inf
    # difference of one sd: 2 * (1.96 + 0.84)^2 = 15.7 -> 16
    assert samples_needed_means(0.3, 0.3) == 16
    assert samples_needed_means(0.0, 1.0) == math.inf


def test_estimate_with_samples_round_trips_and_omits_empty_samples() -> None:
    e = bootstrap_mean([0.25, 0.5, float("nan")], ids=["t/0", "t/1", "t/2"], answers=["a", "b" * 500, "c"])
    assert [s.id for s in e.samples] == ["t/0", "t/1", "t/2"] and e.n == 2  # NaN kept as a sample, not in n
    assert len(e.samples[1].answer) == ANSWER_CHARS
    d = e.to_dict()
    assert d["samples"][0] == {"id": "t/0", "score": 0.25, "answer": "a"} and d["samples"][2]["score"] is None
    back = Estimate.from_dict(d)
    assert back.samples[:2] == e.samples[:2] and math.isnan(back.samples[2].score)
    assert (back.value, back.low, back.high, back.n) == (e.value, e.low, e.high, e.n)
    assert "samples" not in e.to_dict(with_samples=False)
    assert "samples" not in bootstrap_mean([0.2, 0.4]).to_dict()  # none recorded: no key at all
    assert Estimate.from_dict({"value": 0.5, "n": 2, "method": "wilson"}).samples == ()  # an old dict


def test_proportion_and_estimate_carry_zero_one_samples() -> None:
    p = proportion([True, False, True], ids=["a", "b", "c"], answers=["x", "y", "z"])
    w = wilson(2, 3)
    assert (p.value, p.low, p.high, p.n, p.method) == (w.value, w.low, w.high, w.n, "wilson")
    assert [s.score for s in p.samples] == [1.0, 0.0, 1.0]
    e = estimate([1.0, 0.5], ids=["a", "b"])
    assert e.method == "bootstrap" and [s.answer for s in e.samples] == ["", ""]
    assert sample_scores(["a"], [1.0], ["x"]) == (SampleScore("a", 1.0, "x"),)
    with pytest.raises(ValueError, match="one each per sample"):
        estimate([1.0, 0.0], ids=["a"])
