"""A generated answer as its benchmark scores it: the text up to the first end-of-sequence token.

Generation always runs the requested number of tokens (decode.py: checking each step would sync); the
benchmarks stop there (RULER, LongBench and LongGenBench generate with the model's EOS ids as stop
tokens; FreeKV's harness passes generation_config.eos_token_id, rooikeee/FreeKV accuracy/eval/util.py
`load_model_and_tokenizer`), so text after an end token (a hallucinated next chat turn after
`<|im_end|>`, a second answer after `<|endoftext|>`) is never scored. Stop tokens: the tokenizer's
eos_token_id(s) and the chat end tokens its vocabulary has (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`,
`<|end_of_text|>`, `</s>`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHAT_END_TOKENS", "answer_text", "stop_token_ids", "until_stop"]

CHAT_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>")


def stop_token_ids(tokenizer: Any) -> frozenset[int]:
    """The ids that end a generated answer for `tokenizer` (empty for a byte tokenizer without EOS)."""
    ids: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list | tuple):
        ids.update(int(i) for i in eos)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    ids.update(vocab[t] for t in CHAT_END_TOKENS if t in vocab)
    return frozenset(ids)


def until_stop(ids: list[int], stops: frozenset[int]) -> list[int]:
    """`ids` up to (not including) the first stop id."""
    for i, token in enumerate(ids):
        if token in stops:
            return ids[:i]
    return ids


def answer_text(tokenizer: Any, ids: list[int]) -> str:
    """The scored text of a generated answer: decoded up to the first stop token, special tokens skipped."""
    return tokenizer.decode(until_stop(list(ids), stop_token_ids(tokenizer)), skip_special_tokens=True)
