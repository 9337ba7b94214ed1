"""Time the fleet search of `dse serve --target-rate`: the fewest GPUs meeting the SLOs at one target rate,
for 3 profiles x 5 methods x 2 schedulers, each over 3 arrival seeds, and print a table (GPU range,
evaluations, seconds per cell). Target: the whole grid under 60 s on a 2-core CPU.

    PYTHONPATH=. python benchmarks/bench_fleet.py [--rate 2] [--input-tokens 65536] [--output-tokens 1024]
        [--tpot-slo-ms 40] [--schedulers chunked,disaggregated] [--seeds 3]

Each (profile, method) prices its own demand preset as `dse serve` does (sim.replay); the step-model
costs are built once per (profile, method) and shared by both schedulers and all seeds, inside the
timing. Simulated, CPU only.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from sim.replay import DemandSource, Question, answer
from sim.serving import SchedulerSettings, Slos, StepCosts, fewest_gpus
from sim.serving.slos import DEFAULT_QUEUE_S

PROFILES = ("l40s", "h100-sxm", "a100-80g-sxm")
METHODS = ("dense", "freekv", "quest", "shadowkv", "arkvale")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--input-tokens", type=int, default=65536)
    ap.add_argument("--output-tokens", type=int, default=1024)
    ap.add_argument("--tpot-slo-ms", type=float, default=40.0)
    ap.add_argument("--schedulers", default="chunked,disaggregated")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    from dse.commands.serve_rows import fleet_requests

    slos = Slos(args.tpot_slo_ms / 1e3, None, DEFAULT_QUEUE_S)
    schedulers = tuple(args.schedulers.split(","))
    table = Table(
        title=f"fleet search at {args.rate:g} req/s, {args.input_tokens}+{args.output_tokens} tokens, "
        f"{slos.text()}, {args.seeds} seeds"
    )
    for col in ("profile", "method", "scheduler", "GPUs", "prefill share", "stream n", "evaluations", "s"):
        table.add_column(col, justify="left" if col in ("profile", "method", "scheduler") else "right")
    start, cpu_start = time.perf_counter(), time.process_time()
    for method in METHODS:
        q = Question(
            model=args.model,
            hardware=PROFILES,
            demand=DemandSource.from_text(None),
            methods=(method,),
            input_tokens=args.input_tokens,
            output_tokens=args.output_tokens,
        )
        for cell in answer(q).cells:
            t0 = time.perf_counter()
            costs = StepCosts(cell.config, cell.priced_demand, 0)
            n = fleet_requests(costs, args.rate, args.input_tokens, args.output_tokens, slos)
            for s in schedulers:
                ans = fewest_gpus(
                    costs,
                    s,
                    args.rate,
                    args.input_tokens,
                    args.output_tokens,
                    slos,
                    tuple(range(args.seeds)),
                    n,
                    "least-loaded",
                    SchedulerSettings(),
                )
                rng, share = ans.gpu_range(), ans.prefill_share_range()
                table.add_row(
                    cell.hardware,
                    method,
                    s,
                    "none" if rng is None else (f"{rng[0]}" if rng[0] == rng[1] else f"{rng[0]}-{rng[1]}"),
                    "-" if share is None else f"{share[0]:.0%}-{share[1]:.0%}",
                    str(n),
                    str(ans.evaluations),
                    f"{time.perf_counter() - t0:.2f}",
                )
                t0 = time.perf_counter()
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    console = Console(width=140)
    console.print(table)
    cells = len(PROFILES) * len(METHODS) * len(schedulers)
    console.print(
        f"total {total:.1f} s wall, {cpu:.1f} s CPU (this process) for {cells} cells (target < 60 s); "
        "simulated on CPU, not run on a GPU"
    )


if __name__ == "__main__":
    main()
