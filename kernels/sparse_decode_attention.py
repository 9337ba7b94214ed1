"""Sparse decode attention over a per-KV-head page table (sink + selected + window pages), GQA-aware.

Each (batch b, KV head h) attends to the pages listed in page_table[b, h, :n_pages[b, h]] (slot ids in
the NHD cache). Every listed page is full except the last, which holds last_page_tokens[b] tokens
(1..p). For query head j of the group of h:

    o[b, j] = softmax(q[b, j] . K^T / sqrt(d)) V          over the listed tokens (fp32 accumulation)
    lse[b, j] = log sum exp(q[b, j] . K^T / sqrt(d))        (natural log; -inf when nothing is listed)

A (b, h) with n_pages = 0 gets o = 0.

Per-query-head tables: a page_table (b, Hq, M) with n_pages (b, Hq) lists the pages of each query head on
its own (query head j reads KV head j // G at the listed slots), for methods whose code selects per query
head (Quest: mit-han-lab/Quest evaluation/quest_attention.py:139-146; InfiniGen; SnapKV's original code).
The Triton kernel then runs one program per (b, query head); the reference runs the per-KV-head path once
per group member g over the query heads g, G + g, 2G + g, ...

With a per-KV-head table the Triton kernel runs one program per (b, KV head) that serves all
G query heads of the group with an online softmax, so each K/V page is read from memory once. On CUDA
each page list is also split into chunks (flash-decoding) so that small batches still fill the GPU; a
second kernel merges the chunks' partial softmaxes.

Shapes: q (b, Hq, d); k_cache, v_cache (n_slots, p, Hkv, d) "NHD"; page_table (b, Hkv, M) int32;
n_pages (b, Hkv) int32 in [0, M] (or (b, Hq, M) and (b, Hq): per query head); last_page_tokens (b,)
int32. Output (b, Hq, d) in q's dtype, and with
return_lse=True also lse (b, Hq) float32. Entries of page_table past n_pages are never read.
GPU status: the Triton kernel is tested against the reference in Triton's interpreter on the CPU and
compiled ahead of time for sm_80 / sm_90 (tests/kernels/compile_check.py); it has not run on a GPU yet.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from kernels._common import check_float, check_int32, next_pow2, require, same_device, use_triton
from kernels._gather_pages import gather_head_pages
from kernels._slot_span import attend_slot_span, slot_span

__all__ = ["sparse_decode_attention", "sparse_decode_attention_reference", "sparse_decode_attention_triton"]

_MIN_PAGES_PER_SPLIT = 4  # a split streams at least this many pages (amortises its partial write)
_MAX_SPLITS = 64


@triton.jit
def _load_group_queries(q_ptr, b, heads, offs_d, g_mask, d_mask, stride_qb, stride_qh, stride_qd):
    """(BLOCK_G, BLOCK_D) fp32: the query heads `heads` of sequence b; padding rows and columns 0."""
    return tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :] * stride_qd,
                   mask=g_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float32)


@triton.jit
def _attend_page(q, k_base, v_base, slot, stride_ks, stride_vs, t_mask, kv_mask, m_i, l_i, acc, sm_scale,
                 DOT_PRECISION: tl.constexpr):
    """One online-softmax step over the page in cache slot `slot` (k_base / v_base: a slot's (BLOCK_T,
    BLOCK_D) tile pointers; t_mask marks the page's tokens). Returns the updated (running max m_i,
    denominator l_i, unnormalised acc)."""
    k = tl.load(k_base + slot * stride_ks, mask=kv_mask, other=0.0).to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale  # (BG, BT)
    s = tl.where(t_mask[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    v = tl.load(v_base + slot * stride_vs, mask=kv_mask, other=0.0).to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _attend_listed_pages(
    q, table_base, k_base, v_base, first, stop, n, last, page_size, offs_t, d_mask, sm_scale,
    stride_ks, stride_vs, stride_tm,
    BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Online softmax over the listed pages j in [first, stop) of a list of n pages whose last page holds
    `last` tokens: (running max m_i (BG,), denominator l_i (BG,), unnormalised acc (BG, BD)), fp32."""
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for j in range(first, stop):
        slot = tl.load(table_base + j * stride_tm).to(tl.int64)
        n_tok = tl.where(j == n - 1, last, page_size)
        t_mask = offs_t < n_tok
        kv_mask = t_mask[:, None] & d_mask[None, :]
        m_i, l_i, acc = _attend_page(q, k_base, v_base, slot, stride_ks, stride_vs, t_mask, kv_mask, m_i, l_i,
                                     acc, sm_scale, DOT_PRECISION)
    return m_i, l_i, acc


@triton.jit
def _store_split_partial(
    pacc_ptr, pml_ptr, b, heads, split, offs_d, g_mask, d_mask, m_i, l_i, acc,
    stride_ab, stride_ah, stride_as, stride_ad,
    stride_mb, stride_mh, stride_ms, stride_mk,
):
    """Write one split's unnormalised partial: acc to pacc[b, heads, split], (m_i, l_i) to pml[b, heads,
    split, 0:2]."""
    pacc = pacc_ptr + b * stride_ab + heads[:, None] * stride_ah + split * stride_as
    tl.store(pacc + offs_d[None, :] * stride_ad, acc, mask=g_mask[:, None] & d_mask[None, :])
    pml = pml_ptr + b * stride_mb + heads * stride_mh + split * stride_ms
    tl.store(pml, m_i, mask=g_mask)
    tl.store(pml + stride_mk, l_i, mask=g_mask)


@triton.jit
def _store_normalised(
    out_ptr, lse_ptr, b, heads, offs_d, g_mask, d_mask, m_i, l_i, acc,
    stride_ob, stride_oh, stride_od,
    stride_lb, stride_lh,
    STORE_LSE: tl.constexpr,
):
    """Write out[b, heads] = acc / l_i (0 where nothing was listed) and, with STORE_LSE, lse[b, heads]."""
    has_mass = l_i > 0.0
    out = acc / tl.where(has_mass, l_i, 1.0)[:, None]
    tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :] * stride_od,
             out.to(out_ptr.dtype.element_ty), mask=g_mask[:, None] & d_mask[None, :])
    if STORE_LSE:
        lse = tl.where(has_mass, m_i + tl.log(tl.where(has_mass, l_i, 1.0)), float("-inf"))
        tl.store(lse_ptr + b * stride_lb + heads * stride_lh, lse, mask=g_mask)


@triton.jit
def _sparse_decode_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, npages_ptr, last_ptr, out_ptr, lse_ptr, pacc_ptr, pml_ptr,
    group_size, heads_per_row, head_dim, page_size, pages_per_split, sm_scale,
    stride_qb, stride_qh, stride_qd,
    stride_ks, stride_kt, stride_kh, stride_kd,
    stride_vs, stride_vt, stride_vh, stride_vd,
    stride_tb, stride_th, stride_tm,
    stride_nb, stride_nh,
    stride_ob, stride_oh, stride_od,
    stride_lb, stride_lh,
    stride_ab, stride_ah, stride_as, stride_ad,
    stride_mb, stride_mh, stride_ms, stride_mk,
    BLOCK_G: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, STORE_LSE: tl.constexpr,
    SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """One program per (batch, table row h, split): query heads [h * group_size, (h + 1) * group_size)
    over the split's listed pages of KV head h // heads_per_row (a per-KV-head table: group_size G,
    heads_per_row 1; a per-query-head table: group_size 1, heads_per_row G).

    Online softmax over the pages j in [split * pages_per_split, ...) of the (b, h) list. Without SPLIT
    (one split) the program normalises and writes out / lse; with SPLIT it writes its unnormalised
    partial (acc, running max m, denominator l) for `_combine_splits_kernel`.
    Operands are widened to fp32 before tl.dot: with DOT_PRECISION="tf32" the products of fp16/bf16
    inputs stay exact (tf32 holds their mantissas) and run on tensor cores; fp32 caches use "ieee".
    (Widening also sidesteps the Triton 3.9 interpreter's wrong results for bf16 tl.dot.)
    """
    b = tl.program_id(0)
    h = tl.program_id(1)
    split = tl.program_id(2)
    offs_g = tl.arange(0, BLOCK_G)
    offs_t = tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    g_mask = offs_g < group_size
    d_mask = offs_d < head_dim
    heads = h * group_size + offs_g

    q = _load_group_queries(q_ptr, b, heads, offs_d, g_mask, d_mask, stride_qb, stride_qh, stride_qd)
    n = tl.load(npages_ptr + b * stride_nb + h * stride_nh)
    last = tl.load(last_ptr + b)
    first = split * pages_per_split
    stop = tl.minimum(n, first + pages_per_split)
    table_base = table_ptr + b * stride_tb + h * stride_th
    kv_h = h // heads_per_row
    k_base = k_ptr + kv_h * stride_kh + offs_t[:, None] * stride_kt + offs_d[None, :] * stride_kd
    v_base = v_ptr + kv_h * stride_vh + offs_t[:, None] * stride_vt + offs_d[None, :] * stride_vd
    m_i, l_i, acc = _attend_listed_pages(q, table_base, k_base, v_base, first, stop, n, last, page_size,
                                         offs_t, d_mask, sm_scale, stride_ks, stride_vs, stride_tm,
                                         BLOCK_G, BLOCK_D, DOT_PRECISION)
    if SPLIT:
        _store_split_partial(pacc_ptr, pml_ptr, b, heads, split, offs_d, g_mask, d_mask, m_i, l_i, acc,
                             stride_ab, stride_ah, stride_as, stride_ad,
                             stride_mb, stride_mh, stride_ms, stride_mk)
    else:
        _store_normalised(out_ptr, lse_ptr, b, heads, offs_d, g_mask, d_mask, m_i, l_i, acc,
                          stride_ob, stride_oh, stride_od, stride_lb, stride_lh, STORE_LSE)


@triton.jit
def _combine_splits_kernel(
    pacc_ptr, pml_ptr, out_ptr, lse_ptr,
    n_splits, head_dim,
    stride_ab, stride_ah, stride_as, stride_ad,
    stride_mb, stride_mh, stride_ms, stride_mk,
    stride_ob, stride_oh, stride_od,
    stride_lb, stride_lh,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, STORE_LSE: tl.constexpr,
):
    """One program per (batch, query head): merge the splits' partial softmaxes (log-sum-exp rule)."""
    b = tl.program_id(0)
    j = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < n_splits
    d_mask = offs_d < head_dim
    pml = pml_ptr + b * stride_mb + j * stride_mh + offs_s * stride_ms
    m_s = tl.load(pml, mask=s_mask, other=float("-inf"))
    l_s = tl.load(pml + stride_mk, mask=s_mask, other=0.0)
    acc = tl.load(pacc_ptr + b * stride_ab + j * stride_ah + offs_s[:, None] * stride_as
                  + offs_d[None, :] * stride_ad, mask=s_mask[:, None] & d_mask[None, :], other=0.0)
    m_max = tl.max(m_s, axis=0)
    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.exp(m_s - m_safe)  # 0 for empty splits (m_s = -inf)
    total = tl.sum(w * l_s, axis=0)
    has_mass = total > 0.0
    out = tl.sum(acc * w[:, None], axis=0) / tl.where(has_mass, total, 1.0)
    tl.store(out_ptr + b * stride_ob + j * stride_oh + offs_d * stride_od,
             out.to(out_ptr.dtype.element_ty), mask=d_mask)
    if STORE_LSE:
        lse = tl.where(has_mass, m_safe + tl.log(tl.where(has_mass, total, 1.0)), float("-inf"))
        tl.store(lse_ptr + b * stride_lb + j * stride_lh, lse)


def _check_args(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
    n_pages: torch.Tensor, last_page_tokens: torch.Tensor, validate: bool = True,
) -> tuple[int, int, int, int, int]:
    """Validate and return (b, Hkv, G, p, d). Shapes, dtypes and devices always; with validate, values
    (n_pages, last_page_tokens, listed slot ids) too, for CPU tensors only (no device sync)."""
    check_float("q", q, 3)
    check_float("k_cache", k_cache, 4)
    check_float("v_cache", v_cache, 4)
    b, hq, d = q.shape
    require(k_cache.shape == v_cache.shape and k_cache.dtype == v_cache.dtype,
            lambda: f"k_cache and v_cache must match, got {tuple(k_cache.shape)} {k_cache.dtype} and "
            f"{tuple(v_cache.shape)} {v_cache.dtype}")
    n_slots, page_size, hkv, kd = k_cache.shape
    require(kd == d, lambda: f"k_cache must be (n_slots, p, Hkv, d={d}) NHD, got {tuple(k_cache.shape)}")
    require(hkv >= 1 and hq % hkv == 0,
            lambda: f"q heads ({hq}) must be a multiple of cache KV heads ({hkv})")
    require(page_size >= 1, "k_cache page size p must be >= 1")
    require(isinstance(page_table, torch.Tensor) and page_table.dim() == 3
            and tuple(page_table.shape[:2]) in ((b, hkv), (b, hq)),
            lambda: f"page_table must be (b={b}, Hkv={hkv}, M) or, per query head, (b={b}, Hq={hq}, M), got "
            f"{tuple(getattr(page_table, 'shape', ()))}")
    check_int32("page_table", page_table, tuple(page_table.shape))
    check_int32("n_pages", n_pages, tuple(page_table.shape[:2]))
    check_int32("last_page_tokens", last_page_tokens, (b,))
    same_device(q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table, n_pages=n_pages,
                last_page_tokens=last_page_tokens)
    if validate and not q.is_cuda:
        m = page_table.shape[2]
        require(bool(((n_pages >= 0) & (n_pages <= m)).all()), lambda: f"n_pages must lie in [0, M={m}]")
        require(bool(((last_page_tokens >= 1) & (last_page_tokens <= page_size)).all()),
                lambda: f"last_page_tokens must lie in [1, p={page_size}]")
        listed = torch.arange(m, device=q.device) < n_pages[..., None]
        slots = page_table[listed]
        require(bool(((slots >= 0) & (slots < n_slots)).all()),
                lambda: f"listed page_table entries must be slot ids in [0, n_slots={n_slots})")
    return b, hkv, hq // hkv, page_size, d


@functools.lru_cache(maxsize=32)
def _positions(n: int, device: torch.device) -> torch.Tensor:
    return torch.arange(n, device=device)


def _slot_span_applies(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """The slot-span path (kernels._slot_span) takes float32 CPU tensors and contiguous caches."""
    return (q.device.type == "cpu" and q.dtype == k_cache.dtype == v_cache.dtype == torch.float32
            and k_cache.is_contiguous() and v_cache.is_contiguous())


def sparse_decode_attention_reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
    n_pages: torch.Tensor, last_page_tokens: torch.Tensor, return_lse: bool = False, validate: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Plain-torch sparse decode attention (gathers the listed pages, masked softmax in fp32).

    Float32 CPU tensors whose table covers most of one run of slots per sequence (as the runtime's
    paged store's tables do) take the slot-span path instead: one masked SDPA over the run, no gather
    (see kernels._slot_span; same tokens, so the same result up to summation order). return_lse=True
    always gathers.

    The listed tokens of a (b, h) row are a prefix of its M * p table positions (full pages, then the
    last page's tokens): the longest prefix is gathered, and the positions past a row's own count are
    masked (no mask when every row lists the same number of tokens). Table entries past n_pages are
    clamped into the cache before the gather.

    validate=False skips the value checks of the table (shapes and dtypes are still checked): for callers
    that build the table themselves, such as the runtime's paged store on its hot path.
    """
    b, hkv, group, page_size, d = _check_args(q, k_cache, v_cache, page_table, n_pages, last_page_tokens,
                                              validate)
    if page_table.shape[1] != hkv:  # per query head: each group member g on its own (module docstring)
        return _per_query_head_reference(q, k_cache, v_cache, page_table, n_pages, last_page_tokens,
                                         return_lse)
    if not return_lse and _slot_span_applies(q, k_cache, v_cache):
        n_pages_host = n_pages.numpy()
        span = slot_span(page_table.numpy(), n_pages_host, last_page_tokens.numpy(), page_size,
                         k_cache.shape[0])
        if span is not None:
            has_tokens = None if n_pages_host.min() > 0 else torch.from_numpy(n_pages_host > 0)
            return attend_slot_span(q, k_cache, v_cache, span, has_tokens)
    m = page_table.shape[2]
    # tokens listed per (b, h), counted on the host (a few ints; a device sync where q is on CUDA)
    lasts, listed = last_page_tokens.tolist(), n_pages.tolist()
    counts = [[max(0, (n - 1) * page_size + lasts[i]) for n in row] for i, row in enumerate(listed)]
    lo, hi = min(map(min, counts), default=0), max(map(max, counts), default=0)
    # entries past n_pages may hold anything: clamp them into the cache (their tokens are masked)
    every_entry_listed = min(map(min, listed), default=m) == m
    slots = page_table if every_entry_listed else page_table.clamp(0, max(0, k_cache.shape[0] - 1))
    k, v = (t.float() for t in gather_head_pages((k_cache, v_cache), slots.long(), hi))  # (b, Hkv, hi, d)
    qf = q.float().reshape(b, hkv, group, d) * (1.0 / math.sqrt(d))
    s = qf @ k.transpose(-1, -2)  # (b, Hkv, G, hi)
    if lo < hi:  # rows listing fewer tokens than the longest: mask their tail
        n_valid = torch.tensor(counts, device=q.device)
        s = s.masked_fill((_positions(hi, q.device) >= n_valid[..., None])[:, :, None], float("-inf"))
    out = torch.softmax(s, dim=-1) @ v
    if lo == 0 and hi > 0:  # rows with nothing listed: the softmax is NaN there, the output 0
        out = torch.where(torch.tensor(counts, device=q.device)[..., None, None] > 0, out, 0.0)
    out = out.reshape(b, hkv * group, d).to(q.dtype)
    if not return_lse:
        return out
    return out, torch.logsumexp(s, dim=-1).reshape(b, hkv * group)


def _per_query_head_reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
    n_pages: torch.Tensor, last_page_tokens: torch.Tensor, return_lse: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The reference over a per-query-head table (b, Hq, M): query heads g, G + g, ... (one per KV head)
    attend their own rows through the per-KV-head path, for each g in [0, G)."""
    hkv = k_cache.shape[2]
    group = q.shape[1] // hkv
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    for g in range(group):
        rows = slice(g, None, group)
        part = sparse_decode_attention_reference(
            q[:, rows].contiguous(), k_cache, v_cache, page_table[:, rows].contiguous(),
            n_pages[:, rows].contiguous(), last_page_tokens, return_lse, validate=False)
        if return_lse:
            out[:, rows], lse[:, rows] = part
        else:
            out[:, rows] = part
    return (out, lse) if return_lse else out


@functools.lru_cache(maxsize=16)
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _default_splits(q: torch.Tensor, b: int, hkv: int, max_pages: int) -> int:
    """Splits of each page list so that a CUDA launch has about two programs per SM; 1 elsewhere."""
    if not q.is_cuda or max_pages <= _MIN_PAGES_PER_SPLIT:
        return 1
    target = 2 * _sm_count(q.device)
    wanted = math.ceil(target / max(1, b * hkv))
    return max(1, min(wanted, max_pages // _MIN_PAGES_PER_SPLIT, _MAX_SPLITS))


def sparse_decode_attention_triton(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
    n_pages: torch.Tensor, last_page_tokens: torch.Tensor, return_lse: bool = False,
    num_splits: int | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Triton sparse decode attention; same contract as `sparse_decode_attention_reference`.

    num_splits: split each (b, h) page list into this many chunks handled by separate programs and
    merged by a second kernel (flash-decoding); None picks ~2 programs per SM on CUDA, 1 elsewhere.
    """
    b, hkv, group, page_size, d = _check_args(q, k_cache, v_cache, page_table, n_pages, last_page_tokens)
    rows, max_pages = page_table.shape[1], page_table.shape[2]
    heads_per_row = 1 if rows == hkv else group  # a per-query-head table: one program per query head
    if num_splits is None:
        num_splits = _default_splits(q, b, rows, max_pages)
    require(isinstance(num_splits, int) and num_splits >= 1,
            lambda: f"num_splits must be an int >= 1, got {num_splits!r}")
    pages_per_split = max(1, math.ceil(max_pages / num_splits))
    num_splits = max(1, math.ceil(max_pages / pages_per_split))
    split = num_splits > 1
    out = torch.empty_like(q)
    lse = torch.empty((b, hkv * group), dtype=torch.float32, device=q.device)
    parts = (1, 1) if not split else (num_splits, d)
    pacc = torch.empty((b, hkv * group, parts[0], parts[1]), dtype=torch.float32, device=q.device)
    pml = torch.empty((b, hkv * group, parts[0], 2), dtype=torch.float32, device=q.device)
    if b == 0:
        return (out, lse) if return_lse else out
    block_d = max(16, next_pow2(d))
    # tl.dot needs every block dimension >= 16 when compiled; padding rows/columns are masked.
    row_group = (hkv * group) // rows  # query heads per program
    _sparse_decode_kernel[(b, rows, num_splits)](
        q, k_cache, v_cache, page_table, n_pages, last_page_tokens, out, lse, pacc, pml,
        row_group, heads_per_row, d, page_size, pages_per_split, 1.0 / math.sqrt(d),
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *page_table.stride(), *n_pages.stride(),
        *out.stride(), *lse.stride(), *pacc.stride(), *pml.stride(),
        BLOCK_G=max(16, next_pow2(row_group)), BLOCK_T=max(16, next_pow2(page_size)), BLOCK_D=block_d,
        STORE_LSE=return_lse, SPLIT=split,
        DOT_PRECISION="ieee" if k_cache.dtype == torch.float32 else "tf32",
    )
    if split:
        _combine_splits_kernel[(b, hkv * group)](
            pacc, pml, out, lse,
            num_splits, d,
            *pacc.stride(), *pml.stride(), *out.stride(), *lse.stride(),
            BLOCK_S=next_pow2(num_splits), BLOCK_D=block_d, STORE_LSE=return_lse,
        )
    return (out, lse) if return_lse else out


def sparse_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
    n_pages: torch.Tensor, last_page_tokens: torch.Tensor, return_lse: bool = False, validate: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Sparse decode attention: Triton on CUDA (or when forced), the torch reference otherwise.

    validate=False skips the reference's value checks of the table (the Triton path never reads values
    to check them).
    """
    if use_triton(q, k_cache, v_cache, page_table, n_pages, last_page_tokens):
        return sparse_decode_attention_triton(q, k_cache, v_cache, page_table, n_pages, last_page_tokens,
                                              return_lse)
    return sparse_decode_attention_reference(q, k_cache, v_cache, page_table, n_pages, last_page_tokens,
                                             return_lse, validate)
