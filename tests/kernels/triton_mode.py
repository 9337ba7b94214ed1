"""Which mode Triton runs in for the kernel tests: interpreter (CPU) or compiled (CUDA).

Triton picks interpreter or compiler when a @triton.jit function is *decorated*, from the environment
variable TRITON_INTERPRET, and triton.language's own helpers (tl.zeros, tl.max, ...) are decorated when
triton is first imported. So the mode is fixed per process by whoever imports triton first:
- conftest.py calls `request_interpreter()`, which sets TRITON_INTERPRET=1 on a machine without CUDA
  if triton is not imported yet;
- if triton was already imported in compiled mode (another test package imported `kernels` first, or a
  CUDA machine), the in-process interpreter tests skip and `test_interpreter_subprocess.py` runs them
  in a fresh Python process with TRITON_INTERPRET=1 (so they always run somewhere, never silently).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import torch

KERNEL_MODULES = (
    "kernels.page_scores",
    "kernels.topk_pages",
    "kernels.sparse_decode_attention",
    "kernels.query_similarity",
    "kernels.summarize_pages",
    "kernels.recall",
)
SUBPROCESS_NOTE = (
    "triton was imported in compiled mode before these tests (TRITON_INTERPRET is read when triton is "
    "imported); test_interpreter_subprocess.py runs them in a fresh process with TRITON_INTERPRET=1"
)


def request_interpreter() -> None:
    """Set TRITON_INTERPRET=1 if triton is not imported yet and there is no CUDA device."""
    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def jit_objects(module: ModuleType) -> list[object]:
    """The @triton.jit functions defined in a module (compiled or interpreted)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return [v for v in vars(module).values() if isinstance(v, JITFunction | InterpretedFunction)]


def is_interpreted(obj: object) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(obj, InterpretedFunction)


def triton_language_interpreted() -> bool:
    """True when triton.language's jit helpers run in the interpreter (imports triton if needed)."""
    import triton.language.standard as standard

    return is_interpreted(standard.zeros)


def kernel_modules() -> list[ModuleType]:
    return [importlib.import_module(name) for name in KERNEL_MODULES]
