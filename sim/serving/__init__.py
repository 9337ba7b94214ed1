"""Request-level serving on top of the step model: replicas with a scheduler, fleets behind a router,
TTFT and per-token latency, the highest rate under SLOs and the fewest GPUs for a target rate.

One concept per module:
- `requests`: Poisson streams and request files;
- `step_costs`: the step model's decode step, prefill and prefill-chunk costs, memory per sequence;
- `engine`: serving-engine profiles (`--engine`): the host time every iteration pays outside the kernels,
  or (`engine_steps`) an engine's measured whole-iteration times replacing the step model's, and a request
  overhead before the queue; `measured_run`, `engine_fit`: a measured run and the fit of an engine's
  overheads to it (`dse engine-fit`);
- `schedulers`: `blocking`, `chunked`, `disaggregated`: what each does and the cost model it cites;
- `replica` (state every scheduler shares; `blocking`), `prefill_first`, `chunked`, `disaggregated`: the
  schedulers;
- `router`: `round-robin`, `least-loaded`; `fleet`: replicas behind a router in one SimPy environment;
- `slos`, `ledger`, `token_gaps`, `result`: SLOs (the per-token one on TPOT or on a TBT percentile),
  per-request times and every inter-token gap with the early stop, the run's statistics and which SLO
  broke by how much;
- `rate_search`: the highest Poisson rate meeting the SLOs; `fleet_search` (searches in `pool_search`):
  the fewest GPUs meeting them at a target rate, over several arrival seeds.
"""

from sim.serving.fleet import check_fits_alone, serve, simulate
from sim.serving.fleet_search import FleetAnswer, FleetPoint, fewest_gpus
from sim.serving.rate_search import RateSearch, max_rate
from sim.serving.requests import Request, load_requests, poisson_requests
from sim.serving.result import ServingResult
from sim.serving.router import ROUTERS, Router
from sim.serving.schedulers import (
    DEFAULT_CHUNK_TOKENS,
    DEFAULT_KV_LINK_GBPS,
    SCHEDULERS,
    SchedulerSettings,
    scheduler_model,
)
from sim.serving.slos import DEFAULT_QUEUE_S, TOKEN_STATS, Failure, Slos
from sim.serving.step_costs import CONTEXT_BUCKET_TOKENS, STEPS_PER_POINT, StepCosts
from sim.serving.token_gaps import TokenGaps

__all__ = [
    "Request",
    "poisson_requests",
    "load_requests",
    "StepCosts",
    "ServingResult",
    "serve",
    "simulate",
    "check_fits_alone",
    "max_rate",
    "RateSearch",
    "fewest_gpus",
    "FleetAnswer",
    "FleetPoint",
    "Router",
    "ROUTERS",
    "SCHEDULERS",
    "SchedulerSettings",
    "scheduler_model",
    "DEFAULT_CHUNK_TOKENS",
    "DEFAULT_KV_LINK_GBPS",
    "Slos",
    "Failure",
    "DEFAULT_QUEUE_S",
    "TOKEN_STATS",
    "TokenGaps",
    "CONTEXT_BUCKET_TOKENS",
    "STEPS_PER_POINT",
]
