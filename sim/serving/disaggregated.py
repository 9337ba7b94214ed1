"""The `disaggregated` scheduler (sim/serving/schedulers.py): prefill GPUs, the KV handoff over a link, decode
GPUs.

A `PrefillWorker` prefills its queue's prompts in batches, first come first served: each iteration takes the
waiting prompts in arrival order while their prompt tokens stay within `max_batched_tokens` (None: one prompt
per iteration) and the prefill GPU has memory to park each one's KV, as DistServe's context stage forms its
batches (LLMServe/DistServe distserve/context_stage_scheduler.py:127-172 at commit 82831f1: FCFS while the
batch size, `max_tokens_per_batch` and the GPU blocks allow; its simulator likewise, simdistserve/base/
worker.py:204-259, up to the memory's token count, simulate_dist.py:158); a prompt over the cap runs alone. A
batch is priced by `StepCosts.prefill_batch_s` (a whole-step engine's measured batched prefill; on the step
model the prompts' prefills alone, summed, with the engine's host time once). Each finished prompt's KV stays
parked on the prefill GPU (`Parking`: each prompt takes its own KV bytes of the GPU and host memory the fixed
part leaves, as DistServe's context stage counts each prompt's blocks, context_stage_scheduler.py:146-154;
when the next prompt does not fit the worker waits) while the decode router picks a decode GPU and the request
waits in that GPU's FIFO queue for memory; then the KV moves over the prefill GPU's NIC (one transfer at a
time, `kv_bytes / kv_link_gbps`), its parked bytes free, and the first token reaches the user
(`first_token_at_prefill`: it reached the user when the prefill ended, as DistServe's context stage streams
it, and a request of one output token finished there without a handoff; sim/serving/schedulers.py). The
`DecodeReplica` takes it into its running batch at its next step boundary.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator

import simpy

from sim.serving.ledger import Ledger
from sim.serving.replica import Replica
from sim.serving.step_costs import StepCosts

__all__ = ["PrefillWorker", "DecodeReplica", "Parking"]


class Parking:
    """A prefill GPU's memory for finished prompts' KV until it moves: the GPU bytes the fixed part (weights,
    context, transient) leaves and the host bytes, each prompt taking the method's state of its own prompt
    (`StepCosts.per_seq_bytes(input, 1)`); a prompt larger than the whole still parks alone."""

    def __init__(self, env: simpy.Environment, costs: StepCosts) -> None:
        self.env, self.costs = env, costs
        self.capacity = (max(0, costs.gpu_capacity_bytes - costs.gpu_fixed_bytes), costs.host_capacity_bytes)
        self.free = list(self.capacity)
        self.freed = env.event()

    def need(self, input_tokens: int) -> tuple[int, int]:
        gpu, host = self.costs.per_seq_bytes(input_tokens, 1)
        return min(gpu, self.capacity[0]), min(host, self.capacity[1])

    def fits(self, need: tuple[int, int]) -> bool:
        return need[0] <= self.free[0] and need[1] <= self.free[1]

    def take(self, need: tuple[int, int]) -> None:
        self.free[0] -= need[0]
        self.free[1] -= need[1]

    def give(self, need: tuple[int, int]) -> None:
        self.free[0] += need[0]
        self.free[1] += need[1]
        if not self.freed.triggered:
            self.freed.succeed()

    def wait(self) -> simpy.Event:
        """Fires at the next `give`."""
        if self.freed.triggered:
            self.freed = self.env.event()
        return self.freed


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
        self.parking = Parking(env, costs)
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
            need = self.parking.need(self.requests[self.waiting[0]].input_tokens)
            if not self.parking.fits(need):
                yield self.parking.wait()  # room to park the first prompt's KV; then as many more as fit
                continue
            self.parking.take(need)
            batch = [(self.waiting.popleft(), need)]
            tokens = self.requests[batch[0][0]].input_tokens
            while self.waiting:
                n = self.requests[self.waiting[0]].input_tokens
                if self.max_batched_tokens is None or tokens + n > self.max_batched_tokens:
                    break
                need = self.parking.need(n)
                if not self.parking.fits(need):
                    break
                self.parking.take(need)
                batch.append((self.waiting.popleft(), need))
                tokens += n
            inputs = [self.requests[i].input_tokens for i, _ in batch]
            for i, _ in batch:
                self.book.started(i)
            self.book.iteration_tokens(tokens)
            yield self.env.timeout(self.costs.prefill_batch_s(inputs))
            self.load -= len(batch)
            for i, parked in batch:
                self.env.process(self._handoff(i, parked))

    def _handoff(self, i: int, parked: tuple[int, int]) -> Generator[simpy.Event, object, None]:
        self.book.prefilled(i)
        if self.first_token_at_prefill:
            self.book.first_token(i)  # streamed at the prefill's end; one output token: finished here
            if self.requests[i].output_tokens == 1:
                self.parking.give(parked)
                return
        decode = self.pick_decode()
        yield decode.handoff(i)
        with self.nic.request() as nic:
            yield nic
            yield self.env.timeout(self.costs.kv_bytes(self.requests[i].input_tokens) / self.link_bytes_per_s)
        self.parking.give(parked)
        if not self.first_token_at_prefill:
            self.book.first_token(i)
        if self.requests[i].output_tokens > 1:
            decode.kv_arrived(i)
        else:
            decode.in_transfer -= 1
            decode.release(i)
