"""`--set` / `--option` flags: KEY=VALUE pairs, each VALUE parsed as JSON when it is JSON (5, 0.01, true,
"max"), else kept as text. Whoever receives them validates the keys and values."""

from __future__ import annotations

import json
from typing import Any

from dse.errors import DseError
from traces.safe_load import load_json_text

__all__ = ["key_values"]


def key_values(values: tuple[str, ...], option: str, example: str = "") -> dict[str, Any]:
    """{KEY: VALUE} from `option`'s repeated KEY=VALUE words; a word without '=' or key is a DseError
    naming the flag (and `example`, e.g. "kernel_size=7", when given)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            hint = f" (e.g. {example})" if example else ""
            raise DseError(f"{option} expects KEY=VALUE{hint}, got {item!r}")
        try:
            out[key] = load_json_text(raw, f"{option} {key}")
        except json.JSONDecodeError:
            out[key] = raw
    return out
