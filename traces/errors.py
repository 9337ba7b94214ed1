"""The one error class of the `traces` package."""

from __future__ import annotations

__all__ = ["TraceError"]


class TraceError(ValueError):
    """A trace that cannot be written or read as asked: the message names the file (or record field) and
    what is wrong with it, in one paragraph (the `dse` CLI prints it without a traceback)."""
