"""Parsing user YAML and JSON with limits, so that no file can explode, recurse or hang the reader.

    data = load_user_yaml(path, "study file")     # read (traces.user_files) + parse + limits
    data = load_user_json(path, "requests file")
    data = load_yaml_text(text, where="--set tau")

Limits (each refusal says which one was exceeded and names the file):
- size: the file itself (`traces.user_files`); YAML at most `MAX_YAML_BYTES` (PyYAML parses about a
  megabyte a second), JSON at most `MAX_JSON_BYTES`;
- nesting: at most `MAX_DEPTH` levels of lists and mappings (PyYAML's composer and Python's JSON reader
  recurse once per level, and a 1,000-deep file ends in a RecursionError);
- size after aliases: a YAML document may hold at most `MAX_NODES` values counting every alias as a copy
  of what it names, so that nine anchors of nine aliases each ("billion laughs", 9**9 values from a few
  hundred bytes) are refused while they are being read, used or not;
- recursion: an alias inside the node it names (`a: &a [*a]`) is refused;
- duplicate keys: a mapping (YAML or JSON object) holding one key twice is refused with both lines (YAML)
  or the key (JSON); the parsers would otherwise keep one silently;
- JSON's non-standard NaN, Infinity and -Infinity are refused (no input has a use for them), and so are
  numbers of more than 4,300 digits.

`LoadLimitError` (a `UserFileError`) is raised for a limit, `DuplicateKeyError` (a `yaml.YAMLError`) for a
repeated YAML key; other YAML syntax errors stay `yaml.YAMLError`, JSON ones `json.JSONDecodeError`, so
that callers word "not valid YAML/JSON" as before.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from traces.user_files import UserFileError, read_user_text

__all__ = [
    "LoadLimitError",
    "DuplicateKeyError",
    "LimitedLoader",
    "load_yaml_text",
    "load_json_text",
    "load_user_yaml",
    "load_user_json",
    "compose_yaml_text",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_YAML_BYTES",
    "MAX_JSON_BYTES",
]

MAX_DEPTH = 100
MAX_NODES = 100_000
MAX_YAML_BYTES = 2 * 2**20
MAX_JSON_BYTES = 64 * 2**20


class LoadLimitError(UserFileError):
    """A YAML/JSON text past one of the loader's limits (nesting, size after aliases, recursion, NaN)."""


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A YAML mapping holds one key twice."""


try:  # libyaml's parser (C) makes the events, PyYAML's composer (Python, limited here) the nodes
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: Any) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


class LimitedLoader(Composer, _Parser, SafeConstructor, Resolver):
    """A safe YAML loader (PyYAML's safe constructors and resolver) with the limits of this module (depth,
    size after aliases, recursive aliases, duplicate keys). `where` names the file in messages. Events
    come from libyaml when PyYAML has it (about seven times faster than PyYAML's own scanner)."""

    where = "YAML text"

    def __init__(self, stream: Any) -> None:
        _Parser.__init__(self, stream)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        Composer.__init__(self)
        self._depth = 0
        self._total = 0  # values composed so far, each alias counted as a copy of what it names
        self._sizes: dict[int, int] = {}  # id(node) -> values under it, aliases expanded

    def _limit(self, what: str) -> LoadLimitError:
        return LoadLimitError(f"{self.where} {what}")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None and id(node) not in self._sizes:
                line = event.start_mark.line + 1
                raise self._limit(
                    f"has a recursive alias (*{event.anchor} at line {line} is inside the node "
                    f"&{event.anchor} names); aliases may only name finished nodes"
                )
            if node is not None:
                self._count(self._sizes[id(node)], event.start_mark.line + 1)
            return super().compose_node(parent, index)
        self._count(1, self.peek_event().start_mark.line + 1)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            line = self.peek_event().start_mark.line + 1
            raise self._limit(
                f"is nested deeper than {MAX_DEPTH} levels (at line {line}); "
                f"the limit is {MAX_DEPTH} levels of lists and mappings"
            )
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        self._sizes[id(node)] = 1 + sum(self._sizes.get(id(c), 1) for c in children)
        return node

    def _count(self, values: int, line: int) -> None:
        self._total += values
        if self._total > MAX_NODES:
            raise self._limit(
                f"holds more than {MAX_NODES:,} values counting each alias as a copy of what it names "
                f"(passed at line {line}); an alias bomb or a file too large to be a setting? The limit is "
                f"{MAX_NODES:,} values"
            )

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except (TypeError, yaml.YAMLError):
                    continue  # the base class reports an unhashable key itself
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise DuplicateKeyError(
                        None,
                        None,
                        f"duplicate key {key!r} (first at line {seen[key]}, again at line {line}); "
                        "each key may appear once in a mapping",
                        key_node.start_mark,
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]


def _loader_for(where: str) -> type[LimitedLoader]:
    return type("LimitedLoaderFor", (LimitedLoader,), {"where": where})


def load_yaml_text(text: str, where: str = "YAML text") -> Any:
    """Parse `text` like yaml.safe_load, within this module's limits (LoadLimitError naming `where`)."""
    _check_yaml_size(text, where)
    with _libyaml_depth_as_limit(where):
        return yaml.load(text, Loader=_loader_for(where))  # noqa: S506 - a SafeLoader subclass


@contextmanager
def _libyaml_depth_as_limit(where: str) -> Iterator[None]:
    """libyaml's scanner has its own nesting limit (1000 levels), met before ours when it reads ahead."""
    try:
        yield
    except yaml.YAMLError as exc:
        if "maximum nesting depth" not in str(exc):
            raise
        raise LoadLimitError(
            f"{where} is nested deeper than {MAX_DEPTH} levels; the limit is {MAX_DEPTH} "
            "levels of lists and mappings"
        ) from None


def _check_yaml_size(text: str, where: str) -> None:
    if len(text) > MAX_YAML_BYTES:
        raise LoadLimitError(
            f"{where} is {len(text) / 2**20:.1f} MiB of YAML; the limit is {MAX_YAML_BYTES // 2**20} MiB"
        )


def compose_yaml_text(text: str, where: str = "YAML text") -> yaml.Node | None:
    """The node graph of `text` (for line numbers), within the same limits as `load_yaml_text`."""
    _check_yaml_size(text, where)
    with _libyaml_depth_as_limit(where):
        return yaml.compose(text, Loader=_loader_for(where))  # noqa: S506 - a SafeLoader subclass


def _refuse_constant(where: str, text: str) -> Any:
    def refuse(name: str) -> Any:
        found = re.search(r"(?<![A-Za-z\"])-?" + name.lstrip("-") + r"(?![A-Za-z\"])", text)
        at = ""
        if found is not None:
            line = text.count("\n", 0, found.start()) + 1
            before = text[max(0, found.start() - 40) : found.end()].split("\n")[-1].strip()
            at = f" at line {line} ({before})"
        raise LoadLimitError(f"{where} holds {name}{at}, which is not a JSON number; write a finite number")

    return refuse


def _unique_pairs(where: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise LoadLimitError(
                    f"{where} has a duplicate key {key!r} in one object; each key may appear once"
                )
            out[key] = value
        return out

    return pairs


def _depth_within(value: Any, where: str) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > MAX_DEPTH:
                raise LoadLimitError(
                    f"{where} is nested deeper than {MAX_DEPTH} levels; "
                    f"the limit is {MAX_DEPTH} levels of lists and objects"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children if isinstance(c, (list, dict)))


def load_json_text(text: str, where: str = "JSON text") -> Any:
    """Parse `text` like json.loads, within this module's limits (LoadLimitError naming `where`);
    json.JSONDecodeError for a syntax error."""
    try:
        value = json.loads(
            text, parse_constant=_refuse_constant(where, text), object_pairs_hook=_unique_pairs(where)
        )
    except RecursionError:
        raise LoadLimitError(
            f"{where} is nested deeper than {MAX_DEPTH} levels; "
            f"the limit is {MAX_DEPTH} levels of lists and objects"
        ) from None
    except ValueError as exc:
        if isinstance(exc, (json.JSONDecodeError, LoadLimitError)):
            raise
        raise LoadLimitError(f"{where} holds a number JSON cannot read ({exc})") from None
    _depth_within(value, where)
    return value


def load_user_yaml(path: str | os.PathLike[str], what: str) -> Any:
    """Read `path` (a regular UTF-8 file of at most MAX_YAML_BYTES) and parse it as YAML within limits;
    messages start with '<what> <path>'."""
    text = read_user_text(path, what, MAX_YAML_BYTES)
    return load_yaml_text(text, f"{what} {path}")


def load_user_json(path: str | os.PathLike[str], what: str) -> Any:
    """Read `path` (a regular UTF-8 file of at most MAX_JSON_BYTES) and parse it as JSON within limits."""
    text = read_user_text(path, what, MAX_JSON_BYTES)
    return load_json_text(text, f"{what} {path}")
