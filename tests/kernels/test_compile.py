"""The Triton kernels compile to cubins for NVIDIA GPUs (checked without a GPU, in a fresh process).

The interpreter tests check what the kernels compute; this checks that the compiler accepts them
(tl.dot block shapes, dtypes, constexpr branches), which the interpreter does not. See compile_check.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("compile_check.py")


def _compile(archs: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "FREEKV_FORCE_TRITON")}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    result = subprocess.run([sys.executable, str(SCRIPT), "--arch", *archs], env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout


def _check(out: str, arch: str) -> None:
    assert "all kernels compiled" in out
    usage = [line for line in out.splitlines() if line.startswith(f"sm_{arch} ")]
    assert len(usage) >= 10, out  # every case, the split-combine kernel included
    assert all("LOCAL:0" in line for line in usage), f"register spills (local memory):\n{out}"


def test_kernels_compile_for_sm90_without_spills():
    _check(_compile(["90"]), "90")


@pytest.mark.slow
def test_kernels_compile_for_sm80_without_spills():
    _check(_compile(["80"]), "80")
