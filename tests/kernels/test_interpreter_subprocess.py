"""Run the Triton-interpreter kernel tests in a fresh process when this one cannot.

TRITON_INTERPRET is read when triton is imported. When another test package imported triton first in
compiled mode (or on a CUDA machine), the in-process interpreter tests skip; this test then runs the
kernel test modules in a new Python process with TRITON_INTERPRET=1 and requires them to pass there
without any interpreter test skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from triton_mode import SUBPROCESS_NOTE, triton_language_interpreted

ROOT = Path(__file__).resolve().parents[2]


def test_interpreter_tests_in_a_fresh_process(request):
    if triton_language_interpreted():
        pytest.skip("the Triton interpreter tests run in this process")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("FREEKV_FORCE_TRITON", None)
    args = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/kernels",
            "-m", "not gpu", "--ignore=tests/kernels/test_compile.py"]
    if request.config.getoption("--run-slow"):
        args.append("--run-slow")
    result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = result.stdout[-6000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout, tail
    assert SUBPROCESS_NOTE not in result.stdout, tail
