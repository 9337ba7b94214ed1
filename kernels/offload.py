"""NHD -> HND conversion of completed pages for the host pool (torch only, no kernel).

A full GPU page (p, Hkv, d) of keys and one of values become, per KV head, one contiguous run of 2*p*d
elements: out[h, 0] = k_page[:, h, :], out[h, 1] = v_page[:, h, :]. With `out` given (e.g. a view into
the pinned host pool) the runs are written there; from CUDA to pinned memory the copy is asynchronous
(non_blocking), and the caller must sync on its stream before reading.

Shapes: k_page, v_page (p, Hkv, d) or batched (n, p, Hkv, d) -> (Hkv, 2, p, d) or (n, Hkv, 2, p, d).
"""

from __future__ import annotations

import torch

from kernels._common import check_float, require

__all__ = ["offload_nhd_to_hnd", "offload_nhd_to_hnd_reference"]


def offload_nhd_to_hnd(
    k_page: torch.Tensor, v_page: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Transpose NHD page(s) to HND runs on k_page's device, then copy into `out` if given."""
    require(isinstance(k_page, torch.Tensor) and k_page.dim() in (3, 4),
            lambda: "k_page must be (p, Hkv, d) or (n, p, Hkv, d), got "
            f"{tuple(getattr(k_page, 'shape', ()))}")
    check_float("k_page", k_page, k_page.dim())
    check_float("v_page", v_page, k_page.dim())
    require(k_page.shape == v_page.shape and k_page.dtype == v_page.dtype and k_page.device == v_page.device,
            lambda: f"k_page and v_page must match in shape, dtype and device, got {tuple(k_page.shape)} "
            f"{k_page.dtype} {k_page.device} and {tuple(v_page.shape)} {v_page.dtype} {v_page.device}")
    runs = torch.stack([k_page.transpose(-3, -2), v_page.transpose(-3, -2)], dim=-3)  # (..., Hkv, 2, p, d)
    if out is None:
        return runs.contiguous()
    require(tuple(out.shape) == tuple(runs.shape) and out.dtype == runs.dtype,
            lambda: f"out must be {tuple(runs.shape)} {runs.dtype}, got {tuple(out.shape)} {out.dtype}")
    out.copy_(runs, non_blocking=True)
    return out


offload_nhd_to_hnd_reference = offload_nhd_to_hnd
