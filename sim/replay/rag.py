"""RAG requests: k documents of n tokens and a document-cache hit rate, as `dse capacity` and `dse serve`
take them (`--rag k=4,doc_tokens=2048,hit_rate=0.8[,query_tokens=64]`).

A request's prompt is its k documents plus query_tokens (the instruction and the question, 64 by
default): `input_tokens` = k x doc_tokens + query_tokens for every method. A multi-context method
(traces.catalogue kind "multi-context") also gets `documents` = k and `hit_rate` = h as its simulator
knobs (sim/methods/multi_context.py: hits fetched from the host document cache, misses prefilled), unless
--option gives them; every other method reads the joined prompt as one context. Never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import SimInputError
from sim.key_values import split_key_values

__all__ = ["RagRequest", "parse_rag"]

_KEYS = ("k", "doc_tokens", "hit_rate", "query_tokens")


@dataclass(frozen=True)
class RagRequest:
    documents: int
    document_tokens: int
    hit_rate: float
    query_tokens: int = 64

    @property
    def input_tokens(self) -> int:
        return self.documents * self.document_tokens + self.query_tokens

    def options_for(self, method: str, given: dict[str, Any]) -> dict[str, Any]:
        """The simulator knobs of `method` for these requests (module docstring); `given` wins."""
        from traces.catalogue import entry

        if entry(method).kind != "multi-context":
            return dict(given)
        return {"documents": self.documents, "hit_rate": self.hit_rate, **given}


def _bad(text: str, why: str) -> SimInputError:
    return SimInputError(
        f"--rag {text!r}: {why}. Give comma-separated KEY=VALUE pairs: k (documents per request, an "
        "integer >= 1), doc_tokens (tokens per document, an integer >= 1), hit_rate (share of documents "
        "found in the document cache, a number in [0, 1]) and optionally query_tokens (tokens outside the "
        "documents, an integer >= 1, default 64); e.g. --rag k=4,doc_tokens=2048,hit_rate=0.8")


def parse_rag(text: str) -> RagRequest:
    """'k=4,doc_tokens=2048,hit_rate=0.8' -> RagRequest; a SimInputError naming what is wrong."""
    values = split_key_values(
        text, lambda part: _bad(text, f"{part!r} is not one of {', '.join(k + '=...' for k in _KEYS)}"),
        lambda key: _bad(text, f"{key} is given twice"), known=_KEYS)
    missing = [k for k in _KEYS[:3] if k not in values]
    if missing:
        raise _bad(text, f"{', '.join(missing)} missing")
    try:
        k, n = int(values["k"]), int(values["doc_tokens"])
        h = float(values["hit_rate"])
        q = int(values.get("query_tokens", "64"))
    except ValueError:
        raise _bad(text, "a value is not a number of the right kind") from None
    if k < 1 or n < 1 or q < 1:
        raise _bad(text, "k, doc_tokens and query_tokens must be at least 1")
    if not 0.0 <= h <= 1.0:
        raise _bad(text, f"hit_rate must be in [0, 1], got {h:g}")
    return RagRequest(k, n, h, q)
