"""The parts of a hardware profile as loaded: the GPU, the host link and the host (frozen dataclasses).

Units: bandwidths in GB/s (1e9 bytes/s), times in seconds, memory in bytes, compute in TFLOP/s. Where each
number comes from is kept beside them, in `HardwareProfile.sources` (sim/hardware_profile.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GpuSpec", "HostLinkSpec", "HostSpec"]


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    hbm_bandwidth_gbps: float  # peak GB/s
    peak_fp16_tflops: float  # dense FP16/BF16 tensor-core peak (not the 2:4-sparse figure)
    achievable_bandwidth_fraction: float  # of HBM peak reached by decode (memory-bound) kernels, (0, 1]
    achievable_compute_fraction: float  # of tensor peak reached by large GEMMs, (0, 1]
    kernel_launch_s: float  # per kernel launch on a stream (host + device overhead)
    # Optional (None: unknown): streaming multiprocessors and the shared memory one SM can give its
    # resident blocks; the simulator uses them where kernels of two streams compete for SMs (ShadowKV's
    # UVA gather against its key rebuild). Without them such kernels are assumed to overlap freely.
    sm_count: int | None = None
    shared_memory_per_sm_bytes: int | None = None


@dataclass(frozen=True)
class HostLinkSpec:
    kind: str  # "pcie3" | "pcie4" | "pcie5" | "nvlink-c2c"
    h2d_peak_gbps: float
    d2h_peak_gbps: float
    h2d_effective_gbps: float  # large pinned copies, measured (bandwidthTest-style)
    d2h_effective_gbps: float
    copy_issue_s: float  # host CPU time to issue one cudaMemcpyAsync
    dma_latency_s: float  # per-copy latency on the copy engine (setup, first byte)
    copy_engines: int
    run_efficiency: tuple[tuple[int, float], ...]  # (contiguous run bytes, fraction of effective bw)

    def efficiency(self, run_bytes: int) -> float:
        """Fraction of the effective bandwidth reached by a copy of contiguous runs of `run_bytes`.

        Linear interpolation of `run_efficiency` in log2(bytes); clamped to the first and last points.
        """
        if run_bytes <= 0:
            raise ValueError(f"run_bytes must be positive, got {run_bytes}")
        points = self.run_efficiency
        if run_bytes <= points[0][0]:
            return points[0][1]
        if run_bytes >= points[-1][0]:
            return points[-1][1]
        x = math.log2(run_bytes)
        for (b0, e0), (b1, e1) in zip(points, points[1:], strict=False):
            if run_bytes <= b1:
                x0, x1 = math.log2(b0), math.log2(b1)
                return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
        return points[-1][1]  # unreachable: run_bytes < last point here

    def effective_gbps(self, direction: str) -> float:
        if direction == "h2d":
            return self.h2d_effective_gbps
        if direction == "d2h":
            return self.d2h_effective_gbps
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")

    def copy_time_s(self, n_bytes: int, run_bytes: int, direction: str) -> float:
        """Copy-engine time of one copy of `n_bytes` made of contiguous runs of `run_bytes`.

        `dma_latency_s + n_bytes / (effective bandwidth * efficiency(run_bytes))`; 0 for an empty copy.
        The host-side issue cost (`copy_issue_s`) is not included: it is spent on the issuing thread.
        """
        if n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
        bw_bytes_per_s = self.effective_gbps(direction) * 1e9
        if n_bytes == 0:
            return 0.0
        run = min(run_bytes, n_bytes) if run_bytes > 0 else n_bytes
        return self.dma_latency_s + n_bytes / (bw_bytes_per_s * self.efficiency(run))


@dataclass(frozen=True)
class HostSpec:
    name: str
    memory_bytes: int
    memory_bandwidth_gbps: float  # peak DRAM bandwidth of the host socket
    sync_s: float  # host <-> device synchronisation (event/stream sync, small read-back)
    issue_threads: int  # host threads issuing copies (FreeKV uses a small pool)
