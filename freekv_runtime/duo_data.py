"""DuoAttention's synthetic multi-passkey retrieval samples, built offline from local prose.

Follows `MultiplePasskeyRetrievalDataset` of mit-han-lab/duo-attention (duo_attn/data.py, read at fe93c31):
- a passkey is `passkey_words` words drawn uniformly from the NATO alphabet (data.py 19-46, 183-188);
- the haystack is one long text cut to the sample's context length, the same text for every sample
  (data.py 125-132 concatenate booksum; here the prose of Python's reference, `tasks.text.reference_prose`,
  the offline haystack of the runtime's RULER-style tasks);
- a sample's context length is one of `context_intervals` evenly spaced lengths in [context_min,
  context_max] haystack tokens (data.py 110-115, 194), its `n_passkeys` needles go at sorted depths drawn
  without replacement from `depth_intervals` evenly spaced ratios in [depth_min, depth_max]
  (data.py 117-119, 196-202), each needle "Remeber this sequence of words, it's the {ordinal} passkey to the
  vault: " + passkey between separators (data.py 78, 219-242; the typo is the code's);
- the prompt is prompt1 + context + prompt2, then for each passkey the question "Based on the content of
  the book, what is the {ordinal} passkey to the vault?\\nPasskey: " + passkey + separator
  (data.py 79-81, 244-270); the labelled positions (where the loss is taken) are the question-and-answer
  tokens (data.py 269: labels -100 on the prompt).
Not done: the padding of the context to a multiple of 16 tokens with haystack tokens (data.py 255-261),
which serves the code's block-sparse kernels; here attention takes any length.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.tasks.text import PROSE_SOURCE, reference_prose

__all__ = ["PasskeyDataSpec", "PasskeySample", "PasskeySamples"]

PASSKEY_ALPHABET = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo",
    "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
    "whiskey", "xray", "yankee", "zulu",
)
ORDINALS = (
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
    "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth",
    "eighteenth", "nineteenth", "twentieth",
)
NEEDLE = "Remeber this sequence of words, it's the {ordinal} passkey to the vault: "
QUESTION = "Based on the content of the book, what is the {ordinal} passkey to the vault?\nPasskey: "
PROMPT1 = "<|im_start|> This is a very long story book: <book> "
PROMPT2 = " </book>.\n\n"
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class PasskeyDataSpec:
    """The sample distribution; the published run's values in comments (duo-attention scripts/train.sh
    25-32 and scripts/run_train.sh 1: context 1000-32000 in 50 intervals, 10 passkeys, depth 0.05-0.95 in
    1000 intervals; passkey length 32 words, data.py 76)."""

    context_min_tokens: int = 1000
    context_max_tokens: int = 32000
    context_intervals: int = 50
    n_passkeys: int = 10
    passkey_words: int = 32
    depth_min: float = 0.05
    depth_max: float = 0.95
    depth_intervals: int = 1000

    def check(self) -> None:
        """RuntimeInputError naming the field when the spec cannot make samples."""
        if not 1 <= self.context_min_tokens <= self.context_max_tokens:
            raise RuntimeInputError(
                f"passkey data: context tokens must satisfy 1 <= min <= max, got min "
                f"{self.context_min_tokens} and max {self.context_max_tokens}")
        if not 1 <= self.n_passkeys <= len(ORDINALS):
            raise RuntimeInputError(
                f"passkey data: passkeys must be 1 to {len(ORDINALS)}, got {self.n_passkeys}")
        if self.passkey_words < 1 or self.context_intervals < 1:
            raise RuntimeInputError("passkey data: passkey words and context intervals must be at least 1")
        if not 0.0 <= self.depth_min <= self.depth_max <= 1.0 or self.depth_intervals < self.n_passkeys:
            raise RuntimeInputError(
                f"passkey data: depths must satisfy 0 <= min <= max <= 1 with at least as many depth "
                f"intervals as passkeys, got {self.depth_min}-{self.depth_max} in {self.depth_intervals}")

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "haystack": PROSE_SOURCE}


@dataclass(frozen=True)
class PasskeySample:
    """token_ids (T,) and labelled (T,) bool: the question-and-answer positions."""

    token_ids: list[int]
    labelled: list[bool]


class PasskeySamples:
    """Draws samples of `spec` with `tokenizer` (called as transformers tokenizers are:
    tokenizer(text, add_special_tokens=...)["input_ids"]); randomness from `draw`'s `rng` only."""

    def __init__(self, spec: PasskeyDataSpec, tokenizer: Any) -> None:
        spec.check()
        self.spec, self.tok = spec, tokenizer
        haystack = self._encode(reference_prose())
        if len(haystack) < spec.context_max_tokens:
            raise RuntimeInputError(
                f"passkey data: context max {spec.context_max_tokens} tokens exceeds the offline haystack "
                f"({len(haystack)} tokens of {PROSE_SOURCE})")
        self.haystack = haystack[: spec.context_max_tokens]
        self.lengths = np.linspace(spec.context_min_tokens, spec.context_max_tokens,
                                   spec.context_intervals).astype(int)  # data.py 110-115 (torch.int cast)
        self.depths = np.linspace(spec.depth_min, spec.depth_max, spec.depth_intervals)
        self.sep = self._encode(SEPARATOR)
        self.needles = [self._encode(NEEDLE.format(ordinal=o)) for o in ORDINALS[: spec.n_passkeys]]
        self.questions = [self._encode(QUESTION.format(ordinal=o)) for o in ORDINALS[: spec.n_passkeys]]
        self.prompt1 = list(self.tok(PROMPT1, add_special_tokens=True)["input_ids"])
        self.prompt2 = self._encode(PROMPT2)

    def _encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def _passkey(self, rng: np.random.Generator) -> list[int]:
        words = rng.integers(0, len(PASSKEY_ALPHABET), self.spec.passkey_words)
        return self._encode(" ".join(PASSKEY_ALPHABET[i] for i in words))

    def draw(self, rng: np.random.Generator) -> PasskeySample:
        """One sample: a random context length (a shuffled epoch in the code's DataLoader; uniform here),
        sorted random depths, fresh passkeys."""
        n = int(self.lengths[rng.integers(len(self.lengths))])
        depths = np.sort(self.depths[rng.permutation(len(self.depths))[: self.spec.n_passkeys]])
        keys = [self._passkey(rng) for _ in range(self.spec.n_passkeys)]
        hay, context, last = self.haystack[:n], [], 0
        for i, (depth, key) in enumerate(zip(depths, keys, strict=True)):
            point = int(len(hay) * depth)
            context += hay[last:point] + self.sep + self.needles[i] + key + self.sep
            last = point
        context += hay[last:]
        prompt = self.prompt1 + context + self.prompt2
        qa: list[int] = []
        for key, question in zip(keys, self.questions, strict=True):
            qa += question + key + self.sep
        return PasskeySample(prompt + qa, [False] * len(prompt) + [True] * len(qa))
