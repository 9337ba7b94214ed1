"""Input errors of the runtime: shown to the user as one paragraph by the `dse` CLI, never a traceback."""

from __future__ import annotations

__all__ = ["RuntimeInputError"]


class RuntimeInputError(ValueError):
    """Bad input to the runtime (model weights, task parameters, device, dtype); the message names the
    field or file, where the runtime looked, and what would be valid."""
