"""How sure each profile's recommendation is: the simulator's validation band for the recommended
method, and the same capacity question priced the other way and at the ends of the binding hardware
numbers' stated ranges.

For the recommended run of each profile (dse/report/recommend.py) this asks sim.capacity the
question "largest batch whose mean per-token latency meets the study's SLO" over every batch (a
bisection, not only the study's stored batches), on the run's knobs and the demand the capacity grid
replays for it (dense attention needs none), then:
- the validation band: how far the simulator was from the published results checked for the method in
  the study's pricing mode (sim/validation_bands.py, written by benchmarks/validate_sim.py);
- pricing: the answer with the methods priced as their public code runs them and at hardware limits
  (sim.sensitivity.pricing_spread);
- hardware: the answer with HBM efficiency, host link bandwidth and per-copy cost each moved to the ends
  of their stated ranges (sim.sensitivity.sensitivity; the ranges are stated assumptions, not measured
  confidence intervals).
Without a latency SLO only the validation band is shown (the capacity question needs one).
"""

from __future__ import annotations

from dse.report.data import ReportData, describe_config, run_label
from dse.report.page import TableBlock
from dse.report.provenance import Provenance
from dse.report.recommend import Recommendation
from dse.report.simulate import Replays, sim_config, sim_method, workload
from sim.sensitivity import DEFAULT_RANGES

__all__ = ["sureness_table"]

_KNOB_HEADERS = tuple(knob.name for knob in DEFAULT_RANGES)


def _answer_text(answer: object) -> str:
    batch = getattr(answer, "batch", 0)
    point = getattr(answer, "point", None)
    if not batch or point is None:
        return "no batch meets the SLO"
    return f"{point.tokens_per_s:.0f} tokens/s at batch {batch}"


def _end_text(row: object) -> str:
    low, high = row.low, row.high  # type: ignore[attr-defined]
    return (f"x{low.factor:g}: {_answer_text(low.answer)}; x{high.factor:g}: {_answer_text(high.answer)}")


def _row(data: ReportData, rec: Recommendation, replays: Replays, seed: int) -> tuple[str, ...]:
    from sim.sensitivity import pricing_spread, sensitivity
    from sim.validation_bands import band

    run = rec.run
    assert run is not None
    method = sim_method(run.config)
    w = workload(data)
    cfg = sim_config(data, run.config, rec.profile, batch_size=1, input_tokens=int(w["input_tokens"]),
                     output_tokens=int(w["output_tokens"]), method=method)
    label = band(method, cfg.implementation).label()
    head = (rec.profile, f"{run_label(run)}: {describe_config(run.config)}", label)
    if data.slo_s is None:
        return (*head, *("- (no latency SLO)",) * (2 + len(_KNOB_HEADERS)))
    replay = replays.get(rec.profile)
    demand = None
    if method != "dense":
        if replay is None or replay[0] is not run:
            return (*head, *(f"- ({run_label(run)}'s demand is not replayed on this profile)",)
                    * (2 + len(_KNOB_HEADERS)))
        demand = replay[1].demand
    spread = pricing_spread(cfg, demand, data.slo_s, "mean", seed)
    base = spread.answer(cfg.implementation)
    other = "ideal" if cfg.implementation == "as-published" else "as-published"
    hardware = {r.knob: _end_text(r) for r in sensitivity(cfg, demand, data.slo_s, "mean", seed)}
    return (*head, f"{_answer_text(base)}; binds: {base.binds}",
            f"{other}: {_answer_text(spread.answer(other))}",
            *(hardware.get(k, "-") for k in _KNOB_HEADERS))


def sureness_table(data: ReportData, recs: list[Recommendation], replays: Replays, seed: int = 0
                   ) -> TableBlock | None:
    """One row per profile with a recommendation; None when no profile has one."""
    chosen = [rec for rec in recs if rec.run is not None and rec.chosen is not None]
    if not chosen:
        return None
    rows = [_row(data, rec, replays, seed) for rec in chosen]
    mapped = sorted({r[1].mapped_from for r in (replays.get(rec.profile) for rec in chosen)
                     if r is not None and r[1].mapped_from})
    return TableBlock(
        title="How sure each recommendation is (simulated)",
        header=("profile", "recommended run", "simulator's validation band (published results checked)",
                "capacity search: largest batch under the SLO (every batch, profile's own numbers)",
                "priced the other way", *(f"{k} at its range ends" for k in _KNOB_HEADERS)),
        rows=tuple(rows),
        caption=(
            "The recommended run's capacity asked again of the simulator over every batch (bisection; the "
            "table above compares only the study's stored batches, so its batch can be smaller), at the "
            "study's prompt and output lengths and its mean per-token SLO. The validation band says how far "
            "the simulator's predictions were from the published results checked for this method in this "
            "pricing mode (benchmarks/validate_sim.py). 'Priced the other way' answers with the methods "
            "priced at hardware limits (ideal) instead of as their public code runs them (as-published), "
            "or the reverse. The last three columns move one group of the profile's numbers to the ends "
            "of a stated range (HBM efficiency x0.8-1.2, host link bandwidth x0.8-1.2, per-copy cost "
            "x0.5-2; sim/sensitivity.py says why each), the rest as the profile gives them: stated "
            "assumptions about how far the numbers may be off, not measured confidence intervals."
        ),
        provenance=Provenance(
            simulated=(f"largest batch under the SLO and tokens/s of {data.model} on each profile",),
            measured=("retrieval demand of the recommended runs' traces (where they are not dense)",),
            mapped_from=tuple(mapped),
            priced=("as-published and ideal",),
        ),
    )
