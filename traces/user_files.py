"""Reading a file the user named, safely: a regular file, of bounded size, UTF-8 text.

    text = read_user_text(path, "study file")            # UserFileError naming the file, or the text
    check_output_kind(path, "--timeline")                 # before a command writes an output

Before a byte is read, `stat` says what the path is: a directory, a FIFO (reading it would wait forever
for a writer), a device (/dev/zero never ends), a socket, a dangling link or a symlink loop are each refused
in one sentence naming the file. A file larger than the reader's limit is refused with both sizes (reading
it would take minutes, or all the memory). Text is UTF-8, a leading byte-order mark is dropped; other
encodings (Latin-1, UTF-16, binary) are refused with the offending byte. Outputs are checked the same way:
writing to a FIFO blocks until some other process reads it, so an existing output path must be a regular
file. Torch-free, the ground floor of `traces`, `sim`, `freekv_runtime` and `dse`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = [
    "UserFileError",
    "read_user_bytes",
    "read_user_text",
    "check_output_kind",
    "check_input_path",
    "file_kind",
    "DEFAULT_MAX_BYTES",
]

DEFAULT_MAX_BYTES = 16 * 2**20


class UserFileError(ValueError):
    """A user-named file that cannot be read (or written) as asked; the message names it and says why."""


def file_kind(mode: int) -> str:
    """'a directory', 'a FIFO (named pipe)', 'a character device', ... for a stat mode."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "not a file"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _stat(p: Path, what: str) -> os.stat_result:
    try:
        return os.stat(p)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserFileError(f"{what} {p} cannot be read: it is a loop of symbolic links") from None
        if exc.errno == errno.ENOENT:
            dangling = " (a symbolic link to a missing file)" if p.is_symlink() else ""
            raise UserFileError(f"{what} {p} does not exist{dangling}") from None
        raise UserFileError(f"{what} {p} cannot be read ({exc.strerror or exc})") from None


def check_input_path(path: str | os.PathLike[str], what: str) -> os.stat_result:
    """`path` exists and is a regular file or a directory (not a FIFO, a device, a dangling link or a loop
    of links); UserFileError naming `what` otherwise. Returns its stat."""
    p = Path(path)
    st = _stat(p, what)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise UserFileError(f"{what} {p} is not a regular file or directory but {file_kind(st.st_mode)}")
    return st


def read_user_bytes(path: str | os.PathLike[str], what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The bytes of the regular file `path`; UserFileError("<what> <path> ...") when it is another kind of
    file, larger than `max_bytes`, missing or unreadable."""
    p = Path(path)
    st = _stat(p, what)
    if stat.S_ISDIR(st.st_mode):
        raise UserFileError(f"{what} {p} is a directory; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise UserFileError(
            f"{what} {p} is not a regular file but {file_kind(st.st_mode)}; reading it could wait forever "
            "or never end; give a regular file"
        )
    if st.st_size > max_bytes:
        raise UserFileError(f"{what} {p} is {_mib(st.st_size)}; a {what} may be at most {_mib(max_bytes)}")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UserFileError(f"{what} {p} cannot be read ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between stat and open
            raise UserFileError(f"{what} {p} is not a regular file; give a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise UserFileError(f"{what} {p} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UserFileError(f"{what} {p} is over {_mib(max_bytes)}, the limit for a {what}")
    return data


def read_user_text(path: str | os.PathLike[str], what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The UTF-8 text of `path` (a leading byte-order mark dropped), checked as `read_user_bytes` does;
    UserFileError naming the file and the first byte that is not UTF-8."""
    data = read_user_bytes(path, what, max_bytes)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UserFileError(
            f"{what} {path} is UTF-16 text (it starts with a UTF-16 byte-order mark); save it as UTF-8"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserFileError(
            f"{what} {path} is not UTF-8 text (byte {exc.start} is {data[exc.start : exc.start + 1]!r}); "
            "is it a binary file, or in another encoding such as Latin-1? Save it as UTF-8"
        ) from None


def check_output_kind(path: str | os.PathLike[str], what: str) -> None:
    """An existing `path` that a command will write must be a regular file (a FIFO would block the write
    until some process reads it; a device would swallow it); UserFileError naming `what` otherwise.
    A missing path, a directory (the caller's message says more) or a regular file pass."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserFileError(f"{what} {p} cannot be written: it is a loop of symbolic links") from None
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise UserFileError(
            f"{what} {p} is not a regular file but {file_kind(st.st_mode)}; writing to it could block "
            "forever; give a regular file name"
        )
