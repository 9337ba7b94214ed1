"""The `disaggregated` scheduler (sim/serving/schedulers.py): prefill GPUs, the KV handoff over a link, decode
GPUs.

A `PrefillWorker` prefills its queue's prompts in batches, first come first served: each iteration takes the
waiting prompts in arrival order while their prompt tokens stay within `max_batched_tokens` (None: one prompt
per iteration) and a parking slot is free for each, as DistServe's context stage forms its batches
(LLMServe/DistServe distserve/context_stage_scheduler.py:127-172 at commit 82831f1: FCFS while the batch size,
`max_tokens_per_batch` and the GPU blocks allow; its simulator likewise, simdistserve/base/worker.py:204-259,
up to the memory's token count, simulate_dist.py:158); a prompt over the cap runs alone. A batch is priced by
`StepCosts.prefill_batch_s` (a whole-step engine's measured batched prefill; on the step model the prompts'
prefills alone, summed, with the engine's host time once). Each finished prompt's KV stays parked on the
prefill GPU (it needs one of `park_slots`: as many prompts' KV as its memory holds; with none free the worker
waits) while the decode router picks a decode GPU and the request waits in that GPU's FIFO queue for memory;
then the KV moves over the prefill GPU's NIC (one transfer at a time, `kv_bytes / kv_link_gbps`), the slot
frees, and the first token reaches the user (`first_token_at_prefill`: it reached the user when the prefill
ended, as DistServe's context stage streams it, and a request of one output token finished there without a
handoff; sim/serving/schedulers.py). The `DecodeReplica` takes it into its running batch at its next step
boundary.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator

import simpy

from sim.serving.ledger import Ledger
from sim.serving.replica import Replica
from sim.serving.step_costs import StepCosts

__all__ = ["PrefillWorker", "DecodeReplica", "park_slots"]


def park_slots(costs: StepCosts, input_tokens: int) -> int:
    """Prompts whose KV one prefill GPU holds at once (GPU and host memory of the method's state)."""
    gpu, host = costs.per_seq_bytes(input_tokens, 1)
    by_gpu = (costs.gpu_capacity_bytes - costs.gpu_fixed_bytes) // gpu if gpu else 1 << 20
    by_host = costs.host_capacity_bytes // host if host else 1 << 20
    return int(max(1, min(by_gpu, by_host)))


class DecodeReplica(Replica):
    """Continuous batching of decode only: admits handed-off requests in FIFO order as memory allows."""

    def __init__(
        self, env: simpy.Environment, book: Ledger, costs: StepCosts, max_seqs: int | None = None
    ) -> None:
        super().__init__(env, book, costs, max_seqs)
        self.admitted: dict[int, simpy.Event] = {}  # request -> fires when its memory is reserved
        self.in_transfer = 0
        self.ready: list[int] = []  # KV arrived, joins the batch at the next step boundary

    def handoff(self, i: int) -> simpy.Event:
        """Queue prefilled request i; the event fires when its memory is reserved."""
        self.admitted[i] = self.env.event()
        self.enqueue(i)
        return self.admitted[i]

    def kv_arrived(self, i: int) -> None:
        self.in_transfer -= 1
        self.ready.append(i)
        if not self.wake.triggered:
            self.wake.succeed()

    def run(self) -> Generator[simpy.Event, object, None]:
        while True:
            while self.waiting and self.fits(self.waiting[0]):
                i = self.waiting.popleft()
                self.reserve(i)
                self.in_transfer += 1
                self.book.decode_admitted(i)
                self.admitted.pop(i).succeed()
            for i in self.ready:
                self.join_decode(i)
            self.ready.clear()
            if not self.running:
                yield from self.idle()
                continue
            # a KV arriving or a request that could be admitted cuts the span at the step under way
            can_change = self.in_transfer > 0 or not self.waiting
            yield from self.decode_span(interruptible=can_change)


class PrefillWorker:
    """One prefill GPU (module docstring)."""

    def __init__(
        self,
        env: simpy.Environment,
        book: Ledger,
        costs: StepCosts,
        slots: int,
        link_gbps: float,
        pick_decode: Callable[[], DecodeReplica],
        max_batched_tokens: int | None = None,
        first_token_at_prefill: bool = False,
    ) -> None:
        self.env, self.book, self.costs = env, book, costs
        self.first_token_at_prefill = first_token_at_prefill
        self.requests = book.requests
        self.waiting: deque[int] = deque()
        self.load = 0  # queued or being prefilled here
        self.slots = simpy.Resource(env, capacity=slots)
        self.nic = simpy.Resource(env, capacity=1)
        self.link_bytes_per_s = link_gbps * 1e9
        self.pick_decode = pick_decode
        self.max_batched_tokens = max_batched_tokens
        self.wake = env.event()

    def enqueue(self, i: int) -> None:
        self.load += 1
        self.waiting.append(i)
        if not self.wake.triggered:
            self.wake.succeed()

    def run(self) -> Generator[simpy.Event, object, None]:
        while True:
            if not self.waiting:
                if self.wake.triggered:
                    self.wake = self.env.event()
                yield self.wake
                continue
            slot = self.slots.request()
            yield slot  # a parking slot for the first prompt, then as many more as are free now
            batch = [(self.waiting.popleft(), slot)]
            tokens = self.requests[batch[0][0]].input_tokens
            while self.waiting and self.slots.count < self.slots.capacity:
                n = self.requests[self.waiting[0]].input_tokens
                if self.max_batched_tokens is None or tokens + n > self.max_batched_tokens:
                    break
                batch.append((self.waiting.popleft(), self.slots.request()))  # granted at once
                tokens += n
            inputs = [self.requests[i].input_tokens for i, _ in batch]
            for i, _ in batch:
                self.book.started(i)
            self.book.iteration_tokens(tokens)
            yield self.env.timeout(self.costs.prefill_batch_s(inputs))
            self.load -= len(batch)
            for i, slot_i in batch:
                self.env.process(self._handoff(i, slot_i))

    def _handoff(self, i: int, slot: simpy.Event) -> Generator[simpy.Event, object, None]:
        self.book.prefilled(i)
        if self.first_token_at_prefill:
            self.book.first_token(i)  # streamed at the prefill's end; one output token: finished here
            if self.requests[i].output_tokens == 1:
                self.slots.release(slot)
                return
        decode = self.pick_decode()
        yield decode.handoff(i)
        with self.nic.request() as nic:
            yield nic
            yield self.env.timeout(self.costs.kv_bytes(self.requests[i].input_tokens) / self.link_bytes_per_s)
        self.slots.release(slot)
        if not self.first_token_at_prefill:
            self.book.first_token(i)
        if self.requests[i].output_tokens > 1:
            decode.kv_arrived(i)
        else:
            decode.in_transfer -= 1
            decode.release(i)
