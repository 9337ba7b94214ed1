"""`dse sim`'s estimate ranges: each as-published answer re-priced with every estimated constant at the
cheap end and at the dear end of its stated range (sim.estimate_ends), printed as low/high ms per token.

Never imports torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["spreads", "print_spreads", "spreads_json"]


def spreads(ans: Any, batch: int, seed: int, engine: str, by_mode: dict[str, dict]) -> dict[str, Any]:
    """method -> sim.estimate_ends.EstimateSpread of the as-published cells at `batch` (methods that ran
    and fit in memory); {} when as-published was not priced."""
    from sim.estimate_ends import estimate_spread

    results = by_mode.get("as-published") or {}
    out: dict[str, Any] = {}
    for cell in ans.cells:
        res = results.get(cell.method)
        if cell.batch != batch or cell.implementation != "as-published" or res is None or res.oom:
            continue
        base = float(res.latency_stats()["mean"])
        out[cell.method] = estimate_spread(cell.config, cell.demand, seed, base_s=base, engine=engine)
    return out


def print_spreads(found: dict[str, Any], batch: int) -> None:
    """One row per method: mean ms/token as priced, and with every estimate at its low and high end."""
    if not found:
        return
    from rich.table import Table

    from dse.commands.sim_render import console

    table = Table(
        title=f"estimate ranges (as-published, batch {batch}): every estimated constant at its "
        "cheap / dear end together"
    )
    for col in ("method", "mean ms", "low ms", "high ms", "high / low", "moved"):
        table.add_column(col, justify="left" if col in ("method", "moved") else "right")
    for name, s in found.items():
        moved = len(s.software_fields) + len(s.method_knobs)
        knobs = f"; knobs {', '.join(s.method_knobs)}" if s.method_knobs else ""
        table.add_row(
            name,
            f"{s.base_s * 1e3:.2f}",
            f"{s.low_s * 1e3:.2f}",
            f"{s.high_s * 1e3:.2f}",
            f"{s.high_s / s.low_s:.2f}x" if s.low_s > 0 else "-",
            f"{moved} estimates ({len(s.software_fields)} software fields{knobs})",
        )
    out = console()
    out.print(table)
    out.print(
        "ranges: sim/software_profiles/*.yaml `range` of fields whose source is an estimate, and the "
        "models' `estimate_ranges`; the ends are stated assumptions, not confidence intervals"
    )


def spreads_json(found: dict[str, Any]) -> dict[str, Any]:
    return {name: s.to_dict() for name, s in found.items()}
