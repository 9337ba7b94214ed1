"""`dse serve`: request-level serving simulation (sim/serving.py) per hardware profile and method.

    dse serve --model M --hardware P1,P2 --method freekv,dense --input-tokens I --output-tokens O
              --ttft-slo-s T --tpot-slo-ms X [--arrival-rate R | --requests FILE] [--n-requests N]
              [--demand ...] [--transplant-method] [--implementation ...] [--json FILE] [--seed S]
              [--page-size ... --dense-layers ...] [--set FIELD=VALUE] [--option KEY=VALUE] [--software S]

Without --arrival-rate or --requests it searches the highest Poisson rate meeting both p99 SLOs; with
--arrival-rate it simulates that rate; with --requests it replays the file's arrivals. Never imports torch.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from dse.commands.capacity import accuracy_options
from dse.commands.number_types import number
from dse.commands.replay_options import (
    FLAGS,
    demand_option,
    implementation_option,
    replay_knob_options,
    transplant_option,
    what_if_options,
)
from traces.numbers import MILLISECONDS, RATE_PER_S, REQUESTS, SECONDS, SEED, TOKENS

__all__ = ["command"]


@click.command(name="serve")
@click.option("--model", required=True, help="target model (registry name)")
@click.option("--hardware", required=True, help="comma-separated hardware profiles")
@click.option(
    "--method", "methods", default="freekv,dense", show_default=True, help="comma-separated methods"
)
@click.option(
    "--input-tokens",
    type=number(TOKENS),
    default=32768,
    show_default=True,
    help="prompt tokens per Poisson request",
)
@click.option(
    "--output-tokens",
    type=number(TOKENS),
    default=512,
    show_default=True,
    help="generated tokens per Poisson request",
)
@click.option(
    "--ttft-slo-s",
    type=number(SECONDS),
    default=10.0,
    show_default=True,
    help="p99 time-to-first-token SLO, seconds",
)
@click.option(
    "--tpot-slo-ms",
    type=number(MILLISECONDS),
    default=50.0,
    show_default=True,
    help="p99 per-token latency (time per output token after the first) SLO, milliseconds",
)
@click.option(
    "--arrival-rate",
    type=number(RATE_PER_S),
    help="requests per second (Poisson); without it, search the highest rate meeting both SLOs",
)
@click.option(
    "--requests",
    "requests_file",
    type=click.Path(path_type=Path),
    help="CSV/JSON of arrival_s,input_tokens,output_tokens to replay instead of Poisson arrivals",
)
@click.option("--n-requests", type=number(REQUESTS), default=100, show_default=True)
@demand_option
@implementation_option
@replay_knob_options
@what_if_options
@accuracy_options
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="write the results as JSON")
@click.option("--seed", default=0, show_default=True, type=number(SEED))
@transplant_option
def command(model: str, hardware: str, methods: str, input_tokens: int, output_tokens: int, ttft_slo_s: float,
            tpot_slo_ms: float, arrival_rate: float | None, requests_file: Path | None, n_requests: int,
            demand: str | None, implementation: str, page_size: int | None, budget_tokens: int | None,
            sink_tokens: int | None, window_tokens: int | None, dense_layers: str | None,
            overrides: tuple[str, ...], options: tuple[str, ...], software: str | None,
            accuracy_from: tuple[str, ...], measure: str | None, measure_model: str | None,
            accuracy_metric: str | None, min_accuracy_ratio: float | None, budgets: str | None,
            json_path: Path | None, seed: int, transplant_method: bool) -> None:
    """Serve a request stream with continuous batching (prefill blocks decode; memory-gated admission):
    TTFT and per-token latency p50/p99, goodput, and the highest Poisson rate under both SLOs.

    Each method prices its own demand (its own measured trace, else its own preset); --demand gives one
    to all (another policy's trace only with --transplant-method, labelled). With --accuracy-from or
    --measure, one row per method and evidenced knobs, with its measured accuracy and the floor's verdict
    (--min-accuracy-ratio, paired against dense on the same prompts)."""
    from dse.accuracy.floor import rule_text
    from dse.commands.capacity_evidence import (
        accuracy_fields,
        candidates,
        demand_of,
        floor_of,
        gather_evidence,
        parse_budgets,
        question_knobs,
        resolved_knobs,
    )
    from dse.commands.replay_options import knobs_given, split_names, what_ifs
    from dse.paths import check_output_file
    from sim import SimInputError
    from sim.replay import DemandSource, Question, answer
    from sim.serving import load_requests

    if arrival_rate is not None and requests_file is not None:
        raise SimInputError("give either --arrival-rate or --requests FILE, not both")
    if json_path is not None:
        check_output_file(json_path, "--json")
    fixed = load_requests(requests_file) if requests_file is not None else None
    if fixed is not None:
        input_tokens = max(r.input_tokens for r in fixed)
        output_tokens = max(r.output_tokens for r in fixed)
    base = Question(
        model=model, hardware=split_names(hardware, "--hardware"), demand=DemandSource.from_text(demand),
        methods=split_names(methods, "--method"), input_tokens=input_tokens, output_tokens=output_tokens,
        knobs=knobs_given(page_size, budget_tokens, sink_tokens, window_tokens, dense_layers),
        implementations=(implementation,), software=software, transplant_method=transplant_method,
        seed=seed, names=FLAGS, **what_ifs(overrides, options),
    )
    evidence, ev_notes = gather_evidence(base, accuracy_from, measure, measure_model, accuracy_metric,
                                         parse_budgets(budgets))
    dense = [e for e in evidence if e.method == "dense"]
    slos = (ttft_slo_s, tpot_slo_ms / 1e3)
    if demand is not None:
        answer(base)  # one refusal naming every method that may not price the given demand
    results, notes, labels = [], list(ev_notes), []
    for method, knobs, ev in candidates(base.methods, evidence, dict(base.knobs)):
        q_knobs, sim_options = question_knobs(method, knobs)
        source = base.demand if demand is not None else demand_of(method, ev, q_knobs.get("tau"))[0]
        ans = answer(replace(base, methods=(method,), demand=source, knobs={**base.knobs, **q_knobs},
                             method_options={**base.method_options, **sim_options}))
        notes += [n for n in ans.table_notes() if n not in notes]
        labels.append(f"{method}: {ans.demand.label}")
        verdict, ref = floor_of(ev, method, dense, min_accuracy_ratio, seed)
        accuracy = accuracy_fields(method, resolved_knobs(knobs, ans), ev, verdict, ref)
        results += [{**_serve_cell(ans, cell, fixed, arrival_rate, n_requests, slos, seed), **accuracy}
                    for cell in ans.cells]
    payload = {
        "model": model, "input_tokens": input_tokens, "output_tokens": output_tokens,
        "n_requests": len(fixed) if fixed else n_requests, "seed": seed, "implementation": implementation,
        "transplant_method": transplant_method, "ttft_slo_s": ttft_slo_s, "tpot_slo_ms": tpot_slo_ms,
        "demand": {"label": "; ".join(labels), "provenance": "each method its own demand" if demand is None
                   else ans.demand.provenance},
        "min_accuracy_ratio": min_accuracy_ratio,
        "floor_rule": None if min_accuracy_ratio is None else rule_text(min_accuracy_ratio),
        "model_of_serving": "continuous batching, FIFO, memory-gated admission at each sequence's final "
        "context, prefill blocks decode (no chunked prefill): sim/serving.py",
        "results": results,
        "notes": notes,
    }
    if json_path is not None:
        from dse.paths import write_text

        write_text(json_path, json.dumps(payload, indent=2, default=float), "--json")
    _print(payload)


def _serve_cell(ans: Any, cell: Any, fixed: list | None, arrival_rate: float | None, n_requests: int,
                slos: tuple[float, float], seed: int) -> dict[str, Any]:
    """One (profile, method) row: the requests file replayed, a fixed Poisson rate, or the highest rate
    meeting both p99 SLOs."""
    from sim.serving import StepCosts, max_rate, poisson_requests, serve

    q = ans.question
    costs = StepCosts(cell.config, cell.priced_demand, seed)

    def run_at(rate: float) -> Any:
        return serve(poisson_requests(rate, n_requests, q.input_tokens, q.output_tokens, seed), costs)

    row: dict[str, Any] = {"hardware": cell.hardware, "method": cell.method,
                           "transplanted_method": cell.transplanted_method}
    if fixed is not None:
        row.update(mode="requests file", rate_per_s=None, stats=serve(fixed, costs).stats(*slos))
    elif arrival_rate is not None:
        row.update(mode="fixed rate", rate_per_s=arrival_rate, stats=run_at(arrival_rate).stats(*slos))
    else:
        found = max_rate(run_at, *slos)
        row.update(mode="highest rate under both SLOs", rate_per_s=found.rate_per_s, stats=found.stats,
                   rates_tried={f"{k:.4g}": v for k, v in sorted(found.tried.items())})
    return row


def _accuracy(r: dict) -> str:
    from dse.commands.capacity_print import accuracy_text

    return accuracy_text(r)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def _print(payload: dict) -> None:
    from rich.table import Table

    from dse.commands.sim_render import console as make_console

    console = make_console()
    console.print(
        f"[bold]{payload['model']}[/], requests of {payload['input_tokens']} input + "
        f"{payload['output_tokens']} output tokens, {payload['n_requests']} requests, "
        f"seed {payload['seed']}; SLOs: p99 TTFT <= "
        f"{payload['ttft_slo_s']:g} s, p99 per-token <= {payload['tpot_slo_ms']:g} ms; priced "
        f"{payload['implementation']}"
    )
    console.print(f"demand: {payload['demand']['label']}")
    console.print(f"serving model: {payload['model_of_serving']}")
    table = Table(title="serving")
    for col in (
        "hardware",
        "method",
        "knobs",
        "accuracy",
        "floor",
        "rate req/s",
        "TTFT p50 s",
        "TTFT p99 s",
        "tok p50 ms",
        "tok p99 ms",
        "tokens/s",
        "goodput req/s",
        "SLO met",
        "max batch",
    ):
        left = col in ("hardware", "method", "knobs", "floor")
        table.add_column(col, justify="left" if left else "right")
    for r in payload["results"]:
        st = r["stats"]
        method = r["method"] + (" (transplanted)" if r["transplanted_method"] else "")
        rate = "-" if r["rate_per_s"] is None else f"{r['rate_per_s']:.3g}"
        if st is None:
            table.add_row(r["hardware"], method, r["knobs"], _accuracy(r), r["floor_verdict"],
                          "0 (none meets)", *["-"] * 8)
            continue
        table.add_row(
            r["hardware"],
            method,
            r["knobs"],
            _accuracy(r),
            r["floor_verdict"],
            rate,
            f"{st['ttft_p50_s']:.2f}",
            f"{st['ttft_p99_s']:.2f}",
            _ms(st["tpot_p50_s"]),
            _ms(st["tpot_p99_s"]),
            f"{st['throughput_tokens_per_s']:.0f}",
            f"{st['goodput_requests_per_s']:.3g}",
            f"{st['slo_attainment']:.0%}",
            str(st["max_batch"]),
        )
    console.print(table)
    if payload["floor_rule"]:
        console.print(f"rule: {payload['floor_rule']}")
    console.print("accuracy: measured (interval, n; dense's on the same prompts in --json); rates, "
                  "latencies, tokens/s: simulated")
    for note in payload["notes"]:
        console.print(f"[yellow]note:[/] {note}")
