"""Accuracy of each synthetic task with its 95% interval: dense attention and FreeKV at two budgets.

    python benchmarks/bench_tasks.py [--context-tokens 512] [--samples 4] [--tasks longgen,vt,...]

Prints one markdown row per (task, configuration, metric): the score with its interval and the wall
seconds of the run. FreeKV: page 16, sink = window = 16, tau 0.9, budgets 64 and 128 tokens (sink and
window counted). The model is loaded once; samples run as one batch.
"""

from __future__ import annotations

import argparse
import time

import torch

from freekv_runtime.api import PolicyRunner
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.policies import make_policy
from freekv_runtime.tasks import TaskSpec, get_task
from freekv_runtime.timing import OpTimer
from freekv_runtime.weights import load_model

TASKS = "longgen,niah_single,niah_multikey,niah_multivalue,niah_multiquery,vt,cwe,fwe"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context-tokens", type=int, default=512)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--tasks", default=TASKS)
    ap.add_argument("--budgets", type=int, nargs=2, default=[64, 128])
    args = ap.parse_args()
    loaded = load_model("smollm2-135m")
    configs = {"dense": RuntimeConfig(method="dense")}
    for b in args.budgets:
        configs[f"freekv B={b}"] = RuntimeConfig(method="freekv", page_size=16, budget_tokens=b,
                                                 sink_tokens=16, window_tokens=16, knobs={"tau": 0.9})
    print("| task | configuration | metric | score [95% interval] | wall s |")
    print("|---|---|---|---|---|")
    for name in args.tasks.split(","):
        decode = 32 if name == "longgen" else None
        spec = TaskSpec(
            name, context_tokens=args.context_tokens, n_samples=args.samples, decode_tokens=decode
        )
        for label, config in configs.items():
            runner = PolicyRunner(
                loaded, make_policy(config), None, OpTimer(torch.device("cpu")), args.samples
            )
            t0 = time.perf_counter()
            scores = get_task(name).run(spec, runner, seed=0)
            wall = time.perf_counter() - t0
            for metric, e in scores.items():
                print(f"| {name} | {label} | {metric} | {e} | {wall:.0f} |", flush=True)


if __name__ == "__main__":
    main()
