"""Cross-check: DistServe's own simulator and ours on its Figure 1 setups, same requests, same profiles.

    PYTHONPATH=. python benchmarks/crosscheck_distserve_sim.py --distserve PATH [--requests N] [--seed S]
        [--rows KEY,KEY]

PATH is a checkout of LLMServe/DistServe (commit 82831f1: the commit the whole-step engine profiles
`distserve-vllm-opt13b-a100` and `distserve-opt13b-a100` were read from); its simulator needs pandas and
SimPy (`pip install pandas`). For each DistServe Figure 1 row of benchmarks/serving_published.py this runs
the same Poisson arrivals and request lengths (benchmarks/validate_serving.py's `_requests`, same seed)
through both simulators, searches each one's highest rate meeting the row's criterion with the same search
(`highest_rate`: halve / double from 1 rps, bisect to 5%), and prints both goodputs per GPU beside the
published one.

Their side, as simdistserve/benchmarks/simulate_dist.py:133-210 builds it: the vLLM rows run a
`VLLMCluster` (engine "vllm": profiler-a100-80g.vllm.json) with simulate_dist's own batching limits
(prefill_max_batch_size 10^7, max tokens from its memory estimator, not the max_num_seqs / max_num_batched_
tokens DistServe launched vLLM with); the disaggregated row a `DisaggCluster` with the row's prefill and
decode instance counts (engine "distserve": profiler-a100-80g.distserve.json), tensor and pipeline
parallel 1. Per-request TTFT and TPOT are theirs (simdistserve/base/organize_data.py:104-135: TPOT =
(last event - first token) / output tokens), checked against each SLO's P90 on its own as
validate_serving.py does for these rows.

What it shows: whether the request-level model (schedulers, queueing, criterion) reproduces the
published system's own simulator when both price iterations with the same profiles. It is not a check
against measurements (benchmarks/validate_serving.py compares with the published numbers). Simulated on
CPU; nothing runs on a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.serving_published import ROWS, PublishedServing  # noqa: E402
from benchmarks.validate_serving import _lengths, _requests, evaluate, highest_rate  # noqa: E402

FIG1_ROWS = tuple(r.key for r in ROWS if r.key.startswith("distserve-fig1-"))
_POOLS = ("prefill_gpus", "decode_gpus")


def _simdistserve(root: Path) -> dict[str, Any]:
    """The simdistserve modules this script drives, imported from a DistServe checkout at `root`."""
    sys.path.insert(0, str(root))
    names = {
        "organize": "simdistserve.base.organize_data", "scheduler": "simdistserve.base.scheduler",
        "worker": "simdistserve.base.worker", "workload": "simdistserve.base.workload",
        "disagg": "simdistserve.clusters.disagg", "vllm": "simdistserve.clusters.vllm",
        "constants": "simdistserve.constants", "memory": "simdistserve.estimators.memory_estimator",
    }
    return {k: importlib.import_module(v) for k, v in names.items()}


def their_latencies(mods: dict[str, Any], row: PublishedServing, requests: list[Any]) -> tuple[np.ndarray,
                                                                                               np.ndarray]:
    """(TTFT s, TPOT s) per request from DistServe's simulator on `requests` (module docstring)."""
    import simpy

    model = mods["constants"].ModelTypes.model_str_to_object("opt_13b")
    max_tokens = mods["memory"].get_max_num_tokens(model, 1, 1)
    disaggregated = row.scheduler == "disaggregated"
    config = mods["worker"].WorkerConfig(
        model_type=model, TP=1, TP_Prefill=1, TP_Decode=1, prefill_max_batch_size=10**7,
        decode_max_batch_size=10**7, prefill_max_tokens=max_tokens, decode_max_tokens=max_tokens,
        enable_chunked_prefill=False, engine_type="distserve" if disaggregated else "vllm")
    env = simpy.Environment()
    if disaggregated:
        prefill, decode = (int(row.settings[k]) for k in _POOLS)
        cluster = mods["disagg"].DisaggCluster(env=env, N_prefill_instance=prefill, N_decode_instance=decode,
                                               worker_configs=config)
    else:
        cluster = mods["vllm"].VLLMCluster(env=env, PP=1, worker_configs=config)
    arrivals_ms = np.array([r.arrival_s for r in requests]) * 1000.0
    gaps_ms = [0.0, *np.diff(arrivals_ms).tolist()]
    theirs = mods["workload"].convert_pd_pair_to_request(
        [(r.input_tokens, r.output_tokens) for r in requests])
    cluster.run()
    mods["scheduler"].put_requests_with_interarrivals(env, cluster.scheduler, gaps_ms, theirs)
    env.run()
    org = mods["organize"]
    df = org.calculate_per_request_latency(org.organize_request_event_df(theirs),
                                           org.organize_request_df(theirs).output_lens)
    return df.first_token_latency.to_numpy() / 1000.0, df.tpot.to_numpy() / 1000.0


def their_goodput(mods: dict[str, Any], row: PublishedServing, n_requests: int,
                  seed: int) -> tuple[float, int]:
    """(highest rate per GPU at which DistServe's simulator meets the row's criterion, runs)."""
    crit, q = row.criterion, row.criterion["each_percentile"]
    lengths = _lengths(row, n_requests)

    def ok(rate: float) -> bool:
        ttft, tpot = their_latencies(mods, row, _requests(lengths, rate, seed))
        good = np.percentile(ttft, q) <= crit["ttft_s"]
        if "tpot_s" in crit:
            good &= np.percentile(tpot, q) <= crit["tpot_s"]
        return bool(good)

    rate, runs = highest_rate(ok)
    return rate / (sum(int(row.settings.get(k, 0)) for k in _POOLS) or 1), runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--distserve", type=Path, required=True,
                        help="a checkout of LLMServe/DistServe (commit 82831f1): the folder holding "
                        "simdistserve/")
    parser.add_argument("--requests", type=int, default=2048, help="requests per run [2048]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", default=",".join(FIG1_ROWS),
                        help=f"comma-separated rows [{','.join(FIG1_ROWS)}]")
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.rows.split(",") if k.strip()]
    unknown = [k for k in keys if k not in FIG1_ROWS]
    if unknown:
        print(f"error: --rows: {unknown[0]!r} is not a DistServe Figure 1 row; rows: {', '.join(FIG1_ROWS)}",
              file=sys.stderr)
        return 2
    if args.requests < 1:
        print(f"error: --requests must be a positive count, got {args.requests}", file=sys.stderr)
        return 2
    if not (args.distserve / "simdistserve" / "benchmarks" / "simulate_dist.py").is_file():
        print(f"error: --distserve {args.distserve}: no simdistserve/benchmarks/simulate_dist.py there; give "
              "the root of a LLMServe/DistServe checkout (commit 82831f1)", file=sys.stderr)
        return 2
    try:
        mods = _simdistserve(args.distserve.resolve())
    except ImportError as exc:
        print(f"error: DistServe's simulator could not be imported from {args.distserve} ({exc}); it needs "
              "pandas and simpy: pip install pandas simpy", file=sys.stderr)
        return 2
    rows = {r.key: r for r in ROWS}
    print(f"{'row':30} {'published':>9} {'DistServe sim':>13} {'ours':>7} {'ours/sim':>8} {'sim/pub':>8} "
          f"{'ours/pub':>8}")
    for key in keys:
        row = rows[key]
        t0 = time.perf_counter()
        ours = evaluate(row, args.requests, "ideal", args.seed)["ours"]
        theirs, runs = their_goodput(mods, row, args.requests, args.seed)
        print(f"  {key}: {runs} runs of DistServe's simulator, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
        print(f"{key:30} {row.published:>9.3g} {theirs:>13.3g} {ours:>7.3g} {ours / theirs:>8.2f} "
              f"{theirs / row.published:>8.2f} {ours / row.published:>8.2f}")
    print("\ngoodput per GPU (rps); both simulators on CPU with DistServe's per-iteration profiles of "
          "OPT-13B on A100 80GB, the same requests and rate search; published: DistServe Figure 1 "
          "(benchmarks/serving_published.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
