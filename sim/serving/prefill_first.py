"""The `prefill-first` scheduler (sim/serving/schedulers.py): vLLM before chunked prefill (v0.2-v0.3), the
baseline Sarathi-Serve and DistServe measured.

Each iteration is either prefill-only or decode-only. When waiting prompts can be admitted, the iteration
takes them, in arrival order, while each fits memory, the sequence cap (`max_seqs`, vLLM's
`max_num_seqs`) holds and the prompts' tokens stay within `max_batched_tokens` (vLLM's
`max_num_batched_tokens`), and prefills them together as one batch; every running decode waits for it.
Otherwise the iteration decodes one token of every running sequence. As in vLLM, a prompt longer than
`max_batched_tokens` still runs, alone (vLLM refuses to start with `max_num_batched_tokens` below the
model's length, so no admitted prompt exceeds it).

Sources: Sarathi-Serve's port of vLLM's scheduler, which its vLLM baseline ran (microsoft/sarathi-serve
sarathi/core/scheduler/vllm_scheduler.py:47-87 at commit ceaa066: admit waiting prompts while
`can_allocate`, `num_batched_tokens + num_prompt_tokens <= max_num_batched_tokens` and
`len(running) + 1 <= max_num_seqs`, return a prompt-only batch if any was admitted; 89-135: else decode
every running sequence); DistServe's simulator of the vLLM it measured (LLMServe/DistServe
simdistserve/base/worker.py:130-141 (prefill whenever prompts wait), 204-259 (prompts batched up to
`prefill_max_tokens`, chunking off), simdistserve/benchmarks/simulate_dist.py:171-181). vLLM's own
repository at a v0.2/v0.3 tag could not be read here (its snapshot is over the size limit; the file
index holds a v0.4-era scheduler.py only).

Differences: vLLM admits a prompt when its prompt blocks fit and preempts (recomputes) sequences that
later run out of blocks; this model reserves each sequence's memory at its final context on admission
(sim/serving/replica.py), so it never preempts, and admits no earlier than memory at the final context
allows. The batched prefill is priced as one iteration of chunks that each cover a whole prompt
(StepCosts.iteration_s).
"""

from __future__ import annotations

from collections.abc import Generator

import simpy

from sim.serving.ledger import Ledger
from sim.serving.replica import Replica
from sim.serving.step_costs import StepCosts

__all__ = ["PrefillFirstReplica"]


class PrefillFirstReplica(Replica):
    def __init__(
        self,
        env: simpy.Environment,
        book: Ledger,
        costs: StepCosts,
        max_batched_tokens: int | None,
        max_seqs: int | None,
    ) -> None:
        super().__init__(env, book, costs, max_seqs)
        self.max_batched_tokens = max_batched_tokens

    def _admit(self) -> list[int]:
        """The waiting prompts the next prefill iteration takes (module docstring)."""
        batch: list[int] = []
        tokens = 0
        while self.waiting and self.fits(self.waiting[0]):
            n = self.requests[self.waiting[0]].input_tokens
            if batch and self.max_batched_tokens is not None and tokens + n > self.max_batched_tokens:
                break
            i = self.waiting.popleft()
            self.reserve(i)
            self.book.started(i)
            batch.append(i)
            tokens += n
        return batch

    def run(self) -> Generator[simpy.Event, object, None]:
        while True:
            batch = self._admit()
            if batch:
                inputs = [self.requests[i].input_tokens for i in batch]
                self.book.batch(len(self.running) + len(batch))
                self.book.iteration_tokens(sum(inputs))
                dt = self.costs.iteration_s(0, 0.0, [(n, 0, n) for n in inputs])
                yield self.env.timeout(dt)
                for i in batch:
                    self.book.first_token(i)
                    self.join_decode(i)
                continue
            yield from self.decode_or_idle()
