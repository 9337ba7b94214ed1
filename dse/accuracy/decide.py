"""The capacity decision: per profile and method, the knobs with evidence that give the most tokens/s
(or tokens/s per dollar-hour) within the SLO and the accuracy floor; the winner, the runner-up, and why
every other method lost.

Input: one `Option` per (profile, method, knobs) candidate: its capacity answer at the central demand
(and the answers at the demand's ends), its accuracy evidence and the floor's verdict. The rule:
1. a candidate is eligible when the floor's verdict is "meets" (dense attention is the reference and
   always eligible; without a floor every candidate with evidence is), it fits memory and a batch of at
   least 1 meets the SLO;
2. per (profile, method): the eligible candidate with the highest objective; when none is eligible, the
   method's best undecided candidate is shown as undecided (never silently kept or dropped), else the
   method lost on the floor, the SLO or memory, said so;
3. per profile: the winner is the method row with the highest objective among eligible rows, the
   runner-up the next one; every other row says why it lost.
Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dse.accuracy.evidence import Evidence
from dse.accuracy.floor import BELOW, MEETS, REFERENCE, UNDECIDED, FloorVerdict

__all__ = ["Option", "MethodRow", "Decision", "decide", "objective"]


@dataclass
class Option:
    """One candidate: capacity (CapacityAnswer.to_dict() at the central demand), the answers at the
    demand's other ends ({end: dict}), evidence (None: no accuracy evidence), verdict (None: no floor)."""

    hardware: str
    method: str
    knobs: dict[str, Any]
    capacity: dict[str, Any]
    evidence: Evidence | None
    verdict: FloorVerdict | None
    demand: str
    transplant: str | None = None
    transplanted_method: str | None = None
    ends: dict[str, dict[str, Any]] = field(default_factory=dict)
    price_per_hour_usd: float | None = None
    floor_given: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def fits_slo(self) -> bool:
        return (self.capacity.get("batch") or 0) >= 1

    @property
    def floor_state(self) -> str:
        """meets / below / undecided / reference / no floor / no evidence."""
        if self.method == "dense":
            return REFERENCE
        if self.evidence is None:
            return "no evidence"
        return "no floor" if self.verdict is None else self.verdict.verdict

    @property
    def eligible(self) -> bool:
        """Within the SLO and the floor (without a floor: every candidate, ranked by speed alone)."""
        passes = self.floor_state in (MEETS, REFERENCE, "no floor") or not self.floor_given
        return passes and self.fits_slo


def objective(option: Option, per_dollar: bool) -> float:
    tps = option.capacity.get("tokens_per_s") or 0.0
    if per_dollar:
        return tps / option.price_per_hour_usd if option.price_per_hour_usd else 0.0
    return tps


@dataclass
class MethodRow:
    """The shown candidate of one (profile, method), its status and why; runner_up_knobs: the method's
    next-best eligible candidate."""

    option: Option
    status: str = ""
    why: str = ""
    alternatives: int = 0
    runner_up: Option | None = None


@dataclass
class Decision:
    hardware: str
    rows: list[MethodRow]
    winner: MethodRow | None
    runner_up: MethodRow | None


def _lost_reason(option: Option) -> str:
    state = option.floor_state
    if state == BELOW:
        return f"floor: {option.verdict.short()}"
    if state == UNDECIDED:
        return f"floor undecided ({option.verdict.reason})"
    if state == "no evidence":
        return "no accuracy evidence"
    limit = option.capacity.get("memory_limit")
    if (option.capacity.get("max_batch_memory") or 0) < 1:
        return f"memory: batch 1 does not fit ({limit or 'memory'})"
    return f"SLO: not met even at batch 1 ({option.capacity.get('binds')})"


def _method_row(options: list[Option], per_dollar: bool) -> MethodRow:
    ranked = sorted(options, key=lambda o: -objective(o, per_dollar))
    eligible = [o for o in ranked if o.eligible]
    if eligible:
        runner = eligible[1] if len(eligible) > 1 else None
        return MethodRow(eligible[0], "eligible", "", len(options) - 1, runner)
    undecided = [o for o in ranked if o.floor_state in (UNDECIDED, "no evidence") and o.fits_slo]
    if undecided:
        shown = undecided[0]
        return MethodRow(shown, "undecided", _lost_reason(shown), len(options) - 1)
    shown = ranked[0]
    reasons = sorted({_lost_reason(o).split(" (")[0] for o in options})
    return MethodRow(shown, "excluded", _lost_reason(shown) + (
        f"; its {len(options)} knob settings: {', '.join(reasons)}" if len(options) > 1 else ""),
        len(options) - 1)


def decide(options: list[Option], per_dollar: bool = False) -> list[Decision]:
    """One decision per profile, in the order the options name them (module docstring)."""
    profiles = list(dict.fromkeys(o.hardware for o in options))
    out = []
    for hw in profiles:
        mine = [o for o in options if o.hardware == hw]
        methods = list(dict.fromkeys(o.method for o in mine))
        rows = [_method_row([o for o in mine if o.method == m], per_dollar) for m in methods]
        ranked = sorted((r for r in rows if r.status == "eligible"),
                        key=lambda r: -objective(r.option, per_dollar))
        winner = ranked[0] if ranked else None
        runner = ranked[1] if len(ranked) > 1 else None
        unit = "tokens/s per $/h" if per_dollar else "tokens/s"
        for row in rows:
            if row is winner:
                floor = "the floor" if row.option.floor_given else "no floor given: speed alone"
                row.status, row.why = "chosen", f"most {unit} within the SLO ({floor})"
            elif row is runner:
                mine_obj, best_obj = objective(row.option, per_dollar), objective(winner.option, per_dollar)
                row.status, row.why = "runner-up", f"{mine_obj:,.0f} vs {best_obj:,.0f} {unit}"
            elif row.status == "eligible":
                row.why = (f"fewer {unit}: {objective(row.option, per_dollar):,.0f} vs "
                           f"{objective(winner.option, per_dollar):,.0f}")
                row.status = "lost"
        out.append(Decision(hw, rows, winner, runner))
    return out
