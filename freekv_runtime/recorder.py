"""Policy decisions -> trace records.

A `TraceRecorder` serves one batch run (one `generate` or `teacher_forced` call): batch element i is
trace sequence `first_sequence + i`. Prefill decisions become `PrefillRecord`s, each decode step's
`StepDecisions` one `StepRecord` per sequence. Timings are measured for the whole batch step and
attached to each of its sequences' records. Without a writer nothing is written, but the step's
attention mass is still kept (tasks such as fidelity read it).

Shapes: b = batch, L = layers, H = KV heads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from freekv_runtime.policies.base import PrefillDecisions, StepDecisions
from traces.records import PrefillRecord, StepRecord

__all__ = ["TraceRecorder"]


def _pages(per_layer: list[list[np.ndarray]]) -> tuple[tuple[np.ndarray, ...], ...]:
    """[l][h] page id arrays -> nested tuples of sorted int32 arrays (the record layout)."""
    return tuple(tuple(np.sort(np.asarray(h, dtype=np.int32)) for h in layer) for layer in per_layer)


def _moved(decisions: StepDecisions, page_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fetched_tokens int32, evicted_tokens int32, refactorised bool), each (b, L, H): the policy's, or
    where it gives none, the missed pages times the page size, nothing evicted, nothing rebuilt."""
    shape = decisions.attended_tokens.shape
    fetched = decisions.fetched_tokens
    if fetched is None:
        counts = [[[len(h) for h in layer] for layer in seq] for seq in decisions.missed]
        fetched = np.asarray(counts, dtype=np.int64).reshape(shape) * page_size
    evicted = np.zeros(shape, np.int32) if decisions.evicted_tokens is None else decisions.evicted_tokens
    rebuilt = np.zeros(shape, bool) if decisions.refactorised is None else decisions.refactorised
    return (np.asarray(fetched, dtype=np.int32), np.asarray(evicted, dtype=np.int32),
            np.asarray(rebuilt, dtype=bool))


class TraceRecorder:
    """Implements `freekv_runtime.decode.DecisionSink` over a `traces.TraceWriter` (or no writer)."""

    def __init__(self, writer: Any | None, first_sequence: int = 0, page_size: int = 1) -> None:
        self.writer = writer
        self.page_size = page_size  # derives fetched tokens from missed pages where a policy gives none
        self.first_sequence = first_sequence
        self.n_steps = 0
        self.attention_mass: list[np.ndarray] = []  # per step: (b, L, H) float32

    def on_prefill(
        self, decisions: PrefillDecisions, prompt_tokens: int, timings_s: dict[str, float]
    ) -> None:
        if self.writer is None:
            return
        for i, selected in enumerate(decisions.initial_selected):
            self.writer.append_prefill(
                PrefillRecord(
                    sequence=self.first_sequence + i,
                    prompt_tokens=prompt_tokens,
                    initial_selected=_pages(selected),
                    timings_s=dict(timings_s),
                    multi_context=None if decisions.multi_context is None else decisions.multi_context[i],
                )
            )

    def on_step(self, decisions: StepDecisions, context_tokens: int, timings_s: dict[str, float]) -> None:
        step = self.n_steps
        self.n_steps += 1
        if decisions.attention_mass is not None:
            self.attention_mass.append(np.asarray(decisions.attention_mass, dtype=np.float32))
        if self.writer is None:
            return
        moved = _moved(decisions, self.page_size)
        for i in range(decisions.similarity.shape[0]):
            mass = decisions.attention_mass
            self.writer.append_step(
                StepRecord(
                    sequence=self.first_sequence + i,
                    step=step,
                    context_tokens=context_tokens,
                    similarity=np.asarray(decisions.similarity[i], dtype=np.float32),
                    corrected=np.asarray(decisions.corrected[i], dtype=bool),
                    selected=_pages(decisions.selected[i]),
                    missed=_pages(decisions.missed[i]),
                    attended_tokens=np.asarray(decisions.attended_tokens[i], dtype=np.int32),
                    timings_s=dict(timings_s),
                    attention_mass=None if mass is None else np.asarray(mass[i], dtype=np.float32),
                    fetched_tokens=moved[0][i], evicted_tokens=moved[1][i], refactorised=moved[2][i],
                )
            )
