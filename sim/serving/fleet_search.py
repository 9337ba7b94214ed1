"""The fewest GPUs of one profile that meet the SLOs at a target Poisson rate, per scheduler, over
several arrival seeds (the answer is the range across seeds).

Each evaluation simulates the whole fleet (sim/serving/fleet.py) on `n_requests` Poisson arrivals at the
target rate, stopping early once an SLO is certainly broken. Floors no short stream may undercut, as a
fleet below them cannot keep up with the arrivals however short the stream (utilisation over 1):
- prefill: rate x the prompt's prefill seconds (blocking and prefill-first, and the prefill pool of
  disaggregated);
- decode: rate x output tokens / the best decode tokens per second one GPU reaches within its memory
  and the per-token SLO (b / decode_s(b) at the mean context, b up to what fits); no such b means no
  fleet meets the per-token SLO, answered without a search;
- blocking and prefill-first add both (each GPU prefills and decodes, never at once).
Search (sim/serving/pool_search.py), one pool (blocking, prefill-first, chunked): from a guess (the sum
of both floors; later seeds: the previous seed's answer), grow by half until one meets, then bisect
between the last failing and the first meeting count. Disaggregated: first a fleet that meets, grown
from both floors (later seeds: the previous answer) by half in the pool whose wait dominates (a
per-token failure grows the decode pool; TTFT or queueing grows the pool whose p99 wait is larger); then
the fewest total GPUs over every split, exact when meeting the SLOs is monotone in each pool
(pool_search.fewest_total).
With tensor parallelism the searches count replicas of `t` GPUs (disaggregated: each pool its own `t`),
the floors are in replicas (a replica's prefill and decode are one shard's, with its collectives), and
the answer is in GPUs (replicas x t; the fewest GPUs over the splits when the pools' degrees differ).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.serving.fleet import simulate
from sim.serving.pool_search import fewest_total, smallest
from sim.serving.requests import poisson_requests
from sim.serving.result import ServingResult
from sim.serving.schedulers import SchedulerSettings
from sim.serving.slos import Failure, Slos
from sim.serving.step_costs import StepCosts

__all__ = ["FleetPoint", "FleetAnswer", "fewest_gpus", "decode_floor"]


@dataclass(frozen=True)
class FleetPoint:
    """One simulated fleet: its replicas (each `tp` GPUs; `prefill_tp` in the prefill pool) and whether it
    met the SLOs (else what broke)."""

    prefill_replicas: int  # disaggregated: the prefill pool; 0 otherwise
    replicas: int  # serving replicas (blocking, chunked) or the decode pool
    meets: bool
    failures: tuple[Failure, ...]
    stats: dict[str, Any]
    prefill_tp: int = 1  # GPUs per prefill replica (tensor-parallel degree)
    tp: int = 1  # GPUs per serving / decode replica

    @property
    def prefill_gpus(self) -> int:
        return self.prefill_replicas * self.prefill_tp

    @property
    def gpus(self) -> int:
        return self.replicas * self.tp

    @property
    def total(self) -> int:
        """GPUs of the fleet."""
        return self.prefill_gpus + self.gpus

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prefill_gpus": self.prefill_gpus,
            "gpus": self.gpus,
            "total_gpus": self.total,
        }
        if self.tp > 1 or self.prefill_tp > 1:
            out.update(prefill_replicas=self.prefill_replicas, replicas=self.replicas,
                       prefill_tensor_parallel=self.prefill_tp, tensor_parallel=self.tp)
        out.update(meets=self.meets, failures=[f.to_dict() for f in self.failures], stats=self.stats)
        return out


@dataclass
class FleetAnswer:
    scheduler: str
    router: str
    rate_per_s: float
    n_requests: int
    seeds: tuple[int, ...]
    answers: list[FleetPoint | None]  # per seed: the fewest GPUs meeting the SLOs (None: none within cap)
    binding: list[FleetPoint | None]  # per seed: the fleet one replica smaller that failed (what binds)
    impossible: Failure | None = None  # no fleet can meet the per-token SLO
    evaluations: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def met(self) -> list[FleetPoint]:
        return [a for a in self.answers if a is not None]

    def gpu_range(self) -> tuple[int, int] | None:
        met = self.met
        if len(met) < len(self.answers) or not met:
            return None
        return min(a.total for a in met), max(a.total for a in met)

    def prefill_share_range(self) -> tuple[float, float] | None:
        met = self.met
        if self.scheduler != "disaggregated" or not met:
            return None
        shares = [a.prefill_gpus / a.total for a in met]
        return min(shares), max(shares)

    def binding_slos(self) -> list[str]:
        seen: list[str] = []
        for b in self.binding:
            if b is not None and b.failures and b.failures[0].slo not in seen:
                seen.append(b.failures[0].slo)
        return seen

    def to_dict(self) -> dict[str, Any]:
        rng, share = self.gpu_range(), self.prefill_share_range()
        return {
            "scheduler": self.scheduler,
            "router": self.router,
            "rate_per_s": self.rate_per_s,
            "n_requests": self.n_requests,
            "seeds": list(self.seeds),
            "gpus_min": None if rng is None else rng[0],
            "gpus_max": None if rng is None else rng[1],
            "prefill_share_min": None if share is None else share[0],
            "prefill_share_max": None if share is None else share[1],
            "binding_slos": self.binding_slos(),
            "per_seed": [None if a is None else a.to_dict() for a in self.answers],
            "binding_per_seed": [None if b is None else b.to_dict() for b in self.binding],
            "impossible": None if self.impossible is None else self.impossible.to_dict(),
            "evaluations": self.evaluations,
            "notes": self.notes,
        }


def decode_floor(
    costs: StepCosts, rate_per_s: float, input_tokens: int, output_tokens: int, token_s: float
) -> tuple[int, float]:
    """(GPUs, best tokens/s per GPU) the decode work needs at least (module docstring); (0, step at
    batch 1) when even one sequence alone is over the per-token SLO."""
    gpu, host = costs.per_seq_bytes(input_tokens, output_tokens)
    by_gpu = (costs.gpu_capacity_bytes - costs.gpu_fixed_bytes) // gpu if gpu else 1 << 12
    by_host = costs.host_capacity_bytes // host if host else 1 << 12
    fit = int(max(1, min(by_gpu, by_host, 1 << 12)))
    mean_ctx = input_tokens + output_tokens / 2
    one = costs.decode_s(1, mean_ctx)
    if one > token_s:
        return 0, one
    best, b = 1 / one, 2
    while b <= fit:  # powers of two, then the fit itself
        s = costs.decode_s(b, mean_ctx)
        if s > token_s:
            break
        best = max(best, b / s)
        b *= 2
    if fit > 1 and costs.decode_s(fit, mean_ctx) <= token_s:
        best = max(best, fit / costs.decode_s(fit, mean_ctx))
    need = rate_per_s * output_tokens / best
    return max(1, math.ceil(need)), best


class _Evaluator:
    """Simulates fleets of one (profile, method, scheduler, seed), caching each count's verdict."""

    def __init__(
        self,
        costs: StepCosts,
        scheduler: str,
        router: str,
        settings: SchedulerSettings,
        slos: Slos,
        requests: list,
        prefill_costs: StepCosts | None = None,
    ) -> None:
        self.costs, self.scheduler, self.router, self.settings, self.slos = (
            costs,
            scheduler,
            router,
            settings,
            slos,
        )
        self.prefill_costs = prefill_costs or costs
        self.tp, self.prefill_tp = costs.tp.degree, self.prefill_costs.tp.degree
        self.requests = requests
        self.points: dict[tuple[int, int], FleetPoint] = {}
        self.waits: dict[tuple[int, int], tuple[float, float]] = {}  # p99 prefill queueing, decode wait
        self.last = (0, 0)  # the largest fleet tried, when none met the SLOs

    def gpus_of(self, prefill_replicas: int, replicas: int) -> int:
        return prefill_replicas * self.prefill_tp + replicas * self.tp

    def _run(
        self, prefill_replicas: int, replicas: int, stop_early: bool
    ) -> tuple[FleetPoint, ServingResult]:
        res = simulate(self.requests, self.costs, self.scheduler, replicas, prefill_replicas, self.router,
                       self.settings, self.slos, stop_early=stop_early, prefill_costs=self.prefill_costs)
        fails = tuple(res.failures(self.slos))
        stats = res.stats(self.slos.ttft_s, self.slos.token_s if self.slos.token_slo == "TPOT" else None)
        point = FleetPoint(prefill_replicas, replicas, not fails, fails, stats, self.prefill_tp, self.tp)
        return point, res

    def __call__(self, prefill_gpus: int, gpus: int) -> FleetPoint:
        key = (prefill_gpus, gpus)
        if key not in self.points:
            self.points[key], res = self._run(prefill_gpus, gpus, stop_early=True)
            with np.errstate(all="ignore"):
                self.waits[key] = (_p99(res.prefill_queue_s), _p99(res.decode_wait_s))
        return self.points[key]

    def full(self, prefill_gpus: int, gpus: int) -> FleetPoint:
        """The fleet run to the end (no early stop), so that its verdict has every p99."""
        return self._run(prefill_gpus, gpus, stop_early=False)[0]


def _p99(x: np.ndarray) -> float:
    return float(np.nanpercentile(x, 99)) if np.isfinite(x).any() else 0.0


def _first_meeting(
    ev: _Evaluator, p_floor: int, d_floor: int, cap: int, hint: tuple[int, int] | None
) -> tuple[int, int] | None:
    """A disaggregated fleet that meets the SLOs, grown from the floors or the hint (module docstring)."""
    p, d = hint if hint is not None else (p_floor, d_floor)
    p, d = max(p, p_floor), max(d, d_floor)
    while True:
        pt = ev(p, d)
        if pt.meets:
            return p, d
        if ev.gpus_of(p, d) >= cap:
            ev.last = (p, d)
            return None
        worst = pt.failures[0].slo if pt.failures else "TPOT"
        pre, dec = ev.waits[(p, d)]
        if worst in ("TPOT", "TBT") or dec > pre:
            d += max(1, d // 2)
        else:
            p += max(1, p // 2)


def _disaggregated(
    ev: _Evaluator, p_floor: int, d_floor: int, cap: int, hint: tuple[int, int] | None
) -> FleetPoint | None:
    start = _first_meeting(ev, p_floor, d_floor, cap, hint)
    if start is None:
        return None
    p, d = fewest_total(lambda a, b: ev(a, b).meets, start, (p_floor, d_floor), (ev.prefill_tp, ev.tp))
    return ev(p, d)


def fewest_gpus(
    costs: StepCosts,
    scheduler: str,
    rate_per_s: float,
    input_tokens: int,
    output_tokens: int,
    slos: Slos,
    seeds: tuple[int, ...] = (0, 1, 2),
    n_requests: int = 200,
    router: str = "least-loaded",
    settings: SchedulerSettings | None = None,
    max_gpus: int = 512,
    prefill_costs: StepCosts | None = None,
) -> FleetAnswer:
    """The fewest GPUs meeting `slos` at `rate_per_s` for each seed (module docstring); a replica is
    `costs.tp.degree` GPUs (disaggregated: the prefill pool's, `prefill_costs`, default `costs`)."""
    settings = settings or SchedulerSettings()
    pre = prefill_costs or costs
    answer = FleetAnswer(scheduler, router, rate_per_s, n_requests, tuple(seeds), [], [])
    d_floor, best_tps = decode_floor(costs, rate_per_s, input_tokens, output_tokens, slos.token_s)
    if d_floor == 0:
        answer.impossible = Failure(
            slos.token_slo, best_tps, slos.token_s, n_requests, n_requests, slos.token_percentile
        )
        answer.notes.append(
            f"one sequence alone decodes a step in {best_tps * 1e3:.3g} ms at the mean context: no fleet "
            f"meets {slos.text().split(', ')[0]}"
        )
        answer.answers = [None] * len(seeds)
        answer.binding = [None] * len(seeds)
        return answer
    p_floor = max(1, math.ceil(rate_per_s * pre.prefill_s(input_tokens)))
    hint: tuple[int, int] | None = None
    for seed in seeds:
        reqs = poisson_requests(rate_per_s, n_requests, input_tokens, output_tokens, seed)
        ev = _Evaluator(costs, scheduler, router, settings, slos, reqs, pre)
        if scheduler == "disaggregated":
            found = _disaggregated(ev, p_floor, d_floor, max_gpus, hint)
            if found is not None:
                hint = (found.prefill_replicas, found.replicas)
                below = [
                    ev(found.prefill_replicas - k, found.replicas - (1 - k))
                    for k in (1, 0)
                    if found.prefill_replicas - k >= 1 and found.replicas - (1 - k) >= 1
                ]
                fails = [b for b in below if b is not None and not b.meets]
                answer.binding.append(fails[0] if fails else None)
            else:
                answer.binding.append(ev.full(*ev.last))
        else:
            floor = p_floor + d_floor if scheduler in ("blocking", "prefill-first") else d_floor
            guess = hint[1] if hint is not None else p_floor + d_floor
            cap = max(1, max_gpus // costs.tp.degree)  # replicas
            n = smallest(lambda k, ev=ev: ev(0, k).meets, floor, guess, cap)
            found = None if n is None else ev(0, n)
            if found is not None:
                hint = (0, n)
            below = ev.points.get((0, n - 1)) if n is not None else ev.full(0, cap)
            answer.binding.append(below if below is not None and not below.meets else None)
        answer.answers.append(found)
        answer.evaluations += len(ev.points)
    return answer
