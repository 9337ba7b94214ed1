"""Random inputs for the kernel tests (explicit generators), and tolerances per dtype."""

from __future__ import annotations

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# Triton vs reference: both accumulate in fp32 from the same inputs; differences are summation order
# and the final rounding to the output dtype (fp16: 2^-11 relative, bf16: 2^-8 relative).
OUT_TOL = {
    torch.float32: {"atol": 2e-5, "rtol": 2e-5},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
}
FP32_TOL = {"atol": 2e-5, "rtol": 2e-5}  # fp32 outputs computed from any input dtype


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype)


def summaries(gen: torch.Generator, b: int, hkv: int, n_pages: int, d: int, dtype: torch.dtype):
    """Random kmin <= kmax (b, Hkv, P, d)."""
    a = randn(gen, b, hkv, n_pages, d, dtype=dtype)
    c = randn(gen, b, hkv, n_pages, d, dtype=dtype)
    return torch.minimum(a, c), torch.maximum(a, c)


def ragged_page_table(
    gen: torch.Generator, b: int, hkv: int, max_pages: int, n_slots: int, page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A page table (b, Hkv, M) with distinct slots per (b, h), ragged n_pages (b, Hkv) in [0, M]
    (at least one zero when b * Hkv > 2), and partial last pages (b,) in [1, p]. Unused entries hold -1."""
    table = torch.full((b, hkv, max_pages), -1, dtype=torch.int32)
    n_pages = torch.randint(1, max_pages + 1, (b, hkv), generator=gen, dtype=torch.int32)
    if b * hkv > 2:
        n_pages.view(-1)[1] = 0
    for i in range(b):
        for h in range(hkv):
            n = int(n_pages[i, h])
            table[i, h, :n] = torch.randperm(n_slots, generator=gen)[:n].to(torch.int32)
    last = torch.randint(1, page_size + 1, (b,), generator=gen, dtype=torch.int32)
    return table, n_pages, last
