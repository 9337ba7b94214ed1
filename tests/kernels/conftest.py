"""Fixtures of the kernel tests (see triton_mode.py for how the Triton mode is chosen)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from triton_mode import (
    SUBPROCESS_NOTE,
    is_interpreted,
    jit_objects,
    kernel_modules,
    request_interpreter,
    triton_language_interpreted,
)

request_interpreter()  # before any test module of this directory imports triton


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
