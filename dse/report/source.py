"""Which study a report is about: from a study YAML, an Optuna storage URL, or an SQLite file path.

`study_location(source, study_name)` returns (storage URL, study name or None); `dse.results`
then opens the storage and, when the name is None, takes its only study (or names the ones present).
"""

from __future__ import annotations

from pathlib import Path

from dse.errors import DseError

__all__ = ["study_location"]

_VALID = (
    "give a study YAML (its storage and name are used), an Optuna storage URL (sqlite:///..., "
    "postgresql://...) or an SQLite file written by `dse sweep`"
)


def study_location(source: str, study_name: str | None = None) -> tuple[str, str | None]:
    """(storage URL, study name). A study YAML gives both (`--study` overrides the name)."""
    path = Path(source)
    if path.suffix in (".yaml", ".yml"):
        from dse.study import load_study_file

        study, _text = load_study_file(path)
        return study.storage_url, study_name or study.name
    if "://" in source:
        return source, study_name
    if path.is_file():
        return f"sqlite:///{path.resolve()}", study_name
    raise DseError(f"{source!r} is not an existing file or a storage URL: {_VALID}")
