"""Python and torch eager dispatch per op on this host's CPU build: microseconds per call.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_host_dispatch.py [--calls 20000] [--json F]

What it measures: the host time of the calls the as-published method models count
(sim/methods/host_costs.py `HostOps`), on tiny CPU tensors so that the work itself is negligible:
- `python call`: one call of an empty Python function (a Python loop step);
- `torch view`/`torch slice`/`tensor index (int)`: Python-level tensor bookkeeping that launches nothing
  (the models' `python_ops`);
- `torch add (8 elem)`, `torch.topk (64 of 4096)`, `torch.max dim`: an eager op through the dispatcher
  and a CPU kernel (on a CUDA build the CPU kernel is replaced by a cudaLaunchKernel of ~2.5 us:
  `torch_op_dispatch_s` = this dispatch + the launch);
- `.item()` and `.tolist()` on a CPU scalar tensor: the Python side of a read-back (no device sync);
- `index_select 256 rows`: the fixed part of a small host gather;
- `torch.tensor(list of 2048 ints)`: a page table built from a Python list (Quest's
  `InferenceController.begin_forward`, quest/utils/controller.py:103-109), per element.
Best of `--repeats` loops of `--calls` calls each; the loop's own cost (an empty loop) is subtracted.

This is the CPU build (no CUDA): the numbers bound the Python + ATen dispatch part of the profile's
per-op costs. Scaling to a server host: these are single-thread, clock- and IPC-bound, so they scale by
the single-thread performance ratio of the two cores (within ~+-30% between a 2.6-3.3 GHz Xeon/EPYC of
the same generation range); the ranges in sim/software_profiles/pytorch2-cuda12.yaml cover that.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch


def _per_call_us(fn: Callable[[], object], calls: int, repeats: int) -> tuple[float, float]:
    """(per-call microseconds of fn beyond an empty call, microseconds of the empty call + loop step)."""

    def loop(f: Callable[[], object]) -> float:
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(calls):
                f()
            best = min(best, time.perf_counter() - t)
        return best

    def empty() -> None:
        return None

    base = loop(empty)  # loop + one Python call
    return max(0.0, loop(fn) - base) / calls * 1e6, base / calls * 1e6


def measure(calls: int, repeats: int) -> list[dict[str, float | str]]:
    torch.set_num_threads(1)
    small = torch.ones(8)
    scores = torch.randn(4096)
    mat = torch.randn(4, 4096)
    table = torch.randn(4096, 128, dtype=torch.float16)
    idx = torch.randint(0, 4096, (256,))
    scalar = torch.tensor(3)
    page_ids = list(range(2048))

    def nothing() -> None:
        return None

    cases: list[tuple[str, Callable[[], object]]] = [
        ("torch view", lambda: small.view(2, 4)),
        ("torch slice", lambda: small[2:6]),
        ("tensor index (int)", lambda: mat[1]),
        ("torch add (8 elem)", lambda: small + small),
        ("torch.max dim", lambda: torch.max(mat, dim=0)),
        ("torch.topk (64 of 4096)", lambda: torch.topk(scores, 64)),
        (".item() (CPU)", lambda: scalar.item()),
        (".tolist() (CPU, 1 elem)", lambda: scalar.tolist()),
        ("index_select 256 rows x 256 B", lambda: table.index_select(0, idx)),
        ("torch.tensor(list of 2048 ints)", lambda: torch.tensor(page_ids, dtype=torch.int32)),
    ]
    rows: list[dict[str, float | str]] = []
    _, loop_us = _per_call_us(nothing, calls, repeats)
    rows.append({"op": "python call (loop step)", "us": loop_us})
    for name, fn in cases:
        us, _ = _per_call_us(fn, calls, repeats)
        rows.append({"op": name, "us": us})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    if args.calls < 1 or args.repeats < 1:
        parser.error("--calls and --repeats must be >= 1")
    rows = measure(args.calls, args.repeats)
    print(f"torch {torch.__version__} (CPU build: {not torch.cuda.is_available()}), 1 thread")
    print(f"{'op':<32} {'us/call':>8}")
    for r in rows:
        print(f"{r['op']:<32} {r['us']:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
