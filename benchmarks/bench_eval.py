"""Accuracy-evaluation throughput: task samples per second, batched vs one by one, on the default model.

    python benchmarks/bench_eval.py [--contexts 1024 4096] [--samples 4] [--task niah_single]
        [--method freekv] [--rounds 1]

Per context length: the task's samples run once with `batch_size=1` (one by one) and once with
`batch_size=samples` (one batch), alternating per round so both share the machine's drift; prints wall
seconds, samples per second and the speed-up (medians over rounds). Scores must be equal (checked).
The model is loaded (and cached) before timing; trace writing is off (a runner without a writer).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from freekv_runtime.api import PolicyRunner
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.policies import make_policy
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--task", default="niah_single")
    ap.add_argument("--method", default="freekv", choices=["freekv", "dense"])
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    loaded = load_model("smollm2-135m")
    task = get_task(args.task)
    print(
        f"task {args.task}, {args.samples} samples, method {args.method}, {torch.get_num_threads()} threads"
    )
    print("| context | one by one s | batched s | samples/s one by one | samples/s batched | speed-up |")
    print("|---|---|---|---|---|---|")
    for ctx in args.contexts:
        # FreeKV's defaults scaled to the context: B = ctx / 4, S = W = B / 4, page 32
        budget = max(128, ctx // 4)
        config = RuntimeConfig(
            method=args.method,
            page_size=32,
            budget_tokens=budget,
            sink_tokens=budget // 4,
            window_tokens=budget // 4,
        )
        spec = TaskSpec(args.task, context_tokens=ctx, n_samples=args.samples)
        times: dict[int, list[float]] = {1: [], args.samples: []}
        scores = {}
        for _ in range(args.rounds):
            for bs in (1, args.samples):
                runner = PolicyRunner(loaded, make_policy(config), None, OpTimer(torch.device("cpu")), bs)
                t0 = time.perf_counter()
                scores[bs] = task.run(spec, runner, seed=0)
                times[bs].append(time.perf_counter() - t0)
        assert scores[1] == scores[args.samples], "batched and one-by-one scores differ"
        one, many = statistics.median(times[1]), statistics.median(times[args.samples])
        print(
            f"| {ctx} | {one:.1f} | {many:.1f} | {args.samples / one:.3f} | {args.samples / many:.3f} "
            f"| {one / many:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
