"""ShadowKV's decode kernels priced by the loop structure of its public code (as-published mode).

ShadowKV's sparse path per layer (bytedance/ShadowKV at e51904c, models/kv_cache.py:616-666, read at
ByteDance-Seed/ShadowKV) launches small kernels whose time is set by how many blocks run and what one
block waits for, not by HBM bandwidth:

- Selection (kv_cache.py:622-643): `batch_gemm_softmax` is 3 kernels (kernels/batch_gemm_softmax.h:453
  GEMM with partial softmax reductions, :479 final reduction, :508 softmax apply); `torch.max` (:637) 1;
  `torch.topk` (:640, PyTorch 2.3.1 per requirements.txt) at these shapes (tens to hundreds of rows of
  7.5K-31K landmark scores) takes the multi-block path of aten/src/ATen/native/cuda/TensorTopK.cu
  (`mbtopk::launch`: a cudaMemsetAsync, a `fill`, one `radixFindKthValues` pass per 8 bits of bf16 = 2,
  then `sbtopk::gatherTopK`) and, with sorted=True, one sort of the k results: 6 launches; `gather`
  (:642) 1; `reorder_keys_and_compute_offsets` (:643 -> kernels/gather_copy.cu:207) 1; and the copy of
  `query_states.contiguous()` (:623: the query is a transposed view of the fused QKV output, llama.py:143-146,
  :185-186, not contiguous at batch > 1) 1: 13 in all.
  `gatherTopK` runs one block (<= 1024 threads) per row and walks the row in steps of the block width
  twice (values above the k-th; then ties, stopping once k are found: ~half a row), each step one
  dependent load per thread and a block-wide prefix scan: rows x ceil(cols / 1024) x 1.5 steps.
  The softmax's final reduction (batch_gemm_softmax.h:466-479 -> CUTLASS reduction/kernel/
  reduce_softmax_final.h, ApplySoftmaxFinalReduction::apply) runs one thread per query row of a
  (sequence, KV head), 32-thread blocks (fewer than 4 blocks per row: the GQA group is <= 32 rows), and
  each thread walks the GEMM's partials of its row, one per 256-landmark tile (ThreadblockShape
  GemmShape<32, 256, 32>, batch_gemm_softmax.cu:95), twice: the max pass, then the sum pass (two loads
  per step). Both loops are `CUTLASS_PRAGMA_UNROLL` (`#pragma unroll`) over a trip count known only at
  run time: a reproduction of the loops (the same trip count, the same predicated inline-asm 4-byte
  loads) compiled with nvcc 13.0 -O3 -arch=sm_80 unrolls each by 4 (SASS: 4 LDGs, then the max chain,
  then the branch; a remainder loop of one load), so a thread waits one load latency per 4 partials
  and one per leftover partial: 2 x (floor(P / 4) + P mod 4) loads that hit L2 (the GEMM epilogue has
  just written the partials) for P = ceil(cols / 256), on the selection's critical path and growing with
  the context.
- Value gather (kv_cache.py:649 -> gather_copy.cu:239-323 -> kernels/copy.cuh:437-498,
  `gather_copy_var_midpoint_BP`): 2 blocks of 128 threads per (sequence, KV head) with ~65 KB of shared
  memory each. The even block reads the missed 2 KiB chunks from pinned host memory over UVA into a
  device temp buffer (copy.cuh:492), waits for its partner (:494), then copies them from temp into the
  value buffer (:496); the odd block moves the hits within the buffer (:478). Every one of these loops
  (copy.cuh:146-179 and :210-243) loads a chunk into shared memory and reads the next chunk's offset from
  the same shared array, so each thread keeps ONE 16-byte load in flight: compiled with the repository's
  nvcc flags (-std=c++17 --expt-relaxed-constexpr; nvcc 13.0, sm_80) the unrolled loop is
  LDS(offset) -> LDG.E.128 -> STS.128 per chunk, each STS consuming the LDG's register before the next
  LDS may pass it. One block thus moves one 2 KiB chunk per load latency.
- Key rebuild (kv_cache.py:661-662): `gather_copy_d2d_with_offsets` (the same one-chunk-in-flight loop,
  one block per (sequence, KV head), copy.cuh:353-390), the int32 cast of the positions
  (models/tensor_op.py:216), the CUTLASS gather-GEMM and the RoPE push (tensor_op.py:218-236): 4 launches.
- Sorts on the selection's critical path (priced in shared-memory steps, `smem_step_latency_s`):
  `torch.topk(..., sorted=True)` sorts the k = select_sets results of each row in place
  (TensorTopK.cpp: sortKeyValueInplace after launch_gather_topk_kernel; Sort.cu): k <= 128 by
  WarpMergeSort<128> (one warp per row, 4 items per thread, 5 merge rounds, each a merge-path search of
  log2(8 * 2^r) shared loads and a serial merge of 4), 128 < k <= 4096 by MediumRadixSort (one block per
  row, 32 items per thread: 1024 slots for k <= 1024, cub::BlockRadixSort over the 16 bits of the bf16
  key at the default 4 radix bits = 4 passes (NVIDIA/cub block_radix_sort.cuh: per pass RankKeys, then
  __syncthreads, the keys' ScatterToBlocked, __syncthreads, the values'), each a serial ranking of the
  thread's 32 items through its shared digit counters plus ~6 barrier-separated steps: counter scan,
  rank update, key and value exchanges); then `reorder_keys_and_compute_offsets` (gather_copy.cu:207 ->
  kernels/map.cuh:475-516, `reorder_keys_and_mixed_offsets`, one block of select_sets threads per
  (sequence, KV head)) builds a hash map of last step's chunks in shared memory, looks the new ones up,
  packs hits first with block scans (17 barrier-separated steps, map.cuh:86-91, :341-406) and, with
  SORT_OFFSET 1 (gather_copy.cu:29), sorts the offsets by `block_sort2` (map.cuh:229-259): two
  bitonic sorts of select_sets entries, each s(s+1)/2 stages of a shared-memory compare-and-swap
  ending in __syncthreads (map.cuh:196-224), s = log2(select_sets). Each kernel also waits for its
  global loads (2 device load latencies).
- The softmax apply kernel (batch_gemm_softmax.h:494-508) launches ceil(cols / 8192) blocks per row in
  its grid's y dimension (ApplyShape<1, 1024> x 8 bf16 per access, batch_gemm_softmax.cu:103) although
  every block starts at column 0 (`block_n = 0`, batch_gemm_softmax.h:165, ApplySoftmax::apply) and
  walks the whole row, so the row's read and write are repeated that many times. The repeats run next
  to each other (x varies fastest) and hit L2: the extra (repeats - 1) x rows x cols x (2 + 2) bytes are
  priced at `l2_bandwidth_gbps` (the first walk is in the selection's bytes).

Latencies are estimates (knobs of ShadowKVKnobs, with ranges in ShadowKV.estimate_ranges):
`uva_read_latency_s`, the round trip of an SM's read of pinned host memory over PCIe,
`device_load_latency_s`, one dependent global load (L2 or HBM) plus the loop's shared-memory steps, and
`l2_load_latency_s`, one global load that hits L2 (the final reduction's step), `smem_step_latency_s`,
one barrier-separated or dependent shared-memory step (the sorts), and `l2_bandwidth_gbps`, the L2
rate of the apply kernel's repeated walks.
Pure arithmetic on numpy arrays; no torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.sm_occupancy import blocks_per_sm

if TYPE_CHECKING:
    from sim.methods.base import CostContext

__all__ = [
    "COPY_ROW_BYTES",
    "COPY_ROWS_PER_ITER",
    "REBUILD_CTA_SMEM_BYTES",
    "REBUILD_LAUNCHES",
    "REBUILD_TILE_ROWS",
    "SELECT_LAUNCHES",
    "TOPK_BLOCK_THREADS",
    "gather_block_smem_bytes",
    "key_compaction_s",
    "published_compaction_s",
    "published_gather_s",
    "SOFTMAX_TILE_COLS",
    "offset_reorder_s",
    "resident_blocks",
    "select_s",
    "softmax_apply_repeat_s",
    "softmax_final_reduction_s",
    "topk_sort_s",
    "topk_gather_s",
    "value_gather_s",
]

COPY_ROWS_PER_ITER = 32  # kernels/copy.cuh:25 CPY_SIZE, the default (setup.py passes no -DCPY_SIZE)
COPY_ROW_BYTES = 2048  # kernels/copy.cuh: one row = 128 threads (BLOCK_SIZE_CP) x 16 B (int4)
COPY_BLOCK_THREADS = 128  # gather_copy.cu:248 blockSize = BLOCK_SIZE_CP
REBUILD_TILE_ROWS = 128  # kernels/batch_gather_gemm.cu:80, threadblock tile GemmShape<128, 128, 32>
# CUTLASS multistage main loop: 5 stages (batch_gather_gemm.cu:106) of a 128x32 A and a 32x128 B bf16 tile
REBUILD_CTA_SMEM_BYTES = 5 * (128 * 32 + 32 * 128) * 2
# kernel launches per sparse layer (module docstring): selection 1 + 3 + 1 + 6 + 1 + 1, rebuild 4
SELECT_LAUNCHES = 13
REBUILD_LAUNCHES = 4
TOPK_BLOCK_THREADS = 1024  # sbtopk::gatherTopK: min(round_up(cols, 32), 1024) threads per row
TOPK_STEPS_PER_WIDTH = 1.5  # the strict pass over the whole row, the ties pass over half of it on average
THREADS_PER_SM = 2048  # resident threads per SM, compute capability 8.0 and 9.0 (CUDA Programming Guide)
SOFTMAX_TILE_COLS = 256  # batch_gemm_softmax.cu:95 ThreadblockShape<32, 256, 32>: one partial per tile
SOFTMAX_FINAL_PASSES = 2  # reduce_softmax_final.h: the max pass, then the sum pass, each over every partial
SOFTMAX_FINAL_UNROLL = 4  # nvcc's run-time unroll of each pass (SASS of a reproduction, module docstring)
APPLY_BLOCK_COLS = 1024 * 8  # batch_gemm_softmax.cu:103 ApplyShape<1, 1024>, 8 bf16 per 16-byte access
APPLY_BYTES_PER_SCORE = 2 + 2  # one walk reads the bf16 GEMM output and writes the bf16 softmax
SORT_KEY_BITS = 16  # the bf16 scores sorted by torch.topk(sorted=True)
RADIX_BITS = 4  # cub/block/block_radix_sort.cuh: BlockRadixSort's template default RADIX_BITS = 4
RADIX_ITEMS_PER_THREAD = 32  # Sort.cu MediumRadixSort: HANDLE_CASE(1024 | 2048 | 4096, 32)
RADIX_PASS_STEPS = 6  # per pass besides the ranking chain: counter scan, rank update, 2 exchanges
WARP_SORT_SLOTS = 128  # Sort.cu WarpMergeSort<128>: rows of 2-128 results, one warp each
WARP_SORT_ITEMS = WARP_SORT_SLOTS // 32
OFFSET_MAP_STEPS = 17  # reorder_keys_and_mixed_offsets besides block_sort2's two sorts (module docstring)
SORT_GLOBAL_LOADS = 2  # each sort kernel waits for its keys' and values' (or ids') global loads
# selection's score traffic as published, per query score in dtype units (bf16, batch_gemm_softmax.cu:78-82):
# the GEMM writes it, the apply kernel's first walk reads it and writes the softmax, torch.max reads that
# (kv_cache.py:637)
SCORE_PASSES_PER_QUERY = 4
MAX_INDEX_BYTES = 8  # torch.max(dim=-2) also writes an int64 index per KV score
TOPK_ROW_READS = 2 + TOPK_STEPS_PER_WIDTH  # radixFindKthValues per 8 bits of bf16, then gatherTopK's walks


def gather_block_smem_bytes(select_sets: int) -> int:
    """Dynamic shared memory of one block of gather_copy_with_offsets / gather_copy_d2d_with_offsets
    (kernels/gather_copy.cu:250, :124): CPY_SIZE rows of 2 KB, the chunk map (4 B each), one int4."""
    return COPY_ROWS_PER_ITER * COPY_ROW_BYTES + select_sets * 4 + 16


def resident_blocks(
    sm_count: int | None, smem_per_sm_bytes: int | None, block_smem_bytes: int, block_threads: int
) -> int | None:
    """Blocks of a kernel resident on the GPU at once (shared memory and threads per SM), or None when the
    profile does not give `gpu.sm_count` and `gpu.shared_memory_per_sm_bytes` (then: one wave)."""
    if sm_count is None or smem_per_sm_bytes is None:
        return None
    per_sm = min(blocks_per_sm(block_smem_bytes, smem_per_sm_bytes), THREADS_PER_SM // block_threads)
    return max(1, per_sm) * sm_count


def _waves(blocks: int, resident: int | None) -> int:
    return 1 if resident is None or blocks <= 0 else math.ceil(blocks / resident)


def value_gather_s(
    link_s: np.ndarray,
    missed_per_head: np.ndarray,
    hits_per_head: np.ndarray,
    heads: int,
    resident: int | None,
    uva_read_latency_s: float,
    device_load_latency_s: float,
) -> np.ndarray:
    """(S, L) seconds of gather_copy_with_offsets: per wave of block pairs, the host reads (one chunk in
    flight per block: missed chunks x uva latency) or the link's time for all the bytes, whichever is
    longer, against the partner's hit moves; then the copy from temp into the buffer (missed chunks x
    device latency). 0 where nothing was missed."""
    waves = _waves(2 * heads, resident)
    missed = np.asarray(missed_per_head, dtype=np.float64)
    hits = np.asarray(hits_per_head, dtype=np.float64)
    block_reads = waves * np.maximum(missed * uva_read_latency_s, hits * device_load_latency_s)
    copy_back = waves * missed * device_load_latency_s
    out = np.maximum(np.asarray(link_s, dtype=np.float64), block_reads) + copy_back
    return np.where(missed > 0, out, 0.0)


def key_compaction_s(
    hits_per_head: np.ndarray, heads: int, resident: int | None, device_load_latency_s: float
) -> np.ndarray:
    """(S, L) latency floor of gather_copy_d2d_with_offsets: one block per (sequence, KV head) moves its
    hit chunks to the front of the key buffer, one chunk per device load latency."""
    hits = np.asarray(hits_per_head, dtype=np.float64)
    return _waves(heads, resident) * hits * device_load_latency_s


def topk_gather_s(
    rows: int, cols: np.ndarray, sm_count: int | None, device_load_latency_s: float
) -> np.ndarray:
    """Latency floor of sbtopk::gatherTopK over `rows` rows of `cols` scores: one block per row, waves of
    2 blocks per SM (1024 threads each), TOPK_STEPS_PER_WIDTH steps per block width, one dependent load
    and a block scan per step (priced at device_load_latency_s)."""
    cols = np.asarray(cols, dtype=np.float64)
    threads = np.minimum(TOPK_BLOCK_THREADS, np.maximum(32.0, np.ceil(cols / 32.0) * 32.0))
    waves = 1 if sm_count is None else math.ceil(rows / (sm_count * (THREADS_PER_SM // TOPK_BLOCK_THREADS)))
    steps = TOPK_STEPS_PER_WIDTH * np.ceil(cols / threads)
    return np.where(cols > 0, waves * steps * device_load_latency_s, 0.0)


def softmax_final_reduction_s(cols: np.ndarray, l2_load_latency_s: float) -> np.ndarray:
    """Latency floor of the softmax's final reduction over rows of `cols` landmark scores: each thread
    walks P = ceil(cols / SOFTMAX_TILE_COLS) partials SOFTMAX_FINAL_PASSES times, one L2 load latency per
    SOFTMAX_FINAL_UNROLL partials and one per leftover partial (module docstring). All (sequence, KV head)
    blocks of 32 threads are resident at once (one wave), so the batch does not enter."""
    cols = np.asarray(cols, dtype=np.float64)
    partials = np.ceil(cols / SOFTMAX_TILE_COLS)
    steps = np.floor(partials / SOFTMAX_FINAL_UNROLL) + np.mod(partials, SOFTMAX_FINAL_UNROLL)
    return np.where(cols > 0, SOFTMAX_FINAL_PASSES * steps * l2_load_latency_s, 0.0)


def topk_sort_s(k: int, smem_step_latency_s: float, device_load_latency_s: float) -> float:
    """Latency of torch.topk's in-place sort of the k results of each row (module docstring): one warp or
    block per row, all rows in one wave (<= 384 rows of <= 128 threads here). 0 for k <= 1."""
    if k <= 1:
        return 0.0
    if k <= WARP_SORT_SLOTS:
        rounds = range(int(math.log2(32)))  # merge rounds of the warp's 32 sorted runs
        steps = sum(1 + math.log2(2 * WARP_SORT_ITEMS * 2**r) + WARP_SORT_ITEMS for r in rounds)
    else:
        steps = (SORT_KEY_BITS // RADIX_BITS) * (RADIX_ITEMS_PER_THREAD + RADIX_PASS_STEPS)
    return steps * smem_step_latency_s + SORT_GLOBAL_LOADS * device_load_latency_s


def offset_reorder_s(
    select_sets: int, heads: int, sm_count: int | None, smem_step_latency_s: float,
    device_load_latency_s: float,
) -> float:
    """Latency of reorder_keys_and_mixed_offsets: one block of select_sets threads per (sequence, KV
    head), OFFSET_MAP_STEPS steps for the map and the scans and two bitonic sorts of s(s+1)/2 stages
    (s = log2(select_sets)), per wave of blocks (THREADS_PER_SM // select_sets per SM)."""
    if select_sets <= 1:
        return 0.0
    s = math.ceil(math.log2(select_sets))
    per_sm = max(1, THREADS_PER_SM // select_sets)
    waves = 1 if sm_count is None else math.ceil(heads / (per_sm * sm_count))
    steps = OFFSET_MAP_STEPS + s * (s + 1)
    return waves * (steps * smem_step_latency_s + SORT_GLOBAL_LOADS * device_load_latency_s)


def softmax_apply_repeat_s(rows: int, cols: np.ndarray, l2_bandwidth_gbps: float) -> np.ndarray:
    """Seconds of the softmax apply kernel's repeated walks: (ceil(cols / APPLY_BLOCK_COLS) - 1) extra
    reads and writes of `rows` rows of `cols` bf16 scores, through L2 at `l2_bandwidth_gbps`."""
    cols = np.asarray(cols, dtype=np.float64)
    repeats = np.maximum(0.0, np.ceil(cols / APPLY_BLOCK_COLS) - 1.0)
    return repeats * rows * cols * APPLY_BYTES_PER_SCORE / (l2_bandwidth_gbps * 1e9)


# ----- the model's use of the above (knobs: traces.catalogue.retrieval.ShadowKVKnobs) -----
def select_s(ctx: CostContext, knobs: Any) -> np.ndarray:
    """(S,) selection over every landmark (one per chunk and KV head): the GEMM with an fp32 softmax per
    query head at the roofline (ideal: 3 fp32 passes per query score; as published the code's bytes: 4 bf16
    passes per query score, then per KV score max's bf16 value and int64 index and top-k's 3.5 reads of the
    bf16 row); as published also its SELECT_LAUNCHES launches, the softmax final reduction's
    walk over the partials, the apply kernel's repeated walks, gatherTopK's walk, the sort of the top-k
    results and the offsets' reorder and sort."""
    cfg, m = ctx.cfg, ctx.model
    b, d, dt = cfg.batch_size, m.head_dim, cfg.dtype_bytes
    context = ctx.demand.context_tokens.astype(np.float64)
    chunks = np.maximum(0.0, np.floor((context - cfg.sink_tokens - cfg.window_tokens) / knobs.chunk_tokens))
    sel_bytes = b * m.n_kv_heads * chunks * d * dt + 3 * b * m.n_qo_heads * chunks * 4
    if ctx.as_published:  # the code's bf16 passes (SCORE_PASSES_PER_QUERY), max's values and indices, top-k
        kv_score_bytes = dt + MAX_INDEX_BYTES + TOPK_ROW_READS * dt
        sel_bytes = b * chunks * (
            m.n_kv_heads * (d * dt + kv_score_bytes) + m.n_qo_heads * SCORE_PASSES_PER_QUERY * dt
        )
    launches = SELECT_LAUNCHES if ctx.as_published else 4
    select = ctx.cost.kernel_s(2.0 * b * m.n_qo_heads * chunks * d, sel_bytes, launches)
    if ctx.as_published:
        rows = b * m.n_kv_heads
        select = select + softmax_final_reduction_s(chunks, knobs.l2_load_latency_s)
        select = select + topk_gather_s(rows, chunks, ctx.profile.gpu.sm_count, knobs.device_load_latency_s)
        select = select + softmax_apply_repeat_s(b * m.n_qo_heads, chunks, knobs.l2_bandwidth_gbps)
        sets = cfg.selected_tokens // knobs.chunk_tokens
        select = select + topk_sort_s(sets, knobs.smem_step_latency_s, knobs.device_load_latency_s)
        select = select + offset_reorder_s(
            sets, rows, ctx.profile.gpu.sm_count, knobs.smem_step_latency_s, knobs.device_load_latency_s
        )
    return np.where(chunks > 0, select, 0.0)


def _chunks_per_head(
    ctx: CostContext, missed_tokens: np.ndarray, chunk_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """(missed, hit) chunks per (sequence, KV head), (S, L) each."""
    heads = ctx.cfg.batch_size * ctx.model.n_kv_heads
    sets = ctx.cfg.selected_tokens / chunk_tokens
    missed = np.minimum(sets, np.asarray(missed_tokens, dtype=np.float64) / heads / chunk_tokens)
    return missed, np.maximum(0.0, sets - missed)


def _gather_resident(ctx: CostContext, chunk_tokens: int) -> int | None:
    gpu = ctx.profile.gpu
    smem = gather_block_smem_bytes(ctx.cfg.selected_tokens // chunk_tokens)
    return resident_blocks(gpu.sm_count, gpu.shared_memory_per_sm_bytes, smem, COPY_BLOCK_THREADS)


def published_gather_s(
    ctx: CostContext, missed_tokens: np.ndarray, link_s: np.ndarray, knobs: Any
) -> np.ndarray:
    """(S, L) the value gather kernel as its code runs (value_gather_s)."""
    missed, hits = _chunks_per_head(ctx, missed_tokens, knobs.chunk_tokens)
    heads = ctx.cfg.batch_size * ctx.model.n_kv_heads
    return value_gather_s(
        link_s, missed, hits, heads, _gather_resident(ctx, knobs.chunk_tokens),
        knobs.uva_read_latency_s, knobs.device_load_latency_s,
    )


def published_compaction_s(ctx: CostContext, missed_tokens: np.ndarray, knobs: Any) -> np.ndarray:
    """(S, L) the key compaction as its code runs (key_compaction_s)."""
    _, hits = _chunks_per_head(ctx, missed_tokens, knobs.chunk_tokens)
    heads = ctx.cfg.batch_size * ctx.model.n_kv_heads
    resident = _gather_resident(ctx, knobs.chunk_tokens)
    return key_compaction_s(hits, heads, resident, knobs.device_load_latency_s)
