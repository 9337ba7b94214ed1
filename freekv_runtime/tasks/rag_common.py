"""What the multi-context (RAG) tasks share: the prompt's parts and their scoring.

A sample is a prefix (instruction), documents and a query, as token ids (`RagSample`); the runner joins
them (`PolicyRunner.multi_context_batch`). Three metrics per task, each with per-prompt samples (ids from
`sample_id`, so runs of different methods pair):
- `<task>_score`: answer string match of the method's own greedy answer (RULER's string_match_all for
  rag_facts, string_match_part over the gold aliases for rag_qa);
- `<task>_top1`: fidelity against joint prefill: dense attention's greedy answer on the joined prompt is
  teacher-forced through the method, and the share of its positions (the prefill's first answer token
  included) where the method's most likely token is dense attention's;
- `<task>_kl`: the mean KL(dense || method) over those positions, in nats (lower is closer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from freekv_runtime.policies._multi_context import Segments
from freekv_runtime.stats import Estimate, bootstrap_mean, estimate
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import TaskSpec, sample_id
from freekv_runtime.tasks.ruler_common import string_match_all, string_match_part

__all__ = ["RagSample", "run_rag", "fidelity_scores", "rag_metrics"]

# the last joint-prefill reference computed in this process (several methods run on the same prompts)
_REFERENCES: dict[tuple, list] = {}


@dataclass(frozen=True)
class RagSample:
    prefix: list[int]
    documents: list[list[int]]
    query: list[int]
    answers: list[str]
    key: int | str

    @property
    def token_ids(self) -> list[int]:
        return self.prefix + [t for doc in self.documents for t in doc] + self.query

    @property
    def segments(self) -> Segments:
        return Segments(len(self.prefix), tuple(len(d) for d in self.documents), len(self.query))


def rag_metrics(task: str) -> tuple[str, str, str]:
    return (f"{task}_score", f"{task}_top1", f"{task}_kl")


def fidelity_scores(reference: torch.Tensor, method: torch.Tensor) -> tuple[float, float]:
    """reference, method (N, V) logits at the same positions -> (top-1 agreement, mean KL(ref || method))."""
    agree = (reference.argmax(-1) == method.argmax(-1)).float().mean()
    log_p = torch.log_softmax(reference.float(), dim=-1)
    log_q = torch.log_softmax(method.float(), dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1).mean()
    return float(agree), float(kl)


def run_rag(task: str, spec: TaskSpec, runner: Any, seed: int, samples: list[RagSample], n_tokens: int,
            match: str) -> dict[str, Estimate]:
    """Run `samples` under the runner's policy; score accuracy (match "all" or "part") and fidelity."""
    prompts = [s.token_ids for s in samples]
    segments = [s.segments for s in samples]
    key = (getattr(runner, "model_key", None), tuple(map(tuple, prompts)), n_tokens)
    if key not in _REFERENCES:  # dense attention's answers on the same prompts do not depend on the method
        _REFERENCES.clear()
        _REFERENCES[key] = runner.multi_context_batch(prompts, segments, n_tokens, dense=True)
    reference = _REFERENCES[key]
    own = runner.multi_context_batch(prompts, segments, n_tokens, forced=[t for t, _, _ in reference])
    ids = [sample_id(spec, seed, s.key) for s in samples]
    preds = [answer_text(runner.tokenizer, tokens) for tokens, _, _ in own]
    fn = string_match_all if match == "all" else string_match_part
    scores = [fn(p, s.answers) for p, s in zip(preds, samples, strict=True)]
    fidelity = [fidelity_scores(ref, forced)
                for (_, ref, _), (_, _, forced) in zip(reference, own, strict=True)]
    score, top1, kl = rag_metrics(task)
    return {
        score: estimate(scores, seed, ids=ids, answers=preds),
        # per-prompt shares and means, not 0/1 outcomes: a bootstrap even when every prompt agrees fully
        top1: bootstrap_mean([f[0] for f in fidelity], seed, ids=ids),
        kl: bootstrap_mean([f[1] for f in fidelity], seed, ids=ids),
    }

