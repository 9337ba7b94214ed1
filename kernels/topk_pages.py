"""Top-k page selection per (batch, head row), deterministic.

`topk_pages(scores, k)`: scores (b, H, P) float (-inf or NaN = not a candidate) -> (b, H, k) int32
page indices, highest score first, ties broken by the lower page index. Where fewer than k candidate
pages exist, the tail is padded with -1. H is Hkv for pooled scores (`page_scores`) and Hq for
per-query-head scores (`query_page_scores`): every row is selected on its own.

The Triton kernel is one program per (batch, KV head) holding the whole score row in one block and
extracting the maximum k times (O(k * P) work, fine for k of tens and P up to `MAX_TRITON_PAGES`). Rows
longer than `MAX_TRITON_PAGES` fall back to the torch reference (same result, documented limit).
On the CPU the dispatcher runs a compiled loop (`topk_pages_cpu`, kernels/cpu/topk_pages.py): one scan
per row, same result as the reference, one call instead of the reference's sort or top-k plus checks.
GPU status: the Triton kernel is tested against the reference in Triton's interpreter on the CPU and
compiled ahead of time for sm_80 / sm_90 (tests/kernels/compile_check.py); it has not run on a GPU yet.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._common import next_pow2, require, use_triton
from kernels.cpu.topk_pages import topk_pages_loop

__all__ = ["topk_pages", "topk_pages_cpu", "topk_pages_reference", "topk_pages_triton", "MAX_TRITON_PAGES"]

MAX_TRITON_PAGES = 8192  # one block holds a whole score row (8192 pages = 256K tokens at p = 32)


@triton.jit
def _topk_pages_kernel(
    scores_ptr, out_ptr,
    n_pages, k,
    stride_sb, stride_sh, stride_sp,
    stride_ob, stride_oh, stride_ok,
    BLOCK_P: tl.constexpr,
):
    """One program per (batch, KV head): k rounds of (max, lowest index at the max, remove it)."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs = tl.arange(0, BLOCK_P)
    s = tl.load(scores_ptr + b * stride_sb + h * stride_sh + offs * stride_sp,
                mask=offs < n_pages, other=float("-inf")).to(tl.float32)
    alive = (offs < n_pages) & (s > float("-inf"))  # NaN compares False: never a candidate
    out_base = out_ptr + b * stride_ob + h * stride_oh
    for i in range(0, k):
        best = tl.max(tl.where(alive, s, float("-inf")), axis=0)
        at_best = alive & (s == best)
        idx = tl.min(tl.where(at_best, offs, BLOCK_P), axis=0)
        found = idx < BLOCK_P
        tl.store(out_base + i * stride_ok, tl.where(found, idx, -1).to(tl.int32))
        alive = alive & (offs != idx)


def _check_args(scores: torch.Tensor, k: int) -> None:
    require(isinstance(scores, torch.Tensor) and scores.dim() == 3,
            lambda: "scores must be a (b, H, P) tensor, got "
            f"{getattr(scores, 'shape', type(scores).__name__)}")
    require(scores.is_floating_point(), lambda: f"scores must be a float tensor, got {scores.dtype}")
    require(isinstance(k, int) and k >= 0, lambda: f"k must be a non-negative int, got {k!r}")


def topk_pages_reference(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Plain-torch top-k: stable descending sort (ties keep the lower index first), -1 padding.

    Fast path: `torch.topk` of k + 1 (its order among equal values is unspecified); when those k + 1
    values strictly decrease in every row there is no tie to break and no -inf among the first k, so its
    first k indices are exactly the stable order. Otherwise (ties, fewer than k + 1 candidates, NaN) the
    full stable sort runs.
    """
    _check_args(scores, k)
    b, hkv, n_pages = scores.shape
    s = scores if scores.dtype == torch.float32 else scores.float()
    if 0 < k < n_pages:
        values, order = torch.topk(s, k + 1, dim=-1)
        if bool((values[..., :-1] > values[..., 1:]).all()):
            return order[..., :k].to(torch.int32).contiguous()
    s = s.nan_to_num(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    values, order = torch.sort(s, dim=-1, descending=True, stable=True)
    take = min(k, n_pages)
    idx = order[..., :take].to(torch.int32).masked_fill_(values[..., :take] == float("-inf"), -1)
    if take < k:
        pad = torch.full((b, hkv, k - take), -1, dtype=torch.int32, device=scores.device)
        idx = torch.cat([idx, pad], dim=-1)
    return idx.contiguous()


def topk_pages_cpu(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Compiled CPU top-k (kernels/cpu/topk_pages.py); same contract and result as `topk_pages_reference`."""
    _check_args(scores, k)
    require(scores.device.type == "cpu", "topk_pages_cpu takes a CPU tensor")
    b, hkv, _ = scores.shape
    out = torch.empty((b, hkv, k), dtype=torch.int32)
    s = scores if scores.dtype in (torch.float32, torch.float64) else scores.float()
    topk_pages_loop(s.detach().numpy(), k, out.numpy())
    return out


def topk_pages_triton(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Triton top-k; same contract as `topk_pages_reference`. Falls back to it for P > MAX_TRITON_PAGES."""
    _check_args(scores, k)
    b, hkv, n_pages = scores.shape
    if n_pages > MAX_TRITON_PAGES:
        return topk_pages_reference(scores, k)
    out = torch.empty((b, hkv, k), dtype=torch.int32, device=scores.device)
    if k == 0 or b * hkv == 0:
        return out
    _topk_pages_kernel[(b, hkv)](
        scores, out,
        n_pages, k,
        *scores.stride(), *out.stride(),
        BLOCK_P=next_pow2(max(n_pages, 1)),
    )
    return out


def topk_pages(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k pages (b, H, k) int32: Triton on CUDA (or when forced), the compiled loop on the CPU, the
    torch reference elsewhere."""
    if use_triton(scores):
        return topk_pages_triton(scores, k)
    if scores.device.type == "cpu":
        return topk_pages_cpu(scores, k)
    return topk_pages_reference(scores, k)
