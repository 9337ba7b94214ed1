"""HND -> NHD conversion of recalled head-pages: the GPU half of FreeKV's double-buffered recall.

Recalled runs land in a staging buffer in the host (HND) run layout: staging[i, 0] holds the p keys and
staging[i, 1] the p values (each (p, d)) of KV head head_ids[i] of one page. They are scattered into
the NHD cache: k_cache[slot_ids[i], :, head_ids[i], :] = staging[i, 0] and likewise for v_cache.

Shapes: staging (n, 2, p, d); head_ids, slot_ids (n,) int32; k_cache, v_cache (n_slots, p, Hkv, d), same
dtype as staging. In place; returns None. Pairs (slot, head) must be distinct within one call.
GPU status: the Triton kernel is tested against the reference in Triton's interpreter on the CPU and
compiled ahead of time for sm_80 / sm_90 (tests/kernels/compile_check.py); it has not run on a GPU yet.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from kernels._common import check_float, check_int32, next_pow2, require, same_device, use_triton
from kernels.cpu.recall import recall_runs_loop

__all__ = ["recall_hnd_to_nhd", "recall_hnd_to_nhd_reference", "recall_hnd_to_nhd_triton", "recall_runs_cpu"]

_SAME_WIDTH_INT = {2: torch.int16, 4: torch.int32}  # copies move bits: NumPy/Numba have no bfloat16


@triton.jit
def _recall_hnd_to_nhd_kernel(
    staging_ptr, head_ptr, slot_ptr, k_ptr, v_ptr,
    page_size, head_dim,
    stride_sn, stride_skv, stride_st, stride_sd,
    stride_ks, stride_kt, stride_kh, stride_kd,
    stride_vs, stride_vt, stride_vh, stride_vd,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One program per recalled head-page: copy its K run and V run into the NHD cache slot."""
    i = tl.program_id(0)
    offs_t = tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_t[:, None] < page_size) & (offs_d[None, :] < head_dim)
    head = tl.load(head_ptr + i).to(tl.int64)
    slot = tl.load(slot_ptr + i).to(tl.int64)
    src = staging_ptr + i.to(tl.int64) * stride_sn + offs_t[:, None] * stride_st + offs_d[None, :] * stride_sd
    keys = tl.load(src, mask=mask)
    values = tl.load(src + stride_skv, mask=mask)
    k_dst = k_ptr + slot * stride_ks + head * stride_kh + offs_t[:, None] * stride_kt
    v_dst = v_ptr + slot * stride_vs + head * stride_vh + offs_t[:, None] * stride_vt
    k_dst += offs_d[None, :] * stride_kd
    v_dst += offs_d[None, :] * stride_vd
    tl.store(k_dst, keys, mask=mask)
    tl.store(v_dst, values, mask=mask)


def _check_runs_and_caches(
    name: str, runs: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
) -> tuple[int, int]:
    """HND runs (n, 2, p, d) against NHD caches (n_slots, p, Hkv, d): shapes and one dtype. Returns
    (n_slots, Hkv)."""
    check_float(name, runs, 4)
    check_float("k_cache", k_cache, 4)
    check_float("v_cache", v_cache, 4)
    _, two, page_size, d = runs.shape
    n_slots, cp, hkv, cd = k_cache.shape
    require(two == 2,
            lambda: f"{name} must be (n, 2, p, d): [i, 0] keys, [i, 1] values; got {tuple(runs.shape)}")
    require(k_cache.shape == v_cache.shape, lambda: f"k_cache and v_cache must have one shape, got "
            f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    require((cp, cd) == (page_size, d),
            lambda: f"caches must be (n_slots, p={page_size}, Hkv, d={d}) NHD, got "
            f"{tuple(k_cache.shape)}")
    require(runs.dtype == k_cache.dtype == v_cache.dtype,
            lambda: f"{name}, k_cache and v_cache must share a dtype, got {runs.dtype}, {k_cache.dtype}, "
            f"{v_cache.dtype}")
    return n_slots, hkv


def _check_args(
    staging: torch.Tensor, head_ids: torch.Tensor, slot_ids: torch.Tensor, k_cache: torch.Tensor,
    v_cache: torch.Tensor, validate: bool = True,
) -> None:
    """Shapes, dtypes and devices always; with validate (CPU only) also the id ranges."""
    n_slots, hkv = _check_runs_and_caches("staging", staging, k_cache, v_cache)
    n = staging.shape[0]
    check_int32("head_ids", head_ids, (n,))
    check_int32("slot_ids", slot_ids, (n,))
    same_device(staging=staging, head_ids=head_ids, slot_ids=slot_ids, k_cache=k_cache, v_cache=v_cache)
    if validate and not staging.is_cuda:
        require(bool(((head_ids >= 0) & (head_ids < hkv)).all()),
                lambda: f"head_ids must lie in [0, Hkv={hkv})")
        require(bool(((slot_ids >= 0) & (slot_ids < n_slots)).all()),
                lambda: f"slot_ids must lie in [0, n_slots={n_slots})")


def recall_hnd_to_nhd_reference(
    staging: torch.Tensor, head_ids: torch.Tensor, slot_ids: torch.Tensor, k_cache: torch.Tensor,
    v_cache: torch.Tensor, validate: bool = True,
) -> None:
    """Plain-torch scatter of recalled HND runs into the NHD caches (in place).

    validate=False skips the O(n) id-range checks (shapes and dtypes are still checked): for callers
    that build the ids themselves, such as the runtime's recall engine on its hot path.
    """
    _check_args(staging, head_ids, slot_ids, k_cache, v_cache, validate)
    slots, heads = slot_ids.long(), head_ids.long()
    k_cache[slots, :, heads, :] = staging[:, 0]
    v_cache[slots, :, heads, :] = staging[:, 1]


def recall_runs_cpu(
    runs: torch.Tensor, run_ids: np.ndarray, head_ids: np.ndarray, slot_ids: np.ndarray,
    k_cache: torch.Tensor, v_cache: torch.Tensor, validate: bool = True,
) -> None:
    """CPU recall straight from the host runs, in place: for each i, k_cache[slot_ids[i], :, head_ids[i]] =
    runs[run_ids[i], 0] and v_cache[...] = runs[run_ids[i], 1].

    The same result as `recall_hnd_to_nhd_reference(runs[run_ids], head_ids, slot_ids, k_cache, v_cache)`
    in one compiled pass (kernels.cpu.recall), without the staging copy a GPU needs. runs (R, 2, p, d) (the
    host pool viewed as runs); run_ids, head_ids, slot_ids (n,) host integer arrays; CPU tensors of one
    dtype (copied as bits). validate=False skips the id-range checks (the ids index memory unchecked).
    """
    n_slots, hkv = _check_runs_and_caches("runs", runs, k_cache, v_cache)
    require(runs.device.type == k_cache.device.type == v_cache.device.type == "cpu",
            "recall_runs_cpu takes CPU tensors")
    ids = [np.asarray(a) for a in (run_ids, head_ids, slot_ids)]
    require(all(a.ndim == 1 and a.shape == ids[0].shape and a.dtype.kind in "iu" for a in ids),
            "run_ids, head_ids and slot_ids must be 1-D integer arrays of one length")
    if validate and len(ids[0]):
        for name, a, top in zip(("run_ids", "head_ids", "slot_ids"), ids, (runs.shape[0], hkv, n_slots),
                                strict=True):
            require(0 <= a.min() and a.max() < top,
                    lambda name=name, top=top: f"{name} must lie in [0, {top})")
    bits = _SAME_WIDTH_INT[runs.element_size()]
    recall_runs_loop(runs.detach().view(bits).numpy(), *ids, k_cache.detach().view(bits).numpy(),
                     v_cache.detach().view(bits).numpy())


def recall_hnd_to_nhd_triton(
    staging: torch.Tensor, head_ids: torch.Tensor, slot_ids: torch.Tensor, k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> None:
    """Triton scatter; same contract as `recall_hnd_to_nhd_reference`."""
    _check_args(staging, head_ids, slot_ids, k_cache, v_cache)
    n, _, page_size, d = staging.shape
    if n == 0:
        return
    _recall_hnd_to_nhd_kernel[(n,)](
        staging, head_ids, slot_ids, k_cache, v_cache,
        page_size, d,
        *staging.stride(), *k_cache.stride(), *v_cache.stride(),
        BLOCK_T=next_pow2(page_size), BLOCK_D=next_pow2(d),
    )


def recall_hnd_to_nhd(
    staging: torch.Tensor, head_ids: torch.Tensor, slot_ids: torch.Tensor, k_cache: torch.Tensor,
    v_cache: torch.Tensor, validate: bool = True,
) -> None:
    """HND -> NHD recall conversion (in place): Triton on CUDA (or when forced), torch otherwise.

    validate=False skips the reference's id-range checks (the Triton path never reads values to check).
    """
    if use_triton(staging, head_ids, slot_ids, k_cache, v_cache):
        recall_hnd_to_nhd_triton(staging, head_ids, slot_ids, k_cache, v_cache)
    else:
        recall_hnd_to_nhd_reference(staging, head_ids, slot_ids, k_cache, v_cache, validate)
