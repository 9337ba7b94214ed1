"""A fleet: replicas of one profile behind a router, simulated in one SimPy environment.

`simulate(requests, costs, scheduler, replicas, ...)` routes each request at its arrival (sim/serving/
router.py) to one of `replicas` GPUs running `scheduler` (`blocking`, `prefill-first`, `chunked`), or,
`disaggregated`, to one of `prefill_replicas` prefill GPUs whose KV then goes to one of `replicas` decode
GPUs (the same router kind picks both). A replica is one GPU, or with tensor parallelism the `t` GPUs
`costs` prices as one (sim/serving/tensor_parallel.py); disaggregated, `prefill_costs` prices the prefill
replicas (their own tensor-parallel degree, as DistServe allows), `costs` the decode replicas.
`serve(requests, costs)` is one GPU, blocking. Both are pure:
same inputs, same result. With `slos` and `stop_early` the run ends once one SLO is certainly broken
(sim/serving/slos.py).
"""

from __future__ import annotations

from collections.abc import Generator

import simpy

from sim.errors import SimInputError
from sim.serving.chunked import ChunkedReplica
from sim.serving.disaggregated import DecodeReplica, PrefillWorker
from sim.serving.ledger import Ledger
from sim.serving.prefill_first import PrefillFirstReplica
from sim.serving.replica import BlockingReplica, Replica
from sim.serving.requests import Request
from sim.serving.result import ServingResult
from sim.serving.router import Router
from sim.serving.schedulers import SchedulerSettings, check_scheduler
from sim.serving.slos import Slos
from sim.serving.step_costs import StepCosts

__all__ = ["simulate", "serve", "check_fits_alone"]


def _tp_text(costs: StepCosts) -> str:
    return f" at tensor parallel {costs.tp.degree}" if costs.tp.degree > 1 else ""


def check_fits_alone(requests: list[Request], costs: StepCosts) -> None:
    for r in requests:
        g, h = costs.per_seq_bytes(r.input_tokens, r.output_tokens)
        if costs.gpu_fixed_bytes + g > costs.gpu_capacity_bytes or h > costs.host_capacity_bytes:
            raise SimInputError(
                f"a request of {r.input_tokens} input + {r.output_tokens} output tokens does not fit memory "
                f"alone on {costs.cfg.hardware} with {costs.cfg.method}{_tp_text(costs)}: shorten it, pick a "
                "larger GPU, or split the model over more GPUs per replica (--tensor-parallel T)"
            )


def _arrivals(
    env: simpy.Environment, requests: list[Request], router: Router, targets: list, overhead_s: float = 0.0
) -> Generator[simpy.Event, object, None]:
    """Each request joins a target's queue `overhead_s` after its arrival (the engine profile's request
    overhead: API server, tokenisation; sim/serving/engine.py), so that time adds to its TTFT and queueing
    and occupies no GPU."""
    for i, r in enumerate(requests):
        yield env.timeout(max(0.0, r.arrival_s + overhead_s - env.now))
        targets[router.pick()].enqueue(i)


def simulate(
    requests: list[Request],
    costs: StepCosts,
    scheduler: str = "blocking",
    replicas: int = 1,
    prefill_replicas: int = 0,
    router: str = "least-loaded",
    settings: SchedulerSettings | None = None,
    slos: Slos | None = None,
    stop_early: bool = False,
    prefill_costs: StepCosts | None = None,
) -> ServingResult:
    """Serve `requests` on the fleet (module docstring); `prefill_costs` (disaggregated): the prefill
    replicas' costs, `costs` by default."""
    settings = settings or SchedulerSettings()
    pre = prefill_costs or costs
    check_scheduler(scheduler)
    if scheduler == "chunked" and costs.step_time is not None:
        raise costs.step_time.refuse_mixed(costs.engine_profile.name)
    if len(requests) == 0:
        raise SimInputError("serving simulation needs at least one request")
    if replicas < 1 or (scheduler == "disaggregated" and prefill_replicas < 1):
        raise SimInputError(
            f"a fleet needs at least one GPU per pool, got {replicas} decode/serving and {prefill_replicas} "
            "prefill GPUs"
        )
    check_fits_alone(requests, costs)
    env = simpy.Environment()
    book = Ledger(env, requests, slos, stop_early)
    gpus: list[Replica]
    cap = settings.max_seqs
    if scheduler == "blocking":
        gpus = [BlockingReplica(env, book, costs, cap) for _ in range(replicas)]
        front: list = gpus
    elif scheduler == "prefill-first":
        gpus = [
            PrefillFirstReplica(env, book, costs, settings.max_batched_tokens, cap) for _ in range(replicas)
        ]
        front = gpus
    elif scheduler == "chunked":
        gpus = [ChunkedReplica(env, book, costs, settings.chunk_tokens, cap) for _ in range(replicas)]
        front = gpus
    else:
        decoders = [DecodeReplica(env, book, costs, cap) for _ in range(replicas)]
        gpus = list(decoders)
        decode_router = Router(router, decoders)
        front = [
            PrefillWorker(
                env, book, pre, settings.kv_link_gbps, lambda: decoders[decode_router.pick()],
                settings.max_batched_tokens, settings.first_token == "prefill",
            )
            for _ in range(prefill_replicas)
        ]
        for worker in front:
            env.process(worker.run())
    for gpu in gpus:
        env.process(gpu.run())
    overhead_s = pre.engine_profile.request_overhead_s  # the pool requests arrive at
    env.process(_arrivals(env, requests, Router(router, front), front, overhead_s))
    env.run(until=book.stop)
    return ServingResult.from_ledger(book, scheduler)


def serve(requests: list[Request], costs: StepCosts) -> ServingResult:
    """One GPU, prefill blocking decode (the research runtimes' way); pure."""
    return simulate(requests, costs)
