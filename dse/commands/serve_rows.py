"""The rows of `dse serve`: one per (profile, method, scheduler), for a requests file, a fixed rate, the
highest rate under the SLOs (on a fleet of `--gpus`, `--prefill-gpus`) or, with `--target-rate`, the
fewest GPUs meeting the SLOs over several seeds (sim/serving/fleet_search.py), with dollars when the
profile has a price. Never imports torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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

__all__ = ["ServePlan", "rate_row", "fleet_row", "fleet_requests"]


@dataclass(frozen=True)
class ServePlan:
    """What every row of one `dse serve` call shares."""

    slos: Slos
    schedulers: tuple[str, ...]
    router: str
    settings: SchedulerSettings
    gpus: int
    prefill_gpus: int
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


def _fleet_gpus(plan: ServePlan, scheduler: str) -> dict[str, int]:
    if scheduler == "disaggregated":
        return {
            "prefill_gpus": plan.prefill_gpus,
            "gpus": plan.gpus,
            "total_gpus": plan.prefill_gpus + plan.gpus,
        }
    return {"prefill_gpus": 0, "gpus": plan.gpus, "total_gpus": plan.gpus}


def rate_row(
    costs: StepCosts, scheduler: str, plan: ServePlan, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    """A requests file replayed, a fixed Poisson rate, or the highest rate meeting the SLOs."""
    gpus = _fleet_gpus(plan, scheduler)
    n = plan.n_requests or 100
    slos = plan.slos

    def run(reqs: list[Request]) -> Any:
        return simulate(
            reqs, costs, scheduler, gpus["gpus"], gpus["prefill_gpus"], plan.router, plan.settings
        )

    def run_at(rate: float) -> Any:
        return run(poisson_requests(rate, n, input_tokens, output_tokens, plan.seed))

    row: dict[str, Any] = {"scheduler": scheduler, **gpus}
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


def fleet_row(
    costs: StepCosts, scheduler: str, plan: ServePlan, hardware: str, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    """The fewest GPUs meeting the SLOs at --target-rate over --seeds seeds, and their price."""
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
    )
    row: dict[str, Any] = {"scheduler": scheduler, "mode": "fewest GPUs at the target rate", **ans.to_dict()}
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
