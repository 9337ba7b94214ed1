"""An exclusive file lock (fcntl) shared by the sweep processes of one machine.

`exclusive(path)` holds the lock for a `with` block: two sweeps started at once measure a baseline once,
a re-queued trial is handed to one worker only, and an interrupted trial is re-queued once. The lock is
not re-entrant: a process holding `path` must not take it again (use a separate file per purpose).
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from dse.errors import DseError

__all__ = ["exclusive"]


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created if missing) for the `with` block."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")  # noqa: SIM115 - closed in finally
    except OSError as exc:
        raise DseError(
            f"cannot create the lock file {path} ({exc.strerror or exc}); is out_dir writable?"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
