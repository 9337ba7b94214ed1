"""The CPU microbenchmarks behind the software profile's host numbers run and report sane units; the GPU
suite's host-path tables import on a machine without CUDA (they never run here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_host_dispatch  # noqa: E402
import bench_host_gather  # noqa: E402
from gpu_parts.microbench_host_paths import TABLES, svd_flops  # noqa: E402


def test_gather_rows_cover_every_path_with_positive_rates() -> None:
    rows = bench_host_gather.measure(table_mib=4, repeats=1, seed=0, max_gather_mib=1, compiled=False)
    paths = {r["path"] for r in rows}
    assert {"torch index_select", "torch F.embedding", "contiguous copy_", "numpy take out="} <= paths
    for r in rows:
        assert r["gbps"] > 0 and r["ns_per_row"] == pytest.approx(r["seconds"] / r["rows"] * 1e9)
        assert r["rows"] * r["row_bytes"] <= 1 << 20


def test_dispatch_rows_name_each_op() -> None:
    rows = bench_host_dispatch.measure(calls=50, repeats=1)
    assert {"torch view", "torch add (8 elem)", ".item() (CPU)"} <= {r["op"] for r in rows}
    assert all(r["us"] >= 0 for r in rows)


def test_host_path_tables_are_listed_and_count_the_rsvd_flops() -> None:
    assert TABLES == ("tables.svd", "tables.memcpy2d_one_row", "tables.readback", "tables.managed_flag_fault",
                      "tables.pageable_copy")
    assert svd_flops(32768, 1024) == 6.0 * 32768 * 1024**2 + 20.0 * 1024**3
