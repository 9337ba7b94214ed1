"""Generated answers are scored up to the first end token (EOS or the chat end token), as benchmarks do."""

from __future__ import annotations

import pytest
import torch

from freekv_runtime.random_weights import ByteTokenizer
from freekv_runtime.tasks.answer import answer_text, stop_token_ids, until_stop
from freekv_runtime.weights import load_model


@pytest.fixture(scope="module")
def tokenizer():
    return load_model("smollm2-135m", None, torch.device("cpu"), torch.float32).tokenizer


def test_text_after_the_chat_end_token_is_never_scored(tokenizer) -> None:
    stops = stop_token_ids(tokenizer)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in stops and tokenizer.eos_token_id in stops
    answer = tokenizer(" 12345", add_special_tokens=False)["input_ids"]
    next_turn = tokenizer("\nuser: the passkey is 99999", add_special_tokens=False)["input_ids"]
    for end in (im_end, tokenizer.eos_token_id):
        text = answer_text(tokenizer, answer + [end] + next_turn)
        assert text.strip() == "12345"
    assert answer_text(tokenizer, answer + next_turn).strip().startswith("12345\nuser")  # no end: all


def test_until_stop_without_stop_ids_keeps_everything() -> None:
    assert until_stop([5, 6, 7], frozenset()) == [5, 6, 7]
    assert until_stop([5, 6, 7], frozenset({6})) == [5]
    assert stop_token_ids(ByteTokenizer()) == frozenset()  # a byte tokenizer has no end token


def test_benchmark_loaders_state_where_generation_differs_from_the_official_settings() -> None:
    from freekv_runtime.tasks import TaskSpec, get_task

    lb = get_task("longbench_v2")
    assert lb.default_decode_tokens == 128
    notes = lb.generation_notes(TaskSpec("longbench_v2", context_tokens=4096, n_samples=1))
    assert len(notes) == 1 and "temperature 0.1" in notes[0]
    notes = lb.generation_notes(TaskSpec("longbench_v2", context_tokens=4096, n_samples=1, decode_tokens=32))
    assert any("max_new_tokens is 128" in n for n in notes)
    lg = get_task("longgenbench")
    assert any("16000" in n for n in lg.generation_notes(TaskSpec("longgenbench", 8192, 1)))
    assert lg.generation_notes(TaskSpec("longgenbench", 40000, 1, decode_tokens=16000)) == []
