"""Compiled Triton kernels on CUDA vs the torch references (skipped where there is no GPU).

Not run on the development machine (no GPU); the same kernels are checked on the CPU through Triton's
interpreter in the other test modules.
"""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import DTYPES, FP32_TOL, OUT_TOL, ragged_page_table, randn, summaries

import kernels

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("triton_compiled")]
CUDA = torch.device("cuda")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("g,p", [(1, 16), (4, 32), (5, 24), (8, 64)])
def test_sparse_decode_attention_cuda(gen, dtype, g, p):
    dt = DTYPES[dtype]
    b, hkv, d, n_slots = 3, 4, 128, 64
    q = randn(gen, b, hkv * g, d, dtype=dt).to(CUDA)
    k_cache = randn(gen, n_slots, p, hkv, d, dtype=dt).to(CUDA)
    v_cache = randn(gen, n_slots, p, hkv, d, dtype=dt).to(CUDA)
    table, n_pages, last = (t.to(CUDA) for t in ragged_page_table(gen, b, hkv, 20, n_slots, p))
    out, lse = kernels.sparse_decode_attention(q, k_cache, v_cache, table, n_pages, last, return_lse=True)
    ref, ref_lse = kernels.sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last,
                                                             return_lse=True)
    # compiled: tf32 for the second product of fp16/bf16 inputs (probabilities rounded to 10 bits)
    tol = OUT_TOL[dt] if dt == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(out, ref, **tol)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("pooling", ["mean", "max"])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_page_scores_and_topk_cuda(gen, pooling, dtype):
    dt = DTYPES[dtype]
    b, hkv, g, n_pages, d = 2, 8, 4, 1000, 128
    q = randn(gen, b, hkv * g, d, dtype=dt).to(CUDA)
    kmin, kmax = (t.to(CUDA) for t in summaries(gen, b, hkv, n_pages, d, dt))
    lo = torch.tensor([16, 0], dtype=torch.int32, device=CUDA)
    hi = torch.tensor([900, 1000], dtype=torch.int32, device=CUDA)
    scores = kernels.page_scores(q, kmin, kmax, lo, hi, pooling)
    torch.testing.assert_close(scores, kernels.page_scores_reference(q, kmin, kmax, lo, hi, pooling),
                               atol=1e-4, rtol=1e-4)
    assert torch.equal(kernels.topk_pages(scores, 32), kernels.topk_pages_reference(scores, 32))


def test_small_ops_cuda(gen):
    q = randn(gen, 2, 32, 128).to(CUDA)
    q_prev = randn(gen, 2, 32, 128).to(CUDA)
    torch.testing.assert_close(kernels.query_similarity(q, q_prev, 4),
                               kernels.query_similarity_reference(q, q_prev, 4), **FP32_TOL)
    k_pages = randn(gen, 10, 32, 8, 128, dtype=torch.bfloat16).to(CUDA)
    valid = torch.randint(1, 33, (10,), generator=gen, dtype=torch.int32).to(CUDA)
    got, want = kernels.summarize_pages(k_pages, valid), kernels.summarize_pages_reference(k_pages, valid)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    staging = randn(gen, 12, 2, 32, 128, dtype=torch.bfloat16).to(CUDA)
    pairs = torch.randperm(80, generator=gen)[:12]
    slots, heads = (pairs // 8).to(torch.int32).to(CUDA), (pairs % 8).to(torch.int32).to(CUDA)
    k1, v1 = torch.zeros_like(k_pages), torch.zeros_like(k_pages)
    k2, v2 = k1.clone(), v1.clone()
    kernels.recall_hnd_to_nhd(staging, heads, slots, k1, v1)
    kernels.recall_hnd_to_nhd_reference(staging, heads, slots, k2, v2)
    assert torch.equal(k1, k2) and torch.equal(v1, v2)
