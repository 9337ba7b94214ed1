"""Shared helpers of the kernel files: backend choice, argument checks, block sizes.

Backend rule (every dispatcher): the Triton kernel runs when all tensor arguments are on CUDA, or when
the environment variable `FREEKV_FORCE_TRITON=1` is set (used with `TRITON_INTERPRET=1` to run the
Triton kernels on the CPU through Triton's interpreter); otherwise the plain-torch reference runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from kernels.errors import KernelInputError

__all__ = [
    "FORCE_TRITON_ENV", "use_triton", "next_pow2", "require", "check_float", "check_int32", "same_device",
]

FORCE_TRITON_ENV = "FREEKV_FORCE_TRITON"
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def use_triton(*tensors: torch.Tensor) -> bool:
    """True when the Triton path should run for these tensors (all on CUDA, or forced by env)."""
    if os.environ.get(FORCE_TRITON_ENV) == "1":
        return True
    return bool(tensors) and all(t.is_cuda for t in tensors)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (and >= 1): Triton block sizes must be powers of two."""
    return 1 << max(0, int(n) - 1).bit_length()


def require(condition: bool, message: str | Callable[[], str]) -> None:
    """Raise `KernelInputError(message)` unless `condition` holds.

    A message that needs formatting is passed as a callable (`lambda: f"..."`) so that it is only built
    when the check fails: these checks run on every kernel call of the decode hot path.
    """
    if not condition:
        raise KernelInputError(message() if callable(message) else message)


def check_float(name: str, t: torch.Tensor, ndim: int) -> None:
    require(isinstance(t, torch.Tensor), lambda: f"{name} must be a torch.Tensor, got {type(t).__name__}")
    require(t.dim() == ndim, lambda: f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    require(t.dtype in FLOAT_DTYPES, lambda: f"{name} must be float32, float16 or bfloat16, got {t.dtype}")


def check_int32(name: str, t: torch.Tensor, shape: tuple[int, ...]) -> None:
    require(isinstance(t, torch.Tensor), lambda: f"{name} must be a torch.Tensor, got {type(t).__name__}")
    require(t.dtype == torch.int32, lambda: f"{name} must be int32, got {t.dtype}")
    require(t.shape == shape, lambda: f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def same_device(**tensors: torch.Tensor) -> None:
    first = next(iter(tensors.values())).device
    require(
        all(t.device == first for t in tensors.values()),
        lambda: "all tensors must be on one device, got "
        + ", ".join(f"{n}={t.device}" for n, t in tensors.items()),
    )
