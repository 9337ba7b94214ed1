"""Fit the NCCL all-reduce profiles Vidur measured into sim/interconnect_profiles/nccl_all_reduce.yaml.

    python scripts/fit_all_reduce.py VIDUR_CHECKOUT > sim/interconnect_profiles/nccl_all_reduce.yaml

Reads microsoft/vidur data/profiling/network/<interconnect>/all_reduce.csv (rows: `size` in bytes, the
median time `time_stats.all_reduce.median` in ms, `num_workers`, `devices_per_node`). Keeps the
single-node rows (num_workers == devices_per_node, as Vidur's predictor does) of at least 64 KiB, takes
the median size and time of each octave of sizes (one point per power of two, so the dense large sizes
do not outweigh the small ones) and fits time = latency + bytes / bandwidth by least squares on relative
error over those points. Prints the YAML with the points and each fit's largest error over them.
"""

from __future__ import annotations

import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

INTERCONNECTS = {
    "a100_pairwise_nvlink": ("A100 80GB PCIe GPUs joined in pairs by NVLink bridges (Azure NC A100 v4, the "
                             "machine Sarathi-Serve ran on); 4 workers cross the pairs over PCIe",
                             ["a100-80g-pcie"]),
    "a100_dgx": ("A100 SXM in a DGX A100 (NVSwitch)", ["a100-80g-sxm"]),
    "h100_dgx": ("H100 SXM in a DGX H100 (NVSwitch)", ["h100-sxm"]),
}
MIN_BYTES = 1 << 16
HEADER = """\
# NCCL all-reduce times Vidur measured (microsoft/vidur data/profiling/network/*/all_reduce.csv at
# commit 7d47513), fitted by scripts/fit_all_reduce.py (its docstring: octave medians of the
# single-node rows of at least 64 KiB, time = latency + bytes / bandwidth, least squares on relative
# error). `size` is in bytes: Vidur's predictor reads it so (sklearn_execution_time_predictor.py:
# 220-228, 'each token is of size 2 * h bytes'), and only bytes keep the bandwidths under the links'
# per-direction peaks (A100 NVLink 300 GB/s, H100 900/2 GB/s). fit_error: the fit's relative error
# over the points, lowest and highest. points: [bytes, median ms] per octave, as measured.
"""


def fit(path: Path) -> dict[int, dict]:
    by_workers: dict[int, list[tuple[int, float]]] = defaultdict(list)
    with path.open() as f:
        for row in csv.DictReader(f):
            n, per_node = int(row["num_workers"]), int(row["devices_per_node"])
            if n == per_node and int(row["size"]) >= MIN_BYTES:
                by_workers[n].append((int(row["size"]), float(row["time_stats.all_reduce.median"])))
    out = {}
    for n, rows in sorted(by_workers.items()):
        octaves: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for size, ms in rows:
            octaves[int(math.log2(size))].append((size, ms))
        size_b = np.array([np.median([s for s, _ in octaves[k]]) for k in sorted(octaves)])
        time_ms = np.array([np.median([t for _, t in octaves[k]]) for k in sorted(octaves)])
        a = np.stack([1 / time_ms, size_b / time_ms], axis=1)
        (lat_ms, ms_per_byte), *_ = np.linalg.lstsq(a, np.ones_like(time_ms), rcond=None)
        err = (lat_ms + ms_per_byte * size_b - time_ms) / time_ms
        out[n] = {
            "latency_ms": round(float(lat_ms), 5),
            "bandwidth_gbps": round(float(1 / ms_per_byte / 1e6), 2),
            "fit_error": [round(float(err.min()), 3), round(float(err.max()), 3)],
            "rows": len(rows),
            "points": [[int(s), round(float(t), 5)] for s, t in zip(size_b, time_ms, strict=True)],
        }
    return out


def main(vidur: str) -> None:
    print(HEADER.rstrip())
    print("interconnects:")
    for name, (what, hardware) in INTERCONNECTS.items():
        fits = fit(Path(vidur) / "data/profiling/network" / name / "all_reduce.csv")
        print(f"  {name}:")
        print(f"    what: {what}")
        print(f"    hardware: [{', '.join(hardware)}]")
        print(f"    source: microsoft/vidur@7d47513 data/profiling/network/{name}/all_reduce.csv")
        print("    workers:")
        for n, f in fits.items():
            print(f"      {n}:")
            print(f"        latency_ms: {f['latency_ms']}")
            print(f"        bandwidth_gbps: {f['bandwidth_gbps']}")
            print(f"        fit_error: {f['fit_error']}")
            print(f"        rows: {f['rows']}")
            print(f"        points: {f['points']}")


if __name__ == "__main__":
    main(sys.argv[1])
