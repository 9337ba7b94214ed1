"""Fixtures of the kernel tests: Triton kernels in Triton's interpreter (CPU) or compiled (CUDA).

Triton picks interpreter or compiler when a @triton.jit function is *decorated*, from the environment
variable TRITON_INTERPRET, and triton.language's own helpers (tl.zeros, tl.max, ...) are decorated when
triton is first imported. So the mode is fixed per process by whoever imports triton first:
- this conftest sets TRITON_INTERPRET=1 on a machine without CUDA if triton is not imported yet;
- if triton was already imported in compiled mode (another test package imported `kernels` first, or a
  CUDA machine), the in-process interpreter tests skip and `test_interpreter_subprocess.py` runs them
  in a fresh Python process with TRITON_INTERPRET=1 (so they always run somewhere, never silently).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

import pytest
import torch

if "triton" not in sys.modules and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

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


@pytest.fixture(scope="module")
def triton_interpreter() -> list[ModuleType]:
    """Kernel modules whose Triton kernels run in the interpreter (asserted), or skip (see above)."""
    if not triton_language_interpreted():
        pytest.skip(SUBPROCESS_NOTE)
    modules = kernel_modules()
    for module in modules:
        assert jit_objects(module) and all(is_interpreted(o) for o in jit_objects(module)), module.__name__
    return modules


@pytest.fixture(scope="module")
def triton_compiled() -> list[ModuleType]:
    """Kernel modules with compiled Triton kernels (for the CUDA tests)."""
    if triton_language_interpreted():
        pytest.skip("triton runs in interpreter mode in this process (TRITON_INTERPRET=1)")
    modules = kernel_modules()
    for module in modules:
        assert not any(is_interpreted(o) for o in jit_objects(module)), module.__name__
    return modules


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded CPU generator; each test draws its inputs from it."""
    return torch.Generator().manual_seed(1234)
