"""Checking output paths before any work: a file or directory the user named must be writable.

`check_output_file(path, option)` and `check_output_dir(path, option)` raise a DseError naming the
option (`--out`, `--timeline`, `out_dir`, ...) and the path when it cannot be written: a directory where
a file is wanted (or the reverse), a parent that is a regular file, no permission. They create nothing
but the missing parent directories of a directory output (which the command would create anyway).
`write_text(path, text, option)` writes whole or not at all (a temporary file renamed over the target:
traces/atomic_write.py), turning an OSError into the same kind of message; the previous file stays intact.
"""

from __future__ import annotations

import os
from pathlib import Path

from dse.errors import DseError
from traces.user_files import check_output_kind

__all__ = ["check_output_file", "check_output_dir", "write_text", "describe_os_error"]


def describe_os_error(exc: OSError) -> str:
    """The operating system's reason, in words (e.g. 'Permission denied')."""
    return exc.strerror or str(exc) or type(exc).__name__


def _first_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_parent(path: Path, option: str) -> None:
    """The nearest existing ancestor of `path` must be a writable directory."""
    anchor = _first_existing(path.parent)
    if not anchor.is_dir():
        raise DseError(
            f"{option} {path}: {anchor} is a file, not a directory; choose a path under a directory"
        )
    if not os.access(anchor, os.W_OK | os.X_OK):
        raise DseError(f"{option} {path}: cannot write in {anchor} (permission denied); choose another place")


def check_output_file(path: str | os.PathLike[str], option: str) -> Path:
    """`path` may be written as a file (an existing file is replaced); DseError naming `option` if not."""
    p = Path(path)
    check_output_kind(p, option)  # a FIFO or a device: writing could block forever
    if p.is_dir():
        raise DseError(f"{option} {p} is a directory; give a file name, e.g. {p / 'out'}")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise DseError(f"{option} {p}: the file is not writable (permission denied)")
        return p
    _check_parent(p, option)
    return p


def check_output_dir(path: str | os.PathLike[str], option: str) -> Path:
    """`path` may be used as an output directory (created with its parents if missing)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise DseError(f"{option} {p} is a file, not a directory; give a directory")
    if p.is_dir():
        if not os.access(p, os.W_OK | os.X_OK):
            raise DseError(f"{option} {p}: cannot write in it (permission denied); choose another directory")
        return p
    _check_parent(p, option)
    return p


def write_text(path: str | os.PathLike[str], text: str, option: str) -> None:
    """Replace `path` with `text` atomically; DseError naming `option` and the cause when the system
    refuses (the previous file, if any, is left as it was)."""
    from traces.atomic_write import atomic_write_text

    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise DseError(
            f"{option} {path}: cannot write ({describe_os_error(exc)}); nothing was written and any previous "
            "file there is unchanged"
        ) from None
