"""rag_facts: facts spread over separately cached documents, a question about one of them.

Built offline like the RULER-style tasks (tasks/ruler_common.py): k documents (param `documents`, 4) of
equal length, each the offline prose with one RULER needle "One of the special magic numbers for {key} is:
{value}." at a random depth from RULER's 40 (keys word-word pairs foreign to the prose, values 7-digit
numbers, as niah does). The prompt is
    prefix: "Some special magic numbers are hidden within the following documents. Make sure to memorize
             them. I will quiz you about one of them afterwards.\n"
    document i: "Document {i + 1}:\n" + prose with its needle + "\n"
    query: "What is the special magic number for {key} mentioned in the provided documents? The special
            magic number for {key} mentioned in the provided documents is"
asking the key of one document drawn at random (param `template` chat wraps prefix and query in the
model's chat template, the answer prefix opening the assistant turn). Prompt + decode tokens =
context_tokens (up to documents - 1 tokens: the documents share what prefix and query leave, in equal
parts). Score: RULER's
string_match_all; fidelity against joint prefill (tasks/rag_common.py). Deterministic for (spec, seed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate
from freekv_runtime.tasks.base import TaskSpec
from freekv_runtime.tasks.niah import NEEDLE, _random_value
from freekv_runtime.tasks.rag_common import RagSample, rag_metrics, run_rag
from freekv_runtime.tasks.ruler_common import (
    DEPTHS,
    chat_wrap,
    check_params,
    encode,
    haystack_prompt,
    int_param,
    template_param,
)

__all__ = ["RagFactsTask"]

PREFIX = ("Some special magic numbers are hidden within the following documents. Make sure to memorize "
          "them. I will quiz you about one of them afterwards.\n")
QUERY = ("What is the special magic number for {key} mentioned in the provided documents? The special magic "
         "number for {key} mentioned in the provided documents is")
_QUERY_RESERVE = 48  # the check's estimate of the query's tokens (a word-pair key; the prompt uses its own)


class RagFactsTask:
    name = "rag_facts"
    default_decode_tokens = 16
    needs_attention_mass = False
    multi_context = True

    @property
    def metrics(self) -> tuple[str, ...]:
        return rag_metrics(self.name)

    def _params(self, spec: TaskSpec) -> dict[str, Any]:
        check_params(self.name, spec.params, {"documents", "template"})
        return {"documents": int_param(self.name, spec.params, "documents", 4, 1, 64),
                "template": template_param(self.name, spec.params)}

    def _doc_tokens(self, spec: TaskSpec, n_other: int, documents: int) -> int:
        """Tokens of each document: what prefix + query (n_other) and the decode tokens leave, shared."""
        budget = spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens) - n_other
        return budget // documents

    def check(self, spec: TaskSpec) -> None:
        p = self._params(spec)
        if self._doc_tokens(spec, 40 + _QUERY_RESERVE, p["documents"]) < 48:
            raise RuntimeInputError(
                f"rag_facts context_tokens {spec.context_tokens} leaves fewer than 48 tokens per document "
                f"for {p['documents']} documents; give at least {p['documents'] * 48 + 140} plus the decode "
                "tokens")

    def samples(self, spec: TaskSpec, tokenizer: Any, seed: int) -> list[RagSample]:
        p = self._params(spec)
        rng = np.random.default_rng(seed)
        before, after = chat_wrap(tokenizer, p["template"])
        prefix = encode(tokenizer, before + PREFIX)
        out = []
        for index in range(spec.n_samples):
            keys: list[str] = []
            while len(keys) < p["documents"]:
                key = _random_value("words", rng)
                if key not in keys:
                    keys.append(key)
            values = [_random_value("numbers", rng) for _ in keys]
            asked = int(rng.integers(len(keys)))
            query_text = QUERY.format(key=keys[asked])
            if after:  # the chat template's turn boundary before the answer prefix
                question, _, answer_prefix = query_text.partition("? ")
                query_text = question + "?" + after + answer_prefix
            query = encode(tokenizer, query_text)
            n_doc = self._doc_tokens(spec, len(prefix) + len(query), p["documents"])
            words = frozenset(w for k in keys for w in k.split("-"))
            docs = []
            for i, (key, value) in enumerate(zip(keys, values, strict=True)):
                depth = float(rng.choice(DEPTHS[1:-1]))
                docs.append(haystack_prompt(tokenizer, n_doc, f"Document {i + 1}:\n",
                                            [(depth, NEEDLE.format(type_v="numbers", key=key, value=value))],
                                            "\n", "prose", rng, exclude_words=words))
            out.append(RagSample(prefix, docs, query, [values[asked]], index))
        return out

    def run(self, spec: TaskSpec, runner: Any, seed: int) -> dict[str, Estimate]:
        samples = self.samples(spec, runner.tokenizer, seed)
        return run_rag(self.name, spec, runner, seed, samples,
                       spec.decode_tokens or self.default_decode_tokens, "all")
