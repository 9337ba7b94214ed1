"""The one Numba setting the compiled CPU loops share."""

from __future__ import annotations

from collections.abc import Callable

import numba


def cpu_loop(fn: Callable) -> Callable:
    """Compile `fn` with Numba in nopython mode, cached on disk, releasing the GIL while it runs."""
    return numba.njit(cache=True, nogil=True)(fn)
