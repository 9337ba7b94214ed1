"""Part `microbench`: the numbers the simulator's software and hardware profiles assume, measured.

Writes DIR/microbench.json in the schema "freekv-dse-microbench/1" (keys of "software" are
SoftwareProfile fields, keys of "hardware" dotted HardwareProfile fields; absent = not measured, with
the reason under "skipped"). Methods:
- host time of a call: perf_counter around n back-to-back calls / n, median of 5 repetitions (the GPU
  keeps up or the queue absorbs them; nothing in the loop waits);
- device time per copy or kernel: the stream is first blocked by a `torch.cuda._sleep` kernel while the
  host queues n items, an event after the sleep and one after the n items bracket them, so the host's
  issue rate cannot starve the GPU; (end - start) / n;
- wall time per copy: host start of the loop to the stream's completion, / n.
Host->device copies (pinned source, one stream) by size 256 B .. 4 MiB and API path: torch slice
`copy_(non_blocking=True)`, cudaMemcpyAsync, cudaMemcpy2DAsync of 256-byte rows (source pitch of 8 such
rows, the NHD layout of 8 KV heads), cudaMemcpyBatchAsync (one call for all n copies). Tables `topk` and
`uva_gather`, `uva_gather_blocks` (microbench_selection.py): torch.topk at ShadowKV's and page-selection
shapes against a roofline read, a zero-copy gather of runs from pinned host memory against a bulk copy,
and the same gather with ShadowKV's grid (one block per sequence and KV head looping over its chunks).
Tables `svd`, `memcpy2d_one_row`, `readback`, `managed_flag_fault`, `pageable_copy`
(microbench_host_paths.py): ShadowKV's torch.svd at its shapes, FreeKV's NHD recall of 64 one-row
cudaMemcpy2DAsync per head-page, read-back latency after a kernel, FreeKV's managed-flag faults, and
copies from and to pageable host memory (FlexGen's KV cache). None of these CUDA tables has run on a GPU yet.
Without CUDA only the host-side items run (thread hand-off, Python call into an extension, eager CPU
op), labelled device "cpu"; every CUDA item is listed under "skipped".
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from gpu_parts.common import Options, cuda_skip_reason, has_cuda, machine, write_json

__all__ = ["run", "SCHEMA", "SOFTWARE_KEYS", "HARDWARE_KEYS", "validate"]

SCHEMA = "freekv-dse-microbench/1"
SOFTWARE_KEYS = (
    "torch_op_dispatch_s",
    "cpp_kernel_launch_s",
    "python_op_s",
    "memcpy_async_call_s",
    "memcpy2d_async_call_s",
    "torch_copy_call_s",
    "batched_copy_call_s",
    "batched_copy_per_copy_s",
    "stream_sync_s",
    "event_record_s",
    "event_sync_s",
    "stream_wait_event_s",
    "readback_s",
    "thread_handoff_s",
    "python_layer_s",
)
HARDWARE_KEYS = (
    "gpu.kernel_launch_s",
    "link.h2d_effective_gbps",
    "link.d2h_effective_gbps",
    "link.dma_latency_s",
    "link.run_efficiency",
    "host.sync_s",
    "gpu.achievable_bandwidth_fraction",
)
SIZES = (256, 1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20)
ROW_BYTES = 256  # one token of one KV head: d = 128 in bf16
# HBM peak by device name (datasheets): H100 SXM5 80GB 3.35 TB/s, H100 PCIe 2.0 TB/s, H100 NVL 3.9 TB/s,
# H200 141GB 4.8 TB/s, A100 80GB SXM 2.039 TB/s.
HBM_PEAK_GBPS = {
    "H100 80GB HBM3": 3350.0,
    "H100 PCIe": 2000.0,
    "H100 NVL": 3900.0,
    "H200": 4800.0,
    "A100-SXM4-80GB": 2039.0,
}


def validate(doc: dict[str, Any]) -> list[str]:
    """Problems with a microbench document (empty list: valid)."""
    problems = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    for section, keys in (("software", SOFTWARE_KEYS), ("hardware", HARDWARE_KEYS)):
        block = doc.get(section)
        if not isinstance(block, dict):
            problems.append(f"{section} missing or not an object")
            continue
        problems += [f"{section}.{k} is not a field name" for k in block if k not in keys]
        for k, v in block.items():
            if k == "link.run_efficiency":
                if not (isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 for p in v)):
                    problems.append(f"{section}.{k} must be [[bytes, efficiency], ...]")
            elif not isinstance(v, int | float) or v < 0:
                problems.append(f"{section}.{k} must be a non-negative number, got {v!r}")
    for name in ("machine", "tables"):
        if not isinstance(doc.get(name), dict):
            problems.append(f"{name} missing or not an object")
    for name, rows in (doc.get("tables") or {}).items():  # the calibration reads every table as rows
        if not (isinstance(rows, list) and all(isinstance(r, dict) for r in rows)):
            problems.append(f"tables.{name} must be a list of rows (objects)")
    for row in doc.get("tables", {}).get("h2d_copy", []):
        missing = {"api", "bytes_per_copy", "copies", "host_s_per_copy", "wall_s_per_copy", "gbps"} - set(row)
        if missing:
            problems.append(f"tables.h2d_copy row lacks {sorted(missing)}")
    return problems


def host_s(fn: Callable[[], Any], n: int, reps: int = 5) -> float:
    """Median over reps of (seconds for n back-to-back calls) / n."""
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


def thread_handoff_s(n: int) -> float:
    """Median time from submitting a task to a waiting worker thread until it starts running."""
    samples = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(lambda: None).result()  # the worker exists and waits
        for _ in range(n):
            t0 = time.perf_counter()
            started = pool.submit(time.perf_counter).result()
            samples.append(started - t0)
            time.sleep(0)  # let the worker go back to waiting
    return statistics.median(samples)


def _host_only(doc: dict[str, Any], n: int) -> None:
    doc["software"]["thread_handoff_s"] = thread_handoff_s(n)
    doc["software"]["python_op_s"] = host_s(torch.is_grad_enabled, 20 * n)
    x, y, z = torch.ones(256), torch.ones(256), torch.empty(256)
    doc["tables"]["host"] = [
        {
            "item": "thread_handoff",
            "device": "cpu",
            "seconds": doc["software"]["thread_handoff_s"],
            "how": "ThreadPoolExecutor(1): submit -> the task's first perf_counter, median",
        },
        {
            "item": "python_op (torch.is_grad_enabled)",
            "device": "cpu",
            "seconds": doc["software"]["python_op_s"],
        },
        {
            "item": "eager op torch.add(out=) on 256 floats",
            "device": "cpu",
            "seconds": host_s(lambda: torch.add(x, y, out=z), 10 * n),
            "note": "CPU tensors: dispatch plus the CPU kernel, no launch; not torch_op_dispatch_s",
        },
    ]


def run(out: Path, opts: Options) -> dict:
    n = 200 if opts.quick else 1000
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "machine": machine(),
        "device": "cuda" if has_cuda() else "cpu",
        "software": {},
        "hardware": {},
        "tables": {},
        "skipped": {},
        "errors": {},
    }
    _host_only(doc, n)
    if has_cuda():
        from gpu_parts.microbench_cuda import measure_cuda

        measure_cuda(doc, opts.quick)
    else:
        reason = cuda_skip_reason()
        from gpu_parts.microbench_host_paths import TABLES

        tables = ("tables.topk", "tables.uva_gather", "tables.uva_gather_blocks", *TABLES)
        for key in SOFTWARE_KEYS + HARDWARE_KEYS + tables:
            if key not in doc["software"]:
                doc["skipped"][key] = reason
    problems = validate(doc)
    write_json(out.parent / "microbench.json", doc)
    write_json(out / "microbench.json", doc)
    result: dict[str, Any] = {
        "file": str(out.parent / "microbench.json"),
        "measured": sorted(doc["software"]) + sorted(doc["hardware"]),
        "skipped_keys": sorted(doc["skipped"]),
        "errors": doc["errors"],
    }
    if problems:
        result.update(status="failed", error=f"microbench.json fails its schema: {problems}")
    elif not has_cuda():
        result.update(
            status="skipped",
            reason=f"{cuda_skip_reason()}: only host-side items measured "
            "(thread hand-off, Python call), labelled device cpu",
        )
    elif doc["errors"]:
        result.update(status="partial", error=f"{len(doc['errors'])} items failed: {sorted(doc['errors'])}")
    return result
