"""topk_pages: Triton (interpreter) vs reference (exact), and the reference vs a Python sort."""

from __future__ import annotations

import pytest
import torch

from kernels import KernelInputError
from kernels.topk_pages import (
    MAX_TRITON_PAGES,
    topk_pages,
    topk_pages_cpu,
    topk_pages_reference,
    topk_pages_triton,
)


def _scores_with_ties(gen: torch.Generator, b: int, hkv: int, n_pages: int) -> torch.Tensor:
    """Small integer scores (many ties), some -inf (non-candidates), one NaN, one row all -inf."""
    s = torch.randint(0, 4, (b, hkv, n_pages), generator=gen).float()
    s[torch.rand(b, hkv, n_pages, generator=gen) < 0.3] = float("-inf")
    s[0, 0, n_pages // 2] = float("nan")
    if b * hkv > 1:
        s[-1, -1] = float("-inf")
    return s


def _python_topk(row: list[float], k: int) -> list[int]:
    """Highest first, ties by lower index; only finite candidates; -1 padding."""
    cands = [(-v, i) for i, v in enumerate(row) if v == v and v != float("-inf")]
    picked = [i for _, i in sorted(cands)[:k]]
    return picked + [-1] * (k - len(picked))


@pytest.mark.usefixtures("triton_interpreter")
@pytest.mark.parametrize("b,hkv,n_pages,k", [(2, 3, 11, 4), (1, 2, 40, 40), (3, 1, 7, 12), (2, 2, 65, 8)])
def test_triton_matches_reference_exactly(gen, b, hkv, n_pages, k):
    s = _scores_with_ties(gen, b, hkv, n_pages)
    got = topk_pages_triton(s, k)
    assert got.dtype == torch.int32 and got.shape == (b, hkv, k)
    assert torch.equal(got, topk_pages_reference(s, k))


@pytest.mark.usefixtures("triton_interpreter")
def test_triton_on_continuous_scores_and_strided_input(gen):
    s = torch.randn(3, 4, 30, generator=gen)
    s[:, :, :3] = float("-inf")
    strided = s.transpose(0, 1).contiguous().transpose(0, 1)
    assert torch.equal(topk_pages_triton(strided, 6), topk_pages_reference(s, 6))


def test_reference_matches_python_sort(gen):
    s = _scores_with_ties(gen, 3, 2, 13)
    for k in (0, 1, 5, 13, 20):
        got = topk_pages_reference(s, k)
        for i in range(3):
            for h in range(2):
                assert got[i, h].tolist() == _python_topk(s[i, h].tolist(), k)


@pytest.mark.parametrize("tail", ["distinct", "ties_after_k", "tie_at_boundary", "inf_in_top"])
def test_reference_fast_and_sorted_paths_match_python_sort(gen, tail):
    """Distinct top values (topk fast path), ties only past the first k + 1, a tie between the k-th and
    (k + 1)-th value, and +inf among the top (both take the stable sort)."""
    k = 6
    s = torch.randn(2, 3, 40, generator=gen)
    s[:, :, :2] = float("-inf")
    if tail == "ties_after_k":
        order = s.argsort(dim=-1, descending=True)
        s.scatter_(-1, order[..., k + 1 :], 0.0 * s.gather(-1, order[..., k + 1 :]) - 5.0)
    elif tail == "tie_at_boundary":
        order = s.argsort(dim=-1, descending=True)
        s.scatter_(-1, order[..., k : k + 1], s.gather(-1, order[..., k - 1 : k]))
    elif tail == "inf_in_top":
        s[0, 1, 30] = s[0, 1, 31] = float("inf")
    got = topk_pages_reference(s, k)
    for i in range(2):
        for h in range(3):
            assert got[i, h].tolist() == _python_topk(s[i, h].tolist(), k)


def test_rows_beyond_the_triton_limit_fall_back(gen):
    s = torch.randn(1, 1, MAX_TRITON_PAGES + 3, generator=gen)
    assert torch.equal(topk_pages_triton(s, 5), topk_pages_reference(s, 5))


def test_bad_inputs_raise_clear_errors(gen):
    with pytest.raises(KernelInputError, match="k must be"):
        topk_pages(torch.zeros(1, 1, 4), -1)
    with pytest.raises(KernelInputError, match="scores must be"):
        topk_pages(torch.zeros(4), 1)


@pytest.mark.parametrize("b,hkv,n_pages", [(2, 3, 11), (1, 2, 40), (3, 1, 7), (2, 2, 65), (1, 3, 504)])
def test_cpu_loop_matches_reference_exactly(gen, b, hkv, n_pages):
    """The compiled CPU loop (what the dispatcher runs on the CPU) on ties, -inf, NaN, empty rows, and on
    continuous scores, for k below, at and above the number of pages."""
    for s in (_scores_with_ties(gen, b, hkv, n_pages), torch.randn(b, hkv, n_pages, generator=gen)):
        for k in (0, 1, 5, n_pages - 1, n_pages, n_pages + 3):
            if k >= 0:
                assert torch.equal(topk_pages_cpu(s, k), topk_pages_reference(s, k)), k
    half = _scores_with_ties(gen, b, hkv, n_pages).half()
    assert torch.equal(topk_pages(half, 4), topk_pages_reference(half, 4))
