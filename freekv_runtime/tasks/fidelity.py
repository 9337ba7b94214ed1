"""Fidelity: how close the policy's next-token distributions stay to dense attention's, teacher-forced.

Text: the prose of Python's reference (tasks/text.py), tokenized once. Sample i takes a window of
`context_tokens` tokens at evenly spread offsets: the first `context_tokens - decode_tokens` are the
prompt, the rest are fed one per decode step (teacher forcing), so policy and dense attention see the
same tokens. Dense logits come from the dense policy, cached in memory and on disk (per model, text and
window) so that a sweep computes them once.

Metrics, over all decode steps of all samples:
- `top1_agreement`: share of steps where the policy's argmax token equals dense attention's.
- `mean_kl`: mean KL(dense || policy) of the next-token distributions, in nats.
- `attention_mass`: mean over steps, sparse layers (not in RuntimeConfig.dense_layers) and KV heads
  of the share of dense attention probability the policy attended (1.0 for dense attention; NaN if
  the policy did not measure it).
Per-sample results (Estimate.samples): each window's value, with the policy's teacher-forced argmax
tokens decoded as its answer.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from freekv_runtime.cache_files import read_cached, write_cached
from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate, bootstrap_mean
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, sample_id
from freekv_runtime.tasks.text import PROSE_SOURCE, reference_prose

__all__ = ["FidelityTask", "kl_divergence_nats", "top1_agreement"]

_TOKENS: dict[str, list[int]] = {}  # model_key -> tokenized prose
_DENSE: dict[str, torch.Tensor] = {}  # cache key -> dense logits (N, V)


def kl_divergence_nats(reference_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(softmax(reference) || softmax(logits)) per row: (N, V), (N, V) -> (N,) float64."""
    ref_logp = torch.log_softmax(reference_logits.double(), dim=-1)
    logp = torch.log_softmax(logits.double(), dim=-1)
    return (ref_logp.exp() * (ref_logp - logp)).sum(dim=-1).clamp_min(0.0)


def top1_agreement(reference_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """(N, V), (N, V) -> (N,) bool: same argmax token."""
    return reference_logits.argmax(dim=-1) == logits.argmax(dim=-1)


def _prose_tokens(runner: SequenceRunner) -> list[int]:
    if runner.model_key not in _TOKENS:
        encoded = runner.tokenizer(reference_prose(), add_special_tokens=False)
        _TOKENS[runner.model_key] = list(encoded["input_ids"])
    return _TOKENS[runner.model_key]


def _dense_cache_dir() -> Path:
    from freekv_runtime.weights import cache_root

    return cache_root() / "dense_logits"


def _dense_key(runner: SequenceRunner, prompt: list[int], forced: list[int]) -> str:
    return hashlib.sha256(
        f"{runner.model_key}|{PROSE_SOURCE}|{len(prompt)}|{len(forced)}|".encode()
        + np.asarray(prompt + forced, dtype=np.int64).tobytes()
    ).hexdigest()[:24]


def _dense_logits_batch(
    runner: SequenceRunner, windows: list[tuple[list[int], list[int]]]
) -> list[torch.Tensor]:
    """Dense-attention logits (N, V) per window, from memory, disk, or computed once (in one batch)."""
    keys = [_dense_key(runner, p, f) for p, f in windows]
    for key in keys:
        if key not in _DENSE:
            cached = read_cached(_dense_cache_dir() / f"{key}.pt", _load_logits, _logits_problem)
            if cached is not None:
                _DENSE[key] = cached
    todo = [i for i, key in enumerate(keys) if key not in _DENSE]
    if todo:
        computed = runner.dense_teacher_forced_batch(
            [windows[i][0] for i in todo], [windows[i][1] for i in todo]
        )
        for i, logits in zip(todo, computed, strict=True):
            write_cached(_dense_cache_dir() / f"{keys[i]}.pt", lambda f, t=logits: torch.save(t.clone(), f))
            _DENSE[keys[i]] = logits
    return [_DENSE[key] for key in keys]


def _load_logits(path: Path) -> torch.Tensor:
    return torch.load(path, map_location="cpu", weights_only=True)


def _logits_problem(value: object) -> str | None:
    """What is wrong with cached dense logits (N, V), or None."""
    if not isinstance(value, torch.Tensor) or value.ndim != 2 or not value.is_floating_point():
        return f"not a 2-D float tensor of logits: {type(value).__name__}"
    if bool(torch.isnan(value).any()):
        return "logits that are NaN"
    return None


class FidelityTask:
    name = "fidelity"
    metrics = ("top1_agreement", "mean_kl", "attention_mass")
    default_decode_tokens = 64
    needs_attention_mass = True

    def check(self, spec: TaskSpec) -> None:
        """RuntimeInputError for parameters the task cannot run with (before any model is loaded)."""
        if spec.params:
            raise RuntimeInputError(f"the fidelity task takes no params, got {sorted(spec.params)}")
        n_forced = spec.decode_tokens or self.default_decode_tokens
        if spec.context_tokens - n_forced < 16:
            raise RuntimeInputError(
                f"fidelity context_tokens ({spec.context_tokens}) must exceed decode_tokens ({n_forced}) "
                "by at least 16 (context_tokens counts the prompt and the decoded tokens)"
            )

    def windows(self, spec: TaskSpec, runner: SequenceRunner) -> list[tuple[list[int], list[int]]]:
        """(prompt ids, forced ids) per sample: evenly spread windows of the tokenized prose."""
        self.check(spec)
        n_forced = spec.decode_tokens or self.default_decode_tokens
        n_prompt = spec.context_tokens - n_forced
        tokens = _prose_tokens(runner)
        room = len(tokens) - spec.context_tokens
        if room < 0:
            raise RuntimeInputError(
                f"fidelity context_tokens {spec.context_tokens} exceeds the {len(tokens)} tokens of the "
                f"offline text ({PROSE_SOURCE}); use a shorter context"
            )
        starts = np.linspace(0, room, spec.n_samples).astype(int) if spec.n_samples > 1 else [0]
        return [
            (tokens[s : s + n_prompt], tokens[s + n_prompt : s + spec.context_tokens]) for s in starts
        ]

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        """Metrics over all samples (windows are fixed; `seed` only seeds the bootstrap). Each sample's
        per-step values are averaged first; intervals bootstrap over samples."""
        windows = self.windows(spec, runner)
        dense = _dense_logits_batch(runner, windows)
        results = runner.teacher_forced_batch([p for p, _ in windows], [f for _, f in windows])
        agree, kl, mass, answers = [], [], [], []
        for ref, result in zip(dense, results, strict=True):
            agree.append(float(top1_agreement(ref, result.logits).double().mean()))
            kl.append(float(kl_divergence_nats(ref, result.logits).mean()))
            predicted = result.logits.argmax(dim=-1).tolist()  # (N,) the policy's next-token choices
            answers.append(runner.tokenizer.decode(predicted, skip_special_tokens=True))
            if result.attention_mass is not None:
                n_layers = result.attention_mass.shape[1]
                sparse = [i for i in range(n_layers) if i not in runner.dense_layers] or list(range(n_layers))
                mass.append(float(np.nanmean(result.attention_mass[:, sparse])))
        ids = [sample_id(spec, seed, i) for i in range(len(windows))]
        measured = len(mass) == len(ids)  # the policy measured attention mass (else no samples of it)
        return {
            "top1_agreement": bootstrap_mean(agree, seed, ids=ids, answers=answers),
            "mean_kl": bootstrap_mean(kl, seed, ids=ids, answers=answers),
            "attention_mass": bootstrap_mean(mass, seed, ids=ids if measured else None, answers=answers),
        }
