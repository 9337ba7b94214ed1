"""How sure a capacity row is: the simulator's validation band for the method, and, for each profile's
chosen and runner-up rows, the answer priced the other way (as-published vs ideal) and at the ends of the
binding hardware numbers' stated ranges (sim.sensitivity: HBM efficiency, host link bandwidth, per-copy
cost). Never imports torch."""

from __future__ import annotations

from typing import Any

from dse.accuracy.decide import Decision

__all__ = ["add_sureness"]


def _band(method: str, mode: str) -> str:
    from sim.validation_bands import band

    return band(method, mode).label()


def _spread(option: Any, slo_s: float, stat: str, seed: int) -> dict[str, Any]:
    from sim.sensitivity import pricing_spread, sensitivity

    cfg, demand = option.extra["config"], option.extra["priced_demand"]
    answered = option.extra["capacity_answer"]
    spread = pricing_spread(cfg, demand, slo_s, stat, seed, answered=answered).to_dict()
    rows = [{"knob": r.knob, "fields": r.field, "why": r.why,
             "low": {"factor": r.low.factor, "batch": r.low.batch, "tokens_per_s": r.low.tokens_per_s},
             "high": {"factor": r.high.factor, "batch": r.high.batch, "tokens_per_s": r.high.tokens_per_s}}
            for r in sensitivity(cfg, demand, slo_s, stat, seed)]
    return {"pricing": spread, "hardware": rows}


def add_sureness(rows: list[dict[str, Any]], decisions: list[Decision], mode: str, slo_s: float, stat: str,
                 seed: int) -> None:
    """Fill each row's `validation_band`, and `sureness` for the chosen and runner-up rows (in place;
    rows are in decision order, one per decision row)."""
    flat = [(d, r) for d in decisions for r in d.rows]
    for row, (_, method_row) in zip(rows, flat, strict=True):
        row["validation_band"] = _band(row["method"], mode)
        if method_row.status in ("chosen", "runner-up"):
            row["sureness"] = _spread(method_row.option, slo_s, stat, seed)
