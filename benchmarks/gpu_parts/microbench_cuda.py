"""The CUDA items of the microbenchmark part (see microbench.py for the methods and the schema).

Never run during development (no GPU there): every item is wrapped so that one failing item is recorded
under "errors" and the others still run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from gpu_parts.cudart import Cudart
from gpu_parts.microbench import HBM_PEAK_GBPS, ROW_BYTES, SIZES, host_s
from gpu_parts.microbench_host_paths import host_path_tables
from gpu_parts.microbench_selection import topk_table, uva_gather_blocks_table, uva_gather_table

__all__ = ["measure_cuda"]

SLEEP_S = 0.05  # how long the blocking kernel holds the stream while the host queues the items


def _sleep_cycles() -> int:
    props = torch.cuda.get_device_properties(0)
    rate_khz = getattr(props, "clock_rate", None) or 2_000_000  # SM clock; 2 GHz if torch does not say
    return int(rate_khz * 1e3 * SLEEP_S)


def device_s(enqueue: Callable[[int], Any], n: int, stream: torch.cuda.Stream) -> float:
    """GPU seconds per item: n items queued behind a sleep kernel, bracketed by events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(_sleep_cycles())
        start.record(stream)
        for i in range(n):
            enqueue(i)
        end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / n


def wall_and_host_s(enqueue: Callable[[int], Any], n: int, stream: torch.cuda.Stream) -> tuple[float, float]:
    """(wall seconds per item until the stream is done, host seconds per item to queue them)."""
    stream.synchronize()
    with torch.cuda.stream(stream):
        t0 = time.perf_counter()
        for i in range(n):
            enqueue(i)
        t1 = time.perf_counter()
        stream.synchronize()
        t2 = time.perf_counter()
    return (t2 - t0) / n, (t1 - t0) / n


class _Buffers:
    """A pinned host source and a device destination big enough for n copies of `size` bytes."""

    def __init__(self, size: int, n: int, pitch_rows: int = 8) -> None:
        self.size, self.n = size, n
        self.src = torch.empty(
            n * size * pitch_rows if size >= ROW_BYTES else n * size, dtype=torch.uint8, pin_memory=True
        )
        self.dst = torch.empty(n * size, dtype=torch.uint8, device="cuda")
        self.src_ptr, self.dst_ptr = self.src.data_ptr(), self.dst.data_ptr()


def _copy_table(doc: dict[str, Any], rt: Cudart | None, quick: bool) -> None:
    stream = torch.cuda.Stream()
    sp = stream.cuda_stream
    rows = []
    for size in SIZES:
        n = max(16, min(512 if quick else 1024, (64 << 20) // size))
        buf = _Buffers(size, n)
        apis = _copy_apis(buf, size, n, rt, sp)
        for api, fn in apis.items():
            try:
                rows.append(_copy_row(api, fn, size, n, stream))
            except Exception as exc:  # noqa: BLE001 - one failing path is recorded, the others run
                doc["errors"][f"h2d_copy.{api}.{size}"] = f"{type(exc).__name__}: {exc}"
        if rt is not None and rt.has_batch:
            try:
                rows.append(_batched_copy_row(rt, buf, size, n, stream))
            except Exception as exc:  # noqa: BLE001
                doc["errors"][f"h2d_copy.batched.{size}"] = f"{type(exc).__name__}: {exc}"
        del buf
    doc["tables"]["h2d_copy"] = rows


def _copy_apis(
    buf: _Buffers, size: int, n: int, rt: Cudart | None, sp: int
) -> dict[str, Callable[[int], Any]]:
    """Per copy API, a function that queues copy i of `size` bytes from buf's pinned source to the device:
    torch's copy_, and with the CUDA runtime cudaMemcpyAsync and (from ROW_BYTES up) a 2D copy of rows."""
    src_rows = buf.src[: n * size].view(n, size)
    dst_rows = buf.dst.view(n, size)
    apis: dict[str, Callable[[int], Any]] = {
        "torch_copy": lambda i, s=src_rows, d=dst_rows: d[i].copy_(s[i], non_blocking=True)
    }
    if rt is not None:
        apis["memcpy_async"] = lambda i, b=buf, z=size: rt.memcpy_async(
            b.dst_ptr + i * z, b.src_ptr + i * z, z, sp
        )
        if size >= ROW_BYTES:
            height, pitch = size // ROW_BYTES, 8 * ROW_BYTES
            apis["memcpy2d_rows"] = lambda i, b=buf, z=size, h=height, p=pitch: rt.memcpy2d_async(
                b.dst_ptr + i * z, ROW_BYTES, b.src_ptr + i * z * 8, p, ROW_BYTES, h, sp
            )
    return apis


def _copy_row(api: str, fn: Callable[[int], Any], size: int, n: int, stream: torch.cuda.Stream) -> dict:
    """The h2d_copy row of one API and size: n copies queued one call each."""
    wall, host = wall_and_host_s(fn, n, stream)
    dev = device_s(fn, min(n, 500), stream)  # within the launch queue: the GPU never waits
    return {
        "api": api,
        "bytes_per_copy": size,
        "copies": n,
        "host_s_per_copy": host,
        "wall_s_per_copy": wall,
        "device_s_per_copy": dev,
        "gbps": size / wall / 1e9,
        "device_gbps": size / dev / 1e9,
        **({"rows_of_bytes": ROW_BYTES} if api == "memcpy2d_rows" else {}),
    }


def _batched_copy_row(rt: Cudart, buf: _Buffers, size: int, n: int, stream: torch.cuda.Stream) -> dict:
    """The h2d_copy row of the batched API: the n copies of `size` bytes queued by one call."""
    sp = stream.cuda_stream
    arrays = rt.batch_arrays(
        [buf.dst_ptr + i * size for i in range(n)],
        [buf.src_ptr + i * size for i in range(n)],
        [size] * n,
    )
    wall, host = wall_and_host_s(lambda _i, a=arrays: rt.memcpy_batch_async(a, sp), 1, stream)
    dev = device_s(lambda _i, a=arrays: rt.memcpy_batch_async(a, sp), 1, stream)
    return {
        "api": "batched",
        "bytes_per_copy": size,
        "copies": n,
        "host_s_per_copy": host / n,
        "host_s_per_call": host,
        "wall_s_per_copy": wall / n,
        "device_s_per_copy": dev / n,
        "gbps": size * n / wall / 1e9,
        "device_gbps": size * n / dev / 1e9,
    }


def _pick(rows: list[dict], api: str, size: int, key: str) -> float | None:
    found = [r[key] for r in rows if r["api"] == api and r["bytes_per_copy"] == size]
    return found[0] if found else None


def _bulk_gbps(direction: str, n_bytes: int) -> float:
    host = torch.empty(n_bytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n_bytes, dtype=torch.uint8, device="cuda")
    best = 0.0
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        (dev.copy_(host, non_blocking=True) if direction == "h2d" else host.copy_(dev, non_blocking=True))
        end.record()
        end.synchronize()
        best = max(best, n_bytes / (start.elapsed_time(end) / 1e3) / 1e9)
    return best


def _hbm(doc: dict[str, Any]) -> None:
    name = torch.cuda.get_device_name(0)
    peak = next((v for k, v in HBM_PEAK_GBPS.items() if k in name), None)
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    times = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    gbps = 2 * n / min(times[1:]) / 1e9  # read + write
    doc["tables"]["hbm"] = [
        {
            "device_copy_gbps": gbps,
            "peak_gbps": peak,
            "peak_source": "datasheet by name" if peak else f"unknown for {name!r}",
            "bytes": n,
        }
    ]
    if peak:
        doc["hardware"]["gpu.achievable_bandwidth_fraction"] = gbps / peak


def _sync_items(doc: dict[str, Any], n: int) -> None:
    sw = doc["software"]
    stream = torch.cuda.current_stream()
    x = torch.ones(256, device="cuda")
    y, z = torch.ones_like(x), torch.empty_like(x)
    torch.cuda.synchronize()
    sw["torch_op_dispatch_s"] = host_s(lambda: torch.add(x, y, out=z), n)
    torch.cuda.synchronize()
    sleep0 = host_s(lambda: torch.cuda._sleep(0), n)
    torch.cuda.synchronize()
    binding = host_s(torch.cuda.current_device, n)
    sw["cpp_kernel_launch_s"] = max(0.0, sleep0 - binding)
    doc["hardware"]["gpu.kernel_launch_s"] = device_s(lambda _i: torch.cuda._sleep(0), min(n, 500), stream)
    sw["stream_sync_s"] = host_s(stream.synchronize, n)
    doc["hardware"]["host.sync_s"] = sw["stream_sync_s"]
    events = [torch.cuda.Event() for _ in range(n)]
    it = iter(range(10**9))
    sw["event_record_s"] = host_s(lambda: events[next(it) % n].record(stream), n, reps=1)
    torch.cuda.synchronize()
    sw["event_sync_s"] = host_s(events[-1].synchronize, n)
    other = torch.cuda.Stream()
    sw["stream_wait_event_s"] = host_s(lambda: other.wait_event(events[-1]), n)
    one = torch.ones(1, device="cuda")
    sw["readback_s"] = host_s(one.item, min(n, 300))
    doc["tables"]["launch"] = [
        {"item": "torch.cuda._sleep(0) host", "seconds": sleep0},
        {"item": "torch.cuda.current_device() host (binding cost subtracted)", "seconds": binding},
        {"item": "torch.add(out=) 256 floats host", "seconds": sw["torch_op_dispatch_s"]},
    ]


def _derive(doc: dict[str, Any]) -> None:
    rows = doc["tables"].get("h2d_copy", [])
    sw, hw = doc["software"], doc["hardware"]
    for key, api in (
        ("memcpy_async_call_s", "memcpy_async"),
        ("memcpy2d_async_call_s", "memcpy2d_rows"),
        ("torch_copy_call_s", "torch_copy"),
    ):
        value = _pick(rows, api, 16384, "host_s_per_copy")
        if value is not None:
            sw[key] = value
    batch = sorted((r["copies"], r["host_s_per_call"]) for r in rows if r["api"] == "batched")
    if len(batch) >= 2 and batch[0][0] != batch[-1][0]:
        (n0, t0), (n1, t1) = batch[0], batch[-1]
        sw["batched_copy_per_copy_s"] = max(0.0, (t1 - t0) / (n1 - n0))
        sw["batched_copy_call_s"] = max(0.0, t0 - n0 * sw["batched_copy_per_copy_s"])
    peak = hw.get("link.h2d_effective_gbps")
    api = "memcpy_async" if any(r["api"] == "memcpy_async" for r in rows) else "torch_copy"
    small = _pick(rows, api, 256, "device_s_per_copy")
    if small is not None and peak:
        # the cost model prices a copy as dma_latency_s + bytes / (bw * efficiency(bytes)) (sim/hardware.py):
        # the latency comes from the smallest copy, each efficiency from what remains of a copy's time
        bw = peak * 1e9
        latency = max(0.0, small - 256 / bw)
        hw["link.dma_latency_s"] = latency
        hw["link.run_efficiency"] = [
            [
                r["bytes_per_copy"],
                min(1.0, r["bytes_per_copy"] / (bw * max(r["device_s_per_copy"] - latency, 1e-12))),
            ]
            for r in rows
            if r["api"] == api
        ]
    r256, r16k = _pick(rows, api, 256, "device_s_per_copy"), _pick(rows, api, 16384, "device_s_per_copy")
    rows2d = _pick(rows, "memcpy2d_rows", 16384, "device_s_per_copy")
    doc["tables"]["rows_vs_runs"] = [
        {
            "bytes": 16384,
            "api": api,
            "as_64_copies_of_256B_s": None if r256 is None else 64 * r256,
            "as_one_16KiB_run_s": r16k,
            "as_one_2d_copy_of_64_rows_s": rows2d,
        }
    ]


def _measured_hbm_gbps(doc: dict[str, Any]) -> float | None:
    rows = doc["tables"].get("hbm") or [{}]
    return rows[0].get("device_copy_gbps")


def measure_cuda(doc: dict[str, Any], quick: bool) -> None:
    torch.cuda.init()
    n = 300 if quick else 2000
    try:
        rt: Cudart | None = Cudart()
        doc["tables"]["cudart"] = [
            {
                "path": rt.path,
                "version": rt.version,
                "batched_copies": rt.has_batch,
                "note": "calls through ctypes: its overhead is in the host times",
            }
        ]
    except Exception as exc:  # noqa: BLE001
        rt = None
        doc["errors"]["cudart"] = f"{type(exc).__name__}: {exc}"
    items: list[tuple[str, Callable[[], Any]]] = [
        ("sync_and_launch", lambda: _sync_items(doc, n)),
        (
            "link.h2d_effective_gbps",
            lambda: doc["hardware"].__setitem__("link.h2d_effective_gbps", _bulk_gbps("h2d", 256 << 20)),
        ),
        (
            "link.d2h_effective_gbps",
            lambda: doc["hardware"].__setitem__("link.d2h_effective_gbps", _bulk_gbps("d2h", 256 << 20)),
        ),
        ("h2d_copy", lambda: _copy_table(doc, rt, quick)),
        ("hbm", lambda: _hbm(doc)),
        ("derive", lambda: _derive(doc)),
        ("topk", lambda: topk_table(doc, quick, device_s, _measured_hbm_gbps(doc))),
        ("uva_gather", lambda: uva_gather_table(doc, quick, device_s)),
        ("uva_gather_blocks", lambda: uva_gather_blocks_table(doc, quick, device_s)),
        ("host_paths", lambda: host_path_tables(doc, quick, rt)),
    ]
    for name, fn in items:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - recorded; the other items run
            doc["errors"][name] = f"{type(exc).__name__}: {exc}"
        doc["tables"].setdefault("item_seconds", []).append(
            {"item": name, "seconds": round(time.perf_counter() - t0, 3)}
        )
    doc["skipped"]["python_layer_s"] = (
        "not measured: separating a layer's Python glue from its op "
        "dispatches needs a definition the profiles do not fix yet"
    )
    if "batched_copy_call_s" not in doc["software"]:
        doc["skipped"]["batched_copy_call_s"] = "cudaMemcpyBatchAsync unavailable or failed (see errors)"
