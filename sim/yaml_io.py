"""Reading the project's YAML files (hardware profiles, synthetic specs, study files) strictly and safely.

The mechanism lives on the ground floor (`traces.user_files`: a regular file, of bounded size, UTF-8;
`traces.safe_load`: YAML/JSON with limits on nesting, aliases and duplicate keys); this module keeps the
simulator's names for it. `load_yaml(text, where)` parses like yaml.safe_load within those limits (a
repeated key is a `DuplicateKeyError`, a `yaml.YAMLError`); `read_text_file(path, what)` reads a
user-named file as UTF-8 text, a `FileReadError` naming the file otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.errors import SimInputError
from traces.safe_load import MAX_YAML_BYTES, DuplicateKeyError, LimitedLoader, LoadLimitError, load_yaml_text
from traces.user_files import UserFileError, read_user_text

__all__ = ["UniqueKeyLoader", "DuplicateKeyError", "load_yaml", "read_text_file", "FileReadError",
           "LoadLimitError"]

UniqueKeyLoader = LimitedLoader


class FileReadError(SimInputError, UserFileError):
    """A file could not be read as UTF-8 text; the message names it and says why."""


def load_yaml(text: str, where: str = "YAML text") -> Any:
    """Parse `text` like yaml.safe_load within traces.safe_load's limits (LoadLimitError naming `where`);
    a repeated mapping key is an error (yaml.YAMLError)."""
    return load_yaml_text(text, where)


def read_text_file(path: str | Path, what: str, max_bytes: int = MAX_YAML_BYTES) -> str:
    """The UTF-8 text of the regular file `path`; FileReadError("<what> <path> ...") when it cannot be read
    (another kind of file, too large, missing, not UTF-8)."""
    try:
        return read_user_text(path, what, max_bytes)
    except UserFileError as exc:
        raise FileReadError(str(exc)) from None
