"""`dse serve`: request-level serving simulation (sim/serving/) per hardware profile, method and scheduler.

    dse serve --model M --hardware P1,P2 --method freekv,dense --input-tokens I --output-tokens O
              --tpot-slo-ms X [--token-slo-stat tpot-p99|tbt-p99|tbt-p90|tbt-p50] [--ttft-slo-s T]
              [--scheduler blocking,prefill-first,chunked,disaggregated]
              [--arrival-rate R | --requests FILE | --target-rate R [--seeds K] [--prices FILE]]
              [--gpus N --prefill-gpus P] [--router least-loaded|round-robin] [--n-requests N]
              [--chunk-tokens C] [--kv-link-gbps G] [--first-token handoff|prefill]
              [--max-seqs N] [--max-batched-tokens T]
              [--engine none|NAME|FILE]
              [--tensor-parallel T [--prefill-tensor-parallel P] [--decode-tensor-parallel D]]
              [--demand ...] [--implementation ...] [--json FILE]
              [--page-size ... --budget-tokens ... --dense-layers ...] [--set FIELD=VALUE]
              [--option KEY=VALUE] [--software S] [--seed S]

Without --arrival-rate, --requests or --target-rate it searches the highest Poisson rate meeting the SLOs
on a fleet of --gpus (disaggregated: --prefill-gpus + --gpus); with --arrival-rate it simulates that
rate; with --requests it replays the file's arrivals; with --target-rate it answers the fewest GPUs per
profile, method and scheduler meeting the SLOs at that rate, over --seeds arrival seeds. Never imports
torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dse.commands.capacity import accuracy_options
from dse.commands.model_options import model_options
from dse.commands.number_types import number
from dse.commands.replay_options import (
    FLAGS,
    demand_option,
    gpu_memory_option,
    implementation_option,
    replay_knob_options,
    transplant_option,
    what_if_options,
)
from dse.commands.serve_options import scheduler_options, slo_options
from traces.numbers import RATE_PER_S, REQUESTS, SEED, TOKENS, Range

GPUS = Range(1, 4096, integer=True, unit="GPUs", why="at most 4096 per pool")
MAX_GPUS = Range(2, 4096, integer=True, unit="GPUs", why="at most 4096 per pool")
SEEDS = Range(1, 64, integer=True, unit="arrival seeds", why="at most 64")

__all__ = ["command"]


@click.command(name="serve")
@click.option("--model", default=None, help="target model (registry name, a model file's: --model-file, or "
              "the path of a .gguf file, the first part of a split one, or an HF directory: docs/models.md)")
@model_options
@click.option("--hardware", required=True, help="comma-separated hardware profiles")
@click.option(
    "--method", "methods", default="freekv,dense", show_default=True, help="comma-separated methods"
)
@click.option(
    "--input-tokens",
    type=number(TOKENS),
    default=None,
    help="prompt tokens per Poisson request [32768, or --rag's]",
)
@click.option("--rag", "rag", default=None,
              help="RAG requests instead of --input-tokens: k=DOCS,doc_tokens=N,hit_rate=H[,query_tokens=Q] "
                   "(the prompt is k x N + Q tokens; multi-context methods fetch the hits' caches from host "
                   "memory and prefill the misses)")
@click.option(
    "--output-tokens",
    type=number(TOKENS),
    default=512,
    show_default=True,
    help="generated tokens per Poisson request",
)
@slo_options
@scheduler_options
@click.option(
    "--arrival-rate",
    type=number(RATE_PER_S),
    help="requests per second (Poisson) to simulate",
)
@click.option(
    "--requests",
    "requests_file",
    type=click.Path(path_type=Path),
    help="CSV/JSON of arrival_s,input_tokens,output_tokens to replay instead of Poisson arrivals",
)
@click.option(
    "--target-rate",
    type=number(RATE_PER_S),
    help="requests per second: answer the fewest GPUs per profile, method and scheduler meeting the SLOs",
)
@click.option(
    "--seeds",
    type=number(SEEDS),
    default=3,
    show_default=True,
    help="with --target-rate: arrival seeds --seed, --seed+1, ...; the answer is their range",
)
@click.option(
    "--gpus",
    type=number(GPUS),
    default=None,
    help="without --target-rate: serving GPUs (disaggregated: decode GPUs), a multiple of the GPUs per "
    "replica [one replica: 1 GPU, or --tensor-parallel's]",
)
@click.option(
    "--prefill-gpus",
    type=number(GPUS),
    default=None,
    help="without --target-rate, disaggregated: prefill GPUs [one replica: 1 GPU, or its tensor-parallel "
    "degree's]",
)
@click.option(
    "--max-gpus",
    type=number(MAX_GPUS),
    default=256,
    show_default=True,
    help="with --target-rate: the largest fleet searched",
)
@click.option(
    "--n-requests",
    type=number(REQUESTS),
    default=None,
    help="requests per simulated stream [100; with --target-rate: four request lifetimes of "
    "arrivals, at least 200]",
)
@demand_option
@implementation_option
@gpu_memory_option
@replay_knob_options
@what_if_options
@accuracy_options
@click.option(
    "--prices",
    type=click.Path(path_type=Path),
    help="YAML {profile: {price_per_hour_usd, source}} (as dse capacity): with --target-rate, "
    "dollars per hour and per million output tokens",
)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="write the results as JSON")
@click.option("--seed", default=0, show_default=True, type=number(SEED))
@transplant_option
def command(
    model: str | None,
    model_file: Path | None,
    max_positions: int | None,
    rope_scaling: str | None,
    hardware: str,
    methods: str,
    input_tokens: int | None,
    rag: str | None,
    output_tokens: int,
    ttft_slo_s: float | None,
    tpot_slo_ms: float,
    token_slo_stat: str,
    queue_slo_s: float,
    schedulers: str,
    arrival_rate: float | None,
    requests_file: Path | None,
    target_rate: float | None,
    seeds: int,
    router: str,
    gpus: int | None,
    prefill_gpus: int | None,
    max_gpus: int,
    chunk_tokens: int,
    kv_link_gbps: float,
    first_token: str,
    max_seqs: int | None,
    max_batched_tokens: int | None,
    engine: str,
    tensor_parallel: int,
    prefill_tensor_parallel: int | None,
    decode_tensor_parallel: int | None,
    n_requests: int | None,
    demand: str | None,
    implementation: str,
    gpu_memory_utilization: float,
    page_size: int | None,
    budget_tokens: int | None,
    sink_tokens: int | None,
    window_tokens: int | None,
    dense_layers: str | None,
    overrides: tuple[str, ...],
    options: tuple[str, ...],
    software: str | None,
    accuracy_from: tuple[str, ...],
    measure: str | None,
    measure_model: str | None,
    accuracy_metric: str | None,
    min_accuracy_ratio: float | None,
    budgets: str | None,
    prices: Path | None,
    json_path: Path | None,
    seed: int,
    transplant_method: bool,
) -> None:
    """Serve a request stream with continuous batching and memory-gated admission under a scheduler
    (blocking: prefill blocks decode; prefill-first: vLLM v0.2-v0.3, prompts prefilled together while
    decode waits; chunked: Sarathi-Serve / vLLM chunked prefill; disaggregated: prefill and decode pools
    with the KV moved over a link): TTFT, TPOT (a request's mean time per token) and TBT (every gap
    between two tokens) percentiles, goodput, the highest Poisson rate under the SLOs, or with
    --target-rate the fewest GPUs (and, with --prices, dollars) that meet them, over several arrival
    seeds.

    Each method prices its own demand (its own measured trace, else its own preset); --demand gives one
    to all (another policy's trace only with --transplant-method, labelled). With --accuracy-from or
    --measure, one row per method and evidenced knobs, with its measured accuracy and the floor's verdict
    (--min-accuracy-ratio, paired against dense on the same prompts)."""
    from dse.accuracy.floor import rule_text
    from dse.commands.capacity import load_prices
    from dse.commands.capacity_evidence import (
        accuracy_fields,
        candidate_answers,
        candidates,
        floor_of,
        gather_evidence,
        parse_budgets,
        resolved_knobs,
    )
    from dse.commands.model_options import choose_model
    from dse.commands.replay_options import knobs_given, split_names, what_ifs
    from dse.commands.serve_print import print_serve
    from dse.commands.serve_rows import ServePlan, fleet_row, rate_row, tensor_parallel_settings
    from dse.paths import check_output_file
    from sim import SimInputError
    from sim.replay import DemandSource, Question
    from sim.serving import SchedulerSettings, Slos, StepCosts, load_requests, scheduler_model
    from sim.serving.engine import load_engine
    from sim.serving.schedulers import check_scheduler
    from sim.serving.validation_band import serving_band
    from sim.validation_bands import band

    given = [
        f
        for f, v in (
            ("--arrival-rate", arrival_rate),
            ("--requests", requests_file),
            ("--target-rate", target_rate),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise SimInputError(
            f"give one of --arrival-rate, --requests FILE or --target-rate, not {' and '.join(given)}"
        )
    if prices is not None and target_rate is None:
        raise SimInputError("--prices prices a fleet: give it with --target-rate R (requests per second)")
    if json_path is not None:
        check_output_file(json_path, "--json")
    sched = tuple(check_scheduler(s) for s in split_names(schedulers, "--scheduler"))
    engine_profile = load_engine(engine)
    if engine_profile.step_time is not None and "chunked" in sched:
        raise engine_profile.step_time.refuse_mixed(engine_profile.name)
    price = load_prices(prices)
    from dse.commands.rag_option import rag_prompt

    input_tokens, request = rag_prompt(rag, input_tokens, default=32768)
    fixed = load_requests(requests_file) if requests_file is not None else None
    if fixed is not None:
        input_tokens = max(r.input_tokens for r in fixed)
        output_tokens = max(r.output_tokens for r in fixed)
    slos = Slos(tpot_slo_ms / 1e3, ttft_slo_s, queue_slo_s, token_slo_stat)
    settings = SchedulerSettings(chunk_tokens, kv_link_gbps, max_seqs, max_batched_tokens, tensor_parallel,
                                 first_token=first_token)
    disagg_settings = tensor_parallel_settings(
        settings, sched, prefill_tensor_parallel, decode_tensor_parallel, gpus, prefill_gpus,
        fleet=target_rate is not None,
    )
    plan = ServePlan(
        slos=slos,
        schedulers=sched,
        router=router,
        settings=settings,
        gpus=gpus,
        prefill_gpus=prefill_gpus,
        n_requests=n_requests,
        seed=seed,
        seeds=seeds,
        fixed=fixed,
        arrival_rate=arrival_rate,
        target_rate=target_rate,
        max_gpus=max_gpus,
        prices=price,
    )
    model = choose_model(model, model_file, max_positions, rope_scaling)
    base = Question(
        model=model,
        gpu_memory_utilization=gpu_memory_utilization,
        hardware=split_names(hardware, "--hardware"),
        demand=DemandSource.from_text(demand),
        methods=split_names(methods, "--method"),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        rag=request,
        knobs=knobs_given(page_size, budget_tokens, sink_tokens, window_tokens, dense_layers),
        implementations=(implementation,),
        software=software,
        transplant_method=transplant_method,
        seed=seed,
        names=FLAGS,
        **what_ifs(overrides, options),
    )
    evidence, ev_notes = gather_evidence(
        base, accuracy_from, measure, measure_model, accuracy_metric, parse_budgets(budgets)
    )
    dense = [e for e in evidence if e.method == "dense"]
    results, notes, labels = [], list(ev_notes), []
    notes += [
        f"--prices {prices}: no price for {h}: its fleet is not priced"
        for h in base.hardware
        if price and h not in price
    ]
    cands = candidates(base.methods, evidence, dict(base.knobs))
    tp_costs: list[StepCosts] = []
    decode_flag = "--decode-tensor-parallel" if decode_tensor_parallel else "--tensor-parallel"
    prefill_flag = "--prefill-tensor-parallel" if prefill_tensor_parallel else "--tensor-parallel"
    for cand in candidate_answers(base, cands, fixed_demand=demand is not None):
        method, knobs, ev, ans = cand.method, cand.knobs, cand.evidence, cand.answer
        notes += [n for n in ans.table_notes() if n not in notes]
        labels.append(f"{method}: {ans.demand.label}")
        verdict, ref = floor_of(ev, method, dense, min_accuracy_ratio, seed)
        accuracy = accuracy_fields(method, resolved_knobs(knobs, ans), ev, verdict, ref)
        for cell in ans.cells:
            by_degree: dict[int, StepCosts] = {}  # shared by the schedulers

            def costs_at(degree: int, flag: str, cell=cell, by_degree=by_degree) -> StepCosts:
                if degree not in by_degree:
                    by_degree[degree] = StepCosts(
                        cell.config, cell.priced_demand, seed, engine_profile, degree, flag
                    )
                    tp_costs.append(by_degree[degree])
                return by_degree[degree]

            for s in sched:
                if s == "disaggregated":
                    costs = costs_at(disagg_settings.tensor_parallel, decode_flag)
                    pre: StepCosts | None = costs_at(disagg_settings.prefill_tp, prefill_flag)
                else:
                    costs, pre = costs_at(settings.tensor_parallel, "--tensor-parallel"), None
                row = (
                    fleet_row(costs, s, plan, cell.hardware, input_tokens, output_tokens, pre)
                    if target_rate is not None
                    else rate_row(costs, s, plan, input_tokens, output_tokens, pre)
                )
                results.append(
                    {
                        "hardware": cell.hardware,
                        "method": cell.method,
                        "transplanted_method": cell.transplanted_method,
                        **row,
                        **accuracy,
                        "validation_band": band(cell.method, implementation).label(),
                    }
                )
    payload = {
        "model": model,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "n_requests": len(fixed) if fixed else n_requests,
        "seed": seed,
        "implementation": implementation,
        "transplant_method": transplant_method,
        "slos": slos.to_dict(),
        "ttft_slo_s": ttft_slo_s,
        "tpot_slo_ms": tpot_slo_ms,
        "token_slo_stat": token_slo_stat,
        "mode": (
            "fewest GPUs at the target rate"
            if target_rate is not None
            else "requests file"
            if fixed
            else "fixed rate"
            if arrival_rate is not None
            else "highest rate under the SLOs"
        ),
        "target_rate_per_s": target_rate,
        "seeds": seeds if target_rate is not None else 1,
        "router": router,
        "gpus": gpus or settings.tensor_parallel,
        "prefill_gpus": prefill_gpus or disagg_settings.prefill_tp,
        "max_gpus": max_gpus,
        "schedulers": {
            s: scheduler_model(s, disagg_settings if s == "disaggregated" else settings) for s in sched
        },
        "engine": {"name": engine_profile.name, "text": engine_profile.label(), "file": engine_profile.path},
        "demand": {
            "label": "; ".join(labels),
            "provenance": "each method its own demand" if demand is None else ans.demand.provenance,
        },
        "min_accuracy_ratio": min_accuracy_ratio,
        "floor_rule": None if min_accuracy_ratio is None else rule_text(min_accuracy_ratio),
        "prices": price,
        "model_of_serving": "continuous batching, FIFO, memory-gated admission at each sequence's final "
        "context, under each scheduler below: sim/serving/",
        "results": results,
        "validation_bands": {r["method"]: r["validation_band"] for r in results},
        "serving_validation_band": serving_band(
            engine_profile.name, engine_profile.path, [r["hardware"] for r in results]
        ),
        "notes": notes,
    }
    degrees = {settings.tensor_parallel, disagg_settings.tensor_parallel, disagg_settings.prefill_tp}
    if degrees != {1}:
        payload["tensor_parallel"] = {
            "degree": tensor_parallel,
            "prefill_degree": disagg_settings.prefill_tp if "disaggregated" in sched else None,
            "decode_degree": disagg_settings.tensor_parallel if "disaggregated" in sched else None,
            "text": sorted({c.tp.label() for c in tp_costs if c.tp.degree > 1}),
        }
    if json_path is not None:
        from dse.paths import write_text

        write_text(json_path, json.dumps(payload, indent=2, default=float), "--json")
    print_serve(payload)
