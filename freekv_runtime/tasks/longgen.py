"""Long-generation fidelity: free-running generation under the policy vs dense attention, same prompt.

Prompts: windows of the offline prose (as the fidelity task takes them, evenly spread), each
`context_tokens - decode_tokens` tokens. Dense attention generates N = decode_tokens tokens greedily
from each prompt (cached in memory and on disk per model and prompt, so a sweep computes it once); the
policy generates N tokens greedily from the same prompt, on its own trajectory. Then dense attention is
teacher-forced on the policy's trajectory, giving at every decode step the distribution dense attention
would have produced after the same tokens.

Metrics per sample, then averaged over samples (bootstrap intervals over samples):
- `longgen_agreement`: share of the N positions where the policy's token equals dense attention's.
- `longgen_divergence_step`: the first position (0-based) where they differ, N when they never do.
- `longgen_kl`: mean over the N - 1 decode steps of KL(dense || policy) of the next-token distributions
  along the policy's own trajectory, in nats (the prefill's prediction is dense in every policy).
Param `kl` (default true): false skips the dense teacher-forced pass (about a third of the task's
cost) and leaves `longgen_kl` unmeasured (NaN, no samples), for sweeps that optimise agreement only.
Per-sample results (Estimate.samples): each prompt's value, with the policy's generation as its answer.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from freekv_runtime.cache_files import read_cached, write_cached
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate, bootstrap_mean
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, sample_id
from freekv_runtime.tasks.fidelity import _prose_tokens, kl_divergence_nats
from freekv_runtime.tasks.text import PROSE_SOURCE

__all__ = ["LongGenTask", "first_divergence"]

_DENSE: dict[str, list[int]] = {}  # cache key -> dense greedy continuation


def first_divergence(a: list[int], b: list[int]) -> int:
    """The first index where a and b differ; len(a) when they never do (equal lengths)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))


def _dense_generations(runner: SequenceRunner, prompts: list[list[int]], n: int) -> list[list[int]]:
    from freekv_runtime.weights import cache_root

    keys = [
        hashlib.sha256(
            f"{runner.model_key}|{PROSE_SOURCE}|{n}|".encode() + np.asarray(p, np.int64).tobytes()
        ).hexdigest()[:24]
        for p in prompts
    ]
    root = cache_root() / "dense_generations"
    for key in keys:
        if key not in _DENSE:
            cached = read_cached(root / f"{key}.json", lambda p: json.loads(p.read_text(encoding="utf-8")),
                                 lambda v: _tokens_problem(v, n))
            if cached is not None:
                _DENSE[key] = cached
    todo = [i for i, key in enumerate(keys) if key not in _DENSE]
    if todo:
        for i, tokens in zip(todo, runner.dense_generate_batch([prompts[i] for i in todo], n), strict=True):
            tokens = [int(t) for t in tokens]
            write_cached(root / f"{keys[i]}.json", lambda f, t=tokens: f.write(json.dumps(t)), binary=False)
            _DENSE[keys[i]] = tokens
    return [_DENSE[key] for key in keys]


def _tokens_problem(value: object, n: int) -> str | None:
    """What is wrong with a cached dense generation of `n` tokens, or None."""
    if not isinstance(value, list) or len(value) != n:
        return f"not a list of {n} token ids"
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        return "entries that are not token ids (non-negative integers)"
    return None


class LongGenTask:
    name = "longgen"
    metrics = ("longgen_agreement", "longgen_divergence_step", "longgen_kl")
    default_decode_tokens = 64
    needs_attention_mass = False

    def check(self, spec: TaskSpec) -> None:
        unknown = set(spec.params) - {"kl"}
        if unknown or not isinstance(spec.params.get("kl", True), bool):
            raise RuntimeInputError(
                f"the longgen task takes one param, kl (true or false), got {spec.params}"
            )
        n = spec.decode_tokens or self.default_decode_tokens
        if n < 2:
            raise RuntimeInputError("longgen decode_tokens must be at least 2")
        if spec.context_tokens - n < 16:
            raise RuntimeInputError(
                f"longgen context_tokens ({spec.context_tokens}) must exceed decode_tokens ({n}) "
                "by at least 16"
            )

    def prompts(self, spec: TaskSpec, runner: SequenceRunner) -> list[list[int]]:
        """Evenly spread prose windows of context_tokens - decode_tokens tokens."""
        self.check(spec)
        n_prompt = spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens)
        tokens = _prose_tokens(runner)
        room = len(tokens) - n_prompt
        if room < 0:
            raise RuntimeInputError(
                f"longgen context_tokens {spec.context_tokens} exceeds the {len(tokens)} tokens "
                "of the offline text"
            )
        starts = np.linspace(0, room, spec.n_samples).astype(int) if spec.n_samples > 1 else [0]
        return [tokens[s : s + n_prompt] for s in starts]

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        n = spec.decode_tokens or self.default_decode_tokens
        prompts = self.prompts(spec, runner)
        dense = _dense_generations(runner, prompts, n)
        with_kl = spec.params.get("kl", True)
        policy = runner.generate_batch(prompts, n, with_logits=with_kl)
        teacher = (
            runner.dense_teacher_forced_batch(prompts, [tokens[:-1] for tokens, _ in policy])
            if with_kl else [None] * len(prompts)
        )
        agree, first, kl = [], [], []
        for ref, (tokens, logits), dense_logits in zip(dense, policy, teacher, strict=True):
            agree.append(float(np.mean(np.asarray(ref) == np.asarray(tokens))))
            first.append(float(first_divergence(ref, tokens)))
            if logits is not None and dense_logits is not None:
                kl.append(float(kl_divergence_nats(dense_logits, logits).mean()))
        ids = [sample_id(spec, seed, i) for i in range(len(prompts))]
        answers = [answer_text(runner.tokenizer, tokens) for tokens, _ in policy]
        return {
            "longgen_agreement": bootstrap_mean(agree, seed, ids=ids, answers=answers),
            "longgen_divergence_step": bootstrap_mean(first, seed, ids=ids, answers=answers),
            "longgen_kl": bootstrap_mean(kl, seed, ids=ids if with_kl else None, answers=answers),
        }
