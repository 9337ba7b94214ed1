"""Replay DistServe's measured serving runs (OPT-13B, ShareGPT, A100 80GB) through the request-level serving
model and compare, request set by request set.

    PYTHONPATH=. python benchmarks/validate_serving_measured.py [--engines NAME,NAME] [--runs KEY,KEY]
        [--implementation ideal|as-published] [--attainment PCT] [--diagnose] [--json FILE] [--write-bands]

The runs and their setup: benchmarks/serving_measured.py. Each run it can reproduce is replayed with its
EXACT requests (prompt and output lengths, issue times relative to the first), not new Poisson draws, on
the scheduler and settings the run used: vLLM -> `prefill-first` with DistServe's launch flags
(max_num_seqs 1024, max_num_batched_tokens 16384) and --gpu-memory-utilization 0.95, model opt-13b, GPU
a100-80g-sxm, dense; DistServe's c21d11 runs -> `disaggregated` with one prefill replica at tensor parallel 2
and one decode replica at TP 1 (DistServe's launch: context batches up to 8192 tokens, decode up to 1024
sequences, GPU memory utilisation 0.95), the first token at the prefill's end and the KV migrated over
NVLink at 300 GB/s (serving_measured.py says why).

Per run: measured vs ours P50 and P90 TTFT, P90 and mean TPOT, and the SLO attainment (share of requests
within both limits) at the authors' alignment targets (TTFT < 200 ms, TPOT < 100 ms) and at DistServe's
chatbot SLO for OPT-13B (TTFT <= 250 ms, TPOT <= 100 ms). TPOT as DistServe's client measured it:
(last token - first token) / (output tokens - 1), 0 for one output token (sim.serving's `tpot_s`, with
0 for one output token). Then per config and SLO, over the runs on its curve (serving_measured.
MeasuredRun.on_curve): the goodput, the rate where the attainment curve first crosses `--attainment`
(90%), by linear interpolation between neighbouring rates exactly as DistServe's plot code does
(evaluation/2-benchmark-serving/plot.ipynb cell 1 `find_intersection`; where the curve never crosses,
that function returns the first rate with a warning: printed here as "not crossed"), measured and ours
and their ratio (target 1/1.3 to 1.3), at 90% (DistServe's) and 50% (the measured vLLM curve never
reaches 90% at either SLO: 0.86 at 1 req/s at the chatbot SLO). Ours is also run past the highest
measured rate (x1.125 to x2, `EXTEND_FACTORS`: that run's requests with its issue times scaled, as
DistServe's client scales one arrival pattern to each rate; ours only, never compared request by
request), so its curve can cross where the measured one did; the RMSE of the attainment in percentage
points (the authors' alignment score, align_with_real.py:212-214); and the rates at which each P90 (TTFT
and TPOT, each on its own) meets its limit.

Engines (`--engines`, sim/engine_profiles; on the c21d11 runs each stands for a pair, the prefill replica's
profile at TP 2 and the decode replica's at TP 1, `pool_engines`):
- `sarathi-serve-a100`: the step model plus Vidur's profile of Sarathi-Serve's engine host time per
  iteration: independent of DistServe's data (held out);
- `none`: the step model's kernels alone (held out; at TP 2 one GPU's shard plus Vidur's measured NCCL
  all-reduces);
- `distserve-opt13b-a100`: DistServe's own engine, whole steps as DistServe profiled them: on the c21d11
  runs `distserve-opt13b-a100-tp2` (prefill) + `distserve-opt13b-a100` (decode). NOT held out: the
  authors' align_with_real.py (20a1633:100-107, `get_distserve_comparison`) replays exactly these runs
  (tp_prefill 2) to score their simulator, and the DistServe prefill factor x1.1 (3cb7744, 2024-04-25)
  and a decode factor (8a653a7) set after the runs were committed were folded into the JSON by 4c68ed9
  "Realign the curve". Not the engine of the vLLM runs (skipped there);
- `distserve-vllm-opt13b-a100`: DistServe's own per-iteration profile of this vLLM. NOT held out: its
  coefficients are the authors' fit times fudge factors (prefill x1.4, decode x1.2, and +1 ms per
  prefill) set in simdistserve/estimators/time_estimator.py on 2024-04-24/25 (commits 8a653a7 "Add
  fundge overhead", 3cb7744), one and two days after these runs were committed with align_with_real.py,
  whose job is to compare the simulator with exactly these runs, and folded into the JSON in 4c68ed9
  "Realign the curve" (2024-05-01; old vLLM prefill (15.75, 0.1004, 5.77e-6) x 1.4 = the profile's
  (22.05, 0.1405, 8.08e-6), old decode x 1.2 = its decode); vLLM's, so not replayed on the c21d11 runs;
- benchmarks/data/engines/distserve-vllm-opt13b-a100-forward.yaml, a diagnostic: the same profile as of
  the runs' commit, before those factors (the forward-pass fit plus the simulator's Ray overhead); it
  shows what the factors fitted after the runs contribute.
- benchmarks/data/engines/vllm-opt13b-a100-fitted-100-1.yaml (base `sarathi-serve-a100`) and
  ...-fitted-100-1-base-none.yaml (base `none`): a per-iteration `server` term (a + b x sequences ms) and a
  per-request overhead (ms before the request is queued) fitted by `dse engine-fit` (sim/serving/
  engine_fit.py; the command is in each file's header) to the LOWEST-rate run alone, vllm-100-1 (train);
  every other run (1.5-4 req/s) is held out. The form was fixed before the fit, from the low-load run and
  the diagnosis below it in docs/serving_validation.md (about 30 ms per request outside the engine, about
  4-7 ms per decode step growing with the batch), and not changed after seeing the held-out runs. The
  attainment RMSE is also printed over the held-out runs alone. On the c21d11 runs a cross-engine
  diagnostic: vLLM 0.2's API server's overheads on DistServe's engine (its own API server, also Ray-based);
  the fitted profile is valid at TP 1 only, so it prices the decode replica, and the prefill replica runs
  its base engine at TP 2 (`sarathi-serve-a100-tp2`, or `none`) with the fitted request overhead (the API
  server's time before a request is queued). Nothing is fitted to the c21d11 runs.
Simulated on CPU, never on a GPU; nothing of the simulator was set from these runs except the fitted
engines' three numbers, from vllm-100-1. One model change followed the first c21d11 replay: the prefill GPU
parks each prompt's KV by its own bytes, as DistServe's context scheduler counts blocks, where it had
counted slots sized by the longest prompt (docs/serving_validation.md, "DistServe's own runs").

`--write-bands` (every run, every default engine, the default attainment levels) writes the `measured`
section of sim/validation/serving_bands.yaml: per engine its kind (kernels only, host time, whole steps,
fitted) and per config the goodput ratios ours / measured and whether held out, which `dse serve` prints
under its answers (sim/serving/validation_band.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.serving_measured import CONFIGS, GPU, MODEL, SLOS, MeasuredRun, load_runs  # noqa: E402
from benchmarks.validate_serving import TARGET, _p_late  # noqa: E402

_ENGINE_FILES = Path(__file__).resolve().parent / "data" / "engines"
FORWARD_ENGINE = _ENGINE_FILES / "distserve-vllm-opt13b-a100-forward.yaml"
# engine profiles fitted by `dse engine-fit` to the lowest-rate run alone (each file's header has the command)
TRAIN_RUN = "vllm-100-1"
FITTED_ENGINES = {"vllm-opt13b-a100-fitted-100-1": "sarathi-serve-a100",
                  "vllm-opt13b-a100-fitted-100-1-base-none": "none"}
DISTSERVE_ENGINE = "distserve-opt13b-a100"
ENGINES = ("sarathi-serve-a100", "none", "distserve-vllm-opt13b-a100", str(FORWARD_ENGINE), DISTSERVE_ENGINE,
           *(str(_ENGINE_FILES / f"{name}.yaml") for name in FITTED_ENGINES))
# c21d11 (prefill TP 2 + decode TP 1): the prefill replica's profile for each engine (the decode replica: the
# engine itself); vLLM's profiles are not DistServe's engine and are not replayed there
PREFILL_TP2 = {"none": "none", "sarathi-serve-a100": "sarathi-serve-a100-tp2",
               DISTSERVE_ENGINE: "distserve-opt13b-a100-tp2",
               **{name: f"{base}-tp2" if base != "none" else "none" for name, base in FITTED_ENGINES.items()}}
HELD_OUT = {  # engine profile name -> whether it is independent of these runs (module docstring)
    "sarathi-serve-a100": "held out",
    "none": "held out",
    "distserve-vllm-opt13b-a100": "NOT held out: DistServe re-fitted it (fudge factors 8a653a7/3cb7744, "
    "folded in by 4c68ed9) after these runs, with align_with_real.py comparing against them",
    "distserve-vllm-opt13b-a100-forward": "diagnostic: DistServe's forward-pass fit as of the runs' commit "
    "(20a1633), before its alignment; committed a day before the runs (3261c76), which carry no wall date",
    **{name: f"base {base} + a server term and a request overhead fitted on {TRAIN_RUN} (train); other runs "
       "held out" for name, base in FITTED_ENGINES.items()},
    DISTSERVE_ENGINE: "DistServe's own engine: replayed on its c21d11 runs only (below)",
}
HELD_OUT_C21D11 = {  # the same, on the c21d11 runs (DistServe's engine; module docstring)
    "none": "held out: kernels only, the prefill replica one GPU's TP 2 shard + measured NCCL all-reduces",
    "sarathi-serve-a100": "held out; a proxy engine: Sarathi-Serve's host time (Vidur's profile, TP 2 on the "
    "prefill replica, TP 1 on decode), not DistServe's",
    DISTSERVE_ENGINE: "NOT held out: DistServe's whole-step profiles (prefill distserve-opt13b-a100-tp2, "
    "decode distserve-opt13b-a100); align_with_real.py (20a1633:100-107) replays these c21d11 runs to score "
    "DistServe's simulator, and factors set after them (3cb7744, 8a653a7) were folded in by 4c68ed9",
    **{name: f"cross-engine diagnostic: vLLM 0.2's server term and request overhead fitted on {TRAIN_RUN} on "
       f"the decode replica (the profile is valid at TP 1 only); prefill replica on {PREFILL_TP2[name]} at "
       "TP 2 with the fitted request overhead; nothing fitted to these runs" for name in FITTED_ENGINES},
}
ATTAINMENT_PCT = (90.0, 50.0)
LONG_OUTPUT_TOKENS = 20
EXTEND_FACTORS = (1.125, 1.25, 1.375, 1.5, 1.75, 2.0)


def find_intersection(xs: list[float], ys: list[float], target_y: float) -> tuple[float, bool]:
    """DistServe's find_intersection (plot.ipynb cell 1): the first segment whose ends lie on either side of
    target_y (one below, one not), linearly interpolated; (xs[0], False) where none does."""
    for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False):
        if (y0 < target_y) != (y1 < target_y):
            return (target_y - y0) * (x1 - x0) / (y1 - y0) + x0, True
    return xs[0], False


def _pct(x: np.ndarray, q: float) -> float:
    """Percentile q where NaN marks a request never served (late: inf)."""
    return _p_late(np.nan_to_num(np.asarray(x, dtype=float), nan=np.inf), q)


def summary(ttft_ms: np.ndarray, tpot_ms: np.ndarray) -> dict[str, float]:
    """The statistics compared per run (module docstring)."""
    out = {"ttft_p50_ms": _pct(ttft_ms, 50), "ttft_p90_ms": _pct(ttft_ms, 90),
           "tpot_p90_ms": _pct(tpot_ms, 90), "tpot_mean_ms": float(np.mean(tpot_ms))}
    for slo in SLOS:
        out[f"attainment_{slo.name}"] = float(slo.within(ttft_ms, tpot_ms).mean())
        each = out["ttft_p90_ms"] <= slo.ttft_ms and out["tpot_p90_ms"] <= slo.tpot_ms
        out[f"p90_each_{slo.name}"] = bool(each)
    return out


def pool_engines(config: str, engine: str) -> tuple[Any, Any] | str:
    """(prefill replica's engine profile or None, the engine of the run's (decode) replicas) for `config`'s
    runs, or why `engine` is not replayed on them."""
    from dataclasses import replace as replace_profile

    from sim.serving.engine import load_engine

    profile = load_engine(engine)
    if CONFIGS[config].scheduler != "disaggregated":
        if profile.name == DISTSERVE_ENGINE:
            return "DistServe's own engine profile, not vLLM's"
        return None, profile
    if profile.name not in PREFILL_TP2:
        return "vLLM's engine profile; these runs ran DistServe's engine"
    prefill = load_engine(PREFILL_TP2[profile.name])
    if profile.request_overhead_ms:  # the requests arrive at the prefill replica: the API server's time
        prefill = replace_profile(prefill, name=f"{prefill.name} + request overhead of {profile.name}",
                                  request_overhead_ms=profile.request_overhead_ms,
                                  request_overhead_source=profile.request_overhead_source)
    return prefill, profile


def step_costs(config: str, runs: list[MeasuredRun], engine: Any, implementation: str,
               tensor_parallel: int = 1) -> Any:
    from sim.config import SimConfig
    from sim.serving import StepCosts

    longest = max(((int(p), int(o)) for r in runs for p, o in zip(r.prompt_len, r.output_len, strict=True)),
                  key=sum)
    cfg = SimConfig(model=MODEL, hardware=GPU, method="dense", input_tokens=longest[0],
                    output_tokens=longest[1], implementation=implementation,
                    gpu_memory_utilization=CONFIGS[config].gpu_memory_utilization)
    flag = "--prefill-tensor-parallel" if tensor_parallel > 1 else "--tensor-parallel"
    return StepCosts(cfg, None, engine=engine, tensor_parallel=tensor_parallel, tensor_parallel_flag=flag)


def _simulate(config: str, reqs: list[Any], costs: Any, prefill_costs: Any) -> Any:
    """The run's scheduler with its settings (CONFIGS): disaggregated, `prefill_costs` prices the prefill
    replica (its own tensor-parallel degree) and `costs` the decode replica."""
    from sim.serving import SchedulerSettings, simulate

    c = CONFIGS[config]
    pools = ("prefill_gpus", "decode_gpus")
    knobs: dict[str, Any] = {k: v for k, v in c.settings.items() if k not in pools}
    if c.prefill_tensor_parallel > 1:
        knobs["prefill_tensor_parallel"] = c.prefill_tensor_parallel
    prefill, decode = (int(c.settings.get(k, 0)) for k in pools)  # type: ignore[call-overload]
    return simulate(reqs, costs, c.scheduler, decode or 1, prefill, settings=SchedulerSettings(**knobs),
                    prefill_costs=prefill_costs)


def replay(run: MeasuredRun, costs: Any, prefill_costs: Any = None) -> dict[str, Any]:
    """Our TTFT and TPOT of each of the run's requests (ms), with the run's own scheduler and settings
    (`prefill_costs`: the disaggregated prefill replica's, `costs` by default)."""
    from sim.serving import Request

    reqs = [Request(float(t), int(p), int(o))
            for t, p, o in zip(run.issue_time_s, run.prompt_len, run.output_len, strict=True)]
    result = _simulate(run.config, reqs, costs, prefill_costs)
    front = prefill_costs or costs
    ttft_ms = result.ttft_s * 1e3
    tpot_ms = np.where(run.output_len > 1, result.tpot_s * 1e3, 0.0)  # DistServe's client: 0 for one token
    finished = np.isfinite(result.finish_s)
    tpot_ms = np.where(finished | (run.output_len == 1), tpot_ms, np.nan)
    # waiting in the engine's queue: from issue to prefill start less the engine's request overhead
    queue_ms = result.prefill_queue_s * 1e3 - front.engine_profile.request_overhead_ms
    return {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "prefill_queue_ms": queue_ms,
            "max_iteration_tokens": int(result.max_iteration_tokens), "max_batch": int(result.max_batch)}


def _fit(prompt: np.ndarray, ttft_ms: np.ndarray) -> tuple[float, float]:
    """Least-squares TTFT = a + b * prompt tokens (ms, ms per token)."""
    b, a = np.polyfit(prompt.astype(float), ttft_ms, 1)
    return float(a), float(b)


def diagnose(run: MeasuredRun, ours: dict[str, Any]) -> dict[str, Any]:
    """Where ours and measured differ: TTFT ratio by prompt length, and how much of ours is queueing."""
    ratio = ours["ttft_ms"] / run.ttft_ms
    bins = {"prompt<256": run.prompt_len < 256, "256-1023": (run.prompt_len >= 256) & (run.prompt_len < 1024),
            ">=1024": run.prompt_len >= 1024}
    out: dict[str, Any] = {f"ttft_ratio_median_{k}": float(np.median(ratio[m])) if m.any() else None
                           for k, m in bins.items()}
    out["ours_queue_share_of_ttft"] = float(np.nansum(ours["prefill_queue_ms"]) / np.nansum(ours["ttft_ms"]))
    out["measured_fit_ms"] = _fit(run.prompt_len, run.ttft_ms)
    out["ours_fit_ms"] = _fit(run.prompt_len, ours["ttft_ms"])
    out["ttft_min_ms"] = (float(run.ttft_ms.min()), float(np.nanmin(ours["ttft_ms"])))
    long = run.output_len > LONG_OUTPUT_TOKENS  # their TPOT is mostly decode steps, few prefill stalls
    out["tpot_p10_long_ms"] = (float(np.percentile(run.tpot_ms[long], 10)),
                               float(np.nanpercentile(ours["tpot_ms"][long], 10)))
    return out


def goodput(xs: list[float], meas: list[float], ours_xs: list[float], ours: list[float],
            level: float) -> dict[str, Any]:
    """Both curves' crossing of `level` (percent) and their ratio. Ours may run on past the measured rates
    (`ours_xs`, extended: module docstring); where the measured curve crosses and ours stays at or above the
    level to its last rate, the ratio is only bounded below (`ratio_above`)."""
    (gm, fm), (go, fo) = find_intersection(xs, meas, level), find_intersection(ours_xs, ours, level)
    above = fm and not fo and all(y >= level for y in ours)
    return {"level_pct": level, "measured": gm if fm else None, "ours": go if fo else None,
            "ours_beyond_measured": bool(fo and go > xs[-1]),
            "ratio": go / gm if fm and fo else None, "ratio_above": ours_xs[-1] / gm if above else None}


def extension(run: MeasuredRun, costs: Any, prefill_costs: Any = None) -> list[tuple[float, dict[str, Any]]]:
    """Ours past the highest measured rate: `run`'s requests with its issue times scaled to each of
    EXTEND_FACTORS x its rate (as the client scales one arrival pattern to each rate), our summary at each."""
    out = []
    for factor in EXTEND_FACTORS:
        scaled = replace(run, rate=run.rate * factor, issue_time_s=run.issue_time_s / factor)
        ours = replay(scaled, costs, prefill_costs)
        out.append((scaled.rate, summary(ours["ttft_ms"], ours["tpot_ms"])))
    return out


def curve(runs: list[MeasuredRun], per_run: dict[str, dict[str, Any]], levels: tuple[float, ...],
          extended: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """Goodputs, attainment RMSE and P90-each rates of one config on one engine, over its curve's runs
    (ours also over `extended`, past the measured rates)."""
    on = sorted((r for r in runs if r.on_curve and r.key in per_run), key=lambda r: r.rate)
    xs = [r.rate for r in on]
    held = np.array([not per_run[r.key].get("train", False) for r in on])
    out: dict[str, Any] = {"rates": xs, "extended_rates": [x for x, _ in extended],
                           "train_rates": [r.rate for r, h in zip(on, held, strict=True) if not h]}
    for slo in SLOS:
        meas = [100 * per_run[r.key]["measured"][f"attainment_{slo.name}"] for r in on]
        ours = [100 * per_run[r.key]["ours"][f"attainment_{slo.name}"] for r in on]
        ours_ext = ours + [100 * e[f"attainment_{slo.name}"] for _, e in extended]
        err = np.array(meas) - np.array(ours)
        out[slo.name] = {
            "measured_attainment_pct": meas, "ours_attainment_pct": ours,
            "ours_extended_pct": ours_ext[len(ours):],
            "rmse_pp": float(np.sqrt(np.mean(err ** 2))),
            "rmse_pp_held_out": float(np.sqrt(np.mean(err[held] ** 2))) if held.any() else None,
            "goodput": [goodput(xs, meas, xs + out["extended_rates"], ours_ext, level) for level in levels],
            "p90_each_measured": [r.rate for r in on if per_run[r.key]["measured"][f"p90_each_{slo.name}"]],
            "p90_each_ours": [r.rate for r in on if per_run[r.key]["ours"][f"p90_each_{slo.name}"]],
        }
    return out


def measured_curve(runs: list[MeasuredRun], per_run: dict[str, dict[str, Any]],
                   levels: tuple[float, ...]) -> dict[str, Any]:
    """The measured goodputs alone, of a config not replayed here."""
    on = sorted((r for r in runs if r.on_curve), key=lambda r: r.rate)
    xs = [r.rate for r in on]
    out: dict[str, Any] = {"rates": xs, "measured_only": True}
    for slo in SLOS:
        meas = [100 * per_run[r.key]["measured"][f"attainment_{slo.name}"] for r in on]
        found = [find_intersection(xs, meas, level) for level in levels]
        out[slo.name] = {"measured_attainment_pct": meas,
                         "goodput": [{"level_pct": level, "measured": g if ok else None}
                                     for level, (g, ok) in zip(levels, found, strict=True)]}
    return out


def evaluate(runs: list[MeasuredRun], engine: str, implementation: str,
             levels: tuple[float, ...] = ATTAINMENT_PCT, with_diagnosis: bool = False) -> dict[str, Any]:
    """Every run of `runs` on `engine`: per run measured and ours, per config the curve (module docstring)."""
    from sim.serving.engine import load_engine

    name = load_engine(engine).name
    out: dict[str, Any] = {"engine": name, "implementation": implementation,
                           "held_out": HELD_OUT.get(name, "not one of this check's engines"), "runs": {},
                           "configs": {}}
    for config in sorted({r.config for r in runs}):
        mine = [r for r in runs if r.config == config]
        needs = CONFIGS[config].needs
        pools = pool_engines(config, engine) if not needs else f"needs {needs[0]}"
        if isinstance(pools, str):
            for r in mine:
                out["runs"][r.key] = {"config": config, "rate": r.rate, "n": r.n, "status": pools,
                                      "measured": summary(r.ttft_ms, r.tpot_ms)}
            out["configs"][config] = measured_curve(mine, out["runs"], levels)
            continue
        prefill_engine, run_engine = pools
        costs = step_costs(config, mine, run_engine, implementation)
        prefill_costs = None if prefill_engine is None else step_costs(
            config, mine, prefill_engine, implementation, CONFIGS[config].prefill_tensor_parallel)
        for r in mine:
            ours = replay(r, costs, prefill_costs)
            entry = {"config": config, "rate": r.rate, "n": r.n, "status": "ok",
                     "train": name in FITTED_ENGINES and r.key == TRAIN_RUN,
                     "measured": summary(r.ttft_ms, r.tpot_ms),
                     "ours": summary(ours["ttft_ms"], ours["tpot_ms"]),
                     "max_iteration_tokens": ours["max_iteration_tokens"], "max_batch": ours["max_batch"]}
            if with_diagnosis:
                entry["diagnosis"] = diagnose(r, ours)
            out["runs"][r.key] = entry
        last = max((r for r in mine if r.on_curve), key=lambda r: r.rate, default=None)
        extended = extension(last, costs, prefill_costs) if last is not None else []
        out["configs"][config] = curve(mine, out["runs"], levels, extended)
        if prefill_engine is not None:
            tp = CONFIGS[config].prefill_tensor_parallel
            out["configs"][config]["engines"] = (f"prefill {prefill_engine.name} (TP {tp}), decode "
                                                 f"{run_engine.name} (TP 1)")
            out["configs"][config]["held_out"] = HELD_OUT_C21D11.get(name, "not one of this check's engines")
    return out


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return "inf" if not np.isfinite(x) else f"{x:.{digits}f}"


def _pair(m: float, o: float | None, width: int, digits: int = 0) -> str:
    return f"{_fmt(m, digits):>{width}}/{'' if o is None else _fmt(o, digits):<{width}}"


def _goodput_text(g: dict[str, Any]) -> str:
    meas = "not crossed" if g["measured"] is None else f"{g['measured']:.2f}"
    ours = "not crossed" if g["ours"] is None else f"{g['ours']:.2f}"
    if g["ours_beyond_measured"]:
        ours += " (extended)"
    if g["ratio"] is not None:
        inside = 1 / TARGET <= g["ratio"] <= TARGET
        ratio = f"{g['ratio']:.2f} ({'within' if inside else 'OUTSIDE'} 1.3x)"
    elif g["ratio_above"] is not None:
        ratio = f"> {g['ratio_above']:.2f} (ours above {g['level_pct']:g}% at every rate tried)"
    else:
        ratio = "-"
    return f"at {g['level_pct']:g}%: measured {meas}, ours {ours}, ours/measured {ratio}"


def print_engine(res: dict[str, Any]) -> None:
    print(f"\nengine {res['engine']} ({res['implementation']}): {res['held_out']}")
    print(f"{'run':26} {'TTFT p50 ms':>13} {'TTFT p90 ms':>15} {'TPOT p90 ms':>13} {'TPOT mean ms':>13} "
          f"{'att 200/100':>11} {'att 250/100':>11}   (measured/ours)")
    for key, r in res["runs"].items():
        m, o = r["measured"], r.get("ours", {})
        line = (f"{key:26} {_pair(m['ttft_p50_ms'], o.get('ttft_p50_ms'), 6)} "
                f"{_pair(m['ttft_p90_ms'], o.get('ttft_p90_ms'), 7)} "
                f"{_pair(m['tpot_p90_ms'], o.get('tpot_p90_ms'), 6)} "
                f"{_pair(m['tpot_mean_ms'], o.get('tpot_mean_ms'), 6)} "
                f"{_pair(m['attainment_align'], o.get('attainment_align'), 5, 2)} "
                f"{_pair(m['attainment_chatbot'], o.get('attainment_chatbot'), 5, 2)}")
        if r["status"] != "ok":
            print(f"{line}  not replayed: {r['status']}")
            continue
        train = " TRAIN (the fit's run)" if r.get("train") else ""
        print(f"{line}  (largest iteration {r['max_iteration_tokens']} tokens, batch {r['max_batch']})"
              f"{train}")
        if "diagnosis" in r:
            d = r["diagnosis"]
            ratios = ", ".join(f"{k.removeprefix('ttft_ratio_median_')} {_fmt(v, 2)}" for k, v in d.items()
                               if k.startswith("ttft_ratio"))
            (ma, mb), (oa, ob) = d["measured_fit_ms"], d["ours_fit_ms"]
            print(f"{'':26} TTFT ours/measured, median by prompt tokens: {ratios}; ours queueing "
                  f"{100 * d['ours_queue_share_of_ttft']:.0f}% of TTFT")
            print(f"{'':26} TTFT = a + b x prompt (ms): measured {ma:.0f} + {mb:.3f} x, ours {oa:.0f} + "
                  f"{ob:.3f} x; TTFT min measured/ours {_pair(*d['ttft_min_ms'], 0)}; TPOT p10 of outputs > "
                  f"{LONG_OUTPUT_TOKENS} tokens measured/ours {_pair(*d['tpot_p10_long_ms'], 0, 1)} ms")
    for config, c in res["configs"].items():
        if c.get("measured_only"):
            gpus = "" if config != "c21d11" else " (fleet of 3 GPUs)"
            for slo in SLOS:
                texts = [("not crossed" if g["measured"] is None else f"{g['measured']:.2f}", g["level_pct"])
                         for g in c[slo.name]["goodput"]]
                found = ", ".join(f"at {level:g}% {text}" for text, level in texts)
                print(f"  {config}, measured only{gpus}, {slo.name} SLO, goodput over rates {c['rates']}: "
                      f"{found}")
            continue
        if "engines" in c:
            print(f"  {config} ({CONFIGS[config].text}) on {c['engines']}: {c['held_out']}")
        gpus = "" if config != "c21d11" else ", rates of the 3-GPU fleet"
        print(f"  {config}, goodput over rates {c['rates']}{gpus} (ours extended to {c['extended_rates']}):")
        for slo in SLOS:
            s = c[slo.name]
            print(f"    {slo.name} SLO (TTFT {slo.ttft_ms:g} ms, TPOT {slo.tpot_ms:g} ms): "
                  + "; ".join(_goodput_text(g) for g in s["goodput"]))
            held = "" if not c["train_rates"] else (
                f" ({s['rmse_pp_held_out']:.1f} pp over the held-out runs, without the train run at "
                f"{c['train_rates']})")
            print(f"      attainment RMSE {s['rmse_pp']:.1f} pp{held}; P90 TTFT and P90 TPOT each within at "
                  f"rates: measured {s['p90_each_measured'] or 'none'}, ours {s['p90_each_ours'] or 'none'}")


def engine_kind(engine: str) -> str:
    """The kind of an engine (sim.serving.validation_band.KINDS): kernels only, fitted (FITTED_ENGINES),
    whole steps or host time."""
    from sim.serving.engine import load_engine

    profile = load_engine(engine)
    if profile.name == "none":
        return "kernels only"
    if profile.name in FITTED_ENGINES:
        return "fitted"
    return "whole steps" if profile.step_time is not None else "host time"


def bands_section(results: list[dict[str, Any]], engines: list[str], implementation: str) -> dict[str, Any]:
    """The `measured` section of sim/validation/serving_bands.yaml from `evaluate`'s results on `engines`."""
    from sim.serving.engine import load_engine
    from sim.serving.validation_band import measured_section, profile_digest

    kinds = {load_engine(e).name: engine_kind(e) for e in engines}
    digests = {load_engine(e).name: profile_digest(load_engine(e).path) for e in engines}
    return measured_section(results, kinds, {k: c.text for k, c in CONFIGS.items()}, [s.name for s in SLOS],
                            implementation, "DistServe's measured OPT-13B ShareGPT runs (LLMServe/DistServe)",
                            digests, GPU)


def _levels(text: str) -> tuple[float, ...] | None:
    try:
        levels = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    return levels if levels and all(0 < x <= 100 for x in levels) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help="comma-separated engine profiles (sim/engine_profiles names, none, YAML paths) "
                        "[sarathi-serve-a100, none, distserve-vllm-opt13b-a100, the diagnostic "
                        "benchmarks/data/engines/distserve-vllm-opt13b-a100-forward.yaml, "
                        "distserve-opt13b-a100 and the engines fitted on vllm-100-1]")
    parser.add_argument("--runs", default="", help="comma-separated run keys, e.g. vllm-300-3 [all]")
    parser.add_argument("--implementation", choices=("ideal", "as-published"), default="ideal")
    default_levels = ",".join(f"{x:g}" for x in ATTAINMENT_PCT)
    parser.add_argument("--attainment", default=default_levels,
                        help=f"comma-separated SLO attainments (percent) to read goodput at "
                        f"[{default_levels}]")
    parser.add_argument("--diagnose", action="store_true", help="per run: where ours and measured differ")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    parser.add_argument("--write-bands", action="store_true",
                        help="write the measured section of sim/validation/serving_bands.yaml (every run, "
                        "the default engines and attainment levels)")
    args = parser.parse_args(argv)
    runs = load_runs()
    keys = [k.strip() for k in args.runs.split(",") if k.strip()]
    known = sorted(r.key for r in runs)
    unknown = [k for k in keys if k not in known]
    if unknown:
        print(f"error: --runs: unknown run {unknown[0]!r}; runs: {', '.join(known)}", file=sys.stderr)
        return 2
    levels = _levels(args.attainment)
    if levels is None:
        print(f"error: --attainment {args.attainment!r}: expected comma-separated percentages in (0, 100], "
              "e.g. 90,50", file=sys.stderr)
        return 2
    if args.write_bands and (keys or args.engines != ",".join(ENGINES) or levels != ATTAINMENT_PCT):
        print("error: --write-bands records the check as run: give it without --runs, --engines and "
              "--attainment (every run, the default engines and levels)", file=sys.stderr)
        return 2
    if keys:
        runs = [r for r in runs if r.key in keys]
    from sim.errors import SimInputError
    from sim.serving.engine import load_engine

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    try:
        for e in engines:
            load_engine(e)
    except SimInputError as exc:
        print(f"error: --engines: {exc}", file=sys.stderr)
        return 2
    results = []
    for engine in engines:
        t0 = time.perf_counter()
        try:
            res = evaluate(runs, engine, args.implementation, levels, args.diagnose)
        except SimInputError as exc:  # a whole-step profile of another model or GPU
            print(f"error: --engines {engine}: {exc}", file=sys.stderr)
            return 2
        res["wall_s"] = time.perf_counter() - t0
        print(f"  engine {engine}: {res['wall_s']:.0f} s", file=sys.stderr)
        print_engine(res)
        results.append(res)
    print("\nmeasured: real runs, client-side times (LLMServe/DistServe@20a1633; "
          "benchmarks/serving_measured.py); "
          "ours: simulated on CPU with the runs' exact requests and issue times")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, default=float))
    if args.write_bands:
        from sim.serving.validation_band import write_section

        path = write_section("measured", bands_section(results, engines, args.implementation))
        print(f"wrote the measured section of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
