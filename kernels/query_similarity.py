"""Query cosine similarity between adjacent decode steps, pooled per GQA group (FreeKV correction test).

C[b, h] = mean over the G query heads j of KV head h of cos(q[b, j], q_prev[b, j]), computed in fp32 as
dot / max(|q| * |q_prev|, 1e-6). FreeKV corrects head h when C < tau.

Shapes: q, q_prev (b, Hq, d) float; group_size G divides Hq -> (b, Hq / G) float32.
On the CPU the dispatcher runs a compiled loop for float32 queries (`query_similarity_cpu`, one call
instead of the reference's seven). GPU status: the Triton kernel is tested against the reference in
Triton's interpreter on the CPU and compiled ahead of time for sm_80 / sm_90
(tests/kernels/compile_check.py); it has not run on a GPU yet.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._common import check_float, next_pow2, require, same_device, use_triton
from kernels.cpu.query_similarity import query_similarity_loop

__all__ = [
    "query_similarity", "query_similarity_cpu", "query_similarity_reference", "query_similarity_triton",
    "COS_EPS",
]

COS_EPS = 1e-6


@triton.jit
def _query_similarity_kernel(
    q_ptr, p_ptr, out_ptr,
    group_size, head_dim, eps,
    stride_qb, stride_qh, stride_qd,
    stride_pb, stride_ph, stride_pd,
    stride_ob, stride_oh,
    BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One program per (batch, KV head): G cosines, then their mean."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    g_mask = offs_g < group_size
    mask = g_mask[:, None] & (offs_d[None, :] < head_dim)
    heads = h * group_size + offs_g
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd,
                mask=mask, other=0.0).to(tl.float32)
    qp = tl.load(p_ptr + b * stride_pb + heads[:, None] * stride_ph + offs_d[None, :] * stride_pd,
                 mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(q * qp, axis=1)
    norms = tl.sqrt(tl.sum(q * q, axis=1)) * tl.sqrt(tl.sum(qp * qp, axis=1))
    cos = dot / tl.maximum(norms, eps)
    mean = tl.sum(tl.where(g_mask, cos, 0.0), axis=0) / group_size
    tl.store(out_ptr + b * stride_ob + h * stride_oh, mean)


def _check_args(q: torch.Tensor, q_prev: torch.Tensor, group_size: int) -> tuple[int, int, int]:
    """Validate and return (b, Hkv, d)."""
    check_float("q", q, 3)
    check_float("q_prev", q_prev, 3)
    require(q.shape == q_prev.shape, lambda: f"q and q_prev must have one shape, got {tuple(q.shape)} and "
            f"{tuple(q_prev.shape)}")
    b, hq, d = q.shape
    require(isinstance(group_size, int) and group_size >= 1 and hq % group_size == 0,
            lambda: f"group_size must be a positive int dividing the {hq} query heads, got {group_size!r}")
    same_device(q=q, q_prev=q_prev)
    return b, hq // group_size, d


def query_similarity_reference(q: torch.Tensor, q_prev: torch.Tensor, group_size: int) -> torch.Tensor:
    """Plain-torch pooled cosine similarity (b, Hkv) float32."""
    b, hkv, d = _check_args(q, q_prev, group_size)
    qf, pf = q.float(), q_prev.float()
    dot = torch.linalg.vecdot(qf, pf)
    norms = torch.linalg.vector_norm(qf, dim=-1) * torch.linalg.vector_norm(pf, dim=-1)
    cos = dot / norms.clamp_min(COS_EPS)  # (b, Hq)
    return cos.reshape(b, hkv, group_size).mean(-1)


def query_similarity_cpu(q: torch.Tensor, q_prev: torch.Tensor, group_size: int) -> torch.Tensor:
    """Compiled CPU loop (kernels/cpu/query_similarity.py) for float32 CPU tensors; same contract as
    `query_similarity_reference` (fp32 sums in another order: equal to about 1e-7)."""
    b, hkv, _ = _check_args(q, q_prev, group_size)
    require(q.dtype == q_prev.dtype == torch.float32 and q.device.type == "cpu",
            "query_similarity_cpu takes float32 CPU tensors")
    out = torch.empty((b, hkv), dtype=torch.float32)
    query_similarity_loop(q.detach().numpy(), q_prev.detach().numpy(), group_size, COS_EPS, out.numpy())
    return out


def query_similarity_triton(q: torch.Tensor, q_prev: torch.Tensor, group_size: int) -> torch.Tensor:
    """Triton pooled cosine similarity; same contract as `query_similarity_reference`."""
    b, hkv, d = _check_args(q, q_prev, group_size)
    out = torch.empty((b, hkv), dtype=torch.float32, device=q.device)
    if b == 0:
        return out
    _query_similarity_kernel[(b, hkv)](
        q, q_prev, out,
        group_size, d, COS_EPS,
        *q.stride(), *q_prev.stride(), *out.stride(),
        BLOCK_G=next_pow2(group_size), BLOCK_D=next_pow2(d),
    )
    return out


def query_similarity(q: torch.Tensor, q_prev: torch.Tensor, group_size: int) -> torch.Tensor:
    """Pooled cosine similarity (b, Hkv) float32: Triton on CUDA (or when forced), torch otherwise."""
    if use_triton(q, q_prev):
        return query_similarity_triton(q, q_prev, group_size)
    if q.device.type == q_prev.device.type == "cpu" and q.dtype == q_prev.dtype == torch.float32:
        return query_similarity_cpu(q, q_prev, group_size)
    return query_similarity_reference(q, q_prev, group_size)
