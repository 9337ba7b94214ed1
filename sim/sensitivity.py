"""How sure is a capacity answer: its hardware sensitivity and its pricing-mode spread.

`sensitivity(cfg, demand, slo_s, stat, seed)` re-runs `sim.capacity.capacity` with one binding hardware
number of the profile moved to each end of a stated range (`DEFAULT_RANGES`), through the same
mechanism as `--set hardware.FIELD=VALUE` (`SimConfig.hardware_overrides`, applied by
`HardwareProfile.with_overrides` and validated like a profile file), and reports the batch, tokens/s and
what binds at each end. The ranges are stated assumptions about how far the profiles' numbers may be
off, each with its reason (`Knob.why`); they are not measured confidence intervals. Nothing here is
fitted. `DEFAULT_RANGES`:
- HBM bandwidth efficiency (`gpu.achievable_bandwidth_fraction`): x0.8..x1.2, at most 1 (the peak);
  the profiles' 0.85 is an estimate beside measured streaming reads of 0.88-0.90 (their sources);
- host link bandwidth (`link.h2d_effective_gbps` and `link.d2h_effective_gbps` together): x0.8..x1.2, at
  most the link's peak; measured pinned copies reach ~0.82 of the PCIe peak and most profiles apply that
  ratio to their link as an estimate;
- per-copy cost (`link.copy_issue_s` and `link.dma_latency_s` together): x0.5..x2; the profiles split
  one end-to-end figure (~5-7 us per small cudaMemcpyAsync, DualPath arXiv 2602.21548) into host issue
  and engine latency by estimate (the two fields sim.calibrate fits on recall timings).
The "low" end of a row is the knob at its low factor (the smaller values: for the per-copy cost the
cheaper copies), the "high" end at its high factor.

`pricing_spread(cfg, demand, slo_s, stat, seed)` answers the same question with the methods priced
as their public code runs them ("as-published") and at hardware limits ("ideal"; SimConfig.implementation).

Torch-free, like all of sim/.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sim.capacity import CapacityAnswer, capacity, profile_of
from sim.config import IMPLEMENTATIONS, SimConfig
from sim.demand import Demand
from sim.errors import SimInputError
from sim.hardware import HardwareProfile

__all__ = [
    "DEFAULT_RANGES",
    "Knob",
    "SensitivityEnd",
    "SensitivityRow",
    "PricingSpread",
    "sensitivity",
    "pricing_spread",
    "knob_values",
]


@dataclass(frozen=True)
class Knob:
    """Profile fields moved together by the same factor, to `low_factor` and `high_factor` times the
    profile's value (after the config's own overrides); `caps`: per field, the largest value allowed,
    a number or the dotted field holding it (None: no cap), so that an end stays a valid profile."""

    name: str
    fields: tuple[str, ...]
    low_factor: float
    high_factor: float
    why: str
    caps: tuple[float | str | None, ...] = ()

    def __post_init__(self) -> None:
        if not self.fields:
            raise ValueError(f"knob {self.name!r} moves no field")
        if not 0.0 < self.low_factor <= self.high_factor:
            raise ValueError(f"knob {self.name!r}: need 0 < low_factor <= high_factor, got "
                             f"{self.low_factor}, {self.high_factor}")
        if self.caps and len(self.caps) != len(self.fields):
            raise ValueError(f"knob {self.name!r}: one cap per field or none")


DEFAULT_RANGES: tuple[Knob, ...] = (
    Knob(
        "HBM bandwidth efficiency",
        ("gpu.achievable_bandwidth_fraction",),
        0.8,
        1.2,
        "x0.8..x1.2 of the profile's fraction of HBM peak reached by decode kernels, at most 1 (the "
        "datasheet peak). The profiles' fractions are estimates (0.85 for decode attention over gathered "
        "pages) beside measured streaming reads of 0.88-0.90 of peak (their sources: an A100 forum "
        "measurement, an OpenCL benchmark on GH200); +-20% spans those measurements and paged, "
        "small-batch kernels well below them. A stated assumption.",
        caps=(1.0,),
    ),
    Knob(
        "host link bandwidth",
        ("link.h2d_effective_gbps", "link.d2h_effective_gbps"),
        0.8,
        1.2,
        "x0.8..x1.2 of the effective pinned-copy bandwidth of both directions together, at most the "
        "link's peak. Measured bandwidthTest results reach ~0.82 of the PCIe peak (the profiles' source: "
        "25.8 of 31.5 GB/s, A100 on PCIe Gen4); most profiles apply that ratio to another link as an "
        "estimate, and other hosts, root complexes or contended links differ; +-20% (capped at the "
        "spec peak) is a stated assumption.",
        caps=("link.h2d_peak_gbps", "link.d2h_peak_gbps"),
    ),
    Knob(
        "per-copy cost",
        ("link.copy_issue_s", "link.dma_latency_s"),
        0.5,
        2.0,
        "x0.5..x2 of the host's cost to issue one copy and the copy engine's per-copy latency, together. "
        "The profiles split one end-to-end figure (~5-7 us per small cudaMemcpyAsync, DualPath arXiv "
        "2602.21548) into ~3.5 us of host issue and ~2 us of engine latency by estimate; a factor 2 "
        "either way covers that split and the spread of driver and CPU issue costs between hosts. "
        "sim.calibrate fits these two fields on recall timings when a timed trace exists.",
    ),
)


@dataclass(frozen=True)
class SensitivityEnd:
    """One end of a knob's range: the factor, the field values used, and the capacity answer there."""

    factor: float
    values: dict[str, float]
    answer: CapacityAnswer

    @property
    def batch(self) -> int:
        return self.answer.batch

    @property
    def tokens_per_s(self) -> float | None:
        """tokens/s at the answered batch; None when no batch meets the SLO."""
        return None if self.answer.point is None else self.answer.point.tokens_per_s

    @property
    def binds(self) -> str:
        return self.answer.binds

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, "values": dict(self.values), "batch": self.batch,
                "tokens_per_s": self.tokens_per_s, "binds": self.binds}


@dataclass(frozen=True)
class SensitivityRow:
    """A knob moved to both ends of its range: the profile's values (`base`), and each end's answer."""

    knob: str
    fields: tuple[str, ...]
    base: dict[str, float]
    low: SensitivityEnd
    high: SensitivityEnd
    why: str

    @property
    def field(self) -> str:
        """The moved fields, comma-separated ("link.h2d_effective_gbps, link.d2h_effective_gbps")."""
        return ", ".join(self.fields)

    def to_dict(self) -> dict[str, Any]:
        return {"knob": self.knob, "field": self.field, "base": dict(self.base), "low": self.low.to_dict(),
                "high": self.high.to_dict(), "why": self.why}


def _number(profile: HardwareProfile, dotted: str) -> float:
    part, _, name = dotted.partition(".")
    spec = getattr(profile, part, None) if part in ("gpu", "link", "host") else None
    value = getattr(spec, name, None) if spec is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SimInputError(f"sensitivity: {dotted!r} is not a number of profile {profile.name!r} "
                            f"(got {value!r})")
    return float(value)


def knob_values(profile: HardwareProfile, knob: Knob, factor: float) -> dict[str, float]:
    """The knob's fields at `factor` times their values on `profile`, each at most its cap."""
    out = {}
    for i, dotted in enumerate(knob.fields):
        value = _number(profile, dotted) * factor
        cap = knob.caps[i] if knob.caps else None
        if cap is not None:
            value = min(value, _number(profile, cap) if isinstance(cap, str) else float(cap))
        out[dotted] = value
    return out


def sensitivity(
    cfg: SimConfig,
    demand: Demand | None,
    slo_s: float,
    stat: str = "mean",
    seed: int = 0,
    knobs: Sequence[Knob] = DEFAULT_RANGES,
) -> list[SensitivityRow]:
    """`capacity(cfg, demand, slo_s, stat, seed)` with each knob at both ends of its range (2 searches per
    knob), the other numbers as the profile (and cfg's own hardware overrides) give them."""
    profile = profile_of(cfg)
    rows = []
    for knob in knobs:
        base = {f: _number(profile, f) for f in knob.fields}
        ends = []
        for factor in (knob.low_factor, knob.high_factor):
            values = knob_values(profile, knob, factor)
            moved = cfg.replace(hardware_overrides={**cfg.hardware_overrides, **values})
            ends.append(SensitivityEnd(factor, values, capacity(moved, demand, slo_s, stat, seed)))
        rows.append(SensitivityRow(knob.name, knob.fields, base, ends[0], ends[1], knob.why))
    return rows


@dataclass(frozen=True)
class PricingSpread:
    """The same capacity question priced both ways: as the methods' public code runs them, and ideal."""

    as_published: CapacityAnswer
    ideal: CapacityAnswer

    def answer(self, mode: str) -> CapacityAnswer:
        if mode not in IMPLEMENTATIONS:
            raise SimInputError(f"pricing mode must be one of {', '.join(IMPLEMENTATIONS)}, got {mode!r}")
        return self.as_published if mode == "as-published" else self.ideal

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """{mode: {batch, tokens_per_s (None when no batch meets the SLO), binds}}."""
        return {
            mode: {"batch": a.batch, "tokens_per_s": None if a.point is None else a.point.tokens_per_s,
                   "binds": a.binds}
            for mode, a in (("as-published", self.as_published), ("ideal", self.ideal))
        }


def pricing_spread(
    cfg: SimConfig,
    demand: Demand | None,
    slo_s: float,
    stat: str = "mean",
    seed: int = 0,
    answered: CapacityAnswer | None = None,
) -> PricingSpread:
    """`capacity` with cfg.implementation "as-published" and "ideal"; `answered`: cfg's own answer when the
    caller has it (reused for cfg.implementation's mode instead of searching again)."""
    answers = {
        mode: answered if answered is not None and mode == cfg.implementation
        else capacity(cfg.replace(implementation=mode), demand, slo_s, stat, seed)
        for mode in IMPLEMENTATIONS
    }
    return PricingSpread(as_published=answers["as-published"], ideal=answers["ideal"])
