"""`--rag k=4,doc_tokens=2048,hit_rate=0.8` of `dse capacity` and `dse serve` (sim/replay/rag.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["rag_prompt"]


def rag_prompt(rag: str | None, input_tokens: int | None, default: int | None = None) -> tuple[int, Any]:
    """(prompt tokens, RagRequest or None): --rag's prompt length, else --input-tokens (else `default`).
    A SimInputError when both are given, or neither without a default."""
    from sim.errors import SimInputError
    from sim.replay.rag import parse_rag

    if rag is None:
        if input_tokens is None:
            if default is None:
                raise SimInputError("give --input-tokens N (prompt tokens per request) or --rag "
                                    "k=DOCS,doc_tokens=N,hit_rate=H (RAG requests of k documents)")
            return default, None
        return input_tokens, None
    if input_tokens is not None:
        raise SimInputError("give --input-tokens or --rag, not both: --rag sets the prompt to k x doc_tokens "
                            "+ query_tokens tokens")
    request = parse_rag(rag)
    return request.input_tokens, request
