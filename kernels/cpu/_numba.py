"""The one Numba setting the compiled CPU loops share."""

from __future__ import annotations

from collections.abc import Callable

import numba


def cpu_loop(fn: Callable) -> Callable:
    """Compile `fn` with Numba in nopython mode, cached on disk, releasing the GIL while it runs."""
    return numba.njit(cache=True, nogil=True)(fn)


def cpu_inline(fn: Callable) -> Callable:
    """A helper of compiled CPU loops, inlined into each caller at Numba IR level: a loop split into such
    helpers runs as fast as one body (a plain call costs about 20 ns, per head of a reuse plan)."""
    return numba.njit(cache=True, inline="always")(fn)
