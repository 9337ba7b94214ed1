"""Host-memory gathers of scattered rows: torch indexing vs a compiled loop, GB/s by row size and count.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_host_gather.py [--table-mib 1024] [--repeats 5] [--json F]

What it measures (CPU only): a host table of `--table-mib` MiB (larger than the last-level cache, so
rows come from DRAM), read at `rows` random row indices of `row_bytes` each and written contiguously
into a fresh buffer, the way InfiniGen's `select_kv` gathers its speculated tokens with F.embedding
(snu-comparch/InfiniGen speedup/infinigen/infinigen/kv_selection_controller.py:21-24: rows of d fp16
elements, 256 B at d = 128), with:
- `torch index_select`: `table.index_select(0, idx)`, what F.embedding runs on a CPU weight, into a
  fresh output (as InfiniGen's call does: large fresh outputs add the page faults of new memory);
- `torch index_select out=`: the same into a preallocated buffer (the gather alone);
- `torch F.embedding`: the call itself, on an fp16 (n, d) view, fresh output;
- `numpy take out=`: NumPy's C loop (single thread), preallocated;
- `numba loop`: a compiled row-copy loop (`prange`), preallocated, on 1 thread and on every core;
- `contiguous copy_`: `dst.copy_(src)` of as many contiguous bytes into a preallocated buffer: the
  host's copy rate, and InfiniGen's second host copy (flex_opt.py:457 assigns the gathered rows into
  the pinned `prefetch_kv` buffer).
torch and numba run at 1 thread and at all cores (`os.cpu_count()`); numpy is 1 thread. On a shared
machine the all-core rows measure contention; the load average printed says how busy it was.

GB/s counts the gathered bytes once (rows x row_bytes / seconds); the best of `--repeats` runs after a
warm-up. The table "row cost" column is the time per row in ns, single-thread, for torch index_select.

Scaling to a server host (method, stated by the script): a scattered row read of a few cache lines is
latency-bound per core (each row is an independent DRAM miss, prefetchers help within a row), so the
per-core rate scales with the host's DRAM latency, and the all-core rate is capped by its memory
bandwidth. sim/software_profiles/pytorch2-cuda12.yaml `torch_gather_row_s` takes the single-thread
per-row cost measured here as the center, and the range covers the server's DRAM latency relative to
this host and torch's thread count (FlexGen sets none: torch's default, one per physical core).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

ROW_BYTES = (64, 256, 2048, 16384)
ROW_COUNTS = (1024, 16384, 131072)


def _best_s(fn: Callable[[], object], repeats: int, prepare: Callable[[int], None]) -> float:
    """Best of `repeats` timed calls after a warm-up; `prepare(r)` before each call picks fresh row indices
    (the same indices again would find their rows in the cache)."""
    prepare(0)
    fn()
    best = float("inf")
    for r in range(1, repeats + 1):
        prepare(r)
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _numba_gather() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(parallel=True, cache=False)
    def gather(table: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - jit
        for i in numba.prange(idx.shape[0]):
            out[i, :] = table[idx[i], :]

    return gather


def _set_threads(n: int) -> None:
    torch.set_num_threads(n)
    try:
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass


def _paths(
    table: torch.Tensor, cur: dict[str, Any], dst: torch.Tensor, numba_gather: Any, all_threads: int
) -> list[tuple[str, int, Callable[[], object]]]:
    """(name, threads, call) of every gather path over `table` at the indices `cur` holds."""
    half = table.view(torch.float16)
    table_np, dst_np = table.numpy(), dst.numpy()
    paths: list[tuple[str, int, Callable[[], object]]] = []
    for threads in sorted({1, all_threads}):
        paths += [
            ("torch index_select", threads, lambda: table.index_select(0, cur["idx"])),
            ("torch index_select out=", threads, lambda: torch.index_select(table, 0, cur["idx"], out=dst)),
            ("torch F.embedding", threads, lambda: torch.nn.functional.embedding(cur["idx"], half)),
            ("contiguous copy_", threads, lambda: dst.copy_(cur["src"])),
        ]
        if numba_gather is not None:
            paths.append(("numba loop", threads, lambda: numba_gather(table_np, cur["idx_np"], dst_np)))
    paths.append(("numpy take out=", 1, lambda: np.take(table_np, cur["idx_np"], axis=0, out=dst_np)))
    return paths


def measure(
    table_mib: int, repeats: int, seed: int, max_gather_mib: int = 256, compiled: bool = True
) -> list[dict[str, float | int | str]]:
    """Rows of (path, threads, row_bytes, rows, seconds, gbps, ns_per_row); gathers above
    `max_gather_mib` MiB are skipped. Every timed call reads fresh random rows (`prepare`). compiled:
    include the numba loop (its first call compiles it, several seconds)."""
    rng = np.random.default_rng(seed)
    table_u8 = torch.empty(table_mib << 20, dtype=torch.uint8)
    table_u8.fill_(1)  # touch every page
    numba_gather = _numba_gather() if compiled else None
    all_threads = os.cpu_count() or 1
    out: list[dict[str, float | int | str]] = []
    for row_bytes in ROW_BYTES:
        n_rows = table_u8.numel() // row_bytes
        table = table_u8.view(n_rows, row_bytes)
        for rows in ROW_COUNTS:
            if rows * row_bytes > max_gather_mib << 20 or 2 * rows > n_rows:
                continue
            idx_sets = [rng.integers(0, n_rows, size=rows, dtype=np.int64) for _ in range(repeats + 1)]
            starts = [int(x) for x in rng.integers(0, n_rows - rows, size=repeats + 1)]
            cur: dict[str, Any] = {}

            def prepare(
                r: int,
                cur: dict[str, Any] = cur,
                idx_sets: list = idx_sets,
                starts: list = starts,
                table: torch.Tensor = table,
                rows: int = rows,
            ) -> None:
                cur["idx_np"] = idx_sets[r]
                cur["idx"] = torch.from_numpy(idx_sets[r])
                cur["src"] = table[starts[r] : starts[r] + rows]  # contiguous rows elsewhere

            dst = torch.empty(rows, row_bytes, dtype=torch.uint8)
            dst.fill_(0)
            for name, threads, fn in _paths(table, cur, dst, numba_gather, all_threads):
                _set_threads(threads)
                sec = _best_s(fn, repeats, prepare)
                out.append(
                    {
                        "path": name,
                        "threads": threads,
                        "row_bytes": row_bytes,
                        "rows": rows,
                        "seconds": sec,
                        "gbps": rows * row_bytes / sec / 1e9,
                        "ns_per_row": sec / rows * 1e9,
                    }
                )
    _set_threads(all_threads)
    return out


def print_table(rows: list[dict[str, float | int | str]]) -> None:
    print(f"{'path':<24} {'thr':>3} {'row B':>6} {'rows':>6} {'GB/s':>7} {'ns/row':>8}")
    for r in rows:
        print(
            f"{r['path']:<24} {r['threads']:>3} {r['row_bytes']:>6} {r['rows']:>6} "
            f"{r['gbps']:>7.2f} {r['ns_per_row']:>8.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-mib", type=int, default=1024, help="host table size (beyond the LLC)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    if args.table_mib < 1:
        parser.error("--table-mib must be >= 1")
    rows = measure(args.table_mib, args.repeats, args.seed)
    load = os.getloadavg()
    print(
        f"host: {os.cpu_count()} logical CPUs, torch {torch.__version__}, table {args.table_mib} MiB, "
        f"load average {load[0]:.1f} (a load above the CPU count means other work shared the cores)"
    )
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "cpus": os.cpu_count(),
                    "torch": torch.__version__,
                    "table_mib": args.table_mib,
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
