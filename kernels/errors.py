"""The kernels package's input-error class."""

from __future__ import annotations

__all__ = ["KernelInputError"]


class KernelInputError(ValueError):
    """A kernel was called with tensors of the wrong shape, dtype, device or value range.

    The message names the argument and what would be valid.
    """
