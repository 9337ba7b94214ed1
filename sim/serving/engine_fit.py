"""Fit a serving engine's overheads to one measured low-load run: a per-iteration `server` term and a
per-request overhead, added to a base engine profile (sim/serving/engine.py).

The form, fixed before any fit (what a real server adds outside the model's forward pass):
- `server`: host time every iteration pays, linear in the iteration's sequence count n, a + b n ms (a, b
  >= 0), written as points at 1 and `REFERENCE_SEQUENCES` sequences (extended linearly past both): a
  synchronous engine's per-step Python work (scheduling, sampling, detokenising, streaming each sequence's
  token) grows with the sequences it handles;
- `request_overhead`: r ms (>= 0) between a request's issue and its arrival in the engine's queue (API
  server, HTTP, tokenisation), which adds to its TTFT and occupies no GPU.

The fit replays the run (its exact prompt and output lengths and issue times) through sim.serving with
the candidate profile on the run's scheduler and settings and minimises, over requests, a robust (soft-L1,
scale `LOG_SCALE`) sum of the squared log-ratios ours/measured of each request's TTFT and of its TPOT
(requests of more than one output token). Log ratios weigh a short prompt's TTFT as much as a long one's;
soft-L1 keeps a few outliers (a network hiccup, a request that waited behind a long prefill) from pulling
the fit. The error is rugged in the parameters (a slightly longer iteration moves an arrival into another
iteration and regroups the prefills that follow), so a gradient method stops in the first dent
(scipy.optimize.least_squares did, on a synthetic run whose truth it missed by 60%); the fit is
scipy.optimize.differential_evolution (seeded: the same run gives the same fit) within bounds read off
the run (0 <= a <= its median TPOT, 0 <= b <= a quarter of it, 0 <= r <= its median TTFT: neither
overhead can exceed the time it is part of), polished by bounded Nelder-Mead.

Read the overheads off a LOW-load run: there a request's TTFT is its own prefill plus the overheads and its
TPOT the decode steps of a small batch, so each parameter shows in the data; near saturation TTFT is
queueing, which depends on every iteration's cost at once, and the fit would trade one parameter against
another to match a queue. `saturation_warnings` says when a run looks loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml
from scipy.optimize import differential_evolution, minimize

from sim.errors import SimInputError
from sim.serving.engine import EngineProfile, EngineTerm
from sim.serving.fleet import simulate
from sim.serving.measured_run import MeasuredRun
from sim.serving.schedulers import SchedulerSettings, check_scheduler
from sim.serving.step_costs import StepCosts

__all__ = ["EngineFit", "fit_engine", "replay", "saturation_warnings", "REFERENCE_SEQUENCES", "SERVER_TERM"]

SERVER_TERM = "server"
REFERENCE_SEQUENCES = 64  # the second point of the fitted linear term (any count > 1 writes the same line)
LOG_SCALE = 0.1  # soft-L1 scale of a log ratio: ~10% off counts quadratically, more linearly
GENERATIONS = 60  # differential evolution: generations of POPULATION x 3 candidates (each one replay)
POPULATION = 10
SATURATED_P90_OVER_MEDIAN = 3.0
SATURATED_QUEUE_SHARE = 0.5
PROMPT_BUCKETS = ((0, 256), (256, 1024), (1024, None))
_SCHEDULERS = ("blocking", "prefill-first", "chunked")


def replay(run: MeasuredRun, costs: StepCosts, profile: EngineProfile, scheduler: str,
           settings: SchedulerSettings) -> dict[str, np.ndarray]:
    """Ours per request (ms): TTFT, TPOT as the client measures it (0 for one output token, NaN if not
    finished) and queueing (issue to prefill start, the request overhead excluded)."""
    res = simulate(run.requests(), costs.with_host_engine(profile), scheduler, settings=settings)
    tpot = np.where(run.output_len > 1, res.tpot_s * 1e3, 0.0)
    return {"ttft_ms": res.ttft_s * 1e3, "tpot_ms": tpot,
            "queue_ms": res.prefill_queue_s * 1e3 - profile.request_overhead_ms}


@dataclass(frozen=True)
class EngineFit:
    """The fitted profile and how well it and the base reproduce the run."""

    profile: EngineProfile
    server_fixed_ms: float
    server_per_sequence_ms: float
    request_overhead_ms: float
    run: str
    n_requests: int
    evaluations: int
    base: dict[str, Any] = field(default_factory=dict)  # residual statistics on the base profile
    fitted: dict[str, Any] = field(default_factory=dict)  # on the fitted one
    warnings: tuple[str, ...] = ()
    error: float = float("nan")  # the fit's objective at the fitted parameters (soft-L1 over requests)

    def to_yaml(self, header: str = "") -> str:
        """The profile as an engine-profile YAML file (sim/serving/engine.py's format)."""
        p = self.profile
        terms = {}
        for t in p.terms:
            entry: dict[str, Any] = {"points_ms": [[int(s), round(float(m), 6)] for s, m in zip(
                t.sequences, t.ms, strict=True)], "source": t.source}
            if t.range != (1.0, 1.0):
                entry["range"] = [float(x) for x in t.range]
            terms[t.name] = entry
        doc: dict[str, Any] = {"name": p.name, "description": p.description,
                               "tensor_parallel": p.tensor_parallel, "terms": terms,
                               "request_overhead": {"ms": round(p.request_overhead_ms, 6),
                                                    "source": p.request_overhead_source}}
        body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)
        lines = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
        return lines + body


class _Dumper(yaml.SafeDumper):
    """Mappings in block style, lists of numbers (and lists of such lists) in flow style: points_ms on
    one line, as the shipped profiles write them."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flat = all(not isinstance(x, dict | list) or (isinstance(x, list) and not any(
        isinstance(y, dict | list) for y in x)) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _represent_list)


def _log_ratio(ours: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """log(ours / measured), a request never served counted as 1000x over."""
    ours = np.nan_to_num(np.asarray(ours, dtype=float), nan=1e3 * measured, posinf=1e3 * measured)
    return np.log(np.clip(ours, 1e-3, None) / measured)


def _masks(run: MeasuredRun) -> tuple[np.ndarray, np.ndarray]:
    """Requests whose TTFT, and whose TPOT, enter the fit (measured > 0; TPOT: more than one output)."""
    return run.ttft_ms > 0, (run.output_len > 1) & (run.tpot_ms > 0)


def statistics(run: MeasuredRun, ours: dict[str, np.ndarray]) -> dict[str, Any]:
    """Residuals of one replay: median and P90 of ours/measured TTFT and TPOT, their median |log ratio|,
    TTFT median ratio per prompt-length bucket, and P50/P90 of each side."""
    ttft_ok, tpot_ok = _masks(run)
    rt = np.exp(_log_ratio(ours["ttft_ms"][ttft_ok], run.ttft_ms[ttft_ok]))
    rp = np.exp(_log_ratio(ours["tpot_ms"][tpot_ok], run.tpot_ms[tpot_ok]))
    out: dict[str, Any] = {
        "ttft_ratio_median": float(np.median(rt)), "ttft_ratio_p10": float(np.percentile(rt, 10)),
        "ttft_ratio_p90": float(np.percentile(rt, 90)),
        "ttft_abs_log_ratio_median": float(np.median(np.abs(np.log(rt)))),
        "tpot_ratio_median": float(np.median(rp)) if len(rp) else None,
        "tpot_ratio_p10": float(np.percentile(rp, 10)) if len(rp) else None,
        "tpot_ratio_p90": float(np.percentile(rp, 90)) if len(rp) else None,
        "tpot_abs_log_ratio_median": float(np.median(np.abs(np.log(rp)))) if len(rp) else None,
        "ttft_p50_ms": (float(np.median(run.ttft_ms)), float(np.nanmedian(ours["ttft_ms"]))),
        "ttft_p90_ms": (float(np.percentile(run.ttft_ms, 90)), float(np.nanpercentile(ours["ttft_ms"], 90))),
        "tpot_p50_ms": (float(np.median(run.tpot_ms[tpot_ok])) if tpot_ok.any() else None,
                        float(np.nanmedian(ours["tpot_ms"][tpot_ok])) if tpot_ok.any() else None),
    }
    prompts = run.prompt_len[ttft_ok]
    for lo, hi in PROMPT_BUCKETS:
        sel = (prompts >= lo) & (prompts < (hi if hi is not None else np.inf))
        key = f"ttft_ratio_median_prompt_{lo}_{hi if hi is not None else 'up'}"
        out[key] = float(np.median(rt[sel])) if sel.any() else None
    return out


def saturation_warnings(run: MeasuredRun, ours: dict[str, np.ndarray], costs: StepCosts,
                        profile: EngineProfile) -> list[str]:
    """Why `run` may not be a low-load run (module docstring): its measured P90 TTFT over 3x its median, or,
    replayed on `profile`, waiting (TTFT less the request's own prefill alone and its request overhead:
    queueing and prefilling behind other prompts) more than half of the TTFT summed over requests."""
    out = []
    p50, p90 = float(np.median(run.ttft_ms)), float(np.percentile(run.ttft_ms, 90))
    if p90 > SATURATED_P90_OVER_MEDIAN * p50:
        out.append(f"run {run.name}: measured P90 TTFT {p90:.0f} ms is {p90 / p50:.1f}x its median "
                   f"({p50:.0f} ms; over {SATURATED_P90_OVER_MEDIAN:g}x): requests queue, the run looks "
                   "loaded")
    priced = costs.with_host_engine(profile)
    alone_ms = np.array([priced.prefill_s(int(p)) * 1e3 for p in run.prompt_len])
    ttft = np.asarray(ours["ttft_ms"], dtype=float)
    served = np.isfinite(ttft)
    if not served.all():
        out.append(f"run {run.name}: replayed on the fitted profile, {int((~served).sum())} requests are "
                   "never served")
    wait = np.clip(ttft - alone_ms - profile.request_overhead_ms, 0, None)[served]
    share = float(wait.sum() / ttft[served].sum()) if served.any() else 1.0
    if share > SATURATED_QUEUE_SHARE:
        out.append(f"run {run.name}: replayed on the fitted profile, waiting behind other requests is "
                   f"{100 * share:.0f}% of the TTFT summed over requests (over "
                   f"{100 * SATURATED_QUEUE_SHARE:.0f}%): queueing dominates")
    return [f"{w}; fit overheads on a low-load run (TTFT mostly the request's own prefill)" for w in out]


def _candidate(base: EngineProfile, name: str, description: str, source: str, x: np.ndarray,
               tensor_parallel: int) -> EngineProfile:
    a, b, r = (float(v) for v in x)
    n = REFERENCE_SEQUENCES
    server = EngineTerm(SERVER_TERM, (1, n), (a + b, a + b * n),
                        f"{source}: {a:.3f} ms + {b:.4f} ms per sequence per iteration")
    return EngineProfile(name, description, (*base.terms, server), tensor_parallel=tensor_parallel,
                         request_overhead_ms=r, request_overhead_source=f"{source}: {r:.2f} ms")


def check_base(base: EngineProfile) -> None:
    """A base the fit can extend: host time per iteration (not whole steps), no term named `server`."""
    if base.step_time is not None:
        raise SimInputError(
            f"--base-engine {base.name}: a whole-step profile replaces the step model's iterations; the fit "
            "adds host time to the step model: give none or a host-time profile (e.g. sarathi-serve-a100)")
    if any(t.name == SERVER_TERM for t in base.terms):
        raise SimInputError(f"--base-engine {base.name}: already has a {SERVER_TERM!r} term (a fitted "
                            "profile?); fit on a profile without one")


def fit_engine(run: MeasuredRun, costs: StepCosts, base: EngineProfile, scheduler: str = "prefill-first",
               settings: SchedulerSettings | None = None, name: str = "fitted", source: str = "fitted",
               description: str | None = None, generations: int = GENERATIONS, seed: int = 0) -> EngineFit:
    """Fit `server` (a + b n ms per iteration) and `request_overhead` (r ms) on top of `base` to `run` on
    `costs` (its model, GPU and method; module docstring). `source` names the file and run for the
    profile's provenance."""
    check_base(base)
    check_scheduler(scheduler)
    if scheduler not in _SCHEDULERS:
        raise SimInputError(
            f"--scheduler {scheduler}: the fit replays one GPU; valid: {', '.join(_SCHEDULERS)}")
    settings = settings or SchedulerSettings()
    ttft_ok, tpot_ok = _masks(run)
    if ttft_ok.sum() < 3 or tpot_ok.sum() < 3:
        raise SimInputError(f"run {run.name}: {int(ttft_ok.sum())} requests with a TTFT > 0 and "
                            f"{int(tpot_ok.sum())} with a TPOT > 0 (more than one output token); the fit "
                            "needs at least 3 of each")
    desc = description or (f"{base.description}; plus a per-iteration server term and a per-request "
                           f"overhead {source}")
    evaluations = 0
    degree = costs.tp.degree  # the fitted terms hold at the degree the run was served at

    def error(x: np.ndarray) -> float:
        nonlocal evaluations
        evaluations += 1
        ours = replay(run, costs, _candidate(base, name, desc, source, x, degree), scheduler, settings)
        z = np.concatenate([_log_ratio(ours["ttft_ms"][ttft_ok], run.ttft_ms[ttft_ok]),
                            _log_ratio(ours["tpot_ms"][tpot_ok], run.tpot_ms[tpot_ok])]) / LOG_SCALE
        return float(np.sum(2.0 * (np.sqrt(1.0 + z * z) - 1.0)))  # soft-L1

    tpot_median = float(np.median(run.tpot_ms[tpot_ok]))
    bounds = [(0.0, tpot_median), (0.0, tpot_median / 4), (0.0, float(np.median(run.ttft_ms[ttft_ok])))]
    found = differential_evolution(error, bounds, seed=seed, popsize=POPULATION, maxiter=generations,
                                   tol=1e-8, polish=False, init="sobol")
    polished = minimize(error, found.x, method="Nelder-Mead", bounds=bounds,
                        options={"xatol": 1e-3, "fatol": 1e-9, "maxfev": 400})
    best = polished.x if polished.fun <= found.fun else found.x
    at_base = replay(run, costs, base, scheduler, settings)
    profile = _candidate(base, name, desc, source, best, degree)
    at_fit = replay(run, costs, profile, scheduler, settings)
    a, b, r = (float(v) for v in best)
    return EngineFit(profile, a, b, r, run.name, len(run.prompt_len), evaluations,
                     statistics(run, at_base), statistics(run, at_fit),
                     tuple(saturation_warnings(run, at_fit, costs, profile)),
                     float(min(polished.fun, found.fun)))
