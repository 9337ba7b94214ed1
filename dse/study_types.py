"""Booleans where a study wants numbers: `trials: true` or `page_size: [false]` is refused, not read as 1/0.

pydantic's lax mode turns `true` into 1 for an `int` field (YAML's `yes`/`on` are booleans too), so a
study could run one trial or a page size of 1 where the user wrote something else entirely. `bool_paths`
walks the parsed YAML alongside a model's field annotations and returns the dotted path of every boolean
given for a field that takes numbers but not booleans; the study refuses them before validating.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

__all__ = ["bool_paths"]


def _flatten(annotation: Any) -> list[Any]:
    """The concrete types an annotation admits (Annotated, Optional and unions unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _flatten(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _flatten(arg)]
    return [annotation]


def _numeric_not_bool(options: list[Any]) -> bool:
    plain = {t for t in options if isinstance(t, type)}
    return bool(plain & {int, float}) and bool not in plain and Any not in options


def _walk(annotation: Any, value: Any, path: str, out: list[str]) -> None:
    options = _flatten(annotation)
    if isinstance(value, bool):
        if _numeric_not_bool(options):
            out.append(path)
        return
    for option in options:
        origin = typing.get_origin(option)
        if isinstance(option, type) and issubclass(option, BaseModel) and isinstance(value, dict):
            for name, field in option.model_fields.items():
                key = field.alias or name
                if key in value:
                    _walk(field.annotation, value[key], f"{path}.{key}" if path else key, out)
            return
        if origin in (list, tuple, set, frozenset) and isinstance(value, list):
            args = typing.get_args(option)
            item = args[0] if args else Any
            for i, v in enumerate(value):
                _walk(item, v, f"{path}[{i}]", out)
            return
        if origin is dict and isinstance(value, dict):
            args = typing.get_args(option)
            item = args[1] if len(args) == 2 else Any
            for k, v in value.items():
                _walk(item, v, f"{path}.{k}", out)
            return


def bool_paths(model: type[BaseModel], data: Any) -> list[str]:
    """Dotted paths in `data` (parsed YAML for `model`) holding a boolean where a number is wanted."""
    out: list[str] = []
    _walk(model, data, "", out)
    return out
