"""The `chunked` scheduler (sim/serving/schedulers.py): each iteration carries one decode token of every
running sequence and then prefill chunks, in arrival order, up to the token budget.

An iteration is priced as one mixed batch, `StepCosts.iteration_s(batch, mean context, chunks)`
(sim/serving/step_costs.py). A prompt is admitted (its memory reserved) when the budget reaches it, it fits
and a sequence slot is free; its last chunk emits its first token and it decodes from the next iteration.
At most `chunk_tokens` sequences run (fewer with `max_seqs`: Sarathi-Serve's `max_num_seqs`, its batch size
128 in the paper's runs), so every iteration has room for their decode tokens: microsoft/sarathi-serve
sarathi/core/scheduler/sarathi_scheduler.py:121-151 (decode tokens first), 156-178 (the running prompts'
next chunks), 187-226 (new prompts while the budget, memory and `max_num_seqs` allow) at commit ceaa066.
Iterations where one prompt fills the whole remaining budget and is not finished, and the batch and its
context bucket stay the same, are taken as one span: arrivals cannot change them (there is no budget
left for a new prompt).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import simpy

from sim.serving.ledger import Ledger
from sim.serving.replica import Replica
from sim.serving.step_costs import StepCosts

__all__ = ["ChunkedReplica"]


class ChunkedReplica(Replica):
    def __init__(
        self, env: simpy.Environment, book: Ledger, costs: StepCosts, chunk_tokens: int, max_seqs: int | None
    ) -> None:
        super().__init__(env, book, costs, min(chunk_tokens, max_seqs or chunk_tokens))
        self.budget = chunk_tokens
        self.prefilling: dict[int, int] = {}  # request -> prompt tokens already prefilled (arrival order)

    def _plan(self) -> list[tuple[int, int, int, int]]:
        """This iteration's chunks: (request, chunk tokens, prefix tokens, input tokens), admitting waiting
        requests in order while the budget and memory last."""
        left = self.budget - len(self.running)
        plan = []
        for i, done in self.prefilling.items():
            if left <= 0:
                return plan
            n = self.requests[i].input_tokens
            c = min(n - done, left)
            plan.append((i, c, done, n))
            left -= c
        while (
            left > 0
            and self.waiting
            and self.fits(self.waiting[0])
        ):
            i = self.waiting.popleft()
            self.reserve(i)
            self.book.started(i)
            self.prefilling[i] = 0
            n = self.requests[i].input_tokens
            c = min(n, left)
            plan.append((i, c, 0, n))
            left -= c
        return plan

    def _mean_context(self) -> float:
        b = len(self.running)
        return sum(v[0] for v in self.running.values()) / b if b else 0.0

    def _full_chunk_span(self, plan: list[tuple[int, int, int, int]]) -> int:
        """How many iterations like this one (one prompt filling the budget, not finishing; the batch and
        its bucket unchanged) can run back to back."""
        if len(plan) != 1:
            return 1
        i, c, done, n = plan[0]
        k = (n - done - 1) // c  # iterations whose chunk of c does not finish the prompt
        if self.running:
            mean = self._mean_context()
            k = min(k, min(v[1] for v in self.running.values()), int(self.costs.bucket(mean) - mean) + 1)
        return max(1, k)

    def run(self) -> Generator[simpy.Event, object, None]:
        while True:
            plan = self._plan()
            if not plan and not self.running:
                if self.waiting:  # cannot happen: an idle GPU admits any request that fits alone
                    raise AssertionError("a waiting request does not fit an empty GPU")
                yield from self.idle()
                continue
            if not plan:
                yield from self.decode_span(interruptible=not self.waiting)
                continue
            self.book.batch(len(self.running) + len(plan))
            k = self._full_chunk_span(plan)
            if k > 1:
                i, c, done, n = plan[0]
                times = self.costs.chunk_span_s(
                    c, done + c * np.arange(k), n, len(self.running), self._mean_context()
                )
                yield self.env.timeout(float(times.sum()))
                self.book.steps(times)
                self.book.iteration_tokens(len(self.running) + c)
                self.prefilling[i] = done + k * c
                if self.running:
                    self.advance(k, times)
                continue
            chunks = [(c, p, n) for _, c, p, n in plan]
            dt = self.costs.iteration_s(len(self.running), self._mean_context(), chunks)
            yield self.env.timeout(dt)
            self.book.steps(dt)
            self.book.iteration_tokens(len(self.running) + sum(c for _, c, _, _ in plan))
            if self.running:
                self.advance(1, dt)
            for i, c, done, n in plan:
                if done + c >= n:
                    del self.prefilling[i]
                    self.book.first_token(i)
                    self.join_decode(i)
                else:
                    self.prefilling[i] = done + c
