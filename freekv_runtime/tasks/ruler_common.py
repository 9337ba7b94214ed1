"""What the RULER-style tasks share: RULER's scoring, exact-length prompts on the offline prose, word lists.

Scoring, as NVIDIA/RULER's `scripts/eval/synthetic/constants.py` defines it (there in percent, here as a
fraction): `string_match_all` is the share of the references that occur in the prediction
(case-insensitive substring), `string_match_part` is 1 if any reference occurs. Per-sample scores become
an `Estimate` (Wilson when every sample scored 0 or 1, else a bootstrap over samples) carrying each
sample's id (tasks.base.sample_id), score and prediction.

Prompts are built from token ids so that prompt + decoded tokens = `context_tokens` exactly (equal
lengths: a task's samples run as one batch). The haystack is the prose of Python's reference
(tasks/text.py, RULER's "essay" haystack is Paul Graham's essays, which are not available offline) or
RULER's "noise" sentences repeated, or RULER's "needle" haystack (`needles`: every filler sentence a
distractor needle made by the task); inserted lines go after the sentence boundary nearest their depth.
Prose sentences holding a word of the task's keys are skipped (`exclude_words`), so a key never occurs
in the haystack other than in its needle (RULER's keys are wonderwords adjective-noun pairs, foreign to
its essays).

Template (`template` param of every RULER-style task): "plain" (RULER's own prompt text) or "chat" (the
text as the user turn of the model's chat template, the answer prefix opening the assistant turn, as
RULER's model templates place it); `chat_wrap` gives the text before and after the user content.
Decode budgets are RULER's tokens_to_generate (NVIDIA/RULER scripts/data/synthetic/constants.py: niah
128, variable_tracking 30, common_words_extraction 120, freq_words_extraction 50, qa 32; the tasks of
scripts/synthetic.yaml use them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate, estimate
from freekv_runtime.tasks.text import reference_prose, split_sentences

__all__ = [
    "string_match_all",
    "string_match_part",
    "score_samples",
    "encode",
    "haystack_prompt",
    "padded_prompt",
    "prose_words",
    "HAYSTACKS",
    "NOISE",
    "DEPTHS",
    "check_params",
    "int_param",
    "chat_wrap",
    "template_param",
    "TEMPLATES",
    "RULER_TOKENS_TO_GENERATE",
]

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
HAYSTACKS = ("prose", "noise", "needles")
TEMPLATES = ("plain", "chat")
# NVIDIA/RULER scripts/data/synthetic/constants.py `tokens_to_generate` per task family
RULER_TOKENS_TO_GENERATE = {"niah": 128, "variable_tracking": 30, "common_words_extraction": 120,
                            "freq_words_extraction": 50, "qa": 32}
_PLACEHOLDER = "\x00CONTENT\x00"
DEPTHS = np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int) / 100  # RULER's 40 depths
_WORD = re.compile(r"^[a-z]{4,10}$")


def string_match_all(prediction: str, references: list[str]) -> float:
    """Share of references found in the prediction (case-insensitive): RULER's niah/vt/cwe/fwe metric."""
    pred = prediction.lower()
    return sum(r.lower() in pred for r in references) / len(references)


def string_match_part(prediction: str, references: list[str]) -> float:
    """1.0 if any reference is in the prediction (case-insensitive): RULER's qa metric."""
    pred = prediction.lower()
    return float(any(r.lower() in pred for r in references))


def score_samples(
    predictions: list[str], references: list[list[str]], metric: str, seed: int, ids: list[str] | None = None
) -> Estimate:
    """Per-sample RULER scores (metric "all" or "part") -> Estimate over samples; with ids (one per
    prediction), it carries each sample's id, score and prediction."""
    fn = string_match_all if metric == "all" else string_match_part
    scores = [fn(p, r) for p, r in zip(predictions, references, strict=True)]
    return estimate(scores, seed, ids=ids, answers=predictions if ids is not None else None)


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def check_params(task: str, params: dict[str, Any], valid: dict[str, Any]) -> None:
    unknown = set(params) - set(valid)
    if unknown:
        raise RuntimeInputError(f"unknown {task} params {sorted(unknown)}: valid are {sorted(valid)}")


def int_param(task: str, params: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = params.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise RuntimeInputError(f"{task} param {name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def template_param(task: str, params: dict[str, Any]) -> str:
    value = params.get("template", "plain")
    if value not in TEMPLATES:
        raise RuntimeInputError(f"{task} param template must be one of {', '.join(TEMPLATES)}, got {value!r}")
    return value


def chat_wrap(tokenizer: Any, template: str) -> tuple[str, str]:
    """(before, after) the user content: the model's chat template with the generation prompt for
    "chat" (when the tokenizer has one), ("", "") for "plain"."""
    if template == "chat" and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": _PLACEHOLDER}], add_generation_prompt=True, tokenize=False
        )
        before, after = text.split(_PLACEHOLDER)
        return before, after
    return "", ""


@lru_cache(maxsize=1)
def prose_words() -> tuple[str, ...]:
    """Distinct lowercase words of 4-10 letters in the offline prose, sorted (~3000)."""
    words = {w for w in re.findall(r"[A-Za-z]+", reference_prose()) if _WORD.match(w)}
    return tuple(sorted(words))


def _filler(tokenizer: Any, haystack: str, n_tokens: int, rng: np.random.Generator,
            distractor: Callable[[np.random.Generator], str] | None = None,
            exclude_words: frozenset[str] = frozenset()) -> list[list[int]]:
    """Sentences as token ids, at least n_tokens in all (the prose from a random sentence on, without the
    sentences holding an excluded word; or distractor needles for "needles")."""
    if haystack not in HAYSTACKS:
        raise RuntimeInputError(f"haystack must be one of {', '.join(HAYSTACKS)}, got {haystack!r}")
    if haystack == "needles":
        if distractor is None:
            raise RuntimeInputError("haystack 'needles' needs a task that makes distractor needles (niah)")
        pieces, n_have = [], 0
        while n_have < n_tokens:
            pieces.append(encode(tokenizer, " " + distractor(rng)))
            n_have += len(pieces[-1])
        return pieces
    if haystack == "noise":
        sentences = [NOISE]
    else:
        sentences = split_sentences(reference_prose())
        start = int(rng.integers(len(sentences)))
        sentences = sentences[start:] + sentences[:start]
        if exclude_words:
            sentences = [s for s in sentences
                         if not exclude_words & {w.lower() for w in re.findall(r"[A-Za-z]+", s)}]
    pieces, cache, n_have, i = [], {}, 0, 0
    while n_have < n_tokens:
        s = sentences[i % len(sentences)]
        if s not in cache:
            cache[s] = encode(tokenizer, " " + s)
        pieces.append(cache[s])
        n_have += len(cache[s])
        i += 1
    return pieces


def haystack_prompt(
    tokenizer: Any,
    prompt_tokens: int,
    head: str,
    inserts: list[tuple[float, str]],
    tail: str,
    haystack: str,
    rng: np.random.Generator,
    distractor: Callable[[np.random.Generator], str] | None = None,
    exclude_words: frozenset[str] = frozenset(),
) -> list[int]:
    """head + haystack with `inserts` (depth 0..1, text) at sentence boundaries + tail, exactly
    prompt_tokens tokens (the haystack's last sentence may be cut short). distractor / exclude_words: see
    `_filler`."""
    head_ids, tail_ids = encode(tokenizer, head), encode(tokenizer, tail)
    insert_ids = [(d, encode(tokenizer, " " + text)) for d, text in sorted(inserts, key=lambda x: x[0])]
    n_filler = prompt_tokens - len(head_ids) - len(tail_ids) - sum(len(ids) for _, ids in insert_ids)
    if n_filler < 16:
        raise RuntimeInputError(
            f"context_tokens too small: the instructions, inserted lines and question take "
            f"{prompt_tokens - n_filler} tokens; give at least {prompt_tokens - n_filler + 16} plus the "
            "decode tokens"
        )
    pieces = _filler(tokenizer, haystack, n_filler, rng, distractor, exclude_words)
    bounds, n = [0], 0  # token offsets of sentence boundaries within the filler
    for ids in pieces:
        n += len(ids)
        bounds.append(min(n, n_filler))
    filler = [t for ids in pieces for t in ids][:n_filler]
    out, last = list(head_ids), 0
    for depth, ids in insert_ids:
        at = min(bounds, key=lambda b: abs(b - depth * n_filler))
        at = max(at, last)
        out += filler[last:at] + ids
        last = at
    out += filler[last:] + tail_ids
    assert len(out) == prompt_tokens
    return out


def padded_prompt(
    tokenizer: Any, prompt_tokens: int, body_ids: list[int], rng: np.random.Generator,
    lead_ids: list[int] | None = None,
) -> list[int]:
    """lead_ids (e.g. the chat template's opening) + prose tokens and a blank line + body_ids (a complete
    prompt shorter than prompt_tokens) so that the result has exactly prompt_tokens tokens (for tasks
    whose body is a list of items)."""
    lead = list(lead_ids or [])
    gap = prompt_tokens - len(body_ids) - len(lead)
    if gap < 0:
        raise ValueError(f"body of {len(body_ids) + len(lead)} tokens exceeds {prompt_tokens}")
    if gap == 0:
        return lead + list(body_ids)
    sep = encode(tokenizer, "\n\n")
    if gap <= len(sep):
        return lead + sep[:gap] + body_ids
    pieces = _filler(tokenizer, "prose", gap - len(sep), rng)
    filler = [t for ids in pieces for t in ids][: gap - len(sep)]
    return lead + filler + sep + body_ids
