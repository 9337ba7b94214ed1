"""The paired accuracy floor (dse/accuracy/floor.py): each verdict reached for the stated reason."""

from __future__ import annotations

import pytest

from dse.accuracy.floor import BELOW, MEETS, UNDECIDED, floor_verdict, min_prompts_to_meet, rule_text


def _scores(n: int, wrong_every: int | None = None) -> dict[str, float]:
    return {str(i): 0.0 if wrong_every and i % wrong_every == 0 else 1.0 for i in range(n)}


def test_a_large_paired_drop_is_below_the_floor() -> None:
    v = floor_verdict(_scores(60, 3), _scores(60), 0.95)
    assert v.verdict == BELOW and v.losses == 20 and v.wins == 0 and v.mcnemar_p < 1e-4
    assert v.d_high < 0 and v.n == 60


def test_a_perfect_config_meets_only_with_enough_prompts() -> None:
    assert min_prompts_to_meet(0.95) == 60 and min_prompts_to_meet(0.9) == 30
    assert floor_verdict(_scores(60), _scores(60), 0.95).verdict == MEETS
    few = floor_verdict(_scores(10), _scores(10), 0.95)
    assert few.verdict == UNDECIDED and "rule of three" in few.reason


def test_a_small_drop_is_undecided_not_dropped() -> None:
    v = floor_verdict(_scores(60, 10), _scores(60), 0.95)  # 6 losses: 0.9 vs floor 0.95
    assert v.verdict == UNDECIDED and v.d_low < 0 < v.d_high


def test_too_few_losses_for_mcnemar_stay_undecided() -> None:
    v = floor_verdict({"a": 0.0, "b": 0.0, "c": 0.0}, {"a": 1.0, "b": 1.0, "c": 1.0}, 0.95)
    assert v.verdict == UNDECIDED and v.mcnemar_p == pytest.approx(0.25)


def test_only_shared_prompts_are_paired() -> None:
    v = floor_verdict({"a": 1.0, "b": 1.0, "x": 0.0}, {"a": 1.0, "b": 1.0, "y": 1.0}, 0.9)
    assert v.n == 2
    assert floor_verdict({"x": 1.0}, {"y": 1.0}, 0.9).n == 0


def test_continuous_scores_use_the_bootstrap_alone() -> None:
    config = {str(i): 0.5 + 0.001 * i for i in range(40)}
    dense = {str(i): 0.9 + 0.001 * i for i in range(40)}
    v = floor_verdict(config, dense, 0.95)
    assert v.verdict == BELOW and v.mcnemar_p is None


def test_rule_text_states_the_numbers() -> None:
    text = rule_text(0.95)
    assert "0.95" in text and "60" in text and "McNemar" in text


def test_a_bad_ratio_is_refused() -> None:
    with pytest.raises(ValueError, match="ratio"):
        floor_verdict({}, {}, 1.5)
