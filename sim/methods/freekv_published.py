"""FreeKV as published: what the official runtime's host threads do per layer and step, priced with the
software profile (SimConfig.implementation == "as-published").

Official code: rooikeee/FreeKV (also sjtu-zhao-lab/FreeKV) at commit 074f14d, `source/`. The decode loop
is Python: Hugging Face `generate` drives a LlamaForCausalLM whose attention, RMSNorm, MLP and LM head
forwards are patched (source/freekv/adapter/modeling.py `enable_offload` 315-390) to call the C++/CUDA
extension (source/freekv_cpp) and flashinfer. Per decoder layer, in host program order (modeling.py
`_freekv_attn_forward` 101-312), once the layer's context exceeds its budget (210). Steps 1, 5 and 7 are
the shared decoder ops, priced by the decoder-layer skeleton (sim/methods/decoder_layer.py) with
`eager.FREEKV_DECODER`; this module prices FreeKV's own ops:

1. norm, q/k/v projections, RoPE, KV append (117-176): `eager.FREEKV_QKV`; at layer 0 also the step's
   `_prepare_decode` (infer_state.py 640-774): `eager.FREEKV_STEP_PREPARE` + ~3 Python iterations per
   layer of the model.
2. wait for the previous step's background recall of this layer: two `Stream.wait_event` (217-218).
3. correction check `get_corr_managed_cuda` (242-248 -> recall_corr.cu 121-203): cudaMemsetAsync (164),
   one kernel (174), a 4-byte cudaMemcpyAsync to pinned memory (192) and cudaStreamSynchronize of the
   compute stream (198): a host sync per layer (the engine charges it: `check` has host_sync). The
   kernel writes the per-head flags to ONE managed buffer for all layers (cudaMallocManaged,
   recall_corr.cu 8-19; infer_state.py 293-297), which the host read in the previous layer-step's
   blocking recall: the kernel stalls on a page fault there (`managed_page_fault_s` on the GPU).
4. if a head is corrected: `estimate_select` on the compute stream (264 -> infer_state.py 1269-1276,
   834-870: ~10 Python view/slice calls, 2 extension calls, 3 launches), then the BLOCKING recall on the
   main thread (265 -> infer_state.py 1191-1257 -> recall_cpuhnd_2buf.cu `recall_cuda_cpy_cpuhnd_2buf`
   11-183): `rids_gpu.to(kCPU)` (47: a read-back that waits for the selection, so `select_sync` gets
   host_sync), then per (sequence, KV head) group with misses one ATen `index` (106) and one conversion
   kernel launch (120), and ONE cudaMemcpyAsync PER HEAD-PAGE of 2*p*d elements (140: 16 KiB at p=32,
   d=128, bf16), groups alternating between two staging buffers/streams (reading the managed flags
   per group, 79: a host page fault, `managed_page_fault_s`); finally cudaStreamSynchronize
   of both recall streams (178-179: host_sync on `recall_sync`, the second sync in its host_s). The
   runtime has ONE pair of recall streams for all layers (n_recall_stream=2, infer_state.py 42, 277-280;
   rs_group = layer % 1 at 1232-1234 and 1300-1302), shared with the background work of step 6: the
   model puts `recall_sync` on the background recall stream, behind what is still queued there.
5. attention `decode_sdpa` (270 -> infer_state.py 1463-1470): `eager.FREEKV_ATTENTION`.
6. background: `estimate_select_recall_pool` (276 -> infer_state.py 1278-1319: ~14 Python slicing
   calls, 1 extension call) hands ONE task per layer to a C++ ThreadPool (estimate_select_recall.cu
   164-207; thread_pool.h; 2 workers: infer_state.py 41) whose worker launches estimate, mean and
   top-k on recall stream 1 (estimate_select_recall.cu 100-146), reads rids back (recall_cpuhnd_2buf.cu
   223, waiting for that selection), issues one cudaMemcpyAsync per head-page (314) and one conversion
   launch per group (293), and records two events (352-353). When heads were corrected, the remaining
   heads' recall is handed to the pool the same way without a selection (280-282 -> 360-389).
7. o_proj, norm, MLP (modeling.py 297-301, 73-90): `eager.FREEKV_OUT_PROJ`, `eager.FREEKV_FFN`;
   the LM head and HF generation glue at the last layer (`eager.FREEKV_STEP`) and
   `compute_stream.synchronize()` per step (modeling.py 380: the `lm_head` host sync).
8. offload when a page fills (infer_state.py 745-747): per layer and sequence a `permute().contiguous()`
   and a torch `copy_` device->host on the backup stream (1334-1344), and the page summary
   (1372-1380, `_summarize_keys` 1346-1360: ~10 torch ops + 1 append call).

Ablations as the same code runs them:
- no double buffering: `recall_cuda_cpy_cpuhnd_1buf` (recall.cu 249-351): one staging buffer and a
  cudaStreamSynchronize after each group's copies (310), before its conversion launch (325).
- no hybrid layouts: NHD host pool, `recall_impl<CUDA_CPY_ASYNC, kNHD>` (recall.cu 19-247): read-backs
  of rids and eids (63, 75), then per head-page 2*p cudaMemcpy2DAsync calls of ONE d-element row each
  (170-187: 256 B at d=128, bf16; height = group size 1), in place, and a final sync (245). The official
  runtime refuses speculative retrieval with an NHD pool (infer_state.py 299 asserts HND); for
  `freekv-nohl` the pool worker is modelled issuing the same per-row copies (as if the assert were lifted).
- no speculative retrieval: `estimate_select_recall` every layer (modeling.py 287 -> infer_state.py
  1259-1267): selection and the blocking recall of every missed page, no check.

Approximations (model choices): groups with at least one missed page = min(corrected heads, missed
pages) for the synchronous recall and min(other heads, missed pages) for the background one; the pool
worker's per-task and per-group costs are spread evenly over its copies (`issue_s` is one number per
transfer); a worker's latency before its selection (hand-off + launches + read-back) is added to the
background selection's time on recall stream 1, where the worker holds it up.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from sim.methods.base import CostContext, Kernel, Transfer, Work
from sim.methods.host_costs import HostOps

if TYPE_CHECKING:
    from sim.methods.freekv import FreeKV

__all__ = ["published_work", "WAIT_AND_CHECK", "SELECT", "RECALL_CALL", "RECALL_GROUP", "POOL_CALL"]

# modeling.py 217-218 + 240-248, recall_corr.cu 164/174/192 (the sync at 198 is the engine's host_sync)
WAIT_AND_CHECK = HostOps(python_ops=2 + 2, stream_waits=2, ext_calls=1, cpp_launches=2, memcpy_calls=1)
# infer_state.py 1269-1276, 834-870; estimate + mean + top-k launches
SELECT = HostOps(python_ops=10, ext_calls=2, cpp_launches=3)
# infer_state.py 1191-1257 glue + recall_cpuhnd_2buf.cu 47 read-back + the second final sync (179)
RECALL_CALL = HostOps(python_ops=5, ext_calls=1, readbacks=1, stream_syncs=1)
# with speculative retrieval the call also reads the correction flags, managed memory the check kernel
# wrote last (recall_cpuhnd_2buf.cu 79; recall_corr.cu 8-19, 174): one host page fault
RECALL_CALL_FLAGS = RECALL_CALL + HostOps(managed_faults=1)
# per group with misses: ATen index (106) + conversion launch (120)
RECALL_GROUP = HostOps(python_ops=1, cpp_launches=1)
# single-buffer recall: + cudaStreamSynchronize per group (recall.cu 310)
RECALL_GROUP_1BUF = HostOps(python_ops=1, cpp_launches=1, stream_syncs=1)
# NHD recall: read-backs of rids and eids (recall.cu 63, 75) + final sync (245, the engine's host_sync)
RECALL_CALL_NHD = HostOps(python_ops=5, ext_calls=1, readbacks=2)
# main thread: infer_state.py 1278-1319 (or the non-blocking `recall` 280-282, ~6 calls)
POOL_CALL = HostOps(python_ops=14, ext_calls=1)
POOL_RECALL_CALL = HostOps(python_ops=5, ext_calls=1)
# pool worker before its copies: hand-off, estimate/mean/top-k launches, rids read-back
WORKER_SELECT = HostOps(handoffs=1, cpp_launches=3, readbacks=1)
WORKER_RECALL_ONLY = HostOps(handoffs=1, readbacks=1)
WORKER_EVENTS = HostOps(event_records=2)


def _groups(heads: np.ndarray, pages: np.ndarray) -> np.ndarray:
    """Groups with at least one missed page (bounded by the heads involved and by the pages)."""
    return np.minimum(np.asarray(heads, dtype=np.float64), np.asarray(pages, dtype=np.float64))


def _per_copy_mean(extra_s: np.ndarray, copies: np.ndarray) -> float:
    """Total extra seconds spread over all copies (one issue_s per transfer)."""
    n = float(np.sum(copies))
    return float(np.sum(np.where(copies > 0, extra_s, 0.0))) / n if n else 0.0


def _chunk(pages: np.ndarray, groups: np.ndarray) -> int:
    """Head-pages per staging buffer: the mean missed pages of a group (>= 1)."""
    g = float(np.sum(groups))
    return max(1, int(round(float(np.sum(pages)) / g))) if g else 1


def published_work(
    method: FreeKV,
    ctx: CostContext,
    out: dict[str, Work],
    sync_pages: np.ndarray,
    bg_pages: np.ndarray,
    sparse: np.ndarray,
) -> dict[str, Work]:
    """Replace the ideal work of FreeKV's own ops (`FreeKV.own_work`) by what the official runtime pays
    (module docstring; the shared decoder ops are priced by the skeleton's FREEKV_DECODER recipe).

    sync_pages / bg_pages: (S, L) head-pages of the synchronous and background recall (0 on dense
    layers); sparse: (S, L) bool, the layer-steps on the retrieval path (candidates exist).
    """
    res = {**out, **_offload(ctx, out), **_sync_path(method, ctx, out, sync_pages, sparse)}
    if method.speculative:
        res.update(_background(method, ctx, out, bg_pages, sparse))
    return res


def _offload(ctx: CostContext, out: dict[str, Work]) -> dict[str, Work]:
    """Offload on page fill (infer_state.py 745-747, 1334-1344, 1372-1380)."""
    sw, b = ctx.software, ctx.cfg.batch_size
    assert sw is not None
    page_done = np.asarray(out["offload"].n_copies) > 0
    prep = HostOps(torch_ops=b + 10, python_ops=3 * b, ext_calls=1, cpp_launches=1).seconds(sw)
    return {
        "offload_prep": dataclasses.replace(out["offload_prep"], host_s=np.where(page_done, prep, 0.0)),
        "offload": dataclasses.replace(
            out["offload"], issue_s=sw.torch_copy_call_s, issue_threads=1, issuer="host"
        ),
    }


def _sync_path(
    method: FreeKV, ctx: CostContext, out: dict[str, Work], sync_pages: np.ndarray, sparse: np.ndarray
) -> dict[str, Work]:
    """Selection + blocking recall (corrected heads, or every head without speculative retrieval)."""
    sw, dem = ctx.software, ctx.demand
    assert sw is not None
    sel = np.asarray(out["select_sync"].seconds) > 0
    heads_total = ctx.cfg.batch_size * ctx.model.n_kv_heads
    sync_heads = dem.corrected_heads if method.speculative else np.full(ctx.shape, heads_total)
    sync_groups = np.where(sparse, _groups(sync_heads, sync_pages), 0.0)
    return {
        "select_sync": dataclasses.replace(out["select_sync"], host_s=np.where(sel, SELECT.seconds(sw), 0.0)),
        "recall_sync": _recall(method, ctx, out["recall_sync"], sync_pages, sync_groups, "host"),
    }


def _background(
    method: FreeKV, ctx: CostContext, out: dict[str, Work], bg_pages: np.ndarray, sparse: np.ndarray
) -> dict[str, Work]:
    """The correction check and the pool worker's background selection and recall."""
    sw, dem = ctx.software, ctx.demand
    assert sw is not None
    bg_sel = np.asarray(out["select_bg"].seconds) > 0
    worker = WORKER_SELECT.seconds(sw)
    heads_total = ctx.cfg.batch_size * ctx.model.n_kv_heads
    bg_heads = np.maximum(heads_total - dem.corrected_heads, 0)
    bg_groups = np.where(sparse, _groups(bg_heads, bg_pages), 0.0)
    # tasks without a selection (heads were corrected): hand-off + read-back before the copies
    task_fixed = np.where(bg_sel, 0.0, WORKER_RECALL_ONLY.seconds(sw)) + WORKER_EVENTS.seconds(sw)
    recall_bg = _recall(method, ctx, out["recall_bg"], bg_pages, bg_groups, "pool", task_fixed)
    main = np.where(sparse & ~bg_sel, POOL_RECALL_CALL.seconds(sw), 0.0)
    check = out["check"]
    assert isinstance(check, Kernel)
    return {
        "check": Kernel(
            seconds=np.asarray(check.seconds) + _flags_fault_s(ctx, sparse),
            host_s=np.where(sparse, WAIT_AND_CHECK.seconds(sw), 0.0),
        ),
        "select_bg": Kernel(
            seconds=np.where(bg_sel, np.asarray(out["select_bg"].seconds) + worker, 0.0),
            host_s=np.where(bg_sel, POOL_CALL.seconds(sw), 0.0),
        ),
        "recall_bg": dataclasses.replace(recall_bg, host_s=main),
    }


def _flags_fault_s(ctx: CostContext, sparse: np.ndarray) -> np.ndarray:
    """(S, L) GPU seconds the check kernel stalls on a page fault: it writes the managed correction flags
    (one buffer for every layer, infer_state.py 293-297; recall_corr.cu 174-177), which the host last read
    in the previous layer-step's blocking recall (recall_cpuhnd_2buf.cu 79), moving the page to the host."""
    sw = ctx.software
    assert sw is not None
    corrected = (np.asarray(ctx.demand.corrected_heads) > 0) & sparse
    before = np.concatenate(([False], corrected.ravel()[:-1])).reshape(corrected.shape)
    return np.where(sparse & before, sw.managed_page_fault_s, 0.0)


def _recall(
    method: FreeKV,
    ctx: CostContext,
    ideal: Work,
    pages: np.ndarray,
    groups: np.ndarray,
    issuer: str,
    task_fixed: np.ndarray | float = 0.0,
) -> Transfer:
    """A recall transfer as the official code issues it (per head-page copies, or per-row 2D copies)."""
    assert isinstance(ideal, Transfer)
    sw = ctx.software
    assert sw is not None
    pages = np.asarray(pages, dtype=np.int64)
    if not method.hybrid_layouts:
        return _recall_nhd(ctx, pages, issuer, task_fixed)
    group = (RECALL_GROUP if method.double_buffer else RECALL_GROUP_1BUF).seconds(sw)
    chunk = _chunk(pages, groups)
    common = dict(
        direction="h2d",
        n_copies=pages,
        copy_s=ideal.copy_s,
        bytes_per_copy=ideal.bytes_per_copy,
        chunk_copies=chunk,
        buffers=2 if method.double_buffer else 1,
        convert_fixed_s=ideal.convert_fixed_s,
        convert_per_copy_s=ideal.convert_per_copy_s,
        issue_threads=1,
    )
    if issuer == "pool":  # the worker's per-task and per-group costs spread over its copies
        extra = _per_copy_mean(np.asarray(task_fixed) + groups * group, pages)
        return Transfer(issue_s=sw.memcpy_async_call_s + extra, issuer="pool", **common)
    call = RECALL_CALL_FLAGS if method.speculative else RECALL_CALL
    host = np.where(pages > 0, call.seconds(sw) + groups * group, 0.0)
    return Transfer(issue_s=sw.memcpy_async_call_s, issuer="host", host_s=host, **common)


def _recall_nhd(ctx: CostContext, pages: np.ndarray, issuer: str, task_fixed: np.ndarray | float) -> Transfer:
    """NHD pool: 2*p cudaMemcpy2DAsync of one d-element row per head-page (recall.cu 170-187)."""
    sw, cfg = ctx.software, ctx.cfg
    assert sw is not None
    row = ctx.model.head_dim * cfg.dtype_bytes
    n_copies = 2 * cfg.page_size * pages
    copy_s = float(ctx.cost.copy_s(row, row, "h2d"))
    common = dict(direction="h2d", n_copies=n_copies, copy_s=copy_s, bytes_per_copy=row, issue_threads=1)
    per_copy = sw.memcpy2d_async_call_s
    if issuer == "pool":
        extra = _per_copy_mean(np.asarray(task_fixed) * np.ones(ctx.shape), n_copies)
        return Transfer(issue_s=per_copy + extra, issuer="pool", **common)
    host = np.where(pages > 0, RECALL_CALL_NHD.seconds(sw), 0.0)
    return Transfer(issue_s=per_copy, issuer="host", host_s=host, **common)
