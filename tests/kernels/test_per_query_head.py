"""Per-query-head selection kernels: page scores per query head, top-k per row, and sparse decode attention
over a per-query-head page table. Triton (interpreter) vs reference at awkward sizes, and the reference vs
the rule written out per query head."""

from __future__ import annotations

import math

import pytest
import torch
from kernel_inputs import DTYPES, FP32_TOL, OUT_TOL, ragged_page_table, randn, summaries

from kernels import KernelInputError
from kernels.page_scores import query_page_scores_reference, query_page_scores_triton
from kernels.sparse_decode_attention import (
    sparse_decode_attention_reference,
    sparse_decode_attention_triton,
)
from kernels.topk_pages import topk_pages_reference, topk_pages_triton

CASES = [  # (b, Hkv, G, P or p, d, dtype)
    (3, 2, 3, 7, 16, "fp32"),
    (2, 1, 5, 13, 24, "fp16"),
    (1, 3, 4, 5, 8, "bf16"),
]


def _bounds(b: int, n_pages: int) -> tuple[torch.Tensor, torch.Tensor]:
    choices = [(1, n_pages - 1), (0, n_pages), (2, 2)]
    lo = torch.tensor([choices[i % 3][0] for i in range(b)], dtype=torch.int32)
    hi = torch.tensor([choices[i % 3][1] for i in range(b)], dtype=torch.int32)
    return lo, hi


def _direct_scores(q, kmin, kmax, lo, hi):
    """Quest's bound per query head (quest_attention.py:146-184): sum_d max(q_d * kmax_d, q_d * kmin_d)."""
    b, hq, _ = q.shape
    hkv, n_pages = kmin.shape[1], kmin.shape[2]
    g = hq // hkv
    out = torch.full((b, hq, n_pages), float("-inf"))
    for i in range(b):
        for j in range(hq):
            qj = q[i, j].float()
            raw = torch.maximum(qj * kmax[i, j // g].float(), qj * kmin[i, j // g].float()).sum(-1)
            out[i, j, int(lo[i]):int(hi[i])] = raw[int(lo[i]):int(hi[i])]
    return out


@pytest.mark.parametrize("b,hkv,g,n_pages,d,dtype", CASES)
def test_query_page_scores_reference_is_the_rule(gen, b, hkv, g, n_pages, d, dtype):
    dt = DTYPES[dtype]
    q = randn(gen, b, hkv * g, d, dtype=dt)
    kmin, kmax = summaries(gen, b, hkv, n_pages, d, dt)
    lo, hi = _bounds(b, n_pages)
    got = query_page_scores_reference(q, kmin, kmax, lo, hi)
    assert got.shape == (b, hkv * g, n_pages)
    torch.testing.assert_close(got, _direct_scores(q, kmin, kmax, lo, hi), **FP32_TOL)


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("b,hkv,g,n_pages,d,dtype", CASES)
def test_query_page_scores_and_topk_triton_match_reference(gen, b, hkv, g, n_pages, d, dtype):
    dt = DTYPES[dtype]
    q = randn(gen, b, hkv * g, d, dtype=dt)
    kmin, kmax = summaries(gen, b, hkv, n_pages, d, dt)
    lo, hi = _bounds(b, n_pages)
    ref = query_page_scores_reference(q, kmin, kmax, lo, hi)
    got = query_page_scores_triton(q, kmin, kmax, lo, hi)
    torch.testing.assert_close(got, ref, **FP32_TOL)
    k = 3
    assert torch.equal(topk_pages_triton(ref, k), topk_pages_reference(ref, k))
    assert topk_pages_reference(ref, k).shape == (b, hkv * g, k)


def _per_head_table(gen, b, hkv, g, max_pages, n_slots, p):
    """A ragged table per query head: each query head gets its own rows of slots."""
    table, n_pages, last = ragged_page_table(gen, b, hkv * g, max_pages, n_slots, p)
    return table, n_pages, last


def _direct_attention(q, k_cache, v_cache, table, n_pages, last):
    """softmax(q_j K_j^T / sqrt(d)) V_j over query head j's own listed tokens (KV head j // G)."""
    b, hq, d = q.shape
    p, hkv = k_cache.shape[1], k_cache.shape[2]
    g = hq // hkv
    out = torch.zeros(b, hq, d)
    for i in range(b):
        for j in range(hq):
            n = int(n_pages[i, j])
            if n == 0:
                continue
            slots = table[i, j, :n].long()
            keys = k_cache[slots, :, j // g].float().reshape(n * p, d)[: (n - 1) * p + int(last[i])]
            vals = v_cache[slots, :, j // g].float().reshape(n * p, d)[: (n - 1) * p + int(last[i])]
            w = torch.softmax(keys @ q[i, j].float() / math.sqrt(d), dim=0)
            out[i, j] = w @ vals
    return out


@pytest.mark.parametrize("b,hkv,g,p,d,dtype", CASES)
def test_per_query_head_attention_reference_is_the_rule(gen, b, hkv, g, p, d, dtype):
    dt = DTYPES[dtype]
    q = randn(gen, b, hkv * g, d, dtype=dt)
    k_cache, v_cache = randn(gen, 9, p, hkv, d, dtype=dt), randn(gen, 9, p, hkv, d, dtype=dt)
    table, n_pages, last = _per_head_table(gen, b, hkv, g, 4, 9, p)
    got = sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last)
    want = _direct_attention(q, k_cache, v_cache, table, n_pages, last)
    torch.testing.assert_close(got.float(), want, **OUT_TOL[dt])


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("b,hkv,g,p,d,dtype,num_splits", [(*c, 1) for c in CASES] + [(*CASES[0], 3)])
def test_per_query_head_attention_triton_matches_reference(gen, b, hkv, g, p, d, dtype, num_splits):
    dt = DTYPES[dtype]
    q = randn(gen, b, hkv * g, d, dtype=dt)
    k_cache, v_cache = randn(gen, 9, p, hkv, d, dtype=dt), randn(gen, 9, p, hkv, d, dtype=dt)
    table, n_pages, last = _per_head_table(gen, b, hkv, g, 5, 9, p)
    out, lse = sparse_decode_attention_triton(q, k_cache, v_cache, table, n_pages, last, return_lse=True,
                                              num_splits=num_splits)
    ref_out, ref_lse = sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last,
                                                         return_lse=True)
    torch.testing.assert_close(out, ref_out, **OUT_TOL[dt])
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    torch.testing.assert_close(lse, ref_lse, **FP32_TOL)


def test_per_query_head_table_of_a_shared_selection_equals_the_pooled_table(gen):
    """Every query head listing its KV head's pages gives the per-KV-head result."""
    b, hkv, g, p, d = 2, 2, 3, 8, 16
    q = randn(gen, b, hkv * g, d)
    k_cache, v_cache = randn(gen, 9, p, hkv, d), randn(gen, 9, p, hkv, d)
    table, n_pages, last = ragged_page_table(gen, b, hkv, 4, 9, p)
    pooled = sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last)
    per_head = sparse_decode_attention_reference(
        q, k_cache, v_cache, table.repeat_interleave(g, dim=1).contiguous(),
        n_pages.repeat_interleave(g, dim=1).contiguous(), last)
    torch.testing.assert_close(per_head, pooled, **FP32_TOL)


def test_a_table_of_neither_head_count_is_refused(gen):
    q = randn(gen, 1, 6, 8)
    k_cache = randn(gen, 4, 8, 2, 8)
    table = torch.zeros((1, 4, 2), dtype=torch.int32)
    with pytest.raises(KernelInputError, match="per query head"):
        sparse_decode_attention_reference(q, k_cache, k_cache, table, torch.ones((1, 4), dtype=torch.int32),
                                          torch.ones(1, dtype=torch.int32))
