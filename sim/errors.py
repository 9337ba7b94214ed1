"""Errors of the simulator package."""

from __future__ import annotations

__all__ = ["SimInputError"]


class SimInputError(ValueError):
    """Bad simulator input: message names the field/file and what is valid."""
