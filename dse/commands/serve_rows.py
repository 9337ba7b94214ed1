"""The rows of `dse serve`: one per (profile, method, scheduler), for a requests file, a fixed rate, the
highest rate under the SLOs (on a fleet of `--gpus`, `--prefill-gpus`) or, with `--target-rate`, the
fewest GPUs meeting the SLOs over several seeds (sim/serving/fleet_search.py), with dollars when the
profile has a price. Never imports torch."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from sim.errors import SimInputError
from sim.serving import (
    Request,
    SchedulerSettings,
    Slos,
    StepCosts,
    fewest_gpus,
    max_rate,
    poisson_requests,
    simulate,
)

__all__ = ["ServePlan", "rate_row", "fleet_row", "fleet_requests", "tensor_parallel_settings"]


@dataclass(frozen=True)
class ServePlan:
    """What every row of one `dse serve` call shares."""

    slos: Slos
    schedulers: tuple[str, ...]
    router: str
    settings: SchedulerSettings
    gpus: int | None  # None: one replica
    prefill_gpus: int | None
    n_requests: int | None  # None: the fleet search's default (fleet_requests)
    seed: int
    seeds: int
    fixed: list[Request] | None
    arrival_rate: float | None
    target_rate: float | None
    max_gpus: int
    prices: dict[str, dict[str, Any]]


def fleet_requests(costs: StepCosts, rate: float, input_tokens: int, output_tokens: int, slos: Slos) -> int:
    """The stream length of a fleet evaluation: four request lifetimes (prefill + output tokens at the
    per-token SLO) of arrivals at the target rate, at least 200 requests."""
    lifetime_s = costs.prefill_s(input_tokens) + output_tokens * slos.token_s
    return max(200, math.ceil(4 * rate * lifetime_s))


def tensor_parallel_settings(
    settings: SchedulerSettings,
    schedulers: tuple[str, ...],
    prefill_tp: int | None,
    decode_tp: int | None,
    gpus: int | None,
    prefill_gpus: int | None,
    fleet: bool,
) -> SchedulerSettings:
    """The disaggregated scheduler's settings: its decode and prefill pools' tensor-parallel degrees
    (--decode-tensor-parallel, --prefill-tensor-parallel; default --tensor-parallel). Refuses the pool
    flags without the disaggregated scheduler, and (without --target-rate) --gpus / --prefill-gpus that
    are not whole replicas."""
    if (prefill_tp or decode_tp) and "disaggregated" not in schedulers:
        flag = "--prefill-tensor-parallel" if prefill_tp else "--decode-tensor-parallel"
        raise SimInputError(
            f"{flag} sets one pool of the disaggregated scheduler; give it with --scheduler disaggregated, "
            "or use --tensor-parallel for every replica"
        )
    out = replace(settings, tensor_parallel=decode_tp or settings.tensor_parallel,
                  prefill_tensor_parallel=prefill_tp or settings.tensor_parallel)
    if not fleet:
        checks = [("--gpus", gpus, "--tensor-parallel", settings.tensor_parallel)]
        if "disaggregated" in schedulers:
            checks += [("--gpus", gpus, "--decode-tensor-parallel", out.tensor_parallel),
                       ("--prefill-gpus", prefill_gpus, "--prefill-tensor-parallel", out.prefill_tp)]
        for flag, n, tp_flag, t in checks:
            if n is not None and n % t:
                raise SimInputError(
                    f"{flag} {n}: a fleet is made of replicas of {t} GPUs ({tp_flag} {t}), so its GPUs must "
                    f"be a multiple of {t}; give e.g. {flag} {max(t, n - n % t)}"
                )
    return out


def _fleet_gpus(plan: ServePlan, scheduler: str, tp: int, prefill_tp: int) -> dict[str, int]:
    """The GPUs of a fixed fleet: --gpus and --prefill-gpus, one replica of each pool when not given."""
    gpus = plan.gpus or tp
    if scheduler == "disaggregated":
        pre = plan.prefill_gpus or prefill_tp
        return {"prefill_gpus": pre, "gpus": gpus, "total_gpus": pre + gpus}
    return {"prefill_gpus": 0, "gpus": gpus, "total_gpus": gpus}


def rate_row(
    costs: StepCosts,
    scheduler: str,
    plan: ServePlan,
    input_tokens: int,
    output_tokens: int,
    prefill_costs: StepCosts | None = None,
) -> dict[str, Any]:
    """A requests file replayed, a fixed Poisson rate, or the highest rate meeting the SLOs; a replica is
    `costs.tp.degree` GPUs (the prefill pool's: `prefill_costs`)."""
    pre = prefill_costs or costs
    gpus = _fleet_gpus(plan, scheduler, costs.tp.degree, pre.tp.degree)
    replicas, prefill_replicas = gpus["gpus"] // costs.tp.degree, gpus["prefill_gpus"] // pre.tp.degree
    n = plan.n_requests or 100
    slos = plan.slos

    def run(reqs: list[Request]) -> Any:
        return simulate(
            reqs, costs, scheduler, replicas, prefill_replicas, plan.router, plan.settings,
            prefill_costs=prefill_costs,
        )

    def run_at(rate: float) -> Any:
        return run(poisson_requests(rate, n, input_tokens, output_tokens, plan.seed))

    row: dict[str, Any] = {"scheduler": scheduler, **gpus, **_tp_fields(costs, pre, scheduler)}
    if plan.fixed is not None or plan.arrival_rate is not None:
        res = run(plan.fixed) if plan.fixed is not None else run_at(plan.arrival_rate)
        fails = res.failures(slos)
        row.update(
            mode="requests file" if plan.fixed is not None else "fixed rate",
            rate_per_s=plan.arrival_rate,
            stats=res.stats(slos.ttft_s, slos.token_s if slos.token_slo == "TPOT" else None),
            meets=not fails,
            failures=[f.to_dict() for f in fails],
        )
        return row
    found = max_rate(run_at, slos)
    row.update(
        mode="highest rate under the SLOs",
        rate_per_s=found.rate_per_s,
        stats=found.stats,
        meets=found.rate_per_s > 0,
        failures=[f.to_dict() for f in found.failures],
        rates_tried={f"{k:.4g}": v for k, v in sorted(found.tried.items())},
    )
    return row


def _tp_fields(costs: StepCosts, prefill_costs: StepCosts, scheduler: str) -> dict[str, int]:
    """The row's tensor-parallel degrees, only when one is over 1 (rows at 1 read as before)."""
    pre = prefill_costs.tp.degree if scheduler == "disaggregated" else 0
    if costs.tp.degree == 1 and pre <= 1:
        return {}
    out = {"tensor_parallel": costs.tp.degree}
    return out | ({"prefill_tensor_parallel": pre} if pre else {})


def fleet_row(
    costs: StepCosts,
    scheduler: str,
    plan: ServePlan,
    hardware: str,
    input_tokens: int,
    output_tokens: int,
    prefill_costs: StepCosts | None = None,
) -> dict[str, Any]:
    """The fewest GPUs meeting the SLOs at --target-rate over --seeds seeds, and their price (GPUs =
    replicas x their tensor-parallel degree)."""
    rate = plan.target_rate
    assert rate is not None
    n = plan.n_requests or fleet_requests(costs, rate, input_tokens, output_tokens, plan.slos)
    seeds = tuple(plan.seed + k for k in range(plan.seeds))
    ans = fewest_gpus(
        costs,
        scheduler,
        rate,
        input_tokens,
        output_tokens,
        plan.slos,
        seeds,
        n,
        plan.router,
        plan.settings,
        plan.max_gpus,
        prefill_costs,
    )
    row: dict[str, Any] = {"scheduler": scheduler, "mode": "fewest GPUs at the target rate", **ans.to_dict()}
    row.update(_tp_fields(costs, prefill_costs or costs, scheduler))
    met = ans.met
    at = [a.stats for a in met]
    row["ttft_p99_s_max"] = max((s["ttft_p99_s"] for s in at), default=None)
    for key in ("tpot_p99_s", "tbt_p99_s"):
        row[f"{key}_max"] = max((s[key] for s in at if s[key] is not None), default=None)
    row["meets"] = row["gpus_min"] is not None
    row["failures"] = _why_none(ans) if not row["meets"] else []
    price = plan.prices.get(hardware)
    row["price_per_hour_usd_per_gpu"] = price["price_per_hour_usd"] if price else None
    row["price_source"] = price["source"] if price else None
    if price and row["meets"]:
        per_h = price["price_per_hour_usd"]
        tokens_per_h = rate * output_tokens * 3600
        row["usd_per_hour_min"] = row["gpus_min"] * per_h
        row["usd_per_hour_max"] = row["gpus_max"] * per_h
        row["usd_per_million_output_tokens_min"] = row["usd_per_hour_min"] / tokens_per_h * 1e6
        row["usd_per_million_output_tokens_max"] = row["usd_per_hour_max"] / tokens_per_h * 1e6
    return row


def _why_none(ans: Any) -> list[dict[str, Any]]:
    """What broke when no fleet within the cap met the SLOs (per seed that failed)."""
    if ans.impossible is not None:
        return [ans.impossible.to_dict()]
    out = []
    for answer, below in zip(ans.answers, ans.binding, strict=True):
        if answer is None and below is not None:
            out += [f.to_dict() for f in below.failures[:1]]
    return out
