"""Re-simulate a stored study on other hardware profiles or another workload, without re-measuring.

`dse report STUDY --hardware h100-pcie5,rtx-4090 --workload input=8192,output=2048,batch=1/8` keeps
every measured number (accuracy, traces) and replaces the simulated ones: each run (trials and
baselines) replays its stored trace (dse/report/simulate.py: transplanted onto the target model; its
measured rates as synthetic demand when the trace is not on this machine) on each profile at the
workload, over the whole decode (dse/report/sampled.py). The report then draws from these results and
says so in its header.

    overrides = parse_overrides("h100-pcie5", "input=8192,output=2048,batch=1/8")
    results = resimulate(results, overrides, seed=0)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dse.errors import DseError
from dse.results import StudyResults

__all__ = ["Overrides", "parse_overrides", "resimulate"]

_WORKLOAD_KEYS = {"input": "input_tokens", "output": "output_tokens", "batch": "batch_sizes"}


@dataclass(frozen=True)
class Overrides:
    """hardware: profiles to simulate on (None: the study's); workload: keys of dse.study.Workload to
    replace (input_tokens, output_tokens, batch_sizes)."""

    hardware: tuple[str, ...] | None = None
    workload: dict[str, Any] | None = None

    @property
    def any(self) -> bool:
        return bool(self.hardware or self.workload)

    def describe(self) -> str:
        parts = []
        if self.hardware:
            parts.append(f"hardware {', '.join(self.hardware)}")
        if self.workload:
            parts.append(", ".join(f"{k} {v}" for k, v in self.workload.items()))
        return "; ".join(parts)


def parse_overrides(hardware: str | None, workload: str | None) -> Overrides:
    """--hardware 'P1,P2' and --workload 'input=N,output=N,batch=B1/B2/...' -> Overrides (DseError on bad
    text, naming the flag and what is valid)."""
    profiles: tuple[str, ...] | None = None
    if hardware is not None:
        from sim.hardware import list_profiles

        profiles = tuple(dict.fromkeys(p.strip() for p in hardware.split(",") if p.strip()))
        known = set(list_profiles())
        unknown = [p for p in profiles if p not in known]
        if not profiles or unknown:
            raise DseError(
                f"--hardware {hardware!r}: unknown profile(s) {', '.join(unknown) or '(none given)'}; valid: "
                f"{', '.join(sorted(known))} (see `dse hardware list`)"
            )
    w: dict[str, Any] | None = None
    if workload is not None:
        w = {}
        for item in (x.strip() for x in workload.split(",") if x.strip()):
            key, sep, value = item.partition("=")
            if not sep or key.strip() not in _WORKLOAD_KEYS:
                raise DseError(
                    f"--workload {workload!r}: {item!r} is not KEY=VALUE with KEY one of input, output, "
                    "batch (e.g. --workload input=32768,output=512,batch=1/4/16)"
                )
            try:
                numbers = [int(v) for v in value.split("/")]
            except ValueError:
                numbers = []
            if not numbers or any(n < 1 for n in numbers) or (key.strip() != "batch" and len(numbers) > 1):
                raise DseError(
                    f"--workload {workload!r}: {key.strip()} must be a positive integer"
                    + (" or several joined by / (batch=1/4/16)" if key.strip() == "batch" else "")
                    + f", got {value!r}"
                )
            name = _WORKLOAD_KEYS[key.strip()]
            w[name] = numbers if name == "batch_sizes" else numbers[0]
    return Overrides(hardware=profiles, workload=w or None)


def resimulate(results: StudyResults, overrides: Overrides, seed: int = 0) -> StudyResults:
    """`results` with every run's simulated results replaced by replays on the overridden profiles and
    workload (measured numbers kept). Config keys `hardware` and `workload` updated, and
    `resimulated` added (what was overridden)."""
    if not overrides.any:
        return results
    from dse.report.data import make_report_data
    from dse.report.sampled import sampled_decode
    from dse.report.simulate import replay_demand, sim_config
    from sim import load_profile

    config = dict(results.config)
    workload = {**(config.get("workload") or {}), **(overrides.workload or {})}
    missing = {"input_tokens", "output_tokens"} - set(workload)
    if missing:
        raise DseError(
            f"--workload: the study stored no {', '.join(sorted(missing))}; give them "
            "(e.g. --workload input=32768,output=512)"
        )
    workload.setdefault("batch_sizes", [1])
    config["workload"] = workload
    hardware = list(overrides.hardware or results.hardware)
    config["hardware"] = hardware
    config["resimulated"] = overrides.describe()
    staged = replace(results, config=config, hardware=tuple(hardware))
    data = make_report_data(staged) if staged.completed else None
    profiles = {p: load_profile(p) for p in hardware}
    batch = int(workload["batch_sizes"][0])

    def redo(run: Any) -> Any:
        if data is None:
            return run
        # a dense-attention run's trace loads as Demand.dense_attention: the dense model needs none
        demand = replay_demand(data, run, seed)
        sim: dict[str, dict] = {}
        for p, loaded in profiles.items():
            cfg = sim_config(
                data, run.config, p, batch_size=batch, input_tokens=int(workload["input_tokens"]),
                output_tokens=int(workload["output_tokens"]),
            )
            if demand is None and cfg.method != "dense":
                continue  # no trace and no measured rates: nothing to replay
            sim[p] = sampled_decode(cfg, None if demand is None else demand.demand, seed, loaded)
        return replace(run, sim=sim, sim_models={}, sim_grid=[])

    return replace(
        staged,
        trials=tuple(redo(t) if t.state == "COMPLETE" else t for t in staged.trials),
        dense=None if staged.dense is None else redo(staged.dense),
        untuned_freekv=None if staged.untuned_freekv is None else redo(staged.untuned_freekv),
        untuned_methods=tuple(redo(b) for b in staged.untuned_methods),
    )
