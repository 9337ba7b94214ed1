"""Capacity: the largest batch whose per-token latency meets an SLO, at the real final context.

`capacity(cfg, demand, slo_s, stat)` answers for one (profile, method, workload):
- memory: the largest batch that fits GPU and host memory at the final context (input + output), from the
  method's memory model (sim.memory);
- latency: per-token decode latency (one decode step of the batch) on sampled steps (`StepSampling`): every
  step when the output is at most `FULL_STEPS_MAX` tokens, else `WINDOWS` windows of `WINDOW_STEPS`
  consecutive steps spread evenly over the generation, the first starting at the first decode step and
  the last ending at the final one (each window simulated at its own context; equal weights);
- search (`largest_batch`): the powers of two up to the memory bound and the bound itself are simulated,
  not stopping at the first one over the SLO (a latency that is not monotone in batch still finds a larger
  passing batch) but at the first over `HOPELESS_FACTOR` times the SLO or out of memory (a dip back under
  the SLO from more than twice it is not sought); then a binary search between the largest passing probe
  and the next probe (latency assumed monotone inside that one interval);
- what binds (`binding`), the documented rule:
  1. nothing fits memory at batch 1 -> "GPU memory" or "host memory" (sim.memory's limit);
  2. the answer equals the memory bound -> the memory that bounds it ("GPU memory" / "host memory");
  3. otherwise the SLO binds: "SLO (<x>)" where <x> is the largest share of the first batch over the SLO's
     step (batch 1 when nothing passes), grouped: GPU kernels (categories compute, select, other, sync) ->
     "compute"; recalls and offloads (categories recall, offload: link transfers with their per-copy
     issue cost) -> "host link"; host-side issue and syncs (`<op>.host`, category host, idle) ->
     "host/software";
  4. a binding host link says which part of its transfers' time dominates: "host link (bandwidth)" or
     "host link (per-copy cost)". Each transfer op's seconds on the critical path (its breakdown entry)
     are split in the proportion of its copies' bandwidth and per-copy seconds at that batch
     (`SimResult.transfer_parts_s`, sim.engine.transfer_parts_s: per copy, the larger of its copy-engine
     time and its issue interval; the bytes' wire time at the effective bandwidth is "bandwidth", the
     copy engine's `link.dma_latency_s` or the longer issue interval (`link.copy_issue_s` over the
     issuing threads) "per-copy cost"); the larger sum over the group's transfer ops names the part
     (ties: bandwidth). The share printed stays the whole group's. Non-transfer ops of the group (GPU
     kernels and host work in the recall/offload categories) count in the share but not in the split;
     a group with no transfer time stays "host link".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.config import SimConfig
from sim.demand import Demand
from sim.engine import run_simulation
from sim.errors import SimInputError
from sim.hardware import HardwareProfile, load_profile
from sim.memory import MemoryFit, memory_fit
from sim.methods import get_method
from sim.software import SoftwareProfile, load_software
from traces.models import get_model
from traces.numbers import BATCH

__all__ = [
    "StepSampling",
    "BatchPoint",
    "CapacityAnswer",
    "capacity",
    "largest_batch",
    "memory_at",
    "evaluate_batch",
    "binding",
    "host_link_part",
    "FULL_STEPS_MAX",
    "WINDOWS",
    "WINDOW_STEPS",
    "CATEGORY_GROUP",
    "HOST_LINK",
    "HOST_LINK_BANDWIDTH",
    "HOST_LINK_PER_COPY",
]

FULL_STEPS_MAX = 1024  # outputs up to this many tokens are simulated step by step
WINDOWS = 16  # longer outputs: this many windows ...
WINDOW_STEPS = 32  # ... of this many consecutive steps

HOPELESS_FACTOR = 2.0  # probing larger batches stops at one whose latency is over this many times the SLO
UNBOUNDED_MEMORY = {"gpu.memory_bytes": 1 << 50, "host.memory_bytes": 1 << 50}

CATEGORY_GROUP = {
    "compute": "compute",
    "select": "compute",
    "other": "compute",
    "sync": "compute",
    "recall": "host link",
    "offload": "host link",
    "host": "host/software",
}
HOST_LINK = "host link"
HOST_LINK_BANDWIDTH = "host link (bandwidth)"
HOST_LINK_PER_COPY = "host link (per-copy cost)"


@dataclass(frozen=True)
class StepSampling:
    """Which decode steps are simulated: windows of (first step, number of steps)."""

    output_tokens: int
    windows: tuple[tuple[int, int], ...]

    @classmethod
    def for_output(cls, output_tokens: int) -> StepSampling:
        if output_tokens <= FULL_STEPS_MAX:
            return cls(output_tokens, ((0, output_tokens),))
        starts = np.rint(np.linspace(0, output_tokens - WINDOW_STEPS, WINDOWS)).astype(int)
        return cls(output_tokens, tuple((int(s), WINDOW_STEPS) for s in starts))

    @property
    def simulated_steps(self) -> int:
        return sum(n for _, n in self.windows)

    def label(self) -> str:
        if len(self.windows) == 1:
            return f"all {self.output_tokens} decode steps simulated"
        return (
            f"{len(self.windows)} windows of {self.windows[0][1]} consecutive steps spread evenly over "
            f"{self.output_tokens} decode steps ({self.simulated_steps} steps simulated, the last window "
            "ending at the final context; each window at its own context)"
        )


@dataclass(frozen=True)
class BatchPoint:
    """One simulated batch: per-token latency stats over the sampled steps, or out of memory."""

    batch: int
    mean_s: float
    p99_s: float
    prefill_s: float
    memory: MemoryFit
    breakdown_s: dict[str, float]
    categories: dict[str, str]
    oom: bool
    # transfer op -> (bandwidth, per-copy) seconds per step (SimResult.transfer_parts_s over the windows)
    transfer_parts_s: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return float("nan") if self.oom else self.batch / self.mean_s

    def stat(self, name: str) -> float:
        return {"mean": self.mean_s, "p99": self.p99_s}[name]


@dataclass(frozen=True)
class CapacityAnswer:
    """The largest batch under the SLO (0: none), its point, the memory bound and what binds."""

    batch: int
    point: BatchPoint | None
    max_batch_memory: int
    memory_limit: str
    binds: str
    probes: dict[int, BatchPoint] = field(default_factory=dict)
    sampling: StepSampling | None = None

    def to_dict(self) -> dict[str, Any]:
        p = self.point
        return {
            "batch": self.batch,
            "per_token_mean_ms": None if p is None else p.mean_s * 1e3,
            "per_token_p99_ms": None if p is None else p.p99_s * 1e3,
            "tokens_per_s": None if p is None else p.tokens_per_s,
            "prefill_s": None if p is None else p.prefill_s,
            "gpu_gib": None if p is None else p.memory.gpu_bytes / 2**30,
            "host_gib": None if p is None else p.memory.host_bytes / 2**30,
            "max_batch_memory": self.max_batch_memory,
            "memory_limit": self.memory_limit,
            "binds": self.binds,
            "batches_simulated": sorted(self.probes),
            "step_sampling": None if self.sampling is None else self.sampling.label(),
        }


@functools.lru_cache(maxsize=64)
def _profile(hardware: str, overrides: tuple[tuple[str, Any], ...]) -> HardwareProfile:
    profile = load_profile(hardware)
    return profile.with_overrides(dict(overrides)) if overrides else profile


def profile_of(cfg: SimConfig) -> HardwareProfile:
    """cfg's hardware profile with its overrides, loaded once per process (a search simulates hundreds of
    windows; a user file changed during one run is not re-read)."""
    try:
        return _profile(cfg.hardware, tuple(sorted(cfg.hardware_overrides.items())))
    except TypeError:  # an unhashable override value: load it uncached
        return _profile.__wrapped__(cfg.hardware, tuple(sorted(cfg.hardware_overrides.items())))


@functools.lru_cache(maxsize=16)
def software_of(name: str) -> SoftwareProfile:
    return load_software(name)


def memory_at(cfg: SimConfig, demand: Demand | None = None) -> MemoryFit:
    """Memory fit of `cfg` at its final context (input + output tokens); `demand`: the trace the method
    is set up with (`Method.for_demand`, e.g. RazorAttention's measured retrieval heads)."""
    model = get_model(cfg.model)
    return memory_fit(get_method(cfg, demand).memory(cfg, model), cfg, model, profile_of(cfg))


def evaluate_batch(
    cfg: SimConfig, demand: Demand | None, batch: int, seed: int = 0, sampling: StepSampling | None = None
) -> BatchPoint:
    """Simulate `cfg` at `batch` over the sampled steps (memory checked at the final context)."""
    full = cfg.replace(batch_size=batch)
    mem = memory_at(full, demand)
    if not mem.fits:
        return BatchPoint(batch, float("nan"), float("nan"), float("nan"), mem, {}, {}, True)
    sampling = sampling or StepSampling.for_output(cfg.output_tokens)
    lat, breakdown, categories, prefill = [], {}, {}, float("nan")
    parts: dict[str, tuple[float, float]] = {}
    # memory was checked above at the final context; a window (a later prompt, fewer steps) must not be
    # refused for its own prefill transient (sim.memory), so its capacities are lifted
    unbounded = {**cfg.hardware_overrides, **UNBOUNDED_MEMORY}
    for start, n in sampling.windows:
        window = full.replace(
            input_tokens=cfg.input_tokens + start, output_tokens=n, hardware_overrides=unbounded
        )
        res = run_simulation(
            window, demand, seed, profile=profile_of(window), software=software_of(cfg.software)
        )
        if start == 0:
            prefill = res.prefill_s
        lat.append(res.step_latency_s)
        for op, v in res.breakdown_s.items():
            breakdown[op] = breakdown.get(op, 0.0) + v * n
        categories.update(res.categories)
        for op, (bw, per_copy) in res.transfer_parts_s.items():
            was = parts.get(op, (0.0, 0.0))
            parts[op] = (was[0] + bw, was[1] + per_copy)
    steps = np.concatenate(lat)
    breakdown = {op: v / len(steps) for op, v in breakdown.items()}
    parts = {op: (bw / len(steps), per_copy / len(steps)) for op, (bw, per_copy) in parts.items()}
    return BatchPoint(
        batch,
        float(steps.mean()),
        float(np.percentile(steps, 99)),
        prefill,
        mem,
        breakdown,
        categories,
        False,
        parts,
    )


def largest_batch(
    meets: Callable[[int], bool], max_batch: int, hopeless: Callable[[int], bool] | None = None
) -> tuple[int, list[int]]:
    """The largest batch in [1, max_batch] with meets(batch) True (0 if none) and the batches tried.

    Probes the powers of two below max_batch and max_batch itself, not stopping at the first failing one
    (a non-monotone latency cannot hide a larger passing batch behind it) but only at the first probe for
    which hopeless(batch) is True (default: never); then binary-searches between the largest passing probe
    and the next probe above it."""
    if max_batch < 1:
        return 0, []
    probes = sorted({1 << k for k in range(max_batch.bit_length()) if 1 << k <= max_batch} | {max_batch})
    tried: list[int] = []
    results: dict[int, bool] = {}
    for b in probes:
        results[b] = meets(b)
        tried.append(b)
        if not results[b] and hopeless is not None and hopeless(b):
            break
    probes = tried[:]
    passing = [b for b in probes if results[b]]
    if not passing:
        return 0, tried
    lo = passing[-1]
    above = [b for b in probes if b > lo]
    if not above:
        return lo, tried
    hi = above[0]  # fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        tried.append(mid)
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return lo, tried


def binding(answer_batch: int, mem: MemoryFit, over: BatchPoint | None) -> str:
    """What binds (module docstring rule); `over`: the first simulated batch over the SLO, if any."""
    memory = {"gpu": "GPU memory", "host": "host memory"}
    if mem.max_batch == 0:
        gpu_over = mem.gpu_bytes > mem.gpu_capacity_bytes
        return "GPU memory" if gpu_over or mem.host_bytes <= mem.host_capacity_bytes else "host memory"
    if answer_batch == mem.max_batch:
        return memory.get(mem.limit, mem.limit)
    if over is None or not over.breakdown_s:
        return "SLO"
    groups: dict[str, float] = {}
    for op, v in over.breakdown_s.items():
        group = _group(op, over)
        groups[group] = groups.get(group, 0.0) + v
    top = max(groups, key=lambda g: groups[g])
    label = host_link_part(over) if top == HOST_LINK else top
    return f"SLO ({label} {groups[top] / sum(groups.values()):.0%})"


def _group(op: str, point: BatchPoint) -> str:
    cat = "host" if op.endswith(".host") or op == "idle" else point.categories.get(op, "compute")
    return CATEGORY_GROUP.get(cat, "compute")


def host_link_part(point: BatchPoint) -> str:
    """Which part of the host link's transfers dominates at `point` (rule 4 of the module docstring):
    HOST_LINK_BANDWIDTH, HOST_LINK_PER_COPY, or HOST_LINK when its transfers have no time to split."""
    bandwidth = per_copy = 0.0
    for op, v in point.breakdown_s.items():
        if op not in point.transfer_parts_s or _group(op, point) != HOST_LINK:
            continue
        bw, pc = point.transfer_parts_s[op]
        if bw + pc > 0.0:
            bandwidth += v * bw / (bw + pc)
            per_copy += v * pc / (bw + pc)
    if bandwidth + per_copy <= 0.0:
        return HOST_LINK
    return HOST_LINK_BANDWIDTH if bandwidth >= per_copy else HOST_LINK_PER_COPY


def capacity(
    cfg: SimConfig, demand: Demand | None, slo_s: float, stat: str = "mean", seed: int = 0
) -> CapacityAnswer:
    """The largest batch of `cfg` (its batch_size ignored) whose per-token `stat` latency <= slo_s."""
    if stat not in ("mean", "p99"):
        raise SimInputError(f"the SLO statistic must be 'mean' or 'p99', got {stat!r}")
    if not slo_s > 0:
        raise SimInputError(f"the per-token SLO must be a positive number of seconds, got {slo_s}")
    sampling = StepSampling.for_output(cfg.output_tokens)
    mem1 = memory_at(cfg.replace(batch_size=1), demand)
    points: dict[int, BatchPoint] = {}

    def meets(b: int) -> bool:
        if b not in points:
            points[b] = evaluate_batch(cfg, demand, b, seed, sampling)
        p = points[b]
        return not p.oom and p.stat(stat) <= slo_s

    def hopeless(b: int) -> bool:  # far over the SLO: larger batches are not simulated
        return points[b].oom or points[b].stat(stat) > HOPELESS_FACTOR * slo_s

    # a tiny model can fit more sequences than a SimConfig takes: search up to that limit
    best, _ = largest_batch(meets, min(mem1.max_batch, int(BATCH.hi)), hopeless)
    failing = sorted(b for b, p in points.items() if b > best and not p.oom)
    over = points[failing[0]] if failing else None
    binds = binding(best, mem1, over)
    return CapacityAnswer(best, points.get(best), mem1.max_batch, mem1.limit, binds, points, sampling)
