"""One GPU serving its share of a request stream with continuous batching, FIFO, memory-gated admission:
the state every scheduler shares, and the `blocking` scheduler (sim/serving/schedulers.py).

Admission: a waiting request starts when its memory fits beside the running ones: each sequence
reserves its method's per-sequence GPU and host bytes at its own final context (input + output;
sim.memory's model, as the runtimes preallocate a sequence's pages), on top of the fixed part (weights,
CUDA context, prefill transient, the method's fixed buffers); with `max_seqs` (a serving engine's
`max_num_seqs`) also only while fewer than that many sequences hold memory here.

Decode runs in spans: while the batch and its context bucket stay the same, k identical steps are one
SimPy timeout (the same times as k timeouts of one step); a request arriving at an idle queue cuts the
span at the end of the step under way, where a step-by-step loop would have seen it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator

import numpy as np
import simpy

from sim.serving.ledger import Ledger
from sim.serving.step_costs import StepCosts

__all__ = ["Replica", "BlockingReplica"]


class Replica:
    """A GPU's queue, running batch and memory; subclasses schedule prefill and decode in `run()`."""

    def __init__(
        self, env: simpy.Environment, book: Ledger, costs: StepCosts, max_seqs: int | None = None
    ) -> None:
        self.env, self.book, self.costs = env, book, costs
        self.max_seqs = max_seqs
        self.seats = 0  # sequences holding memory here
        self.requests = book.requests
        self.waiting: deque[int] = deque()
        self.running: dict[int, list[int]] = {}  # request -> [context tokens, tokens still to emit]
        self.gpu_bytes, self.host_bytes = costs.gpu_fixed_bytes, 0  # reserved now
        self.wake = env.event()
        self.load = 0  # requests routed here and not finished (Vidur's least-outstanding-requests load)

    # ----- router side -----
    def enqueue(self, i: int) -> None:
        self.load += 1
        self.waiting.append(i)
        if not self.wake.triggered:
            self.wake.succeed()

    # ----- memory -----
    def _seq_bytes(self, i: int) -> tuple[int, int]:
        r = self.requests[i]
        return self.costs.per_seq_bytes(r.input_tokens, r.output_tokens)

    def fits(self, i: int) -> bool:
        g, h = self._seq_bytes(i)
        if self.max_seqs is not None and self.seats >= self.max_seqs:
            return False
        gpu_ok = self.gpu_bytes + g <= self.costs.gpu_capacity_bytes
        return gpu_ok and self.host_bytes + h <= self.costs.host_capacity_bytes

    def reserve(self, i: int) -> None:
        g, h = self._seq_bytes(i)
        self.gpu_bytes += g
        self.host_bytes += h
        self.seats += 1

    def release(self, i: int) -> None:
        """Request i is done here: its memory is free again."""
        g, h = self._seq_bytes(i)
        self.gpu_bytes -= g
        self.host_bytes -= h
        self.seats -= 1
        self.load -= 1

    # ----- decode -----
    def join_decode(self, i: int) -> None:
        """Request i has its first token: decode the rest here (or it is done)."""
        r = self.requests[i]
        if r.output_tokens == 1:
            self.release(i)
        else:
            self.running[i] = [r.input_tokens + 1, r.output_tokens - 1]

    def _span(self) -> tuple[float, int]:
        """(step seconds, steps) the running batch can take before it or its context bucket changes."""
        running = self.running
        ctx_sum = sum(v[0] for v in running.values())
        mean = ctx_sum / len(running)
        dt = self.costs.decode_s(len(running), mean)
        same_bucket = int(self.costs.bucket(mean) - mean) + 1
        return dt, max(1, min(min(v[1] for v in running.values()), same_bucket))

    def advance(self, steps: int, step_s: float | np.ndarray) -> None:
        """The running batch took `steps` iterations ending now, of `step_s` seconds each (or of the
        durations in the array `step_s`): one token each per iteration."""
        self.book.tokens(np.fromiter(self.running, np.int64, len(self.running)), step_s, steps)
        for i in list(self.running):
            state = self.running[i]
            state[0] += steps
            state[1] -= steps
            if state[1] == 0:
                del self.running[i]
                self.release(i)
                self.book.finished(i)

    def decode_span(self, interruptible: bool) -> Generator[simpy.Event, object, None]:
        """Decode steps of the running batch until it changes (module docstring)."""
        self.book.batch(len(self.running))
        self.book.iteration_tokens(len(self.running))
        dt, k = self._span()
        start = self.env.now
        if interruptible and k > 1:
            if self.wake.triggered:
                self.wake = self.env.event()
            yield self.env.timeout(k * dt) | self.wake
            if self.env.now < start + k * dt:  # woken by an arrival: finish the step under way
                k = min(k, int((self.env.now - start) / dt) + 1)
                yield self.env.timeout(max(0.0, start + k * dt - self.env.now))
        else:
            yield self.env.timeout(k * dt)
        self.book.steps(dt, k)
        self.advance(k, dt)

    def decode_or_idle(self) -> Generator[simpy.Event, object, None]:
        """With no prompt to start: decode the running batch until it changes, or wait for an arrival."""
        if not self.running:
            if self.waiting:  # cannot happen: an idle GPU admits any request that fits alone
                raise AssertionError("a waiting request does not fit an empty GPU")
            yield from self.idle()
            return
        yield from self.decode_span(interruptible=not self.waiting)

    def idle(self) -> Generator[simpy.Event, object, None]:
        if self.wake.triggered:
            self.wake = self.env.event()
        yield self.wake

    def run(self) -> Generator[simpy.Event, object, None]:
        raise NotImplementedError


class BlockingReplica(Replica):
    """Prefill blocks decode: waiting requests that fit are prefilled alone, in arrival order, between two
    decode steps; the running batch waits."""

    def run(self) -> Generator[simpy.Event, object, None]:
        while True:
            while self.waiting and self.fits(self.waiting[0]):
                i = self.waiting.popleft()
                self.reserve(i)
                self.book.started(i)
                yield self.env.timeout(self.costs.prefill_s(self.requests[i].input_tokens))
                self.book.first_token(i)
                self.join_decode(i)
            yield from self.decode_or_idle()
