"""RULER's harder niah variants, keys foreign to the haystack, the chat template and RULER's decode budgets
(NVIDIA/RULER scripts/synthetic.yaml, scripts/data/synthetic/constants.py), on the real tokenizer."""

from __future__ import annotations

import re
import uuid

import pytest
import torch

from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.weights import load_model

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


@pytest.fixture(scope="module")
def tokenizer():
    return load_model("smollm2-135m", None, torch.device("cpu"), torch.float32).tokenizer


def test_decode_budgets_are_rulers_tokens_to_generate() -> None:
    budgets = {name: get_task(name).default_decode_tokens
               for name in ("niah_single", "niah_multikey", "niah_multikey_2", "niah_multikey_3",
                            "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")}
    niah = {n: 128 for n in budgets if n.startswith("niah")}
    assert budgets == {**niah, "vt": 30, "cwe": 120, "fwe": 50} and len(niah) == 6


def test_multikey_3_hides_a_uuid_key_among_distractor_needles(tokenizer) -> None:
    spec = TaskSpec("niah_multikey_3", context_tokens=1024, n_samples=2)
    for sample in get_task("niah_multikey_3").samples(spec, tokenizer, seed=0):
        text = tokenizer.decode(sample.token_ids)
        needles = re.findall(r"One of the special magic uuids for (\S+) is: (\S+)\.", text)
        assert len(needles) > 5  # the haystack is needles (~50 tokens each)
        (answer,) = sample.answers
        assert uuid.UUID(answer) and sum(v == answer for _, v in needles) == 1
        key = next(k for k, v in needles if v == answer)
        assert UUID.fullmatch(key) and text.count(key) == 3  # its needle, the question, the answer prefix
        assert len({k for k, _ in needles}) == len(needles)  # every distractor has its own key


def test_multikey_2_uses_word_keys_and_number_values(tokenizer) -> None:
    spec = TaskSpec("niah_multikey_2", context_tokens=768, n_samples=1)
    (sample,) = get_task("niah_multikey_2").samples(spec, tokenizer, seed=1)
    text = tokenizer.decode(sample.token_ids)
    needles = re.findall(r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d{7})\.", text)
    assert len(needles) > 10 and sample.answers[0] in {v for _, v in needles}


def test_word_keys_never_occur_in_the_prose_haystack(tokenizer) -> None:
    spec = TaskSpec("niah_multikey", context_tokens=1536, n_samples=3)
    for sample in get_task("niah_multikey").samples(spec, tokenizer, seed=2):
        text = tokenizer.decode(sample.token_ids)
        keys = re.findall(r"special magic numbers? for ([a-z]+-[a-z]+) is", text)
        assert len(keys) == 4
        words = {w for k in keys for w in k.split("-")}
        needle_free = re.sub(r"One of the special magic numbers? for [a-z]+-[a-z]+ is: \d+\.", "", text)
        question_free = needle_free.split("What is the special magic")[0]
        assert not words & set(re.findall(r"[a-z]+", question_free.lower()))


@pytest.mark.parametrize("task", ["niah_single", "vt", "cwe", "fwe"])
def test_chat_template_wraps_every_ruler_task(tokenizer, task: str) -> None:
    spec = TaskSpec(task, context_tokens=1024, n_samples=1, params={"template": "chat"})
    samples = get_task(task).samples(spec, tokenizer, seed=0)
    ids = samples[0].token_ids if hasattr(samples[0], "token_ids") else samples[0][0]
    prompt_tokens = 1024 - get_task(task).default_decode_tokens
    assert len(ids) == prompt_tokens
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>") and "<|im_start|>assistant\n" in text
    answer_prefix = "The special magic" if task == "niah_single" else "Answer:"
    assert text.split("<|im_start|>assistant\n")[1].lstrip().startswith(answer_prefix)
