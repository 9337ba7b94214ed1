"""The answer at the ends of its estimates: every estimated constant at the cheap end, then the dear end.

An as-published price rests on numbers of two kinds that no measurement fixes yet:
- software-profile fields whose source says "estimate" and states `range: [low, high]` (sim/software.py,
  sim/software_profiles/*.yaml): per-op dispatch, copy-call costs, syncs, host gathers, ...;
- method constants that a model declares in `estimate_ranges` (a ClassVar of its class: knob ->
  (cheap value, dear value)), e.g. ShadowKV's `svd_flops_fraction`.
`end_configs(cfg)` gives the config with every such number at its low (cheap) end and at its high (dear)
end together, the user's own overrides and knobs kept (an override is no estimate); `estimate_spread`
prices both and returns the mean per-token latency at each end beside the profile's own. This is the
widest the stated ranges can move an answer, not a confidence interval: ranges are stated assumptions.

Torch-free, like all of sim/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.config import SimConfig
from sim.demand import Demand
from sim.methods import method_class
from sim.software import estimate_ends, load_software

__all__ = ["EstimateSpread", "end_configs", "estimate_spread", "method_estimate_ranges"]


def method_estimate_ranges(method: str) -> dict[str, tuple[Any, Any]]:
    """knob -> (cheap value, dear value) that the method's model states for its estimated constants."""
    return dict(getattr(method_class(method), "estimate_ranges", {}) or {})


def end_configs(cfg: SimConfig) -> dict[str, SimConfig]:
    """{"low": cfg with every estimate at its cheap end, "high": at its dear end}; fields the config
    overrides and knobs it sets stay as given."""
    software = load_software(cfg.software).with_overrides(cfg.software_overrides)
    ends = estimate_ends(software)
    ranges = {k: v for k, v in method_estimate_ranges(cfg.method).items() if k not in cfg.method_options}
    return {
        end: cfg.replace(
            software_overrides={**cfg.software_overrides, **ends[end]},
            method_options={**cfg.method_options, **{k: v[i] for k, v in ranges.items()}},
        )
        for i, end in enumerate(("low", "high"))
    }


@dataclass(frozen=True)
class EstimateSpread:
    """Mean per-token latency (s) with the profile's values and with every estimate at each end; the
    names of what moved (software fields, method knobs)."""

    method: str
    base_s: float
    low_s: float
    high_s: float
    software_fields: tuple[str, ...]
    method_knobs: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "mean_s": self.base_s,
            "low_mean_s": self.low_s,
            "high_mean_s": self.high_s,
            "software_fields": list(self.software_fields),
            "method_knobs": list(self.method_knobs),
        }


def estimate_spread(
    cfg: SimConfig,
    demand: Demand | None,
    seed: int = 0,
    base_s: float | None = None,
    engine: str = "aggregated",
) -> EstimateSpread:
    """Price cfg at both ends of its estimates (as-published only: ideal mode charges no software costs,
    so only the method's constants move there). `base_s`: cfg's own mean latency when known."""
    from sim.engine import run_simulation

    def mean_s(c: SimConfig) -> float:
        return float(run_simulation(c, demand, seed, engine=engine).latency_stats()["mean"])

    configs = end_configs(cfg)
    low, high = configs["low"], configs["high"]
    moved_sw = tuple(sorted(k for k in low.software_overrides if k not in cfg.software_overrides))
    moved_knobs = tuple(sorted(k for k in low.method_options if k not in cfg.method_options))
    return EstimateSpread(
        method=cfg.method,
        base_s=mean_s(cfg) if base_s is None else base_s,
        low_s=mean_s(low),
        high_s=mean_s(high),
        software_fields=moved_sw if cfg.implementation == "as-published" else (),
        method_knobs=moved_knobs,
    )
