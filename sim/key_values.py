"""Comma-separated KEY=VALUE text (`--rag k=4,doc_tokens=2048,hit_rate=0.8`, a synthetic demand spec
`correction=0.6,hit=0.8`) split into a dict, each caller wording its own errors. Never imports torch."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

__all__ = ["split_key_values"]


def split_key_values(
    text: str,
    malformed: Callable[[str], Exception],
    twice: Callable[[str], Exception],
    known: Collection[str] | None = None,
    convert: Callable[[str, str], Any] | None = None,
) -> dict[str, Any]:
    """'a=1, b=2' -> {'a': '1', 'b': '2'}: parts split at commas, empty parts skipped, keys and values
    stripped. In order, per part: one without '=' (or, when `known` is given, whose key is not in it)
    raises malformed(part); a key seen before raises twice(key); then the value is stored, as
    convert(key, value) when `convert` is given (it raises its own error)."""
    values: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or (known is not None and key not in known):
            raise malformed(part)
        if key in values:
            raise twice(key)
        values[key] = value.strip() if convert is None else convert(key, value.strip())
    return values
