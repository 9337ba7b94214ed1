"""Request-level serving on top of the step model: arrivals, continuous batching, TTFT and per-token latency.

`serve(requests, costs)` runs a SimPy model of one GPU serving a request stream:
- arrivals: `poisson_requests` (exponential gaps from `numpy.random.default_rng(seed)`: the same seed at
  another rate gives the same arrival pattern scaled in time) or `load_requests` (a CSV/JSON file of
  arrival_s, input_tokens, output_tokens);
- admission (continuous batching, FIFO): a waiting request joins when its memory fits beside the running
  ones: each sequence reserves its method's per-sequence GPU and host bytes at its own final context
  (input + output; sim.memory's model, as the runtimes preallocate a sequence's pages), on top of the
  fixed part (weights, CUDA context, prefill transient, the method's fixed buffers). A request that cannot
  fit even alone is refused with an error before the run;
- prefill blocks decode: admitted requests are prefilled one after another, alone on the GPU, between two
  decode steps of the running batch (the FreeKV, Quest and ShadowKV code, like HF generate, prefill a
  sequence in one pass and have no chunked prefill that would mix it into decode steps); the prefill
  emits the request's first token (TTFT = queueing + prefill);
- decode: one step of the whole running batch emits one token per sequence; its duration is the step
  model's per-token latency at that batch and context (`StepCosts`: simulated at the batch's mean
  context rounded up to `CONTEXT_BUCKET_TOKENS`, at powers of two of the batch and linearly interpolated
  between them, each point the mean of `STEPS_PER_POINT` steps, cached);
- outputs (`ServingResult`): TTFT and per-token latency (TPOT: (last token - first token) / (output - 1)
  per request) p50/p99, decode step (time between tokens) p50/p99, throughput and goodput (requests per
  second meeting both SLOs, and their output tokens per second), the largest batch seen.

`max_rate(...)` searches the highest Poisson arrival rate whose p99 TTFT and p99 TPOT meet SLOs
(doubling from a start rate, then bisection to a relative tolerance), as Vidur's capacity search does.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simpy

from sim.capacity import UNBOUNDED_MEMORY, memory_at, profile_of, software_of
from sim.config import SimConfig
from sim.demand import Demand
from sim.engine import run_simulation
from sim.errors import SimInputError
from traces.numbers import REQUESTS, TOKENS, text_to_number
from traces.numbers import SECONDS_OR_ZERO as ARRIVAL_S
from traces.safe_load import MAX_JSON_BYTES, load_user_json
from traces.user_files import UserFileError, read_user_text

__all__ = [
    "Request",
    "poisson_requests",
    "load_requests",
    "StepCosts",
    "ServingResult",
    "serve",
    "max_rate",
    "RateSearch",
    "CONTEXT_BUCKET_TOKENS",
    "STEPS_PER_POINT",
]

CONTEXT_BUCKET_TOKENS = 1024
STEPS_PER_POINT = 8


@dataclass(frozen=True)
class Request:
    arrival_s: float
    input_tokens: int
    output_tokens: int


def poisson_requests(
    rate_per_s: float, n: int, input_tokens: int, output_tokens: int, seed: int = 0
) -> list[Request]:
    """n requests with exponential inter-arrival gaps of mean 1/rate (first at the first gap)."""
    if not rate_per_s > 0:
        raise SimInputError(
            f"the arrival rate must be a positive number of requests per second, got {rate_per_s}"
        )
    gaps = np.random.default_rng(seed).exponential(1.0, n) / rate_per_s
    return [Request(float(t), input_tokens, output_tokens) for t in np.cumsum(gaps)]


_REQUEST_FIELDS = {"arrival_s": ARRIVAL_S, "input_tokens": TOKENS, "output_tokens": TOKENS}
_REQUESTS_FORM = ("expected CSV with header arrival_s,input_tokens,output_tokens (or a JSON list of objects "
                  "with those keys), one request per row")


def load_requests(path: Path) -> list[Request]:
    """A CSV (header arrival_s,input_tokens,output_tokens) or JSON list of such objects, sorted by arrival.

    The file is read as traces.user_files reads every user file (a regular UTF-8 file of bounded size); every
    number is checked against its traces.numbers range (arrival: finite seconds >= 0; tokens: integers),
    at most REQUESTS.hi requests."""
    where = f"--requests {path}"
    try:
        if str(path).endswith(".json"):
            rows = load_user_json(path, "--requests")
        else:
            rows = list(csv.DictReader(read_user_text(path, "--requests", MAX_JSON_BYTES).splitlines()))
    except UserFileError as exc:
        raise SimInputError(str(exc)) from None
    except (ValueError, csv.Error) as exc:
        raise SimInputError(f"{where}: {_REQUESTS_FORM} ({exc})") from None
    if not isinstance(rows, list) or not rows:
        raise SimInputError(f"{where}: {_REQUESTS_FORM}; it holds no request")
    if len(rows) > REQUESTS.hi:
        raise SimInputError(f"{where}: {len(rows)} requests; at most {REQUESTS.hi} per simulation")
    reqs = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or any(k not in row for k in _REQUEST_FIELDS):
            raise SimInputError(f"{where}: request {i + 1}: {_REQUESTS_FORM}, got {row!r}")
        values = []
        for key, bound in _REQUEST_FIELDS.items():
            raw = row[key]
            value = text_to_number(raw, integer=bound.integer) if isinstance(raw, str) else raw
            detail = bound.problem(value if value is not None else raw)
            if detail is not None:
                raise SimInputError(f"{where}: request {i + 1}: {key} {detail}")
            values.append(int(value) if bound.integer else float(value))
        reqs.append(Request(*values))
    return sorted(reqs, key=lambda r: r.arrival_s)


class StepCosts:
    """Cached step-model costs for one (model, hardware, method, knobs) config: decode step seconds at
    (batch, context), prefill seconds per input length, per-sequence memory (module docstring)."""

    def __init__(self, cfg: SimConfig, demand: Demand | None, seed: int = 0) -> None:
        self.cfg, self.demand, self.seed = cfg, demand, seed
        self._step: dict[tuple[int, int], float] = {}
        self._prefill: dict[int, float] = {}
        self._mem: dict[tuple[int, int], tuple[int, int]] = {}
        one = memory_at(cfg.replace(batch_size=1), demand)
        self.gpu_capacity_bytes, self.host_capacity_bytes = one.gpu_capacity_bytes, one.host_capacity_bytes
        per_gpu, _ = self.per_seq_bytes(cfg.input_tokens, cfg.output_tokens)
        self.gpu_fixed_bytes = one.gpu_bytes - per_gpu  # weights, context, transient, fixed buffers

    def per_seq_bytes(self, input_tokens: int, output_tokens: int) -> tuple[int, int]:
        """(GPU, host) bytes one sequence reserves at its final context."""
        key = (input_tokens, output_tokens)
        if key not in self._mem:
            cfg = self.cfg.replace(input_tokens=input_tokens, output_tokens=output_tokens)
            one = memory_at(cfg.replace(batch_size=1), self.demand)
            two = memory_at(cfg.replace(batch_size=2), self.demand)
            self._mem[key] = (two.gpu_bytes - one.gpu_bytes, two.host_bytes - one.host_bytes)
        return self._mem[key]

    def _point(self, batch: int, context: int) -> float:
        key = (batch, context)
        if key not in self._step:
            # admission already checked memory (per-sequence reservations); the step model's own fit
            # would see the bucketed context and a prefill transient that is not there during decode
            cfg = self.cfg.replace(
                batch_size=batch,
                input_tokens=context,
                output_tokens=STEPS_PER_POINT,
                hardware_overrides={**self.cfg.hardware_overrides, **UNBOUNDED_MEMORY},
            )
            res = run_simulation(
                cfg, self.demand, self.seed, profile=profile_of(cfg), software=software_of(cfg.software)
            )
            self._step[key] = float(res.step_latency_s.mean())
        return self._step[key]

    def decode_s(self, batch: int, mean_context: float) -> float:
        """One decode step of `batch` sequences at `mean_context` tokens (bucketed, interpolated in batch)."""
        ctx = int(-(-int(np.ceil(mean_context)) // CONTEXT_BUCKET_TOKENS) * CONTEXT_BUCKET_TOKENS)
        lo = 1 << (batch.bit_length() - 1)
        if lo == batch:
            return self._point(batch, ctx)
        hi = lo * 2
        a, b = self._point(lo, ctx), self._point(hi, ctx)
        return a + (b - a) * (batch - lo) / (hi - lo)

    def prefill_s(self, input_tokens: int) -> float:
        if input_tokens not in self._prefill:
            cfg = self.cfg.replace(batch_size=1, input_tokens=input_tokens, output_tokens=1)
            self._prefill[input_tokens] = float(run_simulation(cfg, self.demand, self.seed).prefill_s)
        return self._prefill[input_tokens]


@dataclass
class ServingResult:
    ttft_s: np.ndarray  # per request
    tpot_s: np.ndarray  # per request (NaN for a single output token)
    step_s: np.ndarray  # every decode step
    finish_s: np.ndarray
    output_tokens: np.ndarray
    max_batch: int
    duration_s: float
    slo: dict[str, float] = field(default_factory=dict)

    def stats(self, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None) -> dict[str, Any]:
        def pct(x: np.ndarray, q: float) -> float | None:
            x = x[~np.isnan(x)]
            return float(np.percentile(x, q)) if len(x) else None

        ok = np.ones(len(self.ttft_s), dtype=bool)
        if ttft_slo_s is not None:
            ok &= self.ttft_s <= ttft_slo_s
        if tpot_slo_s is not None:
            ok &= np.nan_to_num(self.tpot_s, nan=0.0) <= tpot_slo_s
        d = self.duration_s or 1.0
        return {
            "requests": int(len(self.ttft_s)),
            "ttft_p50_s": pct(self.ttft_s, 50),
            "ttft_p99_s": pct(self.ttft_s, 99),
            "tpot_p50_s": pct(self.tpot_s, 50),
            "tpot_p99_s": pct(self.tpot_s, 99),
            "step_p50_s": pct(self.step_s, 50),
            "step_p99_s": pct(self.step_s, 99),
            "throughput_tokens_per_s": float(self.output_tokens.sum() / d),
            "goodput_requests_per_s": float(ok.sum() / d),
            "goodput_tokens_per_s": float(self.output_tokens[ok].sum() / d),
            "slo_attainment": float(ok.mean()) if len(ok) else None,
            "max_batch": self.max_batch,
            "duration_s": self.duration_s,
        }


class _Replica:
    """One GPU serving a request stream (module docstring): requests arrive into a FIFO queue, join the
    running batch when their memory fits, are prefilled alone between decode steps, and leave after
    their last token."""

    def __init__(self, requests: list[Request], costs: StepCosts) -> None:
        self.requests, self.costs = requests, costs
        self.env = simpy.Environment()
        self.waiting: list[int] = []
        self.running: dict[int, list[int]] = {}  # request -> [context tokens, tokens still to emit]
        self.first = np.full(len(requests), np.nan)
        self.finish = np.full(len(requests), np.nan)
        self.steps: list[float] = []
        self.gpu_bytes, self.host_bytes = costs.gpu_fixed_bytes, 0  # reserved now
        self.max_batch = 0
        self.done = 0
        self.arrived = self.env.event()

    def arrivals(self) -> Generator[simpy.Event, object, None]:
        for i, r in enumerate(self.requests):
            yield self.env.timeout(max(0.0, r.arrival_s - self.env.now))
            self.waiting.append(i)
            if not self.arrived.triggered:
                self.arrived.succeed()

    def _seq_bytes(self, i: int) -> tuple[int, int]:
        return self.costs.per_seq_bytes(self.requests[i].input_tokens, self.requests[i].output_tokens)

    def _fits(self, i: int) -> bool:
        g, h = self._seq_bytes(i)
        gpu_ok = self.gpu_bytes + g <= self.costs.gpu_capacity_bytes
        return gpu_ok and self.host_bytes + h <= self.costs.host_capacity_bytes

    def _finished(self, i: int) -> None:
        """Request i emitted its last token now: its memory is free again."""
        self.finish[i] = self.env.now
        g, h = self._seq_bytes(i)
        self.gpu_bytes -= g
        self.host_bytes -= h
        self.done += 1

    def _admit(self) -> Generator[simpy.Event, object, None]:
        """Prefill the waiting requests that fit, in arrival order (the queue's head waits for memory)."""
        while self.waiting and self._fits(self.waiting[0]):
            i = self.waiting.pop(0)
            r = self.requests[i]
            g, h = self._seq_bytes(i)
            self.gpu_bytes += g
            self.host_bytes += h
            yield self.env.timeout(self.costs.prefill_s(r.input_tokens))  # blocks the batch's decode
            self.first[i] = self.env.now
            if r.output_tokens == 1:
                self._finished(i)
            else:
                self.running[i] = [r.input_tokens + 1, r.output_tokens - 1]

    def _decode_step(self) -> Generator[simpy.Event, object, None]:
        """One decode step of the running batch: one token per sequence."""
        running = self.running
        self.max_batch = max(self.max_batch, len(running))
        ctx = sum(v[0] for v in running.values()) / len(running)
        dt = self.costs.decode_s(len(running), ctx)
        yield self.env.timeout(dt)
        self.steps.append(dt)
        for i in list(running):
            running[i][0] += 1
            running[i][1] -= 1
            if running[i][1] == 0:
                del running[i]
                self._finished(i)

    def server(self) -> Generator[simpy.Event, object, None]:
        n = len(self.requests)
        while self.done < n:
            yield from self._admit()
            if not self.running:
                if self.done >= n:
                    break
                self.arrived = self.env.event()
                if self.waiting:  # cannot happen: an idle GPU admits any request that fits alone
                    raise AssertionError("a waiting request does not fit an empty GPU")
                yield self.arrived
                continue
            yield from self._decode_step()

    def result(self) -> ServingResult:
        arrival = np.array([r.arrival_s for r in self.requests])
        outputs = np.array([r.output_tokens for r in self.requests])
        first, finish = self.first, self.finish
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(outputs > 1, (finish - first) / np.maximum(outputs - 1, 1), np.nan)
        return ServingResult(
            first - arrival,
            tpot,
            np.array(self.steps),
            finish,
            outputs,
            self.max_batch,
            float(np.nanmax(finish) - arrival.min()),
        )


def _check_fits_alone(requests: list[Request], costs: StepCosts) -> None:
    for r in requests:
        g, h = costs.per_seq_bytes(r.input_tokens, r.output_tokens)
        if costs.gpu_fixed_bytes + g > costs.gpu_capacity_bytes or h > costs.host_capacity_bytes:
            raise SimInputError(
                f"a request of {r.input_tokens} input + {r.output_tokens} output tokens does not fit memory "
                f"alone on {costs.cfg.hardware} with {costs.cfg.method}: shorten it or pick a larger GPU"
            )


def serve(requests: list[Request], costs: StepCosts) -> ServingResult:
    """Simulate the request stream (module docstring); pure."""
    if len(requests) == 0:
        raise SimInputError("serving simulation needs at least one request")
    _check_fits_alone(requests, costs)
    replica = _Replica(requests, costs)
    replica.env.process(replica.arrivals())
    replica.env.process(replica.server())
    replica.env.run()
    return replica.result()


@dataclass(frozen=True)
class RateSearch:
    rate_per_s: float  # highest rate found meeting both SLOs (0: none, even at the lowest tried)
    stats: dict[str, Any] | None  # at that rate
    tried: dict[float, bool]


def max_rate(
    run_at: Callable[[float], ServingResult],
    ttft_slo_s: float,
    tpot_slo_s: float,
    start_rate: float = 0.1,
    rel_tol: float = 0.05,
    max_evals: int = 24,
) -> RateSearch:
    """Highest rate with p99 TTFT <= ttft_slo_s and p99 TPOT <= tpot_slo_s: halve from `start_rate` until
    one meets them (at most 8 halvings), double until one fails, then bisect to `rel_tol`."""
    tried: dict[float, bool] = {}
    stats: dict[float, dict] = {}

    def ok(rate: float) -> bool:
        st = run_at(rate).stats(ttft_slo_s, tpot_slo_s)
        stats[rate] = st
        good = st["ttft_p99_s"] <= ttft_slo_s and (st["tpot_p99_s"] is None or st["tpot_p99_s"] <= tpot_slo_s)
        tried[rate] = good
        return good

    lo = start_rate
    for _ in range(8):
        if ok(lo):
            break
        lo /= 2
    else:
        return RateSearch(0.0, None, tried)
    hi = lo * 2
    while ok(hi) and len(tried) < max_evals:
        lo, hi = hi, hi * 2
    while hi / lo > 1 + rel_tol and len(tried) < max_evals:
        mid = (lo * hi) ** 0.5
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return RateSearch(lo, stats[lo], tried)
