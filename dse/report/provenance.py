"""Where a figure's numbers come from: measured on the real model, simulated on a profile, mapped from
another model.

Every figure of a report carries a `Provenance`; the page renders it as badges under the figure title
so that a reader never mistakes a simulated latency for a measurement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape

__all__ = ["Provenance", "mapped_sources", "pricing_sources", "study_pricing", "pricing_label"]


@dataclass(frozen=True)
class Provenance:
    """measured: what was measured on the real model, e.g. ("accuracy (passkey_accuracy) of smollm2-135m",).
    simulated: what the simulator computed, e.g. ("per-token latency on a100-40g-pcie4",).
    mapped_from: models whose traces were replayed on another model's shapes.
    synthetic: the synthetic demand used instead of a trace (e.g. "correction=0.61,hit=0.8"), if any.
    priced: how the simulated latencies were priced, e.g. ("as-published (pytorch2-cuda12)",) or
    ("ideal (hardware limits)",) (SimConfig.implementation and the software profile).
    """

    measured: tuple[str, ...] = ()
    simulated: tuple[str, ...] = ()
    mapped_from: tuple[str, ...] = ()
    synthetic: tuple[str, ...] = ()
    priced: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.measured or self.simulated):
            raise ValueError("a figure's provenance must name at least one measured or simulated quantity")

    def badges_html(self) -> str:
        """Badges (HTML spans) for the page: one per kind, each listing what it covers."""
        parts: list[str] = []
        if self.measured:
            parts.append(_badge("measured", "measured: " + "; ".join(self.measured)))
        if self.simulated:
            parts.append(_badge("simulated", "simulated: " + "; ".join(self.simulated)))
        if self.mapped_from:
            names = ", ".join(sorted(set(self.mapped_from)))
            parts.append(_badge("mapped", f"trace mapped from {names}"))
        if self.synthetic:
            parts.append(_badge("synthetic", "synthetic demand: " + "; ".join(sorted(set(self.synthetic)))))
        if self.priced:
            parts.append(_badge("simulated", "latency priced " + "; ".join(dict.fromkeys(self.priced))))
        return '<div class="badges">' + "".join(parts) + "</div>"


def _badge(kind: str, text: str) -> str:
    return f'<span class="badge badge-{kind}">{escape(text)}</span>'


def mapped_sources(sim_dicts: Iterable[dict]) -> tuple[str, ...]:
    """Distinct `mapped_from` models named by SimResult dicts (sorted; empty if none was mapped); results
    stored before the rename say `transplanted_from`."""
    found = (d.get("mapped_from") or d.get("transplanted_from") for d in sim_dicts)
    return tuple(sorted({str(name) for name in found if name}))


def pricing_label(implementation: str | None, software: str | None) -> str:
    """"as-published (<software>)" or "ideal (hardware limits)"; results stored before implementation
    modes existed were priced ideally."""
    if implementation == "as-published":
        return f"as-published ({software or 'pytorch2-cuda12'})"
    if implementation is None:
        return "ideal (hardware limits; recorded before implementation modes)"
    return "ideal (hardware limits)"


def pricing_sources(sim_dicts: Iterable[dict]) -> tuple[str, ...]:
    """Distinct pricing labels of SimResult dicts (their `implementation` and `software`), sorted.
    Out-of-memory results priced nothing (no latency) and are left out."""
    return tuple(
        sorted(
            {
                pricing_label(d.get("implementation"), d.get("software"))
                for d in sim_dicts
                if d and not d.get("oom")
            }
        )
    )


def study_pricing(config: dict) -> tuple[str, ...]:
    """The pricing a study asks for (its `implementation:` and `software:` keys)."""
    return (pricing_label(config.get("implementation", "as-published"), config.get("software")),)
