"""What a task is given and what it returns.

A task builds token sequences, asks a `SequenceRunner` to run them through the model with the policy
under test (each call is one traced sequence), and scores the results into named metrics.

Shapes: T = prompt tokens, N = new / forced tokens, V = vocabulary, L = layers, H = KV heads.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate

__all__ = ["TaskSpec", "SequenceRunner", "ForcedResult", "Task", "sample_id", "record_ids"]


@dataclass(frozen=True)
class TaskSpec:
    """One task instance.

    name: a key of `freekv_runtime.tasks.TASKS`.
    context_tokens: tokens in the KV cache at the last decode step of a sample, i.e. prompt tokens +
        decode tokens (so 8192 fits a model with 8192 positions).
    n_samples: samples (traced sequences).   decode_tokens: per sample, None for the task's default.
    params: task-specific (passkey: `filler` "repeat" | "natural", `template` "plain" | "chat";
        fidelity: none).
    """

    name: str = "passkey"
    context_tokens: int = 2048
    n_samples: int = 4
    decode_tokens: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.context_tokens < 64:
            raise RuntimeInputError(f"task context_tokens must be at least 64, got {self.context_tokens}")
        if self.n_samples < 1:
            raise RuntimeInputError(f"task n_samples must be at least 1, got {self.n_samples}")
        if self.decode_tokens is not None and self.decode_tokens < 1:
            raise RuntimeInputError(f"task decode_tokens must be at least 1, got {self.decode_tokens}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_id(spec: TaskSpec, seed: int, key: int | str) -> str:
    """The id of one prompt of `spec`: "<task>/<context_tokens>/seed<seed>/<key>", key the sample's index
    or the benchmark record's own id. With params or decode_tokens given, an 8-hex digest of them goes
    after the context length ("niah_single/4096/1f0c2a9e/seed0/3"), so that prompts built differently
    never share an id. It never depends on the KV method or its knobs: the same spec and seed give the
    same ids under every configuration, which is what pairs their per-prompt scores."""
    shape = ""
    if spec.params or spec.decode_tokens is not None:
        text = json.dumps({"params": spec.params, "decode_tokens": spec.decode_tokens}, sort_keys=True,
                          default=str)
        shape = "/" + hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{spec.name}/{spec.context_tokens}{shape}/seed{seed}/{key}"


RECORD_ID_FIELDS = ("_id", "id", "unique_id", "index", "ID", "Record ID")


def record_ids(records: list[dict[str, Any]]) -> list[str]:
    """Per record of a benchmark file, its own id (the first of RECORD_ID_FIELDS it has); the position
    ("3") when no record has one; "<id>#<position>" where a record lacks one or shares it with another,
    so that ids stay unique."""
    own = [next((str(r[k]) for k in RECORD_ID_FIELDS if r.get(k) not in (None, "")), None) for r in records]
    if all(key is None for key in own):
        return [str(i) for i in range(len(records))]
    counts = Counter(own)
    return [key if key is not None and counts[key] == 1 else f"{key or ''}#{i}" for i, key in enumerate(own)]


@dataclass(frozen=True)
class ForcedResult:
    """logits (N, V) float32 on the CPU; attention_mass (N, L, H) float32 or None when not measured."""

    logits: torch.Tensor
    attention_mass: np.ndarray | None


class SequenceRunner(Protocol):
    """The model with the policy under test; every sequence it runs with the policy is traced.

    The `*_batch` forms take lists of sequences and return one result per sequence in input order; the
    runner batches sequences of equal lengths (freekv_runtime.api.PolicyRunner), which changes no result.
    """

    tokenizer: Any
    model_key: str  # identifies model weights + dtype + device kind (for caches of reference results)
    dense_layers: tuple[int, ...]  # layers the policy keeps dense (excluded from sparse-layer statistics)
    max_positions: int

    def generate_batch(
        self, prompts: list[list[int]], max_new_tokens: int, sampling: Any = ...,
        seeds: list[int] | None = None, with_logits: bool = False,
    ) -> list[tuple[list[int], torch.Tensor | None]]:
        """Per prompt: N new token ids (greedy, or `decode.Sampling` with one seed per prompt) and, with
        with_logits, the N - 1 decode-step logits (N - 1, V) float32 on the CPU."""
        ...

    def teacher_forced_batch(self, prompts: list[list[int]], forced: list[list[int]]) -> list[ForcedResult]:
        """Per sequence, the next-token logits after feeding forced[i] (see decode.teacher_forced)."""
        ...

    def dense_teacher_forced_batch(
        self, prompts: list[list[int]], forced: list[list[int]]
    ) -> list[torch.Tensor]:
        """The same with dense attention (the dense policy), untraced: logits (N, V) float32 on the CPU."""
        ...

    def dense_generate_batch(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Greedy continuation with dense attention, untraced."""
        ...


class Task(Protocol):
    name: str
    metrics: tuple[str, ...]
    default_decode_tokens: int

    needs_attention_mass: bool  # the metrics need StepDecisions.attention_mass

    def check(self, spec: TaskSpec) -> None:
        """RuntimeInputError for parameters the task cannot run with (before any model is loaded)."""
        ...

    # Optional: `generation_notes(spec) -> list[str]`, where the run's generation settings differ from the
    # benchmark's official ones (run_trace records them in summary.json as `task_notes`; `dse trace`
    # prints them with the score).

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        """Run all samples of `spec`; metric name -> value with its 95% interval (freekv_runtime.stats)
        and its per-sample results (Estimate.samples, ids from `sample_id`)."""
        ...
