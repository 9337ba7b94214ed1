"""The capacity decision (dse/accuracy/decide.py): the fastest within the SLO and the floor, and why the
others lost."""

from __future__ import annotations

from dse.accuracy.decide import Option, decide
from dse.accuracy.evidence import Evidence
from dse.accuracy.floor import floor_verdict


def _ev(method: str) -> Evidence:
    return Evidence(method, {}, "m", 1.0, 0.9, 1.0, 60, {}, "test", "x", 2048, None)


def _opt(method: str, tps: float, batch: int, verdict: str | None) -> Option:
    dense = {str(i): 1.0 for i in range(60)}
    scores = {"meets": dense, "below": {str(i): float(i % 3 != 0) for i in range(60)},
              "undecided": {str(i): float(i % 10 != 0) for i in range(60)}}
    v = None if verdict is None else floor_verdict(scores[verdict], dense, 0.95)
    cap = {"batch": batch, "tokens_per_s": tps if batch else None, "max_batch_memory": 100,
           "memory_limit": None, "binds": "SLO (compute 99%)"}
    return Option("h100", method, {"budget_tokens": 2048}, cap, _ev(method), v, "d")


def test_the_fastest_that_keeps_accuracy_wins_and_others_say_why() -> None:
    options = [_opt("dense", 1000, 10, None), _opt("freekv", 3000, 20, "meets"),
               _opt("snapkv", 9000, 80, "below"), _opt("quest", 5000, 30, "undecided"),
               _opt("shadowkv", 0, 0, "meets")]
    (d,) = decide(options)
    rows = {r.option.method: r for r in d.rows}
    assert d.winner is rows["freekv"] and d.runner_up is rows["dense"]
    assert rows["snapkv"].status == "excluded" and "floor: below" in rows["snapkv"].why
    assert rows["quest"].status == "undecided" and "undecided" in rows["quest"].why
    assert rows["shadowkv"].status == "excluded" and "SLO" in rows["shadowkv"].why


def test_the_best_knobs_of_a_method_are_chosen_and_the_next_is_its_runner_up() -> None:
    slow, fast = _opt("freekv", 2000, 10, "meets"), _opt("freekv", 4000, 20, "meets")
    fast.knobs = {"budget_tokens": 1024}
    (d,) = decide([slow, fast, _opt("dense", 1000, 5, None)])
    row = next(r for r in d.rows if r.option.method == "freekv")
    assert row.option is fast and row.runner_up is slow and row.status == "chosen"


def test_prices_rank_by_tokens_per_dollar() -> None:
    a, b = _opt("dense", 1000, 10, None), _opt("freekv", 1500, 10, "meets")
    a.price_per_hour_usd, b.price_per_hour_usd = 1.0, 3.0
    (d,) = decide([a, b], per_dollar=True)
    assert d.winner.option is a
