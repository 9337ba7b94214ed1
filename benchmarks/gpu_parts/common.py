"""What the GPU suite's parts share: options, the skip signal, JSON output, and the machine description."""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["Options", "Skipped", "write_json", "machine", "has_cuda", "cuda_skip_reason"]


class Skipped(Exception):  # noqa: N818 - a signal, not an error: the part could not run here, and why
    """Raised by a part (or one of its items) that cannot run here; the message is the reason."""


@dataclass(frozen=True)
class Options:
    """The suite's command line, as every part sees it (see gpu_suite.py --help)."""

    out: Path
    quick: bool
    contexts: tuple[int, ...]
    batches: tuple[int, ...]
    taus: tuple[float, ...]
    steps: int
    methods: tuple[str, ...]  # decode part: runtime policies (freekv once per tau)
    parity_methods: tuple[str, ...]  # parity part: runtime policies compared CPU vs CUDA
    seed: int
    repo: Path


def has_cuda() -> bool:
    return torch.cuda.is_available()


def cuda_skip_reason() -> str:
    return f"no CUDA device (torch {torch.__version__}, torch.cuda.is_available() is False)"


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars/arrays -> Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, np.generic):
        return _clean(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: Path, data: Any) -> None:
    """Write atomically (a crash mid-write leaves the previous file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_clean(data), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("torch", "triton", "transformers", "numpy", "cupy-cuda13x", "cupy-cuda12x"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _host_cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} logical CPUs)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} logical CPUs)"


def machine() -> dict[str, Any]:
    """The "machine" block of microbench.json (and of suite.json)."""
    info: dict[str, Any] = {"host_cpu": _host_cpu(), "torch": torch.__version__, "versions": _versions()}
    if has_cuda():
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=torch.cuda.get_device_name(0),
            cuda=torch.version.cuda,
            gpu_memory_bytes=props.total_memory,
            sm=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            driver=_driver(),
        )
    else:
        info.update(gpu=None, cuda=torch.version.cuda, driver=None)
    return info


def _driver() -> str | None:
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None
