"""Microbenchmark tables for the peers' host-bound paths (CUDA only; never run on a GPU yet).

Tables added to microbench.json by `host_path_tables(doc, quick, device_s)`:
- `svd`: `torch.svd(k.float())` on a (batch, context, n_kv * d) key matrix, what ShadowKV's
  `get_svd` runs per layer (bytedance/ShadowKV models/kv_cache.py:209, n_kv * d = 1024 for Llama-3-8B),
  at contexts 8K..64K; the achieved rate counts the R-SVD's 6 m n^2 + 20 n^3 flops (Golub & Van Loan
  Sec. 8.6) per matrix, and `svd_flops_fraction` is that rate over the GPU's dense FP16 tensor peak
  (the ShadowKV model's knob, sim/methods/shadowkv.py); also one KV head's (context x 128) matrix, the
  other shape ShadowKV's appendix timing (17.19 ms at 64K, validate_sim row shadowkv/svd/64k) could be of;
- `memcpy2d_one_row`: FreeKV's NHD recall issues 2 * p cudaMemcpy2DAsync calls of ONE 256-byte row per
  head-page (rooikeee/FreeKV source/freekv_cpp/src/recall.cu:170-187, height = group size 1): 64
  back-to-back calls per head-page, host seconds per call and wall seconds per head-page (the stream
  drained), against one cudaMemcpyAsync of the 16 KiB HND run (recall_cpuhnd_2buf.cu:140);
- `readback`: `.item()` of a one-element tensor and `.to("cpu")` of 8 x 33 int32 page ids (FreeKV's
  `rids_gpu.to(kCPU)`, recall_cpuhnd_2buf.cu:47) right after a tiny kernel: host wall time of the
  read-back including the wait for the kernel.
- `managed_flag_fault`: FreeKV's correction flags ping-pong on one cudaMallocManaged page (written by
  the check kernel, recall_corr.cu:174; read by the host, recall_cpuhnd_2buf.cu:79): the host read of
  a managed int the GPU wrote last, against the same read once the page is on the host; and a one-thread
  kernel writing it after the host read, against the same kernel writing it twice in a row (the software
  profile's `managed_page_fault_s`, an estimate until this runs).
- `pageable_copy`: FlexGen's KV cache is pageable host memory (InfiniGen's speedup code,
  speedup/flexgen/*/pytorch_backend.py `init_cache_one_gpu_batch`: pin_memory = False) copied with
  `dst.copy_(src, non_blocking=True)`: host seconds the call blocks and wall seconds to completion, by size
  (16-256 MiB), host-to-device from pageable and from pinned memory and device-to-host into pageable
  memory; the blocking call's seconds per GB is the software profile's `pageable_staging_s_per_gb` (an
  estimate until this runs) on the machine that runs it.
Each item is independent; a failure is recorded under doc["errors"] and the others run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["host_path_tables", "svd_flops", "TABLES", "FP16_DENSE_TFLOPS"]

TABLES = (
    "tables.svd", "tables.memcpy2d_one_row", "tables.readback", "tables.managed_flag_fault",
    "tables.pageable_copy",
)
# Dense FP16 tensor peaks (datasheets): A100 312, H100 SXM 989, H100 PCIe 756, H200 989 TFLOP/s
FP16_DENSE_TFLOPS = {"A100": 312.0, "H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0}
KV_WIDTH = 1024  # n_kv * d of Llama-3-8B (8 x 128)
HEAD_WIDTH = 128  # d: one KV head's keys


def svd_flops(rows: int, cols: int) -> float:
    """R-SVD operation count of one rows x cols matrix (Golub & Van Loan, Sec. 8.6)."""
    return 6.0 * rows * cols * cols + 20.0 * cols**3


def _fp16_peak_tflops() -> float | None:
    name = torch.cuda.get_device_name(0)
    for key in sorted(FP16_DENSE_TFLOPS, key=len, reverse=True):
        if key in name:
            return FP16_DENSE_TFLOPS[key]
    return None


def svd_table(doc: dict[str, Any], quick: bool) -> None:
    contexts = (8192,) if quick else (8192, 32768, 65536)
    shapes = [(c, KV_WIDTH) for c in contexts] + ([] if quick else [(65536, HEAD_WIDTH)])
    peak = _fp16_peak_tflops()
    rows = []
    for context, cols in shapes:
        k = torch.randn(1, context, cols, device="cuda", dtype=torch.bfloat16)
        torch.svd(k.float())  # warm-up (cuSOLVER handles, workspace)
        torch.cuda.synchronize()
        reps = 1 if quick else 3
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.svd(k.float())
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - t0) / reps
        rate = svd_flops(context, cols) / seconds
        rows.append(
            {
                "context": context,
                "cols": cols,
                "seconds": seconds,
                "tflops": rate / 1e12,
                "svd_flops_fraction": None if peak is None else rate / (peak * 1e12),
            }
        )
        del k
    doc["tables"]["svd"] = rows


def memcpy2d_one_row_table(doc: dict[str, Any], rt: Any, quick: bool) -> None:
    if rt is None:
        raise RuntimeError("no CUDA runtime handle (see errors.cudart)")
    row, per_page, pages = 256, 64, (20 if quick else 200)
    src = torch.empty(pages * per_page * row * 8, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(pages * per_page * row, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    sp, s_ptr, d_ptr = stream.cuda_stream, src.data_ptr(), dst.data_ptr()

    def nhd_page(p: int) -> None:
        for r in range(per_page):  # NHD: rows of one head sit 8 heads apart in the host page
            off = (p * per_page + r) * row
            rt.memcpy2d_async(d_ptr + off, row, s_ptr + off * 8, row, row, 1, sp)

    def hnd_page(p: int) -> None:
        rt.memcpy_async(d_ptr + p * per_page * row, s_ptr + p * per_page * row, per_page * row, sp)

    out = []
    for name, fn, calls in (
        ("nhd: 64 x cudaMemcpy2DAsync of 1 row", nhd_page, per_page),
        ("hnd: 1 x cudaMemcpyAsync of 16 KiB", hnd_page, 1),
    ):
        fn(0)
        stream.synchronize()
        t0 = time.perf_counter()
        for p in range(pages):
            fn(p)
        t1 = time.perf_counter()
        stream.synchronize()
        t2 = time.perf_counter()
        out.append(
            {
                "path": name,
                "head_pages": pages,
                "calls_per_head_page": calls,
                "host_s_per_call": (t1 - t0) / (pages * calls),
                "wall_s_per_head_page": (t2 - t0) / pages,
            }
        )
    doc["tables"]["memcpy2d_one_row"] = out


def readback_table(doc: dict[str, Any], quick: bool) -> None:
    n = 50 if quick else 300
    one = torch.ones(1, device="cuda")
    rids = torch.zeros(8, 33, dtype=torch.int32, device="cuda")
    rows = []
    cases: tuple[tuple[str, Callable[[], Any]], ...] = (
        (".item() after a tiny kernel", lambda: (one.add_(0), one.item())),
        ("rids.to('cpu') 8x33 int32 after a tiny kernel", lambda: (rids.add_(0), rids.to("cpu"))),
    )
    for name, fn in cases:
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        samples.sort()
        rows.append({"item": name, "median_s": samples[len(samples) // 2], "p90_s": samples[int(0.9 * n)]})
    doc["tables"]["readback"] = rows


class _Managed:
    """A managed int32 buffer as Triton takes a tensor argument (data_ptr and dtype)."""

    dtype = torch.int32

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


def managed_flag_fault_table(doc: dict[str, Any], rt: Any, quick: bool) -> None:
    import ctypes

    import triton
    import triton.language as tl

    @triton.jit
    def _write_one(ptr, value):
        tl.store(ptr, value)

    n = 30 if quick else 200
    flag = rt.malloc_managed(4096)
    try:
        rows = []
        for label, gpu_first, host_between in (
            ("host read after a GPU write (fault)", True, False),
            ("host read, page already on the host", False, False),
            ("GPU write after a host read (fault)", True, True),
            ("GPU write, page already on the GPU", True, False),
        ):
            samples = []
            for i in range(n + 1):
                if gpu_first:
                    _write_one[(1,)](_Managed(flag), i)
                    torch.cuda.synchronize()
                if host_between or not gpu_first:
                    ctypes.c_int32.from_address(flag).value  # noqa: B018 - the host touch
                t0 = time.perf_counter()
                if label.startswith("host read"):
                    ctypes.c_int32.from_address(flag).value  # noqa: B018
                else:
                    _write_one[(1,)](_Managed(flag), i)
                    torch.cuda.synchronize()
                samples.append(time.perf_counter() - t0)
            samples = sorted(samples[1:])
            median, p90 = samples[len(samples) // 2], samples[int(0.9 * n)]
            rows.append({"item": label, "median_s": median, "p90_s": p90})
        doc["tables"]["managed_flag_fault"] = rows
    finally:
        rt.free(flag)


def pageable_copy_table(doc: dict[str, Any], quick: bool) -> None:
    sizes = (16 << 20,) if quick else (16 << 20, 64 << 20, 256 << 20)
    reps = 3 if quick else 10
    rows = []
    for size in sizes:
        elems = size // 2
        dev = torch.empty(elems, dtype=torch.float16, device="cuda")
        pageable = torch.ones(elems, dtype=torch.float16)  # touched: resident, not pinned
        pinned = torch.ones(elems, dtype=torch.float16).pin_memory()
        cases = (  # direction, host memory, destination, source
            ("h2d", "pageable", dev, pageable),
            ("h2d", "pinned", dev, pinned),
            ("d2h", "pageable", pageable, dev),
        )
        for direction, memory, dst, src in cases:
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            call, wall = [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                dst.copy_(src, non_blocking=True)
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                call.append(t1 - t0)
                wall.append(time.perf_counter() - t0)
            call_s, wall_s = sorted(call)[reps // 2], sorted(wall)[reps // 2]
            rows.append({
                "direction": direction, "host_memory": memory, "bytes": size, "call_s": call_s,
                "wall_s": wall_s, "gbps": size / wall_s / 1e9, "call_s_per_gb": call_s / (size / 1e9),
            })
    doc["tables"]["pageable_copy"] = rows


def host_path_tables(doc: dict[str, Any], quick: bool, rt: Any) -> None:
    """Run the tables; each failure goes to doc["errors"] under its table name."""
    items: tuple[tuple[str, Callable[[], None]], ...] = (
        ("svd", lambda: svd_table(doc, quick)),
        ("memcpy2d_one_row", lambda: memcpy2d_one_row_table(doc, rt, quick)),
        ("readback", lambda: readback_table(doc, quick)),
        ("managed_flag_fault", lambda: managed_flag_fault_table(doc, rt, quick)),
        ("pageable_copy", lambda: pageable_copy_table(doc, quick)),
    )
    for name, fn in items:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - recorded; the other items run
            doc["errors"][name] = f"{type(exc).__name__}: {exc}"
