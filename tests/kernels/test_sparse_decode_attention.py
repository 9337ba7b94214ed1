"""sparse_decode_attention: Triton (interpreter) vs reference; reference vs dense softmax(qK^T)V."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from kernel_inputs import DTYPES, FP32_TOL, OUT_TOL, ragged_page_table, randn

from kernels import KernelInputError
from kernels._slot_span import slot_span
from kernels.sparse_decode_attention import (
    sparse_decode_attention,
    sparse_decode_attention_reference,
    sparse_decode_attention_triton,
)


def _case(gen, b, hkv, g, p, d, dtype, max_pages=4, n_slots=10):
    q = randn(gen, b, hkv * g, d, dtype=dtype)
    k_cache = randn(gen, n_slots, p, hkv, d, dtype=dtype)
    v_cache = randn(gen, n_slots, p, hkv, d, dtype=dtype)
    table, n_pages, last = ragged_page_table(gen, b, hkv, max_pages, n_slots, p)
    return q, k_cache, v_cache, table, n_pages, last


GROUPS = [1, 3, 4, 5, 7, 8]
PAGE_SIZES = [8, 16, 24, 32, 64]
FAST_CASES = [  # (b, Hkv, G, p, d, dtype)
    (2, 2, 1, 8, 16, "fp32"),
    (3, 1, 3, 24, 16, "fp16"),
    (2, 2, 4, 16, 32, "bf16"),
    (3, 1, 5, 32, 8, "fp32"),
    (2, 1, 7, 8, 24, "fp16"),
    (2, 2, 8, 64, 16, "bf16"),
]


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("b,hkv,g,p,d,dtype", FAST_CASES)
def test_triton_matches_reference(gen, b, hkv, g, p, d, dtype):
    dt = DTYPES[dtype]
    args = _case(gen, b, hkv, g, p, d, dt)
    out, lse = sparse_decode_attention_triton(*args, return_lse=True)
    ref_out, ref_lse = sparse_decode_attention_reference(*args, return_lse=True)
    assert out.dtype == dt and out.shape == (b, hkv * g, d) and lse.shape == (b, hkv * g)
    torch.testing.assert_close(out, ref_out, **OUT_TOL[dt])
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    torch.testing.assert_close(lse, ref_lse, **FP32_TOL)


@pytest.mark.slow
@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("g,p,dtype", list(itertools.product(GROUPS, PAGE_SIZES, DTYPES)))
def test_triton_matches_reference_sweep(gen, g, p, dtype):
    dt = DTYPES[dtype]
    args = _case(gen, 3, 2, g, p, 64, dt, max_pages=5, n_slots=12)
    out, lse = sparse_decode_attention_triton(*args, return_lse=True, num_splits=1 + g % 3)
    ref_out, ref_lse = sparse_decode_attention_reference(*args, return_lse=True)
    torch.testing.assert_close(out, ref_out, **OUT_TOL[dt])
    torch.testing.assert_close(lse, ref_lse, **FP32_TOL)


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("num_splits,dtype", [(2, "bf16"), (5, "fp32")])
def test_triton_split_pages_match_reference(gen, num_splits, dtype):
    """Flash-decoding splits (some empty: ragged lists, n_pages = 0) merge to the same result."""
    dt = DTYPES[dtype]
    args = _case(gen, 3, 1, 3, 8, 16, dt, max_pages=6, n_slots=14)
    out, lse = sparse_decode_attention_triton(*args, return_lse=True, num_splits=num_splits)
    ref_out, ref_lse = sparse_decode_attention_reference(*args, return_lse=True)
    torch.testing.assert_close(out, ref_out, **OUT_TOL[dt])
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    torch.testing.assert_close(lse, ref_lse, **FP32_TOL)


@pytest.mark.usefixtures("triton_interpreter")
def test_triton_strided_inputs_and_mixed_dtypes(gen):
    """q as a non-contiguous fp32 view over fp16 caches that are head slices of larger caches."""
    q_full = randn(gen, 2, 6, 2, 16)
    q = q_full[:, :, 1]  # (b, Hq, d), stride over the token axis
    _, k_big, v_big, table, n_pages, last = _case(gen, 2, 3, 3, 8, 16, torch.float16, max_pages=6)
    k_cache, v_cache = k_big[:, :, 1:], v_big[:, :, 1:]  # (n_slots, p, 2, d) views, not contiguous
    table, n_pages = table[:, :2], n_pages[:, :2]
    got = sparse_decode_attention_triton(q, k_cache, v_cache, table, n_pages, last)
    k_dense, v_dense = k_cache.contiguous(), v_cache.contiguous()
    want = sparse_decode_attention_reference(q, k_dense, v_dense, table, n_pages, last)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, **FP32_TOL)
    # the reference's two gather paths (contiguous rows / strided advanced indexing) agree exactly
    strided = sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last)
    assert torch.equal(strided, want)


@pytest.mark.usefixtures("triton_interpreter")
def test_triton_batched_equals_per_sequence(gen):
    q, k_cache, v_cache, table, n_pages, last = _case(gen, 3, 1, 4, 8, 16, torch.float16)
    batched = sparse_decode_attention_triton(q, k_cache, v_cache, table, n_pages, last)
    for i in range(3):
        s = slice(i, i + 1)
        one = sparse_decode_attention_triton(q[s], k_cache, v_cache, table[s], n_pages[s], last[s])
        assert torch.equal(batched[s], one)


@pytest.mark.parametrize("g,p", [(1, 8), (4, 16), (3, 24)])
def test_all_pages_listed_equals_dense(gen, g, p):
    """Listing every page of a sequence in order gives softmax(q K^T / sqrt(d)) V and its log-sum-exp."""
    b, hkv, d, n_tok = 2, 2, 16, 3 * p + 5  # not a page multiple: a partial last page
    n_full = math.ceil(n_tok / p)
    keys = randn(gen, b, hkv, n_full * p, d)
    values = randn(gen, b, hkv, n_full * p, d)
    q = randn(gen, b, hkv * g, d)
    # sequence i, page j lives in slot i * n_full + j (NHD)
    k_cache = keys.reshape(b, hkv, n_full, p, d).permute(0, 2, 3, 1, 4).reshape(b * n_full, p, hkv, d)
    v_cache = values.reshape(b, hkv, n_full, p, d).permute(0, 2, 3, 1, 4).reshape(b * n_full, p, hkv, d)
    table = (torch.arange(b)[:, None, None] * n_full + torch.arange(n_full)).expand(b, hkv, n_full)
    table = table.to(torch.int32).contiguous()
    n_pages = torch.full((b, hkv), n_full, dtype=torch.int32)
    last = torch.full((b,), n_tok - (n_full - 1) * p, dtype=torch.int32)
    out, lse = sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last, return_lse=True)
    kk = keys[:, :, :n_tok].repeat_interleave(g, dim=1)  # (b, Hq, T, d)
    vv = values[:, :, :n_tok].repeat_interleave(g, dim=1)
    logits = torch.einsum("bhd,bhtd->bht", q, kk) / math.sqrt(d)
    dense = torch.einsum("bht,bhtd->bhd", torch.softmax(logits, -1), vv)
    torch.testing.assert_close(out, dense, **FP32_TOL)
    torch.testing.assert_close(lse, torch.logsumexp(logits, -1), **FP32_TOL)


def test_batched_equals_per_sequence(gen):
    q, k_cache, v_cache, table, n_pages, last = _case(gen, 4, 2, 3, 8, 16, torch.float32)
    batched, lse = sparse_decode_attention(q, k_cache, v_cache, table, n_pages, last, return_lse=True)
    for i in range(4):
        s = slice(i, i + 1)
        one, one_lse = sparse_decode_attention(q[s], k_cache, v_cache, table[s], n_pages[s], last[s],
                                               return_lse=True)
        torch.testing.assert_close(batched[s], one)
        torch.testing.assert_close(lse[s], one_lse)


def test_empty_head_gives_zero_output_and_minus_inf_lse(gen):
    q, k_cache, v_cache, table, n_pages, last = _case(gen, 2, 2, 2, 8, 16, torch.float32)
    n_pages[1, 0] = 0
    out, lse = sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last, return_lse=True)
    listed = (n_pages > 0).repeat_interleave(2, dim=1)  # per query head
    assert (out[~listed] == 0).all() and torch.isneginf(lse[~listed]).all()
    assert torch.isfinite(lse[listed]).all() and listed.any()


def test_bad_inputs_raise_clear_errors(gen):
    q, k_cache, v_cache, table, n_pages, last = _case(gen, 2, 2, 2, 8, 16, torch.float32)
    with pytest.raises(KernelInputError, match="last_page_tokens must lie in"):
        sparse_decode_attention(q, k_cache, v_cache, table, n_pages, last * 0)
    with pytest.raises(KernelInputError, match="n_pages must lie in"):
        sparse_decode_attention(q, k_cache, v_cache, table, n_pages + 10, last)
    bad = table.clone()
    bad[0, 0, 0] = 99
    n_pages[0, 0] = max(1, int(n_pages[0, 0]))
    with pytest.raises(KernelInputError, match="slot ids"):
        sparse_decode_attention(q, k_cache, v_cache, bad, n_pages, last)
    with pytest.raises(KernelInputError, match="page_table must be int32"):
        sparse_decode_attention(q, k_cache, v_cache, table.long(), n_pages, last)
    with pytest.raises(KernelInputError, match="NHD"):
        sparse_decode_attention(q, k_cache[..., :8], v_cache[..., :8], table, n_pages, last)


def _runtime_like_table(b: int, hkv: int, slots_per_seq: int, gen: torch.Generator, holes: bool):
    """Each sequence i lists (a permutation of) its own slots [i * S, (i + 1) * S), as the runtime's paged
    store does; with holes, some (b, h) list only some of them (a selected-page cache not yet full) and,
    with several KV heads, one lists nothing."""
    table = torch.full((b, hkv, slots_per_seq), -1, dtype=torch.int32)
    n_pages = torch.full((b, hkv), slots_per_seq, dtype=torch.int32)
    for i in range(b):
        for h in range(hkv):
            n = slots_per_seq if not holes else int(torch.randint(1, slots_per_seq + 1, (1,), generator=gen))
            n_pages[i, h] = n
            table[i, h, :n] = (i * slots_per_seq + torch.randperm(slots_per_seq, generator=gen)[:n]).int()
    if holes and hkv > 1:
        n_pages[-1, -1] = 0
    return table, n_pages


@pytest.mark.parametrize("b,hkv,g,p,holes", [(1, 3, 3, 16, False), (2, 2, 4, 8, True), (3, 1, 5, 24, True),
                                               (2, 3, 1, 64, False)])
def test_slot_span_path_matches_the_gather(gen, b, hkv, g, p, holes):
    """Float32 CPU tables covering each sequence's own slots take the slot-span path (one masked SDPA);
    its output equals the gathering path's (return_lse=True always gathers)."""
    slots_per_seq, d = 6, 32
    q = randn(gen, b, hkv * g, d)
    k_cache, v_cache = randn(gen, b * slots_per_seq, p, hkv, d), randn(gen, b * slots_per_seq, p, hkv, d)
    table, n_pages = _runtime_like_table(b, hkv, slots_per_seq, gen, holes)
    last = torch.randint(1, p + 1, (b,), generator=gen, dtype=torch.int32)
    assert slot_span(table.numpy(), n_pages.numpy(), last.numpy(), p, b * slots_per_seq) is not None
    out = sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last)
    gathered, _ = sparse_decode_attention_reference(q, k_cache, v_cache, table, n_pages, last,
                                                    return_lse=True)
    torch.testing.assert_close(out, gathered, **FP32_TOL)
    if holes and hkv > 1:
        assert torch.equal(out[-1, -g:], torch.zeros(g, d))


def test_slot_span_declines_tables_it_cannot_serve(gen):
    """Scattered slots, a slot listed twice, or unevenly spaced sequences: the gather runs instead."""
    last = torch.tensor([3, 5], dtype=torch.int32).numpy()
    n_pages = np.full((2, 1), 2, dtype=np.int32)
    assert slot_span(np.array([[[0, 1]], [[2, 3]]], np.int32), n_pages, last, 8, 40) is not None
    assert slot_span(np.array([[[0, 9]], [[2, 3]]], np.int32), n_pages, last, 8, 40) is None  # run of 10 > 2M
    assert slot_span(np.array([[[1, 1]], [[2, 3]]], np.int32), n_pages, last, 8, 40) is None  # repeated slot
    assert slot_span(np.array([[[0, 1]], [[3, 4]]], np.int32), n_pages, last, 8, 40) is not None  # step 3
    ones = np.array([1, 1, 1], np.int32)
    three = np.array([[[0, 1]], [[2, 3]], [[5, 6]]], np.int32)  # first slots 0, 2, 5: uneven
    assert slot_span(three, np.full((3, 1), 2, np.int32), ones, 8, 40) is None
    three = np.array([[[0, 1]], [[4, 3]], [[6, 7]]], np.int32)  # runs at 0, 3, 6; sequence 1 from slot 3
    assert slot_span(three, np.full((3, 1), 2, np.int32), ones, 8, 40) is not None
    nothing_listed = np.array([[2], [0]], np.int32)  # a sequence without any page
    assert slot_span(np.array([[[0, 1]], [[2, 3]]], np.int32), nothing_listed, last, 8, 40) is None
