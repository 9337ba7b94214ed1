"""YAML with source positions, dotted overrides, and readable validation errors for study files.

`read_yaml_with_marks` parses YAML and records, for every key path (a tuple of str keys and int list
indices), the line where its value starts, so a schema error can say "line 12, search.page_size[1]".
`apply_overrides` applies `--set a.b=value` (value parsed as YAML) and remembers which paths came from
the command line.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from dse.errors import DseError
from sim.yaml_io import load_yaml
from traces.safe_load import compose_yaml_text

__all__ = ["read_yaml_with_marks", "apply_overrides", "format_validation_error", "Marks"]

Path_ = tuple[str | int, ...]
Marks = dict[Path_, str]  # path -> "line N" or "--set key=value"


def read_yaml_with_marks(text: str, source: str) -> tuple[Any, Marks]:
    """Parse `text`; returns the plain data and {path: "line N"} for every mapping key / list item."""
    try:
        node = compose_yaml_text(text, source)
        data = load_yaml(text, source)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise DseError(f"{source}: not valid YAML{where}: {problem}.") from None
    marks: Marks = {}
    if node is not None:
        _walk(node, (), marks)
    return data, marks


def _walk(node: yaml.Node, path: Path_, marks: Marks) -> None:
    marks[path] = f"line {node.start_mark.line + 1}"
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            _walk(value_node, (*path, key), marks)
            marks[(*path, key)] = f"line {key_node.start_mark.line + 1}"
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), marks)


def apply_overrides(data: Any, overrides: list[str] | tuple[str, ...], marks: Marks) -> Any:
    """Return a copy of `data` with each "dotted.key=value" set (value parsed as YAML: 4, 0.9, [16, 32],
    null). Intermediate mappings are created; list items are addressed by index (search.tau.0=0.8)."""
    data = copy.deepcopy(data) if data is not None else {}
    for item in overrides:
        if "=" not in item:
            raise DseError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. --set sampler.seed=1")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".")]
        if not all(parts):
            raise DseError(f"--set {item!r}: the key {key!r} has an empty part; use e.g. search.page_size")
        try:
            value = load_yaml(raw, f"--set {key.strip()}") if raw.strip() else None
        except yaml.YAMLError as exc:
            raise DseError(f"--set {item!r}: the value is not valid YAML ({exc}).") from None
        target = data
        path: list[str | int] = []
        for part in parts[:-1]:
            target, step = _descend(target, part, item)
            path.append(step)
        last: str | int = parts[-1]
        if isinstance(target, list):
            last = _index(target, parts[-1], item)
            target[last] = value
        elif isinstance(target, dict):
            target[last] = value
        else:
            raise DseError(f"--set {item!r}: {'.'.join(parts[:-1])} is not a mapping or list")
        full = (*path, last)
        for p in [p for p in marks if p[: len(full)] == full]:
            del marks[p]
        marks[full] = f"--set {item}"
    return data


def _descend(target: Any, part: str, item: str) -> tuple[Any, str | int]:
    if isinstance(target, list):
        idx = _index(target, part, item)
        return target[idx], idx
    if not isinstance(target, dict):
        raise DseError(f"--set {item!r}: cannot descend into {part!r}: its parent is not a mapping")
    if target.get(part) is None:
        target[part] = {}
    return target[part], part


def _index(target: list, part: str, item: str) -> int:
    try:
        idx = int(part)
        target[idx]
    except (ValueError, IndexError):
        raise DseError(f"--set {item!r}: {part!r} is no index of a list of length {len(target)}") from None
    return idx


def _where(loc: Path_, marks: Marks) -> str:
    """The most specific known position of `loc` (or of its closest parent)."""
    for n in range(len(loc), -1, -1):
        if loc[:n] in marks:
            return marks[loc[:n]]
    return "top level"


def _dotted(loc: Path_) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _valid_keys(model: type[BaseModel], loc: Path_) -> list[str] | None:
    """The keys the schema allows at the mapping that holds `loc[-1]`, if it can be found."""
    cls: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = getattr(cls, "model_fields", {}).get(part)
        if field is None:
            return None
        cls = _model_of(field.annotation)
        if cls is None:
            return None
    return sorted(getattr(cls, "model_fields", {}))


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def format_validation_error(exc: ValidationError, source: str, marks: Marks, model: type[BaseModel]) -> str:
    """One paragraph: every problem with its position (line or --set), dotted field and message."""
    parts = []
    errors = [(_strip_tags(e["loc"]), e) for e in exc.errors()]
    # a union field (tau: range or list) reports one error per member: keep the informative ones
    informative = {loc for loc, e in errors if e["type"] not in _TYPE_MISMATCH}
    for loc, err in errors:
        if err["type"] in _TYPE_MISMATCH and loc in informative:
            continue
        msg = err["msg"].removeprefix("Value error, ")
        if not loc:  # a cross-field check: its message starts with the field path
            head = _PATH_RE.match(msg)
            if head:
                loc = _parse_path(head.group(1))
                msg = msg[head.end():]
        if err["type"] == "extra_forbidden":
            valid = _valid_keys(model, loc)
            key = loc[-1] if loc else "?"
            msg = f"unknown key {key!r}" + (f"; valid keys here: {', '.join(valid)}" if valid else "")
        elif err["type"] == "missing":
            msg = "required key is missing"
        elif "input" in err and err["type"] not in ("value_error", "assertion_error"):
            msg += f" (got {err['input']!r})"
        parts.append(f"{_where(loc, marks)}, {_dotted(loc)}: {msg}")
    unique = list(dict.fromkeys(parts))
    return f"{source} is not a valid study: " + "; ".join(unique) + ". See docs/studies.md for every key."


_TYPE_MISMATCH = {"list_type", "dict_type", "model_type", "model_attributes_type"}
_PATH_RE = re.compile(r"^([a-z_][a-z0-9_-]*(?:\.[a-z_][a-z0-9_-]*|\[\d+\])*): ")


def _parse_path(text: str) -> Path_:
    out: list[str | int] = []
    for name, index in re.findall(r"([a-z_][a-z0-9_-]*)|\[(\d+)\]", text):
        out.append(int(index) if index else name)
    return tuple(out)


def _strip_tags(loc: tuple) -> Path_:
    """pydantic adds union-member / validator tags ("list[float]", "TauRange") to loc: drop them."""
    return tuple(p for p in loc if isinstance(p, int) or not _is_tag(p))


def _is_tag(part: str) -> bool:
    """Union-member and validator tags pydantic puts into error locations ("list[float]",
    "function-after[...]", a model class name such as "TauRange"); a user's key is never one."""
    return any(c in part for c in "[]-") or part in _model_names(BaseModel)


def _model_names(cls: type) -> set[str]:
    names = set()
    for sub in cls.__subclasses__():
        names |= {sub.__name__} | _model_names(sub)
    return names
