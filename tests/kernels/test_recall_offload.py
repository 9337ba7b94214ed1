"""recall_hnd_to_nhd (Triton in the interpreter vs reference), the CPU runs recall, offload round trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_inputs import DTYPES, randn

from kernels import KernelInputError, offload_nhd_to_hnd
from kernels.recall import (
    recall_hnd_to_nhd,
    recall_hnd_to_nhd_reference,
    recall_hnd_to_nhd_triton,
    recall_runs_cpu,
)


def _recall_case(gen, n, p, hkv, d, dtype, n_slots=6):
    staging = randn(gen, n, 2, p, d, dtype=dtype)
    pairs = torch.randperm(n_slots * hkv, generator=gen)[:n]  # distinct (slot, head) pairs
    slot_ids, head_ids = (pairs // hkv).to(torch.int32), (pairs % hkv).to(torch.int32)
    k_cache = randn(gen, n_slots, p, hkv, d, dtype=dtype)
    v_cache = randn(gen, n_slots, p, hkv, d, dtype=dtype)
    return staging, head_ids, slot_ids, k_cache, v_cache


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("n,p,hkv,d,dtype", [(5, 8, 2, 16, "fp32"), (7, 24, 3, 20, "fp16"),
                                             (4, 32, 4, 64, "bf16"), (3, 64, 1, 8, "fp16")])
def test_triton_matches_reference_exactly(gen, n, p, hkv, d, dtype):
    staging, heads, slots, k_cache, v_cache = _recall_case(gen, n, p, hkv, d, DTYPES[dtype])
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    recall_hnd_to_nhd_triton(staging, heads, slots, k_cache, v_cache)
    recall_hnd_to_nhd_reference(staging, heads, slots, k_ref, v_ref)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


def test_reference_writes_exactly_the_named_head_pages(gen):
    staging, heads, slots, k_cache, v_cache = _recall_case(gen, 4, 8, 3, 16, torch.float32)
    k_before = k_cache.clone()
    recall_hnd_to_nhd_reference(staging, heads, slots, k_cache, v_cache)
    touched = torch.zeros(k_cache.shape[0], k_cache.shape[2], dtype=torch.bool)
    for i, (s, h) in enumerate(zip(slots.tolist(), heads.tolist(), strict=True)):
        assert torch.equal(k_cache[s, :, h], staging[i, 0]) and torch.equal(v_cache[s, :, h], staging[i, 1])
        touched[s, h] = True
    untouched = ~touched[:, None, :].expand(-1, k_cache.shape[1], -1)
    assert torch.equal(k_cache[untouched], k_before[untouched])


def test_offload_then_recall_round_trip(gen):
    """NHD page -> HND runs (host layout) -> staging -> NHD slot reproduces the page."""
    p, hkv, d = 16, 3, 8
    k_page, v_page = randn(gen, p, hkv, d), randn(gen, p, hkv, d)
    runs = offload_nhd_to_hnd(k_page, v_page)
    assert runs.shape == (hkv, 2, p, d) and runs.is_contiguous()
    k_cache, v_cache = torch.zeros(2, p, hkv, d), torch.zeros(2, p, hkv, d)
    heads = torch.arange(hkv, dtype=torch.int32)
    recall_hnd_to_nhd(runs, heads, torch.ones(hkv, dtype=torch.int32), k_cache, v_cache)
    assert torch.equal(k_cache[1], k_page) and torch.equal(v_cache[1], v_page)


def test_offload_batched_and_into_out(gen):
    k, v = randn(gen, 3, 8, 2, 4), randn(gen, 3, 8, 2, 4)
    out = torch.empty(3, 2, 2, 8, 4)
    assert offload_nhd_to_hnd(k, v, out=out) is out
    for i in range(3):
        assert torch.equal(out[i], offload_nhd_to_hnd(k[i], v[i]))
    with pytest.raises(KernelInputError, match="out must be"):
        offload_nhd_to_hnd(k, v, out=torch.empty(3, 2, 2, 4, 8))


def test_bad_inputs_raise_clear_errors(gen):
    staging, heads, slots, k_cache, v_cache = _recall_case(gen, 3, 8, 2, 16, torch.float32)
    with pytest.raises(KernelInputError, match="share a dtype"):
        recall_hnd_to_nhd(staging.half(), heads, slots, k_cache, v_cache)
    with pytest.raises(KernelInputError, match="head_ids must lie in"):
        recall_hnd_to_nhd(staging, heads + 5, slots, k_cache, v_cache)
    with pytest.raises(KernelInputError, match=r"\(n, 2, p, d\)"):
        recall_hnd_to_nhd(staging[:, :1], heads, slots, k_cache, v_cache)


@pytest.mark.parametrize("n,p,hkv,d,dtype", [(5, 8, 2, 16, "fp32"), (7, 24, 3, 20, "fp16"),
                                             (0, 16, 3, 8, "fp32"), (9, 64, 1, 8, "bf16")])
def test_cpu_runs_recall_equals_reference_of_gathered_runs(gen, n, p, hkv, d, dtype):
    """recall_runs_cpu (one compiled pass from the pool) == staging gather + recall_hnd_to_nhd_reference."""
    dt = DTYPES[dtype]
    _, heads, slots, k_cache, v_cache = _recall_case(gen, n, p, hkv, d, dt, n_slots=max(6, n))
    runs = randn(gen, 11, 2, p, d, dtype=dt)  # the pool as runs
    run_ids = torch.randint(0, 11, (n,), generator=gen).numpy()
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    recall_runs_cpu(runs, run_ids, heads.numpy(), slots.numpy(), k_cache, v_cache)
    recall_hnd_to_nhd_reference(runs[torch.from_numpy(run_ids)], heads, slots, k_ref, v_ref)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


def test_cpu_runs_recall_rejects_bad_ids_and_dtypes(gen):
    _, heads, slots, k_cache, v_cache = _recall_case(gen, 3, 8, 2, 16, torch.float32)
    runs = randn(gen, 4, 2, 8, 16)
    ok = np.array([0, 1, 2])
    with pytest.raises(KernelInputError, match="run_ids"):
        recall_runs_cpu(runs, np.array([0, 1, 4]), heads.numpy(), slots.numpy(), k_cache, v_cache)
    with pytest.raises(KernelInputError, match="slot_ids"):
        recall_runs_cpu(runs, ok, heads.numpy(), np.array([0, 1, 6]), k_cache, v_cache)
    with pytest.raises(KernelInputError, match="one length"):
        recall_runs_cpu(runs, ok[:2], heads.numpy(), slots.numpy(), k_cache, v_cache)
    with pytest.raises(KernelInputError, match="dtype"):
        recall_runs_cpu(runs.bfloat16(), ok, heads.numpy(), slots.numpy(), k_cache, v_cache)
