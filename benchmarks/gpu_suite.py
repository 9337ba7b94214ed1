"""The whole GPU programme in one command: every result lands under one output directory.

    python3 benchmarks/gpu_suite.py --out DIR [--parts tests,parity,decode,microbench,kernels] [--quick]
        [--contexts 8192,32768,65536] [--batches 1,4] [--taus 0.8,0.9] [--steps 16]
        [--methods dense,freekv] [--parity-methods freekv]

Parts (each in benchmarks/gpu_parts/, each writes DIR/<part>/):
- tests: the `gpu`-marked tests and the Triton compile check, pytest with junit XML and a log;
- parity: per policy of --parity-methods, the same random weights and seed decoded on the CPU and on
  CUDA (teacher-forced), the two traces compared step by step (selections, corrections, recalled pages);
- decode: the policies of --methods (default `dense` and `freekv`; `peers` adds every retrieval peer)
  on the Llama-3.1-8B shape (random weights, bf16) per context, batch and (FreeKV) tau (B=2048, S=W=512,
  p=32), ms/token and tokens/s, CUDA-event per-op timings in a trace, a profiler timeline, recall
  bandwidth and recall/compute overlap; table.json + table.md;
- microbench: what the simulator's software and hardware profiles assume -> DIR/microbench.json
  (schema "freekv-dse-microbench/1", docs/hardware.md "Calibrating from microbenchmarks");
- kernels: the Triton kernels' achieved bandwidth against the GPU's HBM peak.

A part that cannot run here (no CUDA) is recorded as skipped with the reason; a part that fails records
its error and the suite goes on. DIR/suite.json is rewritten after every part (status, seconds,
reason or error), so results land as they complete. Exit status 0 unless the arguments are bad.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_parts import decode, kernel_bw, microbench, parity, tests_part  # noqa: E402
from gpu_parts.common import Options, Skipped, machine, write_json  # noqa: E402
from gpu_parts.methods import parse_methods  # noqa: E402

PARTS = {
    "tests": tests_part.run,
    "parity": parity.run,
    "decode": decode.run,
    "microbench": microbench.run,
    "kernels": kernel_bw.run,
}


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise SystemExit(f"error: {flag} takes comma-separated positive integers, got {text!r}")
    return values


def parse(argv: list[str] | None) -> tuple[Options, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory (created)")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}"
    )
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer repetitions")
    parser.add_argument("--contexts", default=None, help="decode contexts [8192,32768,65536; quick 8192]")
    parser.add_argument("--batches", default="1,4", help="decode batch sizes [1,4]")
    parser.add_argument("--taus", default="0.8,0.9", help="FreeKV tau values [0.8,0.9]")
    parser.add_argument("--steps", type=int, default=None, help="timed decode steps per config [16; quick 4]")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs")
    parser.add_argument(
        "--methods", default="dense,freekv",
        help="decode: comma-separated runtime policies; 'peers' = every retrieval peer, 'all' = every "
        "policy [dense,freekv]",
    )
    parser.add_argument(
        "--parity-methods", default="freekv",
        help="parity: comma-separated runtime policies compared CPU vs CUDA; 'peers', 'all' [freekv]",
    )
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        parser.error(f"--parts: unknown {unknown or 'empty list'}; valid: {', '.join(PARTS)}")
    try:
        taus = tuple(float(x) for x in args.taus.split(","))
    except ValueError:
        parser.error(f"--taus takes comma-separated numbers, got {args.taus!r}")
    if not all(0 <= t <= 1 for t in taus):
        parser.error(f"--taus must lie in [0, 1], got {args.taus!r}")
    contexts = args.contexts or ("8192" if args.quick else "8192,32768,65536")
    steps = args.steps if args.steps is not None else (4 if args.quick else 16)
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    try:
        methods = parse_methods(args.methods, "--methods")
        parity_methods = parse_methods(args.parity_methods, "--parity-methods")
    except ValueError as exc:
        parser.error(str(exc))
    opts = Options(
        out=args.out,
        quick=args.quick,
        contexts=_ints(contexts, "--contexts"),
        batches=_ints(args.batches, "--batches"),
        taus=taus,
        steps=steps,
        seed=args.seed,
        methods=methods,
        parity_methods=parity_methods,
        repo=REPO,
    )
    return opts, parts


def main(argv: list[str] | None = None) -> int:
    opts, parts = parse(argv)
    opts.out.mkdir(parents=True, exist_ok=True)
    suite = {
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:],
        "quick": opts.quick,
        "machine": machine(),
        "parts": {},
    }
    write_json(opts.out / "suite.json", suite)
    started = time.perf_counter()
    for name in parts:
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        record: dict = {"status": "running"}
        suite["parts"][name] = record
        write_json(opts.out / "suite.json", suite)
        try:
            result = PARTS[name](opts.out / name, opts)
            record.update(status=result.pop("status", "ok"), **result)
        except Skipped as skip:
            record.update(status="skipped", reason=str(skip))
        except Exception as exc:  # noqa: BLE001 - a failing part is recorded and the suite goes on
            record.update(
                status="failed",
                error=f"{type(exc).__name__}: {exc}",
                traceback=traceback.format_exc(limit=12),
            )
        record["seconds"] = round(time.perf_counter() - t0, 2)
        suite["total_seconds"] = round(time.perf_counter() - started, 2)
        write_json(opts.out / "suite.json", suite)
        print(
            f"== {name}: {record['status']} in {record['seconds']} s"
            + (f" ({record.get('reason') or record.get('error')})" if record["status"] != "ok" else ""),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
