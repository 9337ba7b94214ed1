"""Page scoring from per-page key summaries, pooled over a GQA group (FreeKV / Quest selection).

For query head j (KV head h = j // G) and page i with per-channel key bounds kmin[i], kmax[i]:

    raw[j, i] = sum_d max(q[j, d] * kmax[i, d], q[j, d] * kmin[i, d])   (>= q . k for every key k of page i)

(with a box summary, kmin = c - r and kmax = c + r, the same formula is q . c + |q| . r.)
Only pages in [page_lo, page_hi) are candidates (sink pages lie before, window / current pages from
page_hi on). Pooling over the G query heads of a KV head (official FreeKV code: rooikeee/FreeKV):
- "softmax_mean" (the official accuracy harness, GQA_policy avgSM, accuracy/kvc/patch/
  dynamic_attention.py:quest_sel ~95-99): softmax of raw[j, :] over the candidate pages per head, then
  the mean of those G distributions;
- "softmax_scaled_mean" (the harness's avgSdM, ~100-104, which its CLI does not offer): the
  same with raw / sqrt(d);
- "mean" (the official runtime, source/freekv_cpp/src/estimate.cu ~65-69): the mean over the group of
  raw[j, i], no softmax;
- "max" (Quest / RaaS made group-consistent; harness maxS): the max over the group of raw[j, i].
Result (b, Hkv, P) float32, -inf outside the candidate range (all -inf where the range is empty).

Per query head (`query_page_scores`, no pooling: Quest's own harness, mit-han-lab/Quest evaluation/
quest_attention.py:139-146 repeats K to every query head and scores chunks per head): raw[j, i] for every
query head j against its KV head's summaries, (b, Hq, P) float32, -inf outside the candidates; top-k of
that per row (`kernels.topk_pages`) is each query head's own selection.

Shapes: q (b, Hq, d); kmin, kmax (b, Hkv, P, d), any float dtype, kmin <= kmax; page_lo, page_hi (b,)
int32. Accumulation in float32. GPU status: the Triton kernel is tested against the reference in
Triton's interpreter on the CPU and compiled ahead of time for sm_80 / sm_90
(tests/kernels/compile_check.py); it has not run on a GPU yet.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels._common import check_float, check_int32, next_pow2, require, same_device, use_triton

__all__ = ["page_scores", "page_scores_reference", "page_scores_triton", "POOLINGS", "query_page_scores",
           "query_page_scores_reference", "query_page_scores_triton"]

POOLINGS = ("softmax_mean", "softmax_scaled_mean", "mean", "max")
_POOL_SOFTMAX, _POOL_MAX, _POOL_MEAN = 0, 1, 2
# Upper bound on BLOCK_G * BLOCK_P * BLOCK_D, the (heads x pages x channels) product tile of one iteration.
_MAX_TILE_ELEMS = 8192


@triton.jit
def _scaled_page_bounds(q, kmin, kmax, sm_scale):
    """q (BG, BD) fp32, kmin/kmax (BP, BD) fp32 -> (BG, BP) scaled upper bounds of q . k per page."""
    q3 = q[:, None, :]
    bound = tl.maximum(q3 * kmax[None, :, :], q3 * kmin[None, :, :])
    return tl.sum(bound, axis=2) * sm_scale


@triton.jit
def _block_scores(q, kmin_base, kmax_base, pages, lo, hi, n_pages, offs_d, d_mask,
                  stride_np, stride_nd, stride_xp, stride_xd, sm_scale):
    """For a block of page ids: (cand (BP,) bool: candidate pages, (BG, BP) scaled bounds; 0-loaded rows
    where not a candidate)."""
    cand = (pages >= lo) & (pages < hi) & (pages < n_pages)
    tile_mask = cand[:, None] & d_mask[None, :]
    kmin = tl.load(kmin_base + pages[:, None] * stride_np + offs_d[None, :] * stride_nd,
                   mask=tile_mask, other=0.0).to(tl.float32)
    kmax = tl.load(kmax_base + pages[:, None] * stride_xp + offs_d[None, :] * stride_xd,
                   mask=tile_mask, other=0.0).to(tl.float32)
    return cand, _scaled_page_bounds(q, kmin, kmax, sm_scale)


@triton.jit
def _pool_group(s, cand, g_mask, group_size, POOL: tl.constexpr):
    """(BP,) the group's pooled scores of a block whose non-candidate columns of s (BG, BP) are -inf:
    the max over the heads (POOL 1) or their mean (POOL 2); -inf outside the candidates."""
    if POOL == 1:
        pooled = tl.max(tl.where(g_mask[:, None], s, float("-inf")), axis=0)
    else:
        pooled = tl.sum(tl.where(g_mask[:, None], s, 0.0), axis=0) / group_size
        pooled = tl.where(cand, pooled, float("-inf"))
    return pooled


@triton.jit
def _store_max_or_mean(q, kmin_base, kmax_base, out_base, lo, hi, n_pages, group_size, offs_p, offs_d, g_mask,
                       d_mask, stride_np, stride_nd, stride_xp, stride_xd, stride_op, sm_scale,
                       BLOCK_P: tl.constexpr, POOL: tl.constexpr):
    """Max (POOL 1) or mean (POOL 2) pooling: one pass over the pages, each block's pooled scores stored."""
    for start in range(0, n_pages, BLOCK_P):
        pages = start + offs_p
        cand, s = _block_scores(q, kmin_base, kmax_base, pages, lo, hi, n_pages, offs_d, d_mask,
                                stride_np, stride_nd, stride_xp, stride_xd, sm_scale)
        s = tl.where(cand[None, :], s, float("-inf"))
        pooled = _pool_group(s, cand, g_mask, group_size, POOL)
        tl.store(out_base + pages * stride_op, pooled, mask=pages < n_pages)


@triton.jit
def _softmax_denominators(q, kmin_base, kmax_base, lo, hi, n_pages, offs_p, offs_d, d_mask,
                          stride_np, stride_nd, stride_xp, stride_xd, sm_scale,
                          BLOCK_G: tl.constexpr, BLOCK_P: tl.constexpr):
    """Softmax pooling, pass 1: per head, the running max m_i (BG,) and softmax denominator l_i (BG,) over
    the candidate pages."""
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    for start in range(0, n_pages, BLOCK_P):
        pages = start + offs_p
        cand, s = _block_scores(q, kmin_base, kmax_base, pages, lo, hi, n_pages, offs_d, d_mask,
                                stride_np, stride_nd, stride_xp, stride_xd, sm_scale)
        s = tl.where(cand[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_i = l_i * tl.exp(m_i - m_safe) + tl.sum(tl.exp(s - m_safe[:, None]), axis=1)
        m_i = m_new
    return m_i, l_i


@triton.jit
def _store_softmax_mean(q, kmin_base, kmax_base, out_base, lo, hi, n_pages, group_size, m_i, l_i, offs_p,
                        offs_d, g_mask, d_mask, stride_np, stride_nd, stride_xp, stride_xd, stride_op,
                        sm_scale, BLOCK_P: tl.constexpr):
    """Softmax pooling, pass 2: normalised probabilities, averaged over the group's heads, stored."""
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    inv_l = 1.0 / tl.where(l_i > 0.0, l_i, 1.0)
    for start in range(0, n_pages, BLOCK_P):
        pages = start + offs_p
        cand, s = _block_scores(q, kmin_base, kmax_base, pages, lo, hi, n_pages, offs_d, d_mask,
                                stride_np, stride_nd, stride_xp, stride_xd, sm_scale)
        p = tl.exp(s - m_safe[:, None]) * inv_l[:, None]
        p = tl.where(g_mask[:, None] & cand[None, :], p, 0.0)
        pooled = tl.sum(p, axis=0) / group_size
        pooled = tl.where(cand, pooled, float("-inf"))
        tl.store(out_base + pages * stride_op, pooled, mask=pages < n_pages)


@triton.jit
def _page_scores_kernel(
    q_ptr, kmin_ptr, kmax_ptr, lo_ptr, hi_ptr, out_ptr,
    n_pages, group_size, summary_group, head_dim, sm_scale,
    stride_qb, stride_qh, stride_qd,
    stride_nb, stride_nh, stride_np, stride_nd,
    stride_xb, stride_xh, stride_xp, stride_xd,
    stride_ob, stride_oh, stride_op,
    BLOCK_G: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr, POOL: tl.constexpr,
):
    """One program per (batch, row h); loops over the pages in blocks of BLOCK_P. Row h pools query heads
    [h * group_size, (h + 1) * group_size) against the summaries of KV head h // summary_group (pooled
    scores: one row per KV head, summary_group 1; per query head: one row per query head, group_size 1,
    summary_group G).

    POOL: 0 softmax over the candidates per head then mean (scores times sm_scale), 1 max, 2 mean."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_g = tl.arange(0, BLOCK_G)
    offs_p = tl.arange(0, BLOCK_P)
    offs_d = tl.arange(0, BLOCK_D)
    g_mask = offs_g < group_size
    d_mask = offs_d < head_dim

    heads = h * group_size + offs_g
    q_ptrs = q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=g_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float32)
    lo = tl.load(lo_ptr + b)
    hi = tl.load(hi_ptr + b)
    kv_h = h // summary_group
    kmin_base = kmin_ptr + b * stride_nb + kv_h * stride_nh
    kmax_base = kmax_ptr + b * stride_xb + kv_h * stride_xh
    out_base = out_ptr + b * stride_ob + h * stride_oh

    if POOL == 0:
        m_i, l_i = _softmax_denominators(q, kmin_base, kmax_base, lo, hi, n_pages, offs_p, offs_d, d_mask,
                                         stride_np, stride_nd, stride_xp, stride_xd, sm_scale,
                                         BLOCK_G, BLOCK_P)
        _store_softmax_mean(q, kmin_base, kmax_base, out_base, lo, hi, n_pages, group_size, m_i, l_i, offs_p,
                            offs_d, g_mask, d_mask, stride_np, stride_nd, stride_xp, stride_xd, stride_op,
                            sm_scale, BLOCK_P)
    else:
        _store_max_or_mean(q, kmin_base, kmax_base, out_base, lo, hi, n_pages, group_size, offs_p, offs_d,
                           g_mask, d_mask, stride_np, stride_nd, stride_xp, stride_xd, stride_op, sm_scale,
                           BLOCK_P, POOL)


_POOL_CODES = {"softmax_mean": _POOL_SOFTMAX, "softmax_scaled_mean": _POOL_SOFTMAX, "mean": _POOL_MEAN,
               "max": _POOL_MAX}


def _scale(pooling: str, d: int) -> float:
    """The factor on the raw bound: 1/sqrt(d) for softmax_scaled_mean only (the others use raw scores)."""
    return 1.0 / math.sqrt(d) if pooling == "softmax_scaled_mean" else 1.0


def _check_args(
    q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, page_lo: torch.Tensor, page_hi: torch.Tensor,
    pooling: str,
) -> tuple[int, int, int, int, int]:
    """Validate and return (b, Hkv, G, P, d)."""
    check_float("q", q, 3)
    check_float("kmin", kmin, 4)
    check_float("kmax", kmax, 4)
    b, hq, d = q.shape
    require(kmin.shape == kmax.shape,
            lambda: f"kmin and kmax must have one shape, got {tuple(kmin.shape)} and "
            f"{tuple(kmax.shape)}")
    kb, hkv, n_pages, kd = kmin.shape
    require(kb == b and kd == d, lambda: f"kmin/kmax must be (b={b}, Hkv, P, d={d}), got {tuple(kmin.shape)}")
    require(hkv >= 1 and hq % hkv == 0,
            lambda: f"q heads ({hq}) must be a multiple of kmin/kmax heads ({hkv})")
    require(n_pages >= 1, "kmin/kmax must hold at least one page (P >= 1)")
    check_int32("page_lo", page_lo, (b,))
    check_int32("page_hi", page_hi, (b,))
    require(pooling in POOLINGS, lambda: f"pooling must be one of {POOLINGS}, got {pooling!r}")
    same_device(q=q, kmin=kmin, kmax=kmax, page_lo=page_lo, page_hi=page_hi)
    return b, hkv, hq // hkv, n_pages, d


def _bound_scores(qf: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """qf (b * Hkv, G, d) scaled queries -> (b * Hkv, G, hi - lo) bounds max(qf, 0) . kmax + min(qf, 0) . kmin
    of pages [lo, hi).

    When kmax and kmin are the two halves of one (..., P, 2, d) buffer (the runtime's paged store keeps
    them so), the bound is one GEMM of [max(qf, 0), min(qf, 0)] against the pages' 2d values, which
    reads each page's summary once; otherwise a GEMM and a fused multiply-add GEMM, one per bound.
    """
    bd, group, d = qf.shape
    pos, neg = qf.clamp(min=0), qf.clamp(max=0)
    step = kmin.data_ptr() - kmax.data_ptr()
    same_storage = kmin.untyped_storage().data_ptr() == kmax.untyped_storage().data_ptr()
    if (abs(step) == d * kmin.element_size() and kmin.dtype == kmax.dtype and kmin.stride() == kmax.stride()
            and kmin.stride(-1) == 1 and same_storage):
        first = kmax if step > 0 else kmin
        joint = first.as_strided((*first.shape[:-1], 2 * d), first.stride())  # (b, Hkv, P, 2d)
        pages = joint[:, :, lo:hi].float().reshape(bd, hi - lo, 2 * d)
        both = torch.cat((pos, neg) if step > 0 else (neg, pos), dim=-1)  # (b * Hkv, G, 2d)
        return both @ pages.transpose(1, 2)
    kmax_t = kmax[:, :, lo:hi].float().reshape(bd, hi - lo, d).transpose(1, 2)
    kmin_t = kmin[:, :, lo:hi].float().reshape(bd, hi - lo, d).transpose(1, 2)
    return torch.baddbmm(pos @ kmax_t, neg, kmin_t)


def page_scores_reference(
    q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, page_lo: torch.Tensor, page_hi: torch.Tensor,
    pooling: str = "softmax_mean",
) -> torch.Tensor:
    """Plain-torch page scores (b, Hkv, P) float32; see the module docstring.

    Uses max(q*a, q*c) = max(q, 0)*a + min(q, 0)*c for a >= c, which turns the bound into two
    matmuls over the summaries as they are (no elementwise pass over the (b, Hkv, P, d) tensors).
    When every sequence has the same candidate range (a runtime batch always has) only the candidate
    pages are scored and no mask is built; otherwise the non-candidates are masked per sequence.
    """
    b, hkv, group, n_pages, d = _check_args(q, kmin, kmax, page_lo, page_hi, pooling)
    qf = q.float().reshape(b * hkv, group, d) * _scale(pooling, d)
    los, his = set(page_lo.tolist()), set(page_hi.tolist())
    if b and len(los) == len(his) == 1:
        lo = min(max(los.pop(), 0), n_pages)
        hi = min(max(his.pop(), lo), n_pages)
        out = torch.full((b, hkv, n_pages), float("-inf"), dtype=torch.float32, device=q.device)
        if hi > lo:
            scores = _bound_scores(qf, kmin, kmax, lo, hi).view(b, hkv, group, hi - lo)
            if pooling == "max":
                out[:, :, lo:hi] = scores.amax(dim=2)
            elif pooling == "mean":
                out[:, :, lo:hi] = scores.sum(dim=2) / group
            else:
                out[:, :, lo:hi] = torch.softmax(scores, dim=-1).sum(dim=2) / group
        return out
    scores = _bound_scores(qf, kmin, kmax, 0, n_pages).view(b, hkv, group, n_pages)
    pages = torch.arange(n_pages, device=q.device)
    outside = ((pages < page_lo[:, None]) | (pages >= page_hi[:, None]))[:, None, :]  # (b, 1, P)
    if pooling == "max":
        return scores.amax(dim=2).masked_fill(outside, float("-inf")).contiguous()
    if pooling == "mean":
        return (scores.sum(dim=2) / group).masked_fill(outside, float("-inf")).contiguous()
    # a row without candidates is NaN after the softmax and -inf after the final fill
    probs = torch.softmax(scores.masked_fill(outside[:, :, None], float("-inf")), dim=-1)
    return (probs.sum(dim=2) / group).masked_fill(outside, float("-inf")).contiguous()


def page_scores_triton(
    q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, page_lo: torch.Tensor, page_hi: torch.Tensor,
    pooling: str = "softmax_mean",
) -> torch.Tensor:
    """Triton page scores; same contract as `page_scores_reference`."""
    b, hkv, group, n_pages, d = _check_args(q, kmin, kmax, page_lo, page_hi, pooling)
    out = torch.empty((b, hkv, n_pages), dtype=torch.float32, device=q.device)
    if b == 0:
        return out
    block_g, block_d = next_pow2(group), next_pow2(d)
    block_p = max(1, min(next_pow2(n_pages), _MAX_TILE_ELEMS // (block_g * block_d)))
    _page_scores_kernel[(b, hkv)](
        q, kmin, kmax, page_lo, page_hi, out,
        n_pages, group, 1, d, _scale(pooling, d),
        *q.stride(), *kmin.stride(), *kmax.stride(), *out.stride(),
        BLOCK_G=block_g, BLOCK_P=block_p, BLOCK_D=block_d, POOL=_POOL_CODES[pooling],
    )
    return out


def page_scores(
    q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, page_lo: torch.Tensor, page_hi: torch.Tensor,
    pooling: str = "softmax_mean",
) -> torch.Tensor:
    """Page scores (b, Hkv, P) float32: Triton on CUDA (or when forced), the torch reference otherwise."""
    if use_triton(q, kmin, kmax, page_lo, page_hi):
        return page_scores_triton(q, kmin, kmax, page_lo, page_hi, pooling)
    return page_scores_reference(q, kmin, kmax, page_lo, page_hi, pooling)


def query_page_scores_reference(
    q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, page_lo: torch.Tensor, page_hi: torch.Tensor,
) -> torch.Tensor:
    """Plain-torch per-query-head page scores (b, Hq, P) float32: the raw bound of every query head against
    its KV head's page summaries, -inf outside [page_lo, page_hi) (module docstring)."""
    b, hkv, group, n_pages, d = _check_args(q, kmin, kmax, page_lo, page_hi, "max")
    qf = q.float().reshape(b * hkv, group, d)
    scores = _bound_scores(qf, kmin, kmax, 0, n_pages).view(b, hkv * group, n_pages)
    pages = torch.arange(n_pages, device=q.device)
    outside = ((pages < page_lo[:, None]) | (pages >= page_hi[:, None]))[:, None, :]  # (b, 1, P)
    return scores.masked_fill(outside, float("-inf")).contiguous()


def query_page_scores_triton(
    q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, page_lo: torch.Tensor, page_hi: torch.Tensor,
) -> torch.Tensor:
    """Triton per-query-head page scores; same contract as `query_page_scores_reference`: the pooled kernel
    with one program per (batch, query head), each a group of one reading its KV head's summaries."""
    b, hkv, group, n_pages, d = _check_args(q, kmin, kmax, page_lo, page_hi, "max")
    out = torch.empty((b, hkv * group, n_pages), dtype=torch.float32, device=q.device)
    if b == 0:
        return out
    block_d = next_pow2(d)
    block_p = max(1, min(next_pow2(n_pages), _MAX_TILE_ELEMS // block_d))
    _page_scores_kernel[(b, hkv * group)](
        q, kmin, kmax, page_lo, page_hi, out,
        n_pages, 1, group, d, 1.0,
        *q.stride(), *kmin.stride(), *kmax.stride(), *out.stride(),
        BLOCK_G=1, BLOCK_P=block_p, BLOCK_D=block_d, POOL=_POOL_MAX,
    )
    return out


def query_page_scores(
    q: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor, page_lo: torch.Tensor, page_hi: torch.Tensor,
) -> torch.Tensor:
    """Per-query-head page scores (b, Hq, P) float32: Triton on CUDA (or when forced), the reference
    otherwise."""
    if use_triton(q, kmin, kmax, page_lo, page_hi):
        return query_page_scores_triton(q, kmin, kmax, page_lo, page_hi)
    return query_page_scores_reference(q, kmin, kmax, page_lo, page_hi)
