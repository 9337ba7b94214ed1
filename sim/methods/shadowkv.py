"""ShadowKV: low-rank pre-RoPE keys on the GPU, values in host memory, sparse chunks recalled per step.

Source: Sun et al., "ShadowKV: KV Cache in Shadows for High-Throughput Long-Context LLM Inference"
(arXiv 2410.21465) and its code (bytedance/ShadowKV; read at WilliamBy/ShadowKV models/kv_cache.py,
class ShadowKV_CPU). Assumptions (docs/methods.md has the discussion):

- Prefill: per layer and sequence the pre-RoPE key matrix (context x n_kv*d) is factorised by a full
  fp32 SVD (`torch.svd`) and kept as U (context x r) and S*V (r x n_kv*d), rank r = 160; values go to
  pinned host memory laid out per KV head in chunks of `chunk_tokens` (8) tokens, i.e. contiguous runs
  of chunk_tokens * d elements (2 KiB for d = 128, bf16); a landmark (mean of the post-RoPE keys) per
  chunk and 48 outlier chunks per KV head stay on the GPU in full, with the local window.
- Every decode step and every (non-dense) layer, on the critical path: scores of all landmarks (a
  GEMM + softmax per query head, max over the GQA group: one chunk set per KV head), top-k of the
  (budget - sink - window) / chunk_tokens chunks; the code compares them with last step's chunks and
  only the misses are fetched (values, host->device, by a gather kernel reading pinned memory over
  UVA: one launch per layer, runs of one chunk) and rebuilt (keys: U[rows] @ S*V + RoPE on the GPU);
  fetch and rebuild overlap, attention waits for both. Miss share: the trace's page miss ratio.
- Generated tokens (default, as ShadowKV's paper and code do it): the SVD runs once, at prefill. Decode
  appends each new token's keys and values in full to the GPU buffers after the sparse budget
  (ShadowKVCache_CPU.update_kv_cache: `k_cache_buffer[..., sparse_end + gen_offset]`, no re-factorisation;
  get_key_cache/get_value_cache return `[:sparse_end + gen_offset]`), so attention reads budget + outliers
  + every generated token, and GPU memory holds them all (the code sizes that buffer for 128 generated
  tokens; the model extends it to the whole output). `svd_interval_tokens = N > 0` re-runs the SVD every N
  generated tokens instead; `svd_every_window = true` re-runs it every W tokens, the FreeKV paper's
  protocol for ShadowKV in long generation (Liu et al., arXiv 2505.13109, evaluation setup). A re-run
  covers the whole context and blocks the step; the values of the interval's tokens are then offloaded and
  the uncompressed tokens on the GPU are those since the last SVD. SVD routine: `torch.svd(k_cache.float())`
  (kv_cache.py:499) on (prefill batch, context, n_kv * d) fp32, i.e. torch.linalg.svd(full_matrices=False);
  on CUDA with torch 2.3.1 (requirements.txt) that is cuSOLVER's gesvdj, one matrix after another
  (aten BatchLinearAlgebraLib.cpp svd_cusolver: the default driver is gesvdj, its batched form only for
  m, n <= 32), per layer over the prefill sub-batch of 4 sequences (8 for 120K-200K prompts, base.py:
  277-284), after a torch.cuda.synchronize(), gc.collect() and empty_cache() (kv_cache.py:494-497). SVD
  cost: the R-SVD operation count 6 m n^2 + 20 n^3 (Golub & Van Loan, Matrix Computations, Sec. 8.6) for
  m = context, n = n_kv * d per sequence, a lower bound on the Jacobi method's count, at
  `svd_flops_fraction` of the dense FP16 tensor peak (default 0.01, at most the FP32 CUDA-core share:
  estimate, the dominant uncertainty of this model: see docs/methods.md).
- Outlier chunks kept on the GPU per KV head: (sparse budget // 1024) * 24 (models/kv_cache.py:398,
  ShadowKVCache_CPU), i.e. 48 at the 2048-token sparse budget; local chunks (4 x 8 tokens) are the window.

As published (SimConfig.implementation "as-published"; "ideal" charges none of this). The code
(bytedance/ShadowKV at a21f5a9; models/base.py, models/llama.py, models/kv_cache.py) runs the model in
eager PyTorch, one Python call per op, no CUDA graphs; per decode layer (base.py:102-186):
- qkv: RMSNorm (llama.py:184) and vLLM rotary (llama.py:143), 2 extension calls; the fused QKV F.linear
  (llama.py:185), 1 eager op; split/view/transpose bookkeeping (llama.py:186-188, 145-146), 5 Python
  steps; the new token's K and V copied into the GPU buffers with two `copy_` of slices
  (kv_cache.py:697-698): 2 eager ops + 2 Python slicing steps.
- select: shadowkv.batch_gemm_softmax and reorder_keys_and_compute_offsets (kv_cache.py:622, :643),
  2 extension calls; query_states.contiguous(), torch.max, torch.topk, gather (kv_cache.py:623, :637,
  :640, :642), 4 eager ops.
- fetch: switch to the copy stream and wait_stream (base.py:154-155), 2 Python steps; one
  gather_copy_with_offsets launch (kv_cache.py:649) that reads the missed value chunks from pinned host
  memory (UVA), called from Python (one extension call on the host; the launch is the transfer's issue).
- rebuild: gather_copy_d2d_with_offsets and batch_gather_gemm_rotary_pos_emb_cuda (kv_cache.py:661-662),
  2 extension calls; curr_stream.wait_stream (base.py:161), 1 Python step.
- attention: flash_attn_with_kvcache (base.py:164), 1 extension call + 4 Python steps (transposes).
- out_proj: F.linear + residual add (llama.py:196-197), 2 eager ops. ffn: RMSNorm and silu_and_mul
  (llama.py:199, :205), 2 extension calls; gate_up F.linear, torch.empty, down F.linear, residual add
  (llama.py:201, :204, :207, :208), 4 eager ops.
- per step: embedding, final norm, LM head, .float() (base.py:61-70) and sampling (~4 eager ops), then
  `next_token.tolist()` (base.py:331): one read-back, the host waits for the step (host_sync).
No host sync inside a layer: the host runs ahead of the GPU unless its per-layer cost exceeds the GPU's.
On the GPU the code's small kernels are priced by their loop structure (sim/methods/shadowkv_kernels.py):
selection's 13 launches, its softmax final reduction's walk over the partials, the apply kernel's repeated
row walks, gatherTopK's walk, the sort of the top-k results and the offsets' reorder and sorts, the
value gather's one chunk in flight per block, its copy back from the temp buffer, and the key compaction;
the value gather holds ~65 KB of shared memory per block, so the key rebuild gets only the SMs it leaves
(ShadowKV.rebuild_sm_share, sim/sm_occupancy.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from sim.config import SimConfig
from sim.methods.base import CostContext, Dep, Kernel, MemoryNeed, OpSpec, Transfer, Work
from sim.methods.decoder_layer import (
    DecoderMethod,
    OwnOps,
    attention_over,
    layer_split,
    prefill_offload_exposed_s,
)
from sim.methods.eager import HF_OUT_PROJ, DecoderRecipe
from sim.methods.host_costs import HostOps, host_s
from sim.methods.shadowkv_kernels import (
    REBUILD_CTA_SMEM_BYTES,
    REBUILD_LAUNCHES,
    REBUILD_TILE_ROWS,
    gather_block_smem_bytes,
    published_compaction_s,
    published_gather_s,
    select_s,
)
from sim.sm_occupancy import co_runner_sm_share
from traces.catalogue.retrieval import shadowkv_rank
from traces.models import ModelSpec

__all__ = ["ShadowKV", "SHADOWKV_DECODER"]

# ShadowKV's eager Llama (module docstring): qkv, attention, out_proj, ffn, per step (lm_head + sampling)
SHADOWKV_DECODER = DecoderRecipe(
    qkv=HostOps(torch_ops=3, ext_calls=2, cpp_launches=2, python_ops=7),
    attention=HostOps(ext_calls=1, cpp_launches=1, python_ops=4),
    out_proj=HF_OUT_PROJ,
    ffn=HostOps(torch_ops=4, ext_calls=2, cpp_launches=2),
    step=HostOps(torch_ops=8, readbacks=1),
)

def outlier_chunks(sparse_budget_tokens: int) -> int:
    """Outlier chunks per KV head kept on the GPU (models/kv_cache.py:398): (budget // 1024) * 24."""
    return (sparse_budget_tokens // 1024) * 24


@dataclass(frozen=True)
class ShadowKV(DecoderMethod):
    """ShadowKV (module docstring). Knobs: rank, chunk_tokens, svd_interval_tokens (0: SVD at prefill
    only, as ShadowKV's code; N: re-run every N generated tokens), svd_every_window (re-run every W
    tokens: the FreeKV paper's protocol), svd_flops_fraction (share of the FP16 tensor peak the fp32 SVD
    reaches), uva_rate_fraction (share of the link's DMA rate the zero-copy value gather reaches, as
    published)."""

    sources: ClassVar[tuple[str, ...]] = (
        "Sun et al., ShadowKV: KV Cache in Shadows for High-Throughput Long-Context LLM Inference "
        "(arXiv 2410.21465): low-rank pre-RoPE keys, offloaded values, landmarks, outlier chunks",
        "bytedance/ShadowKV code (read at WilliamBy/ShadowKV models/kv_cache.py, ShadowKV_CPU): torch.svd "
        "rank 160, 48 outlier chunks, gather_copy_with_offsets (misses only), batch_gather_gemm_rotary",
        "bytedance/ShadowKV models/kv_cache.py ShadowKVCache_CPU.update_kv_cache: generated tokens appended "
        "in full to the GPU buffers, no SVD after prefill (the default here)",
        "Liu et al., FreeKV (arXiv 2505.13109), evaluation setup: ShadowKV re-runs its SVD every W tokens "
        "(option svd_every_window)",
        "Golub & Van Loan, Matrix Computations (4th ed.), Sec. 8.6: R-SVD costs 6mn^2 + 20n^3 flops",
    )

    # estimated constants (sim/estimate_ends.py): knob -> (cheap end, dear end).
    # svd_flops_fraction: the fp32 SVD's share of the FP16 tensor peak; 0.01 (3.1 TFLOP/s on an A100, 16% of
    # its FP32 CUDA-core peak: cuSOLVER's gesvdj, the driver torch.svd reaches, is an iterative Jacobi method
    # and its count exceeds the R-SVD count priced here); 0.003-0.0625. The cheap end is the FP32 CUDA-core
    # peak itself (A100 datasheet: 19.5 TFLOP/s FP32 against 312 FP16 tensor; cuSOLVER does not use tensor
    # cores for an fp32 SVD by default): no fp32 SVD of this count can be faster. The one public timing,
    # ShadowKV's appendix Table 12 (17.19 ms at 64K, validate_sim row shadowkv/svd/64k), would need 25 TFLOP/s
    # on the R-SVD count if it were one layer's (65536 x 1024) matrix, above that ceiling: the row is a check,
    # not a source. The GPU suite's microbench table `svd` measures it.
    # uva_rate_fraction: the zero-copy gather's share of the link's DMA rate when the link binds: SMs read
    # pinned memory in 128-byte requests, the copy engine in larger ones; 0.6-1.0, 1.0 taken.
    # uva_read_latency_s: one SM read of pinned host memory, round trip; 2 us: PCIe read round trips of
    # ~0.5-1 us measured from devices on Xeon hosts (Neugebauer et al., SIGCOMM 2018), plus the GPU's
    # path to its host interface and, on DGX/HGX boards, a PCIe switch; 1-4 us. The GPU suite's
    # `uva_gather_blocks` table (1 run in flight per block) measures it.
    # device_load_latency_s: one step of a one-chunk-in-flight loop (a dependent global load that hits L2 or
    # HBM, 200-800 cycles at ~1.4 GHz, plus its shared-memory load and store); 0.5 us, 0.3-0.8 us.
    # l2_load_latency_s: one global load that hits L2, the step of the softmax final reduction's walk
    # (shadowkv_kernels.softmax_final_reduction_s); 0.16 us, 0.14-0.25 us. Read (search tools, 2026-11-28):
    # an L2 hit is 200 cycles on V100, A100 and H100 alike (Table 3 of PMC10448217, Ultrason. Sonochem. 2023,
    # a secondary table of round numbers; shared memory 20 cycles there); the A100 holds 1410 MHz under
    # load (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023: A100 SXM4 at 1410 MHz,
    # no clock drop); an access to the far half of the A100's split L2 is 1.75x slower and copies the line
    # into the near half (notes of the GTC 2021 talk "Dissecting the Ampere GPU Architecture through
    # Microbenchmarking", kayzee3327.github.io/the-cuda-cache); per-SM L2 hit latency spans 222-339 cycles on
    # an L40 (arXiv 2606.22588, Ada, not A100). Not read: the latency tables of Jia et al. (arXiv 1804.06826)
    # and Abdelkhalik et al. (arXiv 2208.11174), and the Chips and Cheese latency plots (only the pages'
    # openings and abstracts came back). So: 200 cycles / 1.41 GHz = 0.142 us (near), 350 cycles = 0.248 us
    # (far); a row's partials span a few 128-byte lines, the first touch of each may be far and the rest near,
    # plus the max/sum chain per step (~20 cycles): 0.16 us; all far 0.25 us.
    # smem_step_latency_s: one barrier-separated or dependent shared-memory step of the sorts
    # (shadowkv_kernels.topk_sort_s, offset_reorder_s); 40 ns, 14-85 ns: a shared load of ~20 cycles (the
    # same Table 3) at 1.41 GHz is 14 ns; with the store and the __syncthreads that follow, ~60 cycles
    # (43 ns); up to ~120 cycles with bank conflicts of the scattered exchanges (85 ns). Estimate.
    # l2_bandwidth_gbps: the L2 rate of the softmax apply kernel's repeated walks (shadowkv_kernels.
    # softmax_apply_repeat_s); 3600 GB/s, 2400-5400: A100 L2 slice geometry, 32 B per sector x 8 slices x 10
    # partitions = 2560 B per cycle at 1.41 GHz = 3.6 TB/s; a 2 MB L2-resident copy measured 2447 GB/s of
    # read + write at 0.74 waves; cp.async's 1.5 sectors per cycle 5.4 TB/s (smallscientist1/
    # cuda_microbenchmark analysis_A100.md, A100 PCIe 80GB with Nsight Compute).
    estimate_ranges: ClassVar[dict[str, tuple[float, float]]] = {
        "svd_flops_fraction": (0.0625, 0.003),
        "uva_rate_fraction": (1.0, 0.6),
        "uva_read_latency_s": (1.0e-6, 4.0e-6),
        "device_load_latency_s": (3.0e-7, 8.0e-7),
        "l2_load_latency_s": (1.4e-7, 2.5e-7),
        "smem_step_latency_s": (1.4e-8, 8.5e-8),
        "l2_bandwidth_gbps": (5400.0, 2400.0),
    }

    def recipe(self) -> DecoderRecipe:
        return SHADOWKV_DECODER

    def own_ops(self, ctx: CostContext) -> OwnOps:
        return OwnOps(
            after_qkv=(
                OpSpec("svd", ("compute",), category="other"),
                OpSpec("svd_offload", ("offload", "d2h"), (Dep("svd"),), category="offload"),
                OpSpec("select", ("compute",), category="select"),
                OpSpec("fetch", ("recall_sync", "h2d"), (Dep("select"),), category="recall"),
                OpSpec(
                    "rebuild",
                    ("compute",),
                    (Dep("fetch"),) if self.rebuild_sm_share(ctx) == 0.0 else (),
                    category="recall",
                ),
            ),
            attention_deps=(Dep("fetch"), Dep("rebuild")),
        )

    def rebuild_sm_share(self, ctx: CostContext) -> float:
        """Share of the SMs the key rebuild can use while the value gather runs (as-published; 1.0 in
        ideal mode or when the profile does not give gpu.sm_count and gpu.shared_memory_per_sm_bytes).

        The gather (gather_copy_with_offsets, kernels/gather_copy.cu:249) launches 2 blocks per (sequence,
        KV head) with ~65 KB of shared memory each, on the copy stream and before the rebuild's kernels
        (models/base.py:154-159); under the left-over policy (sim/sm_occupancy.py) the rebuild's CUTLASS
        GEMM (80 KB per CTA) gets only SMs with room left beside the gather's blocks. 0.0: the gather
        fills every SM, so the rebuild effectively waits for it (the template then makes it depend on the
        fetch)."""
        gpu = ctx.profile.gpu
        if not ctx.as_published or gpu.sm_count is None or gpu.shared_memory_per_sm_bytes is None:
            return 1.0
        cfg = ctx.cfg
        return co_runner_sm_share(
            2 * cfg.batch_size * ctx.model.n_kv_heads,
            gather_block_smem_bytes(cfg.selected_tokens // self.knobs.chunk_tokens),
            REBUILD_CTA_SMEM_BYTES,
            gpu.sm_count,
            gpu.shared_memory_per_sm_bytes,
        )

    def interval(self, cfg: SimConfig) -> int | None:
        """Generated tokens between two SVD runs; None when the SVD runs at prefill only (the default)."""
        if self.knobs.svd_every_window:
            return cfg.window_tokens
        return self.knobs.svd_interval_tokens or None

    def uncompressed_tokens(self, cfg: SimConfig) -> int:
        """Most generated tokens held in full on the GPU: the interval, or the whole output."""
        interval = self.interval(cfg)
        return cfg.output_tokens if interval is None else min(interval, cfg.output_tokens)

    def svd_schedule(self, ctx: CostContext) -> tuple[np.ndarray, np.ndarray]:
        """(S, L) share of the batch's SVD run at each layer-step, and (S, L) generated tokens since the
        last SVD (inclusive). From a ShadowKV trace that recorded re-factorisations
        (BatchDemand.refactorised_heads): the share of (sequence, KV head) pairs it re-factorised there;
        otherwise the options' schedule (`interval`: the whole batch every N tokens, or never)."""
        dem, cfg, m = ctx.demand, ctx.cfg, ctx.model
        n_steps = ctx.shape[0]
        steps = np.arange(n_steps, dtype=np.float64)
        if dem.method == self.replays and dem.refactorised_heads.any():
            share = np.minimum(1.0, dem.refactorised_heads / float(cfg.batch_size * m.n_kv_heads))
        else:
            interval = self.interval(cfg)
            share = np.zeros(ctx.shape)
            if interval is None:
                return share, np.broadcast_to(steps[:, None] + 1.0, ctx.shape).copy()
            share[((steps + 1) % interval == 0)] = 1.0
        since = np.empty(ctx.shape)
        count = np.zeros(ctx.shape[1])
        for s in range(n_steps):  # tokens since the last SVD (it offloads them and starts over)
            count += 1.0
            since[s] = count
            count = np.where(share[s] > 0, 0.0, count)
        return share, since

    @staticmethod
    def _offload_copy_s(ctx: CostContext, run_bytes: np.ndarray) -> np.ndarray:
        """(S, L) seconds of one copy of `run_bytes` (one contiguous run each; 0 where none)."""
        out = np.zeros(run_bytes.shape)
        for size in np.unique(run_bytes[run_bytes > 0]):
            out[run_bytes == size] = float(ctx.cost.copy_s(size, int(size), "d2h"))
        return out

    def rank(self, model: ModelSpec) -> int:
        """The SVD rank: the `rank` knob, or ShadowKV's 160/1024 share of the model's Hkv * d."""
        return shadowkv_rank(self.knobs.rank, model.n_kv_heads, model.head_dim)

    def svd_s(self, ctx: CostContext, rows: np.ndarray) -> np.ndarray:
        """Time of the batch's SVDs of (rows x n_kv*d) fp32 key matrices plus the rank-r refit of U."""
        m, cfg = ctx.model, ctx.cfg
        n = m.n_kv_heads * m.head_dim
        rows = np.asarray(rows, dtype=np.float64)
        flops = cfg.batch_size * (6.0 * rows * n * n + 20.0 * n**3)
        gpu = ctx.profile.gpu
        seconds = flops / (gpu.peak_fp16_tflops * 1e12 * self.knobs.svd_flops_fraction)
        refit = ctx.cost.kernel_s(
            2.0 * cfg.batch_size * rows * n * self.rank(m),
            cfg.batch_size * rows * (n * 4 + self.rank(m) * cfg.dtype_bytes),
            3,
        )
        return seconds + refit

    def attention_s(self, ctx: CostContext) -> np.ndarray:
        """Budget + outlier chunks + the generated tokens held in full: those since the last SVD (all of
        them without a re-SVD)."""
        cfg, c = ctx.cfg, self.knobs.chunk_tokens
        context = ctx.demand.context_tokens.astype(np.float64)
        _, since = self.svd_schedule(ctx)
        generated = np.minimum(np.maximum(0.0, context - cfg.input_tokens)[:, None], since)
        outliers = outlier_chunks(cfg.selected_tokens)
        return attention_over(ctx, np.minimum(context[:, None], cfg.budget_tokens + outliers * c + generated))

    def own_work(self, ctx: CostContext) -> dict[str, Work]:
        dem = ctx.demand
        missed_tokens = np.where(dem.dense_layer[None, :], 0, dem.fetched_tokens).astype(np.float64)
        return {**self._svd_work(ctx), **self._retrieval_work(ctx, missed_tokens)}

    def _svd_work(self, ctx: CostContext) -> dict[str, Work]:
        """The scheduled SVDs and, at each, the offload of the values of the tokens since the last one."""
        cfg, m, dem = ctx.cfg, ctx.model, ctx.demand
        d, dt = m.head_dim, cfg.dtype_bytes
        context = dem.context_tokens.astype(np.float64)
        svd_share, since = self.svd_schedule(ctx)
        svd_now = (svd_share > 0) & ~dem.dense_layer[None, :]
        svd = np.where(svd_now, svd_share * self.svd_s(ctx, context)[:, None], 0.0)
        # per (sequence, KV head) at an SVD: the values of the tokens since the last one, one contiguous run
        new_values = since * d * dt
        return {
            "svd": Kernel(svd),
            "svd_offload": Transfer(
                direction="d2h",
                n_copies=np.where(svd_now, cfg.batch_size * m.n_kv_heads, 0).astype(np.int64),
                copy_s=self._offload_copy_s(ctx, np.where(svd_now, new_values, 0.0)),
                bytes_per_copy=new_values,
                issue_s=ctx.profile.link.copy_issue_s,
                issue_threads=1,
            ),
        }

    def _retrieval_work(self, ctx: CostContext, missed_tokens: np.ndarray) -> dict[str, Work]:
        """Landmark selection, the UVA gather of the missed value chunks and the key rebuild."""
        cfg, cost, dem, m = ctx.cfg, ctx.cost, ctx.demand, ctx.model
        d, dt, c = m.head_dim, cfg.dtype_bytes, self.knobs.chunk_tokens
        dense = dem.dense_layer[None, :]
        sparse = np.where(dense, 0.0, 1.0) * np.ones(ctx.shape)
        # misses: the value tokens the trace fetched (its own policy's, or FreeKV's missed pages x p) ->
        # chunks of c tokens
        fetch_bytes = missed_tokens * d * dt  # values only
        fetch_copy = np.asarray(cost.copy_s(fetch_bytes, c * d * dt, "h2d"), dtype=np.float64)
        if ctx.as_published:  # a kernel reading pinned memory over UVA, one chunk in flight per block
            link_s = fetch_copy / self.knobs.uva_rate_fraction
            fetch_copy = published_gather_s(ctx, missed_tokens, link_s, self.knobs)
        return {
            "select": Kernel(
                np.where(dense, 0.0, ctx.full(select_s(ctx, self.knobs))),
                host_s=sparse * host_s(ctx, HostOps(torch_ops=4, ext_calls=2, cpp_launches=2)),
            ),
            "fetch": Transfer(  # one gather kernel per layer-step reading pinned host memory (UVA)
                direction="h2d",
                n_copies=(fetch_bytes > 0).astype(np.int64),
                copy_s=fetch_copy,
                bytes_per_copy=fetch_bytes,
                issue_s=ctx.profile.gpu.kernel_launch_s,
                issue_threads=1,
                host_s=sparse * host_s(ctx, HostOps(ext_calls=1, cpp_launches=1, python_ops=2)),
            ),
            "rebuild": Kernel(
                np.asarray(self._rebuild_s(ctx, missed_tokens, fetch_copy), dtype=np.float64),
                host_s=sparse * host_s(ctx, HostOps(ext_calls=2, cpp_launches=2, python_ops=1)),
            ),
        }

    def _rebuild_s(self, ctx: CostContext, missed_tokens: np.ndarray, fetch_copy: np.ndarray) -> np.ndarray:
        """(S, L) key rebuild: the hits' keys move to the front of the buffer (gather_copy_d2d_with_offsets,
        read + write; as published no faster than one chunk per device load latency per block), then
        U[rows] (t x r) @ SV_h (r x d) + RoPE for every 128-row tile not wholly made of hits
        (gemm_universal_batch_gather_indices.h:678 skips only those), per (sequence, KV head)."""
        cfg, m = ctx.cfg, ctx.model
        d, dt = m.head_dim, cfg.dtype_bytes
        heads = cfg.batch_size * m.n_kv_heads
        hit_tokens = np.maximum(0.0, heads * cfg.selected_tokens - missed_tokens)
        skipped = REBUILD_TILE_ROWS * np.floor(hit_tokens / heads / REBUILD_TILE_ROWS)  # <= selected_tokens
        rows = np.maximum(missed_tokens, heads * (cfg.selected_tokens - skipped))
        rank = self.rank(m)
        launches = REBUILD_LAUNCHES if ctx.as_published else 2
        gemm_bytes = rows * (rank + 3 * d) * dt + heads * rank * d * dt
        rebuild = ctx.cost.kernel_s(2.0 * rows * rank * d, gemm_bytes + 2.0 * hit_tokens * d * dt, launches)
        if ctx.as_published:  # the hits' move is latency-bound (shadowkv_kernels.key_compaction_s)
            gemm = ctx.cost.kernel_s(2.0 * rows * rank * d, gemm_bytes, launches)
            rebuild = np.maximum(rebuild, published_compaction_s(ctx, missed_tokens, self.knobs) + gemm)
        share = self.rebuild_sm_share(ctx)
        if 0.0 < share < 1.0:  # on the SMs the gather leaves free, and never later than after the gather
            rebuild = np.minimum(rebuild / share, fetch_copy + rebuild)
        return np.where(missed_tokens > 0, rebuild, 0.0)

    def memory(self, cfg: SimConfig, model: ModelSpec) -> MemoryNeed:
        """GPU per sparse layer: U, S*V, landmarks (+ int64 ids), buffers for budget + outliers + the
        uncompressed tokens since the last SVD. Host: the values. Dense layers: full KV on the GPU."""
        d, dt, n_kv = model.head_dim, cfg.dtype_bytes, model.n_kv_heads
        ctx_tokens = cfg.max_context_tokens
        n_sparse, n_dense = layer_split(cfg, model)
        landmarks = -(-ctx_tokens // self.knobs.chunk_tokens) * n_kv * (d * dt + 8)
        rank = self.rank(model)
        low_rank = ctx_tokens * rank * dt + n_kv * d * rank * dt
        outliers = outlier_chunks(cfg.selected_tokens)
        buffered = (
            cfg.budget_tokens + outliers * self.knobs.chunk_tokens + self.uncompressed_tokens(cfg)
        )
        buffers = min(buffered, ctx_tokens) * n_kv * 2 * d * dt
        per_layer = landmarks + low_rank + buffers
        dense_kv = n_dense * ctx_tokens * 2 * n_kv * d * dt
        return MemoryNeed(
            gpu_fixed_bytes=0,
            gpu_per_seq_bytes=int(n_sparse * per_layer + dense_kv),
            host_per_seq_bytes=int(n_sparse * ctx_tokens * n_kv * d * dt),
        )

    def prefill(self, ctx: CostContext) -> dict[str, float]:
        """Dense prefill, the SVD of every layer's prompt keys, values offloaded behind the compute."""
        parts = ctx.cost.dense_prefill_s(ctx.cfg.input_tokens)
        m, cfg = ctx.model, ctx.cfg
        n_sparse, _ = layer_split(cfg, m)
        parts["prefill_svd"] = n_sparse * float(self.svd_s(ctx, np.asarray(float(cfg.input_tokens))))
        layer_bytes = cfg.batch_size * cfg.input_tokens * m.n_kv_heads * m.head_dim * cfg.dtype_bytes
        parts["prefill_offload_exposed"] = prefill_offload_exposed_s(ctx, parts, layer_bytes, n_sparse)
        return parts
