"""Whole-or-nothing output files: write a temporary file beside the target, fsync it, rename it over.

A reader (or the user) sees either the previous file or the new one in full, never a file cut short by a
full disk, a killed process or an interrupted write: `os.replace` is atomic on POSIX when both names are in
one directory, and the fsync before it makes the new contents durable before the name points at them. On
any failure the temporary file is removed and the previous file is left as it was; the OSError propagates
for the caller to name the option or file.

Used for every file a command writes whole (reports, JSON/CSV tables, timelines, calibrated profiles, run
summaries). The trace writer's records file is different by design: it is appended to as the run goes and
its reader keeps every whole record before a torn tail (traces/writer.py).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write_text", "atomic_write_bytes", "atomic_open"]


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8", newline: str | None = None
) -> Iterator[IO[Any]]:
    """Open a temporary file in `path`'s directory for writing (`mode` "w" or "wb"); when the block ends
    without an exception it is flushed, fsynced and renamed to `path` (the file keeps the permissions a
    newly created file would get). On an exception the temporary file is removed and `path` is untouched."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    target = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        _default_permissions(fd, target)
        if mode == "wb":
            handle: IO[Any] = os.fdopen(fd, "wb")
        else:
            handle = os.fdopen(fd, "w", encoding=encoding, newline=newline)
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Replace `path` with `text` whole, or leave it as it was (OSError on failure)."""
    with atomic_open(path, "w", encoding=encoding) as f:
        f.write(text)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` whole, or leave it as it was (OSError on failure)."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def _default_permissions(fd: int, target: Path) -> None:
    """mkstemp creates 0600; give the file the mode of the file it replaces, else 0666 less the umask."""
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    with contextlib.suppress(OSError):
        os.fchmod(fd, mode)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (best effort: some file systems refuse to open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
