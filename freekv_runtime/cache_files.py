"""Files the runtime caches between runs (dense logits, dense generations): read back with a check, and a
damaged one (cut short by a full disk, edited, from an incompatible version) is named, deleted and rebuilt
instead of failing every later run.

`read_cached(path, load, check)` returns the value, or None when there is no file or it was damaged (then
a `CacheRebuiltWarning` names the file and why, and the file is gone so the caller recomputes it).
`write_cached(path, write)` writes through a temporary file renamed into place (traces/atomic_write.py).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

from traces.atomic_write import atomic_open

__all__ = ["CacheRebuiltWarning", "read_cached", "write_cached", "discard_damaged"]

T = TypeVar("T")


class CacheRebuiltWarning(UserWarning):
    """A cached file was damaged; it was deleted and is rebuilt."""


def discard_damaged(path: Path, why: str) -> None:
    """Warn that the cache entry `path` is damaged (`why`) and delete it (file or directory)."""
    import shutil

    warnings.warn(
        f"the cached file {path} is damaged ({why}); deleted, rebuilding it",
        CacheRebuiltWarning,
        stacklevel=3,
    )
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def read_cached(path: Path, load: Callable[[Path], T], check: Callable[[T], str | None]) -> T | None:
    """`load(path)` if the file exists and reads back whole and `check(value)` finds nothing wrong (it
    returns what is wrong, else None); otherwise None (a damaged file is named and deleted)."""
    if not path.is_file():
        return None
    try:
        value = load(path)
    except Exception as exc:  # noqa: BLE001 - any failure to read a cache file means: rebuild it
        discard_damaged(path, f"{type(exc).__name__}: {str(exc)[:200]}")
        return None
    problem = check(value)
    if problem is not None:
        discard_damaged(path, problem)
        return None
    return value


def write_cached(path: Path, write: Callable[[IO[Any]], None], binary: bool = True) -> None:
    """Create `path` whole (parents too) with `write(handle)`; a failure leaves no partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb" if binary else "w") as handle:
        write(handle)
