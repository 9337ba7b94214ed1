"""Microbenchmark items behind the ShadowKV validation gap (docs/methods.md, "Validation against published
results"): the simulator predicts ShadowKV's published throughput 13-43% too fast while the same table's
full-attention rows are within 6%, and two costs it prices at hardware limits are the candidates.

- table `topk`: device time of `torch.topk(scores, k, dim=-1)` on fp32 scores of shape (rows, cols), at the
  shapes ShadowKV's decode uses (models/kv_cache.py:640: rows = batch x KV heads, cols = context / 8
  landmark chunks, k = sparse budget / 8), and at FreeKV's page-selection shapes (cols = context / page,
  k = budget / page), against the time to read the scores once at the measured HBM rate (what a roofline
  selection model charges);
- table `uva_gather`: a Triton kernel that reads `run_bytes` contiguous runs at random run indices straight
  from pinned host memory (zero-copy over UVA, the path of ShadowKV's `gather_copy_with_offsets`), in GB/s,
  against one cudaMemcpy-class copy of the same bytes (`torch` `copy_` of a pinned tensor);
- table `uva_gather_blocks`: the same zero-copy reads of 2 KiB runs, but with ShadowKV's grid shape: one
  program per (sequence, KV head) looping over its own missed chunks one 2 KiB run at a time
  (`gather_copy_var_midpoint_BP`, kernels/copy.cuh), at the block counts and misses per block of
  ShadowKV's e2e.py cells (40-384 blocks, 51-205 runs each), in GB/s: whether a gather with few, long
  blocks fills the link (the simulator charges the DMA rate whatever the block count).

Neither table feeds a profile yet: they say whether the simulator's roofline selection and DMA-rate value
fetch are what a GPU really does at these shapes. Device times: n calls queued behind a sleep kernel,
bracketed by events (microbench_cuda.device_s). Never run during development (no GPU there).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

__all__ = [
    "TOPK_SHAPES",
    "UVA_BLOCK_SHAPES",
    "UVA_IN_FLIGHT",
    "UVA_RUN_BYTES",
    "gather_runs",
    "gather_runs_per_block",
    "topk_table",
    "uva_gather_blocks_table",
    "uva_gather_table",
]

# (label, rows, cols, k): ShadowKV's e2e.py cells (batch x KV heads, 60/122/244K / chunk 8, budget / 8),
# then FreeKV-style page selection (batch 1-4 x 8 KV heads, 32K / page 32, budget 2048 / 32)
TOPK_SHAPES = (
    ("shadowkv llama-3 60K b48", 48 * 8, 60 * 1024 // 8, 1024 // 8),
    ("shadowkv llama-3 122K b24", 24 * 8, 122 * 1024 // 8, 2048 // 8),
    ("shadowkv llama-3 244K b12", 12 * 8, 244 * 1024 // 8, 4096 // 8),
    ("shadowkv glm-4 60K b50", 50 * 4, 60 * 1024 // 8, 1024 // 8),
    ("shadowkv glm-4 244K b12", 12 * 4, 244 * 1024 // 8, 4096 // 8),
    ("shadowkv yi 244K b10", 10 * 4, 244 * 1024 // 8, 4096 // 8),
    ("pages 32K p32 b1", 1 * 8, 32768 // 32, 2048 // 32),
    ("pages 32K p32 b4", 4 * 8, 32768 // 32, 2048 // 32),
)
UVA_RUN_BYTES = (256, 2048, 16384)  # one token of one KV head (d 128, bf16); a ShadowKV chunk; a page
# (label, blocks, runs per block): ShadowKV's h2d gather blocks (batch x KV heads) and missed chunks per
# block (40% of budget / 8) in e2e.py's cells; the 4-KV-head cells are the validation rows still off
UVA_BLOCK_SHAPES = (
    ("llama-3 60K b48", 48 * 8, 1024 // 8 * 2 // 5),
    ("llama-3 122K b24", 24 * 8, 2048 // 8 * 2 // 5),
    ("llama-3 244K b12", 12 * 8, 4096 // 8 * 2 // 5),
    ("glm-4 60K b50", 50 * 4, 1024 // 8 * 2 // 5),
    ("glm-4 122K b25", 25 * 4, 2048 // 8 * 2 // 5),
    ("glm-4 244K b12", 12 * 4, 4096 // 8 * 2 // 5),
    ("yi 122K b21", 21 * 4, 2048 // 8 * 2 // 5),
    ("yi 244K b10", 10 * 4, 4096 // 8 * 2 // 5),
)


def topk_table(doc: dict[str, Any], quick: bool, device_s, hbm_gbps: float | None) -> None:
    """doc["tables"]["topk"]: per shape, seconds per torch.topk call and the one-read roofline time."""
    stream = torch.cuda.Stream()
    rows_out = []
    for label, rows, cols, k in TOPK_SHAPES[:4] if quick else TOPK_SHAPES:
        scores = torch.rand(rows, cols, device="cuda", dtype=torch.float32)
        torch.topk(scores, k, dim=-1)  # warm-up: kernel selection and allocator
        torch.cuda.synchronize()
        seconds = device_s(lambda _i, s=scores, kk=k: torch.topk(s, kk, dim=-1), 20 if quick else 100, stream)
        read_s = None if not hbm_gbps else scores.numel() * 4 / (hbm_gbps * 1e9)
        rows_out.append(
            {
                "shape": label,
                "rows": rows,
                "cols": cols,
                "k": k,
                "device_s_per_call": seconds,
                "one_read_at_hbm_s": read_s,
                "times_roofline": None if not read_s else seconds / read_s,
            }
        )
    doc["tables"]["topk"] = rows_out


@triton.jit
def _gather_runs_kernel(src_ptr, run_ids_ptr, dst_ptr, RUN_WORDS: tl.constexpr):
    i = tl.program_id(0)
    run = tl.load(run_ids_ptr + i).to(tl.int64)
    offs = tl.arange(0, RUN_WORDS)
    tl.store(dst_ptr + i.to(tl.int64) * RUN_WORDS + offs, tl.load(src_ptr + run * RUN_WORDS + offs))


def gather_runs(src: torch.Tensor, run_ids: torch.Tensor, dst: torch.Tensor, run_words: int) -> None:
    """dst[i*run_words : (i+1)*run_words] = src[run_ids[i]*run_words : ...] with a Triton kernel, one
    program per run (int32 words; run_words a power of two). `src` may be pinned host memory: the GPU then
    reads it over the link (zero-copy)."""
    _gather_runs_kernel[(run_ids.numel(),)](src, run_ids, dst, RUN_WORDS=run_words)


@triton.jit
def _gather_runs_per_block_kernel(
    src_ptr, run_ids_ptr, dst_ptr, RUNS: tl.constexpr, IN_FLIGHT: tl.constexpr, RUN_WORDS: tl.constexpr
):
    block = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, IN_FLIGHT)
    offs = tl.arange(0, RUN_WORDS)
    # IN_FLIGHT runs loaded, then stored, one group after another (num_stages=1: no prefetch of the next
    # group), as one ShadowKV block reads up to CPY_SIZE chunks into shared memory before writing them
    for j in tl.range(0, RUNS, IN_FLIGHT, num_stages=1):
        mask = j + rows < RUNS
        index = block * RUNS + j + rows
        run = tl.load(run_ids_ptr + index, mask=mask, other=0).to(tl.int64)
        data = tl.load(src_ptr + run[:, None] * RUN_WORDS + offs[None, :], mask=mask[:, None])
        tl.store(dst_ptr + index[:, None] * RUN_WORDS + offs[None, :], data, mask=mask[:, None])


def gather_runs_per_block(
    src: torch.Tensor,
    run_ids: torch.Tensor,
    dst: torch.Tensor,
    runs_per_block: int,
    run_words: int,
    in_flight: int = 1,
) -> None:
    """As gather_runs, but run_ids.numel() // runs_per_block programs, each copying its runs_per_block runs
    in order, `in_flight` (a power of two) at a time (block b: runs b*runs_per_block ...): ShadowKV's
    one-block-per-(sequence, head) gather."""
    blocks = run_ids.numel() // runs_per_block
    _gather_runs_per_block_kernel[(blocks,)](
        src, run_ids, dst, RUNS=runs_per_block, IN_FLIGHT=in_flight, RUN_WORDS=run_words
    )


# runs in flight per block: one; ShadowKV's unroll (copy.cuh UNROLL_FACTOR 8); its CPY_SIZE (32)
UVA_IN_FLIGHT = (1, 8, 32)


def uva_gather_blocks_table(doc: dict[str, Any], quick: bool, device_s) -> None:
    """doc["tables"]["uva_gather_blocks"]: zero-copy GB/s of 2 KiB runs at ShadowKV's grid shapes, with 1, 8
    and 32 runs in flight per block (what ShadowKV's loop keeps in flight depends on the compiler)."""
    stream = torch.cuda.Stream()
    words = 2048 // 4
    most = max(blocks * runs for _, blocks, runs in UVA_BLOCK_SHAPES)
    host = torch.randint(0, 2**31 - 1, (4 * most * words,), dtype=torch.int32).pin_memory()
    rows_out = []
    for label, blocks, runs in UVA_BLOCK_SHAPES[:3] if quick else UVA_BLOCK_SHAPES:
        n_runs = blocks * runs
        run_ids = torch.randperm(4 * most, device="cuda")[:n_runs].to(torch.int32)
        dst = torch.empty(n_runs * words, dtype=torch.int32, device="cuda")
        for in_flight in UVA_IN_FLIGHT:
            dst.fill_(-1)
            gather_runs_per_block(host, run_ids, dst, runs, words, in_flight)
            torch.cuda.synchronize()
            last = int(run_ids[-1])
            if not torch.equal(dst[-words:].cpu(), host[last * words : (last + 1) * words]):
                raise RuntimeError(f"uva gather at {label}, {in_flight} in flight, read wrong data")
            def call(_i, r=run_ids, d=dst, k=runs, f=in_flight) -> None:
                gather_runs_per_block(host, r, d, k, words, f)

            seconds = device_s(call, 5, stream)
            rows_out.append(
                {
                    "shape": label,
                    "blocks": blocks,
                    "runs_per_block": runs,
                    "runs_in_flight": in_flight,
                    "bytes": n_runs * 2048,
                    "zero_copy_gbps": n_runs * 2048 / seconds / 1e9,
                }
            )
    doc["tables"]["uva_gather_blocks"] = rows_out


def uva_gather_table(doc: dict[str, Any], quick: bool, device_s) -> None:
    """doc["tables"]["uva_gather"]: zero-copy gather GB/s per run size vs one bulk copy of the bytes."""
    stream = torch.cuda.Stream()
    total_bytes = (32 if quick else 128) << 20
    host = torch.randint(0, 2**31 - 1, (2 * total_bytes // 4,), dtype=torch.int32).pin_memory()
    rows_out = []
    for run_bytes in UVA_RUN_BYTES:
        words, n_runs = run_bytes // 4, total_bytes // run_bytes
        run_ids = torch.randperm(2 * n_runs, device="cuda")[:n_runs].to(torch.int32)
        dst = torch.empty(n_runs * words, dtype=torch.int32, device="cuda")
        gather_runs(host, run_ids, dst, words)  # compile + check one result against the host copy
        torch.cuda.synchronize()
        first = int(run_ids[0])
        if not torch.equal(dst[:words].cpu(), host[first * words : (first + 1) * words]):
            raise RuntimeError(f"uva gather of {run_bytes}-byte runs read wrong data")
        seconds = device_s(lambda _i, r=run_ids, d=dst, w=words: gather_runs(host, r, d, w), 5, stream)
        bulk_dst = torch.empty(n_runs * words, dtype=torch.int32, device="cuda")
        bulk_src = host[: n_runs * words]
        bulk_s = device_s(lambda _i, d=bulk_dst, s=bulk_src: d.copy_(s, non_blocking=True), 5, stream)
        rows_out.append(
            {
                "run_bytes": run_bytes,
                "runs": n_runs,
                "bytes": n_runs * run_bytes,
                "zero_copy_gbps": n_runs * run_bytes / seconds / 1e9,
                "bulk_copy_gbps": n_runs * run_bytes / bulk_s / 1e9,
                "zero_copy_share_of_bulk": bulk_s / seconds,
            }
        )
    doc["tables"]["uva_gather"] = rows_out
