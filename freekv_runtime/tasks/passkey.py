"""Passkey retrieval: find a 5-digit key hidden at some depth of a long filler text.

Prompt, line by line as in the classic passkey test (params `template`: "plain", default; or "chat",
inside the model's chat template when it has one, the assistant turn starting "The pass key is"):
    intro / filler ... / needle "The pass key is 71432. Remember it. 71432 is the pass key." /
    filler ... / "What is the pass key? The pass key is"
Measured on smollm2-135m with full KV (greedy): this plain layout answers 10/10 depths at 2K; with the
needle inside a filler line instead of on its own line it answered 0/2 at 2K, and the chat layout
2/3 at 1K, so plain is the default.
Filler: the repeated sentences of the classic passkey test ("repeat") or prose of the Python reference
("natural", see tasks/text.py). Sample i puts the needle at depth 5%..95% (evenly spread over the
samples; 50% for one sample) and uses a key drawn from `numpy.random.default_rng(seed)`. The prompt is
built from token ids so that prompt + decoded tokens = `context_tokens` exactly. Greedy decoding; a
sample is correct if the key's digits appear in the decoded text. Metric: `passkey_accuracy` (Wilson
interval). Samples run as one batch (equal prompt lengths).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate, proportion
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, sample_id
from freekv_runtime.tasks.text import reference_prose, split_sentences

__all__ = ["PasskeyTask", "PasskeyPrompt", "build_prompt", "FILLERS", "TEMPLATES"]

INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there."
)
REPEAT_SENTENCES = (
    "The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again.",
)
NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = "What is the pass key?"
ANSWER_PREFIX = "The pass key is"
FILLERS = ("repeat", "natural")
TEMPLATES = ("plain", "chat")
_PLACEHOLDER = "\x00CONTENT\x00"


@dataclass(frozen=True)
class PasskeyPrompt:
    """token_ids: the full prompt; needle_token: index of the needle's first token; key: the answer."""

    token_ids: list[int]
    needle_token: int
    key: int
    depth: float


def _template(tokenizer: Any, template: str) -> tuple[str, str]:
    """Text before and after the user content: the chat template ("chat", if the tokenizer has one) or
    the classic plain prompt ending "What is the pass key? The pass key is"."""
    if template == "chat" and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": _PLACEHOLDER}], add_generation_prompt=True, tokenize=False
        )
        before, after = text.split(_PLACEHOLDER)
        return before, after + ANSWER_PREFIX
    return "", " " + ANSWER_PREFIX


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _filler_sentences(filler: str, rng: np.random.Generator) -> list[str]:
    if filler == "repeat":
        return list(REPEAT_SENTENCES)
    sentences = split_sentences(reference_prose())
    start = int(rng.integers(len(sentences)))
    return sentences[start:] + sentences[:start]


def build_prompt(
    tokenizer: Any, prompt_tokens: int, depth: float, key: int, filler: str, rng: np.random.Generator,
    template: str = "plain",
) -> PasskeyPrompt:
    """A passkey prompt of exactly `prompt_tokens` tokens with the needle at `depth` (0..1) of the filler."""
    before, after = _template(tokenizer, template)
    head = _encode(tokenizer, before + INTRO + "\n")
    needle = _encode(tokenizer, "\n" + NEEDLE.format(key=key) + "\n")  # on its own line
    tail = _encode(tokenizer, "\n" + QUESTION + after)
    n_filler = prompt_tokens - len(head) - len(needle) - len(tail)
    if n_filler < 16:
        raise RuntimeInputError(
            f"passkey context_tokens too small: the template, needle and question alone take "
            f"{prompt_tokens - n_filler} tokens; give at least {prompt_tokens - n_filler + 16 + 8}"
        )
    sentences = _filler_sentences(filler, rng)
    pieces: list[list[int]] = []  # filler sentences as token ids, in order
    cache: dict[str, list[int]] = {}
    n_have, i = 0, 0
    while n_have < n_filler:
        sentence = sentences[i % len(sentences)]
        if sentence not in cache:
            cache[sentence] = _encode(tokenizer, " " + sentence)
        ids = cache[sentence]
        pieces.append(ids)
        n_have += len(ids)
        i += 1
    # needle after the sentence boundary closest to depth * n_filler
    target, n_before = depth * n_filler, 0
    for ids in pieces:
        if abs(n_before + len(ids) - target) > abs(n_before - target) or n_before + len(ids) > n_filler:
            break
        n_before += len(ids)
    filler_ids = [t for ids in pieces for t in ids][:n_filler]  # last sentence may be cut short
    token_ids = head + filler_ids[:n_before] + needle + filler_ids[n_before:] + tail
    return PasskeyPrompt(token_ids=token_ids, needle_token=len(head) + n_before, key=key, depth=depth)


class PasskeyTask:
    name = "passkey"
    metrics = ("passkey_accuracy",)
    default_decode_tokens = 8
    needs_attention_mass = False

    def check(self, spec: TaskSpec) -> None:
        """RuntimeInputError for parameters the task cannot run with (before any model is loaded)."""
        filler = spec.params.get("filler", "repeat")
        if filler not in FILLERS:
            raise RuntimeInputError(f"passkey filler must be one of {', '.join(FILLERS)}, got {filler!r}")
        template = spec.params.get("template", "plain")
        if template not in TEMPLATES:
            raise RuntimeInputError(
                f"passkey template must be one of {', '.join(TEMPLATES)}, got {template!r}"
            )
        unknown = set(spec.params) - {"filler", "template"}
        if unknown:
            raise RuntimeInputError(
                f"unknown passkey params {sorted(unknown)}: valid are 'filler', 'template'"
            )
        decode_tokens = spec.decode_tokens or self.default_decode_tokens
        if spec.context_tokens - decode_tokens < 64:
            raise RuntimeInputError(
                f"passkey context_tokens ({spec.context_tokens}) must exceed decode_tokens "
                f"({decode_tokens}) by at least 64 (context_tokens counts the prompt and the decoded tokens)"
            )

    def prompts(self, spec: TaskSpec, tokenizer: Any, seed: int) -> list[PasskeyPrompt]:
        """The n_samples prompts of `spec` (deterministic in seed)."""
        self.check(spec)
        filler = spec.params.get("filler", "repeat")
        template = spec.params.get("template", "plain")
        n = spec.n_samples
        depths = np.linspace(0.05, 0.95, n) if n > 1 else np.array([0.5])
        rng = np.random.default_rng(seed)
        keys = rng.integers(10_000, 100_000, size=n)
        decode_tokens = spec.decode_tokens or self.default_decode_tokens
        prompt_tokens = spec.context_tokens - decode_tokens
        return [
            build_prompt(tokenizer, prompt_tokens, float(depth), int(key), filler, rng, template)
            for depth, key in zip(depths, keys, strict=True)
        ]

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        """All samples in batches (equal prompt lengths); Wilson interval of the share answered."""
        decode_tokens = spec.decode_tokens or self.default_decode_tokens
        prompts = self.prompts(spec, runner.tokenizer, seed)
        outputs = runner.generate_batch([p.token_ids for p in prompts], decode_tokens)
        answers = [answer_text(runner.tokenizer, ids) for ids, _ in outputs]
        return {"passkey_accuracy": proportion(
            [str(p.key) in a for p, a in zip(prompts, answers, strict=True)],
            ids=[sample_id(spec, seed, i) for i in range(len(prompts))], answers=answers,
        )}
