"""Demand presets: named synthetic demand with its provenance and a low and high end.

`--demand preset:NAME` (dse sim --synthetic preset:NAME, dse capacity, dse serve) builds synthetic demand
(sim.synthetic) from a preset's central rates; capacity answers are also given at the preset's low end
(the worse demand: more corrections, fewer GPU-cache hits) and high end, so a planner sees how much the
answer moves with the rates no trace of theirs has measured yet.

Each preset names where its numbers come from; "published" presets quote a third-party measurement of the
official FreeKV code (the project's FreeKV reference notes, "One third-party run"), with the model and task
it was measured on: using them for another model or task is an assumption the outputs state. The
published hit rate is a range (72-86%): the preset's central value is its midpoint, its ends the range's
ends; the correction share is a single reported average, so it is the same at both ends. No preset comes
from this repository's own traces yet (none at a registry model's long context has been recorded).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import SimInputError

__all__ = ["DemandPreset", "PRESETS", "get_preset", "is_preset", "preset_name", "own_preset"]

PREFIX = "preset:"


@dataclass(frozen=True)
class DemandPreset:
    """correction: share of (step, layer, KV head) corrected; hit: share of selected pages already on the
    GPU. low/high: (correction, hit) at the worse and the better end of the published (or, for an
    "assumed" preset, the stated plausible) range. method: the method whose rates these are: another
    method's model prices them only as a labelled transplant."""

    name: str
    correction: float
    hit: float
    low: tuple[float, float]
    high: tuple[float, float]
    tau: float | None
    source: str
    label: str
    method: str = "freekv"

    def spec(self, end: str = "central") -> str:
        """The synthetic spec (sim.synthetic) at the central rates or at the "low" / "high" end."""
        corr, hit = {"central": (self.correction, self.hit), "low": self.low, "high": self.high}[end]
        return f"correction={corr},hit={hit}"


_THIRD_PARTY = (
    "a third-party run of the official FreeKV code (DeepSeek-R1-Distill-Llama-8B, AIME, A100-40GB; not a "
    "figure of the FreeKV paper), as summarised in the project's FreeKV reference notes: at tau 0.9 about "
    "59% of KV heads corrected, at tau 0.8 about 14%; GPU-cache hit rate of selected pages about 72-86%"
)

_SHADOWKV_PAPER = (
    "ShadowKV (Sun et al., arXiv 2410.21465): its GPU chunk cache of values cuts the values fetched from the "
    "host by about 60% (the rate benchmarks/validate_sim.py also uses); the paper gives one number, so the "
    "ends (hit 0.4 and 0.8) are a stated plausible range, not a measurement; every KV head selects each "
    "step (correction 1.0: ShadowKV has no speculative reuse)"
)
_ARKVALE_ASSUMED = (
    "ArkVale (Chen et al., NeurIPS 2024) publishes page recalls per step only for its own setups (Fig. 4b), "
    "not as a rate for a planned budget: a central GPU-cache hit rate of 0.7 with a plausible range "
    "0.5-0.9 is assumed and labelled so; every KV head selects each step (correction 1.0)"
)

PRESETS: dict[str, DemandPreset] = {
    p.name: p
    for p in (
        DemandPreset(
            name="freekv-tau0.9",
            correction=0.59,
            hit=0.79,
            low=(0.59, 0.72),
            high=(0.59, 0.86),
            tau=0.9,
            source=_THIRD_PARTY,
            label="published (third-party measurement, tau 0.9; long generation)",
        ),
        DemandPreset(
            name="freekv-tau0.8",
            correction=0.14,
            hit=0.79,
            low=(0.14, 0.72),
            high=(0.14, 0.86),
            tau=0.8,
            source=_THIRD_PARTY,
            label="published (third-party measurement, tau 0.8; long input)",
        ),
        DemandPreset(
            name="shadowkv-paper",
            correction=1.0,
            hit=0.6,
            low=(1.0, 0.4),
            high=(1.0, 0.8),
            tau=None,
            source=_SHADOWKV_PAPER,
            label="published (ShadowKV paper: its chunk cache cuts fetched values by 60%); ends assumed",
            method="shadowkv",
        ),
        DemandPreset(
            name="arkvale-assumed",
            correction=1.0,
            hit=0.7,
            low=(1.0, 0.5),
            high=(1.0, 0.9),
            tau=None,
            source=_ARKVALE_ASSUMED,
            label="assumed range (no published per-step hit rate at a planned budget), not measured",
            method="arkvale",
        ),
    )
}


def own_preset(method: str, tau: float | None = None) -> str | None:
    """`preset:NAME` of the method's own rates (for FreeKV the preset of the nearest tau), None when the
    method has none."""
    own = [p for p in PRESETS.values() if p.method == method]
    if not own:
        return None
    if tau is not None and all(p.tau is not None for p in own):
        own.sort(key=lambda p: abs(p.tau - tau))
    return PREFIX + own[0].name


def is_preset(spec: str | None) -> bool:
    return bool(spec) and str(spec).startswith(PREFIX)


def preset_name(spec: str) -> str:
    return spec.removeprefix(PREFIX)


def get_preset(spec: str) -> DemandPreset:
    """`preset:NAME` or `NAME` -> the preset; a clear error naming the valid ones."""
    name = preset_name(spec)
    if name not in PRESETS:
        raise SimInputError(
            f"unknown demand preset {name!r}: valid presets are "
            + ", ".join(f"preset:{n}" for n in PRESETS)
            + " (or give a trace directory or a synthetic spec such as 'correction=0.6,hit=0.8')"
        )
    return PRESETS[name]
