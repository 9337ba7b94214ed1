"""Compiled CPU loops (Numba) for host-side work that plain torch/NumPy would split into many small calls.

On a CPU every torch or NumPy call costs microseconds of dispatch, and a decode step makes thousands; a
loop that does one small job in one pass replaces a chain of such calls: top-k page selection, the query
similarity, a recall's gather and layout change (here), and FreeKV's reuse planning
(freekv_runtime/policies/_reuse_loops.py). The loops take and fill NumPy arrays (zero-copy views of CPU
tensors) and never import torch. They are compiled on first use (about a second each) and cached on disk
next to this package (Numba's cache; a read-only install falls back to Numba's user cache directory).
"""

from kernels.cpu._numba import cpu_inline, cpu_loop

__all__ = ["cpu_inline", "cpu_loop"]
