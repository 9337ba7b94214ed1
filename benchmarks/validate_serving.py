"""Check the request-level serving model against published serving results it was not fitted to.

    PYTHONPATH=. python benchmarks/validate_serving.py [--requests N]
        [--implementation ideal|as-published|both] [--rows KEY,KEY] [--json FILE]
        [--hardware-set FIELD=VALUE ...] [--engine as-run|none|NAME|FILE] [--write-bands]

For each row of benchmarks/serving_published.py: the published number, ours on the same setup (model, GPU,
request lengths, Poisson arrivals, the schedulers with the settings the published runs used, the paper's
own capacity criterion) on the engine the published run used, and their ratio (ours / published; the
target band is 1/1.3 to 1.3). Rows may also run on other engines (`diagnostics` of the row: `none`, the
step model's kernels alone), printed as diagnostic lines. Rows whose `needs` name a feature the model
lacks print "not reproducible here". A row run at tensor parallelism (`tensor_parallel`) prices replicas
of that many GPUs (sim/serving/tensor_parallel.py) and reports its rate per GPU. Nothing here was fitted
to these rows.

Criteria, as the papers' own code applies them:
- Sarathi-Serve's capacity: the highest QPS with P99 TBT <= the SLO and median scheduling delay <= 2 s
  (microsoft/sarathi-serve sarathi/benchmark/capacity_search/capacity_search.py:79-90 and main.py:34-37,
  commit ceaa066). TBT is every decode token's gap from the request's previous token, pooled over all
  requests, with a 0 logged for each request's first output token (sarathi/core/datatypes/
  sequence_state.py:277-289, sarathi/metrics/metrics_store.py:403-424): our `ServingResult.tbt` with one
  zero per request that got its first token. Scheduling delay: arrival to the request's first scheduled
  iteration (sequence_state.py:194-203): our prefill queueing.
- DistServe's Figure 1 goodput: the highest rate at which the P90 TTFT and the P90 TPOT each meet their SLO
  (Figure 1 plots each against its SLO; DistServe's goodput search tests each percentile on its own,
  LLMServe/DistServe simdistserve/benchmarks/search_binary.py:92-101 on simulate_dist.py:298-316), TPOT
  being a request's decoding time (first token to last) / its output tokens
  (simdistserve/base/organize_data.py:112-130); a request not finished counts as infinitely late. The
  share of requests meeting both (DistServe's SLO attainment, simulate_dist.py:251-255) is printed
  beside it, and a row with `attainment` in its criterion uses that instead.
The rate search is max_rate's (halve from a start rate until one meets the criterion, double until one
fails, bisect to 5%), run on these criteria.

Engine (sim/serving/engine.py): `--engine as-run` (the default) takes each row's engine
(benchmarks/serving_published.py): for the Sarathi-Serve rows Vidur's profile of Sarathi-Serve's engine
(`sarathi-serve-a100`: host time per iteration added to the step model); for the DistServe rows DistServe's
own profiles of the vLLM and DistServe engines it measured on OPT-13B (`distserve-vllm-opt13b-a100`,
`distserve-opt13b-a100`: whole iterations, replacing the step model). `--engine none` prices kernels alone,
a name or file gives one profile to every row (a whole-step profile runs only the rows on its model and
GPU; the others print why not).

`--hardware-set` replaces a field of the rows' hardware profiles (sim.config.SimConfig.hardware_overrides)
for a what-if, e.g. `gpu.achievable_compute_fraction=0.85`: the A100 80GB profiles' GEMM efficiency before
it was set to 0.70 from Vidur's A100 operator profile (microsoft/vidur data/profiling/compute/a100/*/mlp.csv:
QKV, output, up and down projections of 8 models at 512-4096 tokens, median 0.70 of 312 TFLOPS).

Pricing: vLLM and Sarathi-Serve decode with paged FlashAttention kernels and CUDA graphs, not the stock
Hugging Face eager loop the dense method's as-published pricing models, so `ideal` (hardware limits) is
the nearer; `--implementation both` prints both. Labelled: simulated on CPU, never run on a GPU here.

`--write-bands` (every row, each on its own engine, one pricing mode, no --hardware-set) writes the
`published` section of sim/validation/serving_bands.yaml: each row's ratio and its diagnostic engines'
ratios, and the tally within 1.3x, which `dse serve` prints under its answers
(sim/serving/validation_band.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.serving_published import ROWS, SHAREGPT_REQUESTS_CSV, PublishedServing  # noqa: E402

TARGET = 1.3
REL_TOL = 0.05
MAX_EVALS = 20
START_RATE = 1.0
_POOLS = ("prefill_gpus", "decode_gpus")


def _lengths(row: PublishedServing, n: int) -> list[tuple[int, int]]:
    """(input, output) tokens of the row's first n requests."""
    w = row.workload
    if "requests_csv" in w:
        with open(SHAREGPT_REQUESTS_CSV, newline="") as f:
            rows = [(int(r["input_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)]
        return rows[:n]
    return [(int(w["input_tokens"]), int(w["output_tokens"]))] * n


def _requests(lengths: list[tuple[int, int]], rate: float, seed: int) -> list[Any]:
    """Poisson arrivals at `rate` (sim.serving.poisson_requests' gaps: the same seed scales in time)."""
    from sim.serving import Request

    gaps = np.random.default_rng(seed).exponential(1.0, len(lengths)) / rate
    return [Request(float(t), i, o) for t, (i, o) in zip(np.cumsum(gaps), lengths, strict=True)]


def runner(scheduler: str, settings: dict[str, object]) -> Callable[[list, Any], Any]:
    """A function (requests, costs) -> ServingResult running `scheduler` with the row's settings."""
    from sim.serving import SchedulerSettings, simulate

    knobs = {k: v for k, v in settings.items() if k not in _POOLS}
    prefill, decode = (int(settings.get(k, 0)) for k in _POOLS)
    sched = SchedulerSettings(**knobs)  # type: ignore[arg-type]
    return lambda reqs, costs: simulate(reqs, costs, scheduler, decode or 1, prefill, settings=sched)


def _p(x: np.ndarray, q: float) -> float:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.percentile(x, q)) if len(x) else float("inf")


def _p_late(x: np.ndarray, q: float) -> float:
    """Percentile q of x where inf marks a request never served (inf once the percentile reaches them)."""
    with np.errstate(invalid="ignore"):  # inf - inf between two unserved requests
        v = float(np.percentile(x, q))
    return float("inf") if np.isnan(v) else v


def meets(row: PublishedServing, result: Any, requests: list[Any]) -> tuple[bool, dict[str, float]]:
    """Whether a run meets the row's criterion (module docstring), and the measured values."""
    crit = row.criterion
    if "tbt_p99_s" in crit:
        served = int(np.isfinite(result.ttft_s).sum())
        tbt = result.tbt.percentile(99, zeros=served)
        tbt = float("inf") if tbt is None else tbt
        delay = _p(result.prefill_queue_s, 50)
        ok = tbt <= crit["tbt_p99_s"] and delay <= crit["scheduling_delay_p50_s"]
        return ok, {"tbt_p99_s": tbt, "scheduling_delay_p50_s": delay}
    arrival = np.array([r.arrival_s for r in requests])
    outputs = np.array([r.output_tokens for r in requests])
    ttft = np.nan_to_num(result.ttft_s, nan=np.inf)  # a request never served misses
    good = ttft <= crit["ttft_s"]
    tpot = np.zeros(len(requests))
    if "tpot_s" in crit:
        tpot = np.nan_to_num((result.finish_s - (arrival + result.ttft_s)) / outputs, nan=np.inf)
        good &= tpot <= crit["tpot_s"]
    share = float(good.mean())
    if "each_percentile" in crit:
        q = crit["each_percentile"]
        values = {f"ttft_p{q:g}_s": _p_late(ttft, q), "attainment_both": share}
        ok = values[f"ttft_p{q:g}_s"] <= crit["ttft_s"]
        if "tpot_s" in crit:
            values[f"tpot_p{q:g}_s"] = _p_late(tpot, q)
            ok &= values[f"tpot_p{q:g}_s"] <= crit["tpot_s"]
        return bool(ok), values
    return share >= crit["attainment"], {"attainment": share}


def highest_rate(ok: Callable[[float], bool], start: float = START_RATE) -> tuple[float, int]:
    """max_rate's search on another criterion: (highest rate found meeting it, 0 if none; runs)."""
    from sim.serving.rate_search import highest_passing

    tried: dict[float, bool] = {}

    def test(rate: float) -> bool:
        tried[rate] = ok(rate)
        return tried[rate]

    return highest_passing(test, start, REL_TOL, MAX_EVALS, tried), len(tried)


def step_costs(row: PublishedServing, lengths: list[tuple[int, int]], implementation: str,
               hardware_set: dict[str, float] | None = None, engine: str = "as-run") -> Any:
    from sim.config import SimConfig
    from sim.serving import StepCosts

    longest = max(lengths, key=lambda x: x[0] + x[1]) if lengths else (4096, 1)
    cfg = SimConfig(model=row.model, hardware=row.gpu, method="dense", input_tokens=longest[0],
                    output_tokens=longest[1], implementation=implementation,
                    hardware_overrides=dict(hardware_set or {}))
    return StepCosts(cfg, None, engine=row.engine if engine == "as-run" else engine,
                     tensor_parallel=row.tensor_parallel)


def capacity(row: PublishedServing, baseline: bool, lengths: list[tuple[int, int]], costs: Any,
             seed: int) -> tuple[float, dict[str, float]]:
    """(highest rate per GPU meeting the row's criterion with its scheduler, or its baseline; the measured
    values at that rate)."""
    scheduler = str(row.baseline) if baseline else row.scheduler
    settings = row.baseline_settings if baseline else row.settings
    run = runner(scheduler, settings)
    gpus = (sum(int(settings.get(k, 0)) for k in _POOLS) or 1) * row.tensor_parallel
    seen: dict[float, dict[str, float]] = {}

    def ok(rate: float) -> bool:
        reqs = _requests(lengths, rate, seed)
        good, seen[rate] = meets(row, run(reqs, costs), reqs)
        return good

    rate, _ = highest_rate(ok)
    return rate / gpus, seen.get(rate, {})


_RUNS: dict[str, dict[str, Any]] = {}  # rows that share their runs (same setup) compute them once


def _ours(row: PublishedServing, lengths: list[tuple[int, int]], costs: Any, seed: int) -> dict[str, Any]:
    setup = repr((row.model, row.gpu, row.workload, row.criterion, row.quantity, row.scheduler, row.settings,
                  row.baseline, row.baseline_settings, len(lengths), seed, costs.cfg, costs.engine_profile))
    if setup not in _RUNS:
        _RUNS[setup] = _ours_uncached(row, lengths, costs, seed)
    return dict(_RUNS[setup])


def _ours_uncached(row: PublishedServing, lengths: list[tuple[int, int]], costs: Any,
                   seed: int) -> dict[str, Any]:
    rate, values = capacity(row, False, lengths, costs, seed)
    out: dict[str, Any] = {"rate_per_gpu": rate, "measured": values}
    if row.quantity == "goodput_rps":
        return {**out, "ours": rate}
    base, base_values = capacity(row, True, lengths, costs, seed)
    return {**out, "baseline_rate_per_gpu": base, "baseline_measured": base_values,
            "ours": rate / base if base else float("inf")}


def evaluate(row: PublishedServing, n_requests: int, implementation: str, seed: int,
             hardware_set: dict[str, float] | None = None, engine: str = "as-run") -> dict[str, Any]:
    """One row's outcome on its engine (or `engine`), the ratio, the diagnostic engines' ratios (as-run
    only), or why not run."""
    from sim.serving.engine_steps import StepTimeRefused

    out: dict[str, Any] = {"key": row.key, "implementation": implementation, "published": row.published,
                           "engine": row.engine if engine == "as-run" else engine}
    if row.needs:
        return {**out, "status": f"not reproducible here: needs {', '.join(row.needs)} (not modelled)"}
    out["tensor_parallel"] = row.tensor_parallel
    try:
        if row.quantity == "decode_iteration_s":
            w = row.workload
            costs = step_costs(row, [(int(w["context"]), 1)], implementation, hardware_set, engine)
            out["engine"] = costs.engine_profile.name
            ours = costs.decode_s(int(w["batch"]), float(w["context"]) + 1)
            return {**out, "status": "ok", "ours": ours, "ratio": ours / row.published}
        lengths = _lengths(row, n_requests)
        costs = step_costs(row, lengths, implementation, hardware_set, engine)
        out["engine"] = costs.engine_profile.name
        out.update(_ours(row, lengths, costs, seed), status="ok")
    except StepTimeRefused as exc:
        return {**out, "status": f"not run on this engine: {exc}"}
    out["ratio"] = out["ours"] / row.published
    out["diagnostics"] = []
    for name in row.diagnostics if engine == "as-run" else ():
        diag = _ours(row, lengths, step_costs(row, lengths, implementation, hardware_set, name), seed)
        out["diagnostics"].append({**diag, "ratio": diag["ours"] / row.published, "engine": name})
    return out


def _print(results: list[dict[str, Any]], rows: dict[str, PublishedServing]) -> None:
    print(f"{'row':34} {'impl':12} {'published':>10} {'ours':>10} {'ours/pub':>9}  status")
    for r in results:
        row, ratio = rows[r["key"]], r.get("ratio")
        inside = ratio is not None and 1 / TARGET <= ratio <= TARGET
        flag = "" if ratio is None else ("  within 1.3x" if inside else "  OUTSIDE 1.3x")
        ours = "" if r.get("ours") is None else f"{r['ours']:.4g}"
        print(f"{r['key']:34} {r['implementation']:12} {row.published:>10.4g} {ours:>10} "
              f"{'' if ratio is None else f'{ratio:.2f}':>9}  {r['status']}{flag}")
        if r.get("ratio") is not None:
            tp = r.get("tensor_parallel", 1)
            print(f"{'':34} engine {r['engine']}" + (f", tensor parallel {tp}" if tp > 1 else ""))
        if r.get("measured"):
            base = f"; baseline {r['baseline_rate_per_gpu']:.3g}/GPU at {r['baseline_measured']}" \
                if "baseline_rate_per_gpu" in r else ""
            print(f"{'':34} {r['rate_per_gpu']:.3g}/GPU at {r['measured']}{base}")
        for d in r.get("diagnostics", []):
            print(f"{'':34} diagnostic, engine {d['engine']}: {d['ours']:.4g} (ours/pub {d['ratio']:.2f}) "
                  f"at {d['measured']}")
    print("\nsimulated on CPU (no GPU run): the step model plus each row's engine host time per iteration, "
          "or the row's engine's own profiled iteration times (whole-step profiles; sim/engine_profiles); "
          "published values and setups: benchmarks/serving_published.py")


def _hardware_set(items: list[str]) -> dict[str, float] | None:
    """--hardware-set FIELD=VALUE pairs (None, with the error printed, when one is not of that form)."""
    out: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            print(f"error: --hardware-set {item!r}: expected FIELD=NUMBER, e.g. "
                  "gpu.achievable_compute_fraction=0.70", file=sys.stderr)
            return None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2048, help="requests per run [2048, as the papers]")
    parser.add_argument("--implementation", choices=("ideal", "as-published", "both"), default="ideal")
    parser.add_argument("--rows", default="", help="comma-separated row keys [all]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--hardware-set", action="append", default=[], metavar="FIELD=VALUE",
                        help="what-if: a hardware profile field, e.g. gpu.achievable_compute_fraction=0.85")
    parser.add_argument("--engine", default="as-run",
                        help="engine host time per iteration: as-run (each row's engine), none (kernels "
                        "alone), or an engine profile name or YAML file, with @low or @high for every "
                        "term at that end of its range [as-run]")
    parser.add_argument("--write-bands", action="store_true",
                        help="write the published section of sim/validation/serving_bands.yaml (every row, "
                        "--engine as-run, one --implementation, no --hardware-set)")
    args = parser.parse_args(argv)
    rows = {r.key: r for r in ROWS}
    keys = [k.strip() for k in args.rows.split(",") if k.strip()] or list(rows)
    unknown = [k for k in keys if k not in rows]
    if unknown:
        print(f"error: --rows: unknown row {unknown[0]!r}; rows: {', '.join(rows)}", file=sys.stderr)
        return 2
    if args.requests < 1:
        print(f"error: --requests must be a positive count, got {args.requests}", file=sys.stderr)
        return 2
    hardware_set = _hardware_set(args.hardware_set)
    if hardware_set is None:
        return 2
    if args.write_bands and (args.rows.strip() or hardware_set or args.engine != "as-run"
                             or args.implementation == "both"):
        print("error: --write-bands records the check as run: give it without --rows, --hardware-set and "
              "--engine (every row on its own engine) and with one --implementation (ideal or as-published)",
              file=sys.stderr)
        return 2
    impls = ("ideal", "as-published") if args.implementation == "both" else (args.implementation,)
    from sim.errors import SimInputError
    from sim.serving.engine import load_engine

    if args.engine != "as-run":
        try:
            load_engine(args.engine)
        except SimInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    results = []
    for key in keys:
        for impl in impls:
            t0 = time.perf_counter()
            try:
                res = evaluate(rows[key], args.requests, impl, args.seed, hardware_set, args.engine)
            except SimInputError as exc:  # a --hardware-set field the profile lacks (HardwareError)
                print(f"error: {exc}", file=sys.stderr)
                return 2
            res["wall_s"] = time.perf_counter() - t0
            results.append(res)
            print(f"  {key} ({impl}): {res['status']} in {res['wall_s']:.0f} s", file=sys.stderr)
    _print(results, rows)
    if hardware_set:
        print(f"what-if hardware fields: {hardware_set}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    if args.write_bands:
        from sim.serving.validation_band import published_section, write_section

        path = write_section("published", published_section(results, impls[0], args.requests, args.seed))
        print(f"wrote the published section of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
