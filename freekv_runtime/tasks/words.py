"""RULER aggregation: common-words extraction (`cwe`) and frequent-words extraction (`fwe`).

As NVIDIA/RULER's `common_words_extraction.py` and `freq_words_extraction.py` build them:
- cwe: a numbered list "1. word 2. word ..." in which `num_cw` (10) common words appear `freq_cw` times
  and every other word `freq_ucw` times, shuffled; RULER uses 30 / 3 from 4K tokens and 6 / 1 below.
  Prompt "Below is a numbered list of words. In these words, some appear more often than others.
  Memorize the ones that appear most often.\n{context}\nQuestion: What are the 10 most common words in
  the above list?" + " Answer: The top 10 words that appear most often in the list are:". Words: the
  offline prose's words (RULER: wonderwords). RULER's one few-shot example is left out (it would take a
  large share of a short context). Answer: the common words.
- fwe: coded words of `coded_wordlen` (6) random letters, word k of the vocabulary appearing
  num_words * k^-alpha / zeta(alpha) times (alpha 2.0), the most frequent one replaced by "...." noise;
  prompt "Read the following coded text and track the frequency of each coded word. Find the three most
  frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the
  dots '....'. What are the three most frequently appeared words in the above coded text?" + " Answer:
  According to the coded text above, the three most frequently appeared words are:". Answer: words 2-4.
The list is as long as fits (the largest count whose prompt fits, found by bisection); the few tokens
left are filled with prose before the instructions so that every prompt has the same length.
Score: string_match_all. Metrics: `cwe_score`, `fwe_score`.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import numpy as np

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, sample_id
from freekv_runtime.tasks.ruler_common import (
    RULER_TOKENS_TO_GENERATE,
    chat_wrap,
    check_params,
    encode,
    int_param,
    padded_prompt,
    prose_words,
    score_samples,
    template_param,
)

__all__ = ["CommonWordsTask", "FrequentWordsTask", "zeta"]

CWE_HEAD = (
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n"
)
CWE_TAIL = "\nQuestion: What are the {n} most common words in the above list?"
CWE_PREFIX = " Answer: The top {n} words that appear most often in the list are:"
FWE_HEAD = (
    "Read the following coded text and track the frequency of each coded word. Find the three most "
    "frequently appeared coded words. "
)
FWE_TAIL = (
    "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three most "
    "frequently appeared words in the above coded text?"
)
FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"


def zeta(alpha: float, terms: int = 100_000) -> float:
    """Riemann zeta(alpha), alpha > 1: partial sum plus the integral tail."""
    k = np.arange(1, terms + 1, dtype=np.float64)
    return float((k**-alpha).sum() + terms ** (1 - alpha) / (alpha - 1))


def _largest_fit(build: Callable[[int], list[int]], prompt_tokens: int, low: int, high: int) -> list[int]:
    """The prompt of the largest n in [low, high] whose token count fits prompt_tokens (bisection)."""
    best = build(low)
    if len(best) > prompt_tokens:
        raise RuntimeInputError(
            f"context_tokens too small: even the shortest list takes {len(best)} prompt "
            f"tokens (> {prompt_tokens})"
        )
    while low < high:
        mid = (low + high + 1) // 2
        ids = build(mid)
        if len(ids) <= prompt_tokens:
            low, best = mid, ids
        else:
            high = mid - 1
    return best


class _Words:
    name: str
    metric: str
    default_decode_tokens: int
    needs_attention_mass = False
    valid: set[str]

    @property
    def metrics(self) -> tuple[str, ...]:
        return (self.metric,)

    def check(self, spec: TaskSpec) -> None:
        self._params(spec)
        if spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens) < 128:
            raise RuntimeInputError(f"{self.name} context_tokens must exceed decode_tokens by at least 128")

    def _params(self, spec: TaskSpec) -> dict[str, Any]:
        raise NotImplementedError

    def _sample(
        self, p: dict[str, Any], tokenizer: Any, prompt_tokens: int, rng: np.random.Generator
    ) -> tuple[list[int], list[str]]:
        raise NotImplementedError

    def samples(self, spec: TaskSpec, tokenizer: Any, seed: int) -> list[tuple[list[int], list[str]]]:
        """(prompt ids of exactly context_tokens - decode_tokens, answer words) per sample."""
        p = self._params(spec)
        rng = np.random.default_rng(seed)
        prompt_tokens = spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens)
        return [self._sample(p, tokenizer, prompt_tokens, rng) for _ in range(spec.n_samples)]

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        samples = self.samples(spec, runner.tokenizer, seed)
        outputs = runner.generate_batch(
            [ids for ids, _ in samples], spec.decode_tokens or self.default_decode_tokens
        )
        preds = [answer_text(runner.tokenizer, ids) for ids, _ in outputs]
        ids = [sample_id(spec, seed, i) for i in range(len(samples))]
        return {self.metric: score_samples(preds, [a for _, a in samples], "all", seed, ids)}


class CommonWordsTask(_Words):
    name = "cwe"
    metric = "cwe_score"
    default_decode_tokens = RULER_TOKENS_TO_GENERATE["common_words_extraction"]  # 120

    def _params(self, spec: TaskSpec) -> dict[str, Any]:
        check_params(self.name, spec.params, {"num_cw", "freq_cw", "freq_ucw", "template"})
        short = spec.context_tokens < 4096
        return {
            "template": template_param(self.name, spec.params),
            "num_cw": int_param(self.name, spec.params, "num_cw", 10, 1, 50),
            "freq_cw": int_param(self.name, spec.params, "freq_cw", 6 if short else 30, 2, 1000),
            "freq_ucw": int_param(self.name, spec.params, "freq_ucw", 1 if short else 3, 1, 1000),
        }

    def _sample(
        self, p: dict[str, Any], tokenizer: Any, prompt_tokens: int, rng: np.random.Generator
    ) -> tuple[list[int], list[str]]:
        if p["freq_ucw"] >= p["freq_cw"]:
            raise RuntimeInputError("cwe freq_ucw must be smaller than freq_cw")
        words = list(prose_words())
        order = rng.permutation(len(words))
        pool = [words[i] for i in order]
        common = pool[: p["num_cw"]]
        n = p["num_cw"]
        before, after = chat_wrap(tokenizer, p["template"])
        lead = encode(tokenizer, before) if before else []
        tail = CWE_TAIL.format(n=n) + after + CWE_PREFIX.format(n=n)
        shuffle_seed = int(rng.integers(2**31))

        def build(n_uncommon: int) -> list[int]:
            uncommon = pool[n : n + n_uncommon]
            items = common * p["freq_cw"] + uncommon * p["freq_ucw"]
            np.random.default_rng(shuffle_seed).shuffle(items)
            body = " ".join(f"{i + 1}. {w}" for i, w in enumerate(items))
            return encode(tokenizer, CWE_HEAD + body + tail)

        ids = _largest_fit(build, prompt_tokens - len(lead), 0, len(pool) - n)
        return padded_prompt(tokenizer, prompt_tokens, ids, rng, lead), common


class FrequentWordsTask(_Words):
    name = "fwe"
    metric = "fwe_score"
    default_decode_tokens = RULER_TOKENS_TO_GENERATE["freq_words_extraction"]  # 50

    def _params(self, spec: TaskSpec) -> dict[str, Any]:
        check_params(self.name, spec.params, {"alpha", "coded_wordlen", "vocab_size", "template"})
        alpha = spec.params.get("alpha", 2.0)
        if not isinstance(alpha, int | float) or not 1.0 < float(alpha) <= 10.0:
            raise RuntimeInputError(f"fwe param alpha must be a number in (1, 10], got {alpha!r}")
        return {
            "template": template_param(self.name, spec.params),
            "alpha": float(alpha),
            "coded_wordlen": int_param(self.name, spec.params, "coded_wordlen", 6, 2, 16),
            # RULER: max_seq_length // 50
            "vocab_size": int_param(
                self.name, spec.params, "vocab_size", max(10, spec.context_tokens // 50), 5, 100_000
            ),
        }

    def _sample(
        self, p: dict[str, Any], tokenizer: Any, prompt_tokens: int, rng: np.random.Generator
    ) -> tuple[list[int], list[str]]:
        vocab: list[str] = []
        while len(vocab) < p["vocab_size"]:
            word = "".join(rng.choice(list(string.ascii_lowercase), size=p["coded_wordlen"]))
            if word not in vocab:
                vocab.append(word)
        vocab[0] = "...."  # the top-ranked word is noise, as in RULER
        k = np.arange(1, len(vocab) + 1, dtype=np.float64)
        share = k ** -p["alpha"] / zeta(p["alpha"])
        shuffle_seed = int(rng.integers(2**31))
        before, after = chat_wrap(tokenizer, p["template"])
        lead = encode(tokenizer, before) if before else []

        def build(num_words: int) -> list[int]:
            counts = (num_words * share).astype(int)
            items = [w for w, c in zip(vocab, counts, strict=True) for _ in range(c)]
            np.random.default_rng(shuffle_seed).shuffle(items)
            return encode(tokenizer, FWE_HEAD + " ".join(items) + FWE_TAIL + after + FWE_PREFIX)

        ids = _largest_fit(build, prompt_tokens - len(lead), 1, prompt_tokens * 2)
        return padded_prompt(tokenizer, prompt_tokens, ids, rng, lead), vocab[1:4]
