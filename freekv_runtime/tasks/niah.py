"""RULER needle-in-a-haystack: single, multi-key, multi-value and multi-query, on the offline prose.

As NVIDIA/RULER's `scripts/data/synthetic/niah.py` builds them: needles "One of the special magic
{numbers} for {key} is: {value}." at depths drawn from RULER's 40 depths, shuffled; the prompt
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will
    quiz you about the numbers afterwards.\n{context}\nWhat are all the special magic numbers for {query}
    mentioned in the provided text?" + answer prefix
    " The special magic numbers for {query} mentioned in the provided text are"
(singular wording when one value is asked for). Keys are "word-word" pairs from the prose's words
(RULER: wonderwords adjective-noun), values 7-digit numbers (or words, or UUIDs). Score: RULER's
string_match_all over the queried keys' values.

Variants (NVIDIA/RULER scripts/synthetic.yaml): `niah_single` 1 key, 1 value, 1 query; `niah_multikey`
4 keys (3 distractors), 1 query (multikey_1); `niah_multikey_2` 1 key in a haystack made of distractor
needles (type_haystack needle, word keys, number values); `niah_multikey_3` the same with uuid keys and
uuid values; `niah_multivalue` 1 key with 4 values; `niah_multiquery` 4 keys, all 4 queried.
Difficulty params: num_keys, num_values, num_queries, key_type (words | uuids), value_type (numbers |
words | uuids), haystack (prose | noise | needles), template (plain | chat: the model's chat template,
the answer prefix opening the assistant turn). Distractor needles get fresh random keys and values of
the same types (RULER niah.py `type_haystack == 'needle'`). Word keys are never words of the prose
haystack: prose sentences holding a key's word are skipped (RULER's wonderwords keys do not occur in its
essays). Decode budget: RULER's tokens_to_generate for niah, 128 (scripts/data/synthetic/constants.py);
generation is scored up to the first end token (tasks/answer.py).
Metric: `<variant>_score` (fraction 0..1).
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import numpy as np

from freekv_runtime.errors import RuntimeInputError
from freekv_runtime.stats import Estimate
from freekv_runtime.tasks.answer import answer_text
from freekv_runtime.tasks.base import SequenceRunner, TaskSpec, sample_id
from freekv_runtime.tasks.ruler_common import (
    DEPTHS,
    HAYSTACKS,
    RULER_TOKENS_TO_GENERATE,
    chat_wrap,
    check_params,
    haystack_prompt,
    int_param,
    prose_words,
    score_samples,
    template_param,
)

__all__ = ["NiahSingleTask", "NiahMultiKeyTask", "NiahMultiKey2Task", "NiahMultiKey3Task",
           "NiahMultiValueTask",
           "NiahMultiQueryTask", "NiahSample"]

NEEDLE = "One of the special magic {type_v} for {key} is: {value}."
TEMPLATE_HEAD = (
    "Some special magic {type_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_v} afterwards.\n"
)
TEMPLATE_TAIL = "\nWhat are all the special magic {type_v} for {query} mentioned in the provided text?"
ANSWER_PREFIX = " The special magic {type_v} for {query} mentioned in the provided text are"
VALUE_TYPES = ("numbers", "words", "uuids")
KEY_TYPES = ("words", "uuids")


class NiahSample:
    def __init__(self, token_ids: list[int], answers: list[str]) -> None:
        self.token_ids, self.answers = token_ids, answers


def _random_value(kind: str, rng: np.random.Generator) -> str:
    if kind == "numbers":
        return str(int(rng.integers(1_000_000, 10_000_000)))
    words = prose_words()
    if kind == "words":
        return f"{words[rng.integers(len(words))]}-{words[rng.integers(len(words))]}"
    return str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | int(rng.integers(0, 2**63)), version=4))


class _Niah:
    name: ClassVar[str]
    defaults: ClassVar[dict[str, int]]
    text_defaults: ClassVar[dict[str, str]] = {}  # key_type, value_type, haystack where RULER's differ
    default_decode_tokens = RULER_TOKENS_TO_GENERATE["niah"]
    needs_attention_mass = False

    @property
    def metrics(self) -> tuple[str, ...]:
        return (f"{self.name}_score",)

    def _params(self, spec: TaskSpec) -> dict[str, Any]:
        p = spec.params
        check_params(self.name, p, {"num_keys", "num_values", "num_queries", "key_type", "value_type",
                                    "haystack", "template"})
        out: dict[str, Any] = {k: int_param(self.name, p, k, v, 1, 16) for k, v in self.defaults.items()}
        out["num_keys"] = max(out["num_keys"], out["num_queries"])  # as RULER does
        out["template"] = template_param(self.name, p)
        d = {"key_type": "words", "value_type": "numbers", "haystack": "prose", **self.text_defaults}
        for name, valid in (("key_type", KEY_TYPES), ("value_type", VALUE_TYPES)):
            out[name] = p.get(name, d[name])
            if out[name] not in valid:
                raise RuntimeInputError(f"{self.name} {name} must be one of {valid}, got {out[name]!r}")
        out["haystack"] = p.get("haystack", d["haystack"])
        if out["haystack"] not in HAYSTACKS:
            raise RuntimeInputError(
                f"{self.name} haystack must be one of {HAYSTACKS}, got {out['haystack']!r}"
            )
        return out

    def check(self, spec: TaskSpec) -> None:
        self._params(spec)
        if spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens) < 128:
            raise RuntimeInputError(
                f"{self.name} context_tokens ({spec.context_tokens}) must exceed "
                "decode_tokens by at least 128"
            )

    def samples(self, spec: TaskSpec, tokenizer: Any, seed: int) -> list[NiahSample]:
        """The n_samples prompts (deterministic in seed) with their expected answers."""
        p = self._params(spec)
        rng = np.random.default_rng(seed)
        prompt_tokens = spec.context_tokens - (spec.decode_tokens or self.default_decode_tokens)
        type_v, type_k = p["value_type"], p["key_type"]
        before, after = chat_wrap(tokenizer, p["template"])
        out = []
        for _ in range(spec.n_samples):
            keys = [_random_value(type_k, rng) for _ in range(p["num_keys"])]
            values = [[_random_value(type_v, rng) for _ in range(p["num_values"])] for _ in keys]
            needles = [
                NEEDLE.format(type_v=type_v, key=k, value=v)
                for k, vs in zip(keys, values, strict=True)
                for v in vs
            ]
            rng.shuffle(needles)
            depths = rng.choice(DEPTHS, size=len(needles), replace=len(needles) > len(DEPTHS))
            asked = sorted(rng.choice(len(keys), size=p["num_queries"], replace=False).tolist())
            queries = [keys[i] for i in asked]
            query = queries[0] if len(queries) == 1 else ", ".join(queries[:-1]) + ", and " + queries[-1]
            head, tail, prefix = TEMPLATE_HEAD, TEMPLATE_TAIL, ANSWER_PREFIX
            shown_type = type_v
            if p["num_queries"] * p["num_values"] == 1:  # RULER's singular wording
                head = head.replace("Some", "A").replace("are", "is")
                tail = tail.replace("are all", "is").replace("are", "is")
                prefix = prefix.replace("are", "is")
                shown_type = type_v[:-1]

            def distractor(g: np.random.Generator, type_v: str = type_v, keys: list[str] = keys) -> str:
                key = _random_value(type_k, g)
                while key in keys:  # a distractor never repeats a real key
                    key = _random_value(type_k, g)
                return NEEDLE.format(type_v=type_v, key=key, value=_random_value(type_v, g))

            key_words = frozenset(w for k in keys for w in k.split("-")) if type_k == "words" else frozenset()
            ids = haystack_prompt(
                tokenizer,
                prompt_tokens,
                before + head.format(type_v=shown_type),
                list(zip(depths.tolist(), needles, strict=True)),
                tail.format(type_v=shown_type, query=query) + after
                + prefix.format(type_v=shown_type, query=query),
                p["haystack"],
                rng,
                distractor=distractor,
                exclude_words=key_words,
            )
            out.append(NiahSample(ids, [v for i in asked for v in values[i]]))
        return out

    def run(self, spec: TaskSpec, runner: SequenceRunner, seed: int) -> dict[str, Estimate]:
        samples = self.samples(spec, runner.tokenizer, seed)
        outputs = runner.generate_batch(
            [s.token_ids for s in samples], spec.decode_tokens or self.default_decode_tokens
        )
        preds = [answer_text(runner.tokenizer, ids) for ids, _ in outputs]
        ids = [sample_id(spec, seed, i) for i in range(len(samples))]
        return {self.metrics[0]: score_samples(preds, [s.answers for s in samples], "all", seed, ids)}


class NiahSingleTask(_Niah):
    name = "niah_single"
    defaults = {"num_keys": 1, "num_values": 1, "num_queries": 1}


class NiahMultiKeyTask(_Niah):
    name = "niah_multikey"
    defaults = {"num_keys": 4, "num_values": 1, "num_queries": 1}


class NiahMultiKey2Task(_Niah):
    """RULER niah_multikey_2: one key hidden in a haystack of distractor needles (word keys, numbers)."""

    name = "niah_multikey_2"
    defaults = {"num_keys": 1, "num_values": 1, "num_queries": 1}
    text_defaults = {"haystack": "needles"}


class NiahMultiKey3Task(_Niah):
    """RULER niah_multikey_3: as niah_multikey_2 with uuid keys and uuid values."""

    name = "niah_multikey_3"
    defaults = {"num_keys": 1, "num_values": 1, "num_queries": 1}
    text_defaults = {"haystack": "needles", "key_type": "uuids", "value_type": "uuids"}


class NiahMultiValueTask(_Niah):
    name = "niah_multivalue"
    defaults = {"num_keys": 1, "num_values": 4, "num_queries": 1}


class NiahMultiQueryTask(_Niah):
    name = "niah_multiquery"
    defaults = {"num_keys": 4, "num_values": 1, "num_queries": 4}
