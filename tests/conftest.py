"""Markers: `slow` runs with --run-slow (or FREEKV_DSE_RUN_SLOW=1); `gpu` runs where CUDA is present.

Skipped tests are listed with their reason at the end of every run (pytest -ra in pyproject).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# Triton chooses interpreter or compiler when it is first imported; on a machine without CUDA, make
# every test process use the interpreter (the CPU dispatch path never runs Triton unless forced).
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass

REPO_ROOT = Path(__file__).resolve().parents[1]


def _run_fresh_python(code: str) -> None:
    """Runs Python source `code` in a new interpreter from the repository root, where nothing is imported
    yet (so what a module imports shows in sys.modules); fails with the child's stderr."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def fresh_python() -> Callable[[str], None]:
    """_run_fresh_python, for tests to take as an argument."""
    return _run_fresh_python


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = config.getoption("--run-slow") or os.environ.get("FREEKV_DSE_RUN_SLOW") == "1"
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip_slow = pytest.mark.skip(reason="slow test: run with --run-slow or FREEKV_DSE_RUN_SLOW=1")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; none present on this machine")
    for item in items:  # markers, not keywords: keywords also hold directory names (a checkout named "gpu")
        if item.get_closest_marker("slow") is not None and not run_slow:
            item.add_marker(skip_slow)
        if item.get_closest_marker("gpu") is not None and not has_cuda:
            item.add_marker(skip_gpu)
