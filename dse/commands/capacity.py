"""`dse capacity`: per hardware profile and method, the largest batch under a per-token latency SLO.

    dse capacity --model M --hardware P1,P2 --method freekv,dense,quest --input-tokens I
                 --output-tokens O --slo-ms X [--slo-stat mean|p99] [--demand TRACE|SPEC|preset:NAME]
                 [--implementation as-published|ideal] [--transplant-method] [--prices FILE] [--csv FILE]
                 [--json FILE] [--page-size ... --dense-layers ...] [--set FIELD=VALUE] [--option KEY=VALUE]

The search, the step sampling and the "what binds" rule are sim.capacity's (its docstring). Never imports
torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

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
from traces.numbers import FRACTION, MILLISECONDS, SEED, TOKENS, USD_PER_HOUR

__all__ = ["command", "load_prices", "accuracy_options"]


def load_prices(path: Path | None) -> dict[str, dict[str, Any]]:
    """`--prices FILE`: YAML {profile: {price_per_hour_usd: number, source: text}} -> that dict."""
    if path is None:
        return {}
    import yaml

    from sim.errors import SimInputError
    from sim.yaml_io import load_yaml, read_text_file

    try:
        data = load_yaml(read_text_file(path, "--prices"), f"--prices {path}")
    except yaml.YAMLError as exc:
        raise SimInputError(f"--prices {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SimInputError(f"--prices {path}: expected a mapping profile -> {{price_per_hour_usd, source}}")
    _check_price_keys(path, data)
    out = {}
    for name, entry in data.items():
        price = entry.get("price_per_hour_usd") if isinstance(entry, dict) else None
        USD_PER_HOUR.check(price, f"--prices {path}: {name}.price_per_hour_usd", SimInputError)
        if not isinstance(entry.get("source"), str) or not entry["source"].strip():
            raise SimInputError(f"--prices {path}: {name}.source must say where the price comes from")
        out[str(name)] = {"price_per_hour_usd": float(price), "source": entry["source"]}
    return out


_PRICE_KEYS = ("price_per_hour_usd", "source")


def _check_price_keys(path: Path, data: dict[Any, Any]) -> None:
    """Every entry names a known hardware profile and holds only price_per_hour_usd and source (a typo
    would otherwise be ignored and that profile left unpriced)."""
    import difflib

    from sim import list_profiles
    from sim.errors import SimInputError

    known = list_profiles()
    for name, entry in data.items():
        if str(name) not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SimInputError(
                f"--prices {path}: {name!r} is not a hardware profile; {hint}known profiles: "
                f"{', '.join(known)} (see `dse hardware list`)"
            )
        extra = sorted(str(k) for k in entry if k not in _PRICE_KEYS) if isinstance(entry, dict) else []
        if extra:
            raise SimInputError(
                f"--prices {path}: {name}: unknown key(s) {', '.join(extra)}; an entry holds only "
                f"{' and '.join(_PRICE_KEYS)}"
            )


def accuracy_options(command: Any) -> Any:
    """--accuracy-from, --measure, --measure-model, --accuracy-metric, --min-accuracy-ratio, --budgets:
    the accuracy evidence of dse capacity and dse serve (dse.accuracy)."""
    options = [
        click.option("--accuracy-from", "accuracy_from", multiple=True,
                     help="accuracy evidence, repeatable: a `dse trace` output directory, a directory of "
                     "them, or a study (YAML, storage URL, SQLite file): its baselines and trials"),
        click.option("--measure", default=None, metavar="TASK[:SAMPLES[:CONTEXT]]",
                     help="measure accuracy now: dense and every method x --budgets on the same prompts "
                     "(e.g. passkey:60:2048; cached under $FREEKV_DSE_CACHE/evidence)"),
        click.option("--measure-model", default=None,
                     help="model --measure runs [the planned model if its weights are here, else the "
                     "stand-in smollm2-135m, labelled]"),
        click.option("--accuracy-metric", default=None, help="metric of the evidence [its first]"),
        click.option("--min-accuracy-ratio", type=number(FRACTION), default=None,
                     help="accuracy floor as a share of dense attention's on the same prompts, decided on "
                     "paired prompts (rule printed with the answer)"),
        click.option("--budgets", default=None,
                     help="comma-separated candidate budgets (tokens) to measure and price per method "
                     "[--budget-tokens, else the default]"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command(name="capacity")
@click.option("--model", default=None, help="target model (registry name, a model file's: --model-file, or "
              "the path of a .gguf file, the first part of a split one, or an HF directory: docs/models.md)")
@model_options
@click.option("--hardware", required=True, help="comma-separated hardware profiles (dse hardware list)")
@click.option(
    "--method", "methods", default="freekv,dense", show_default=True,
    help="comma-separated methods with a simulator model (`dse methods`)",
)
@click.option("--input-tokens", type=number(TOKENS), help="prompt tokens per request (or --rag)")
@click.option("--output-tokens", required=True, type=number(TOKENS))
@click.option("--rag", "rag", default=None,
              help="RAG requests instead of --input-tokens: k=DOCS,doc_tokens=N,hit_rate=H[,query_tokens=Q] "
                   "(the prompt is k x N + Q tokens; multi-context methods fetch the hits' caches from host "
                   "memory and prefill the misses)")
@click.option(
    "--slo-ms",
    required=True,
    type=number(MILLISECONDS),
    help="per-token (per decode step) latency SLO, milliseconds",
)
@click.option("--slo-stat", type=click.Choice(["mean", "p99"]), default="mean", show_default=True)
@demand_option
@implementation_option
@gpu_memory_option
@replay_knob_options
@what_if_options
@accuracy_options
@click.option(
    "--prices",
    type=click.Path(path_type=Path),
    help="YAML {profile: {price_per_hour_usd, source}}: adds tokens/s per dollar-hour and ranks by it",
)
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), help="write the rows as CSV")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="write the answer as JSON")
@click.option("--seed", default=0, show_default=True, type=number(SEED))
@transplant_option
def command(model: str | None, model_file: Path | None, max_positions: int | None, rope_scaling: str | None,
            hardware: str, methods: str, input_tokens: int | None, output_tokens: int, rag: str | None,
            slo_ms: float,
            slo_stat: str, demand: str | None, implementation: str, gpu_memory_utilization: float,
            page_size: int | None,
            budget_tokens: int | None, sink_tokens: int | None, window_tokens: int | None,
            dense_layers: str | None, overrides: tuple[str, ...], options: tuple[str, ...],
            software: str | None, accuracy_from: tuple[str, ...], measure: str | None,
            measure_model: str | None, accuracy_metric: str | None, min_accuracy_ratio: float | None,
            budgets: str | None, prices: Path | None, csv_path: Path | None, json_path: Path | None,
            seed: int, transplant_method: bool) -> None:
    """Per hardware profile and method: the knobs with accuracy evidence that give the most tokens/s
    (per dollar-hour with --prices) within the per-token latency SLO (--slo-ms, at the final context) and
    the accuracy floor (--min-accuracy-ratio of dense, on paired prompts); the largest batch, its
    tokens/s and memory, what binds, and how sure each number is.

    Each method prices its own demand: its own measured trace, else its own preset (with the answer at
    its ends); --demand gives one demand to all (another policy's trace only with --transplant-method,
    labelled)."""
    from dse.commands.capacity_answer import run_capacity
    from dse.commands.model_options import choose_model
    from dse.commands.replay_options import knobs_given, split_names, what_ifs
    from dse.paths import check_output_file
    from sim.replay import DemandSource, Question

    for path, flag in ((csv_path, "--csv"), (json_path, "--json")):
        if path is not None:
            check_output_file(path, flag)
    from dse.commands.rag_option import rag_prompt

    input_tokens, request = rag_prompt(rag, input_tokens)
    model = choose_model(model, model_file, max_positions, rope_scaling)
    price = load_prices(prices)
    given = knobs_given(page_size, budget_tokens, sink_tokens, window_tokens, dense_layers)
    base = Question(
        model=model, hardware=split_names(hardware, "--hardware"), demand=DemandSource.from_text(demand),
        methods=split_names(methods, "--method"), input_tokens=input_tokens, output_tokens=output_tokens,
        knobs=given, implementations=(implementation,), software=software,
        transplant_method=transplant_method, demand_ends=True, seed=seed, names=FLAGS,
        gpu_memory_utilization=gpu_memory_utilization, rag=request, **what_ifs(overrides, options),
    )
    run_capacity(base, demand_given=demand is not None, slo_ms=slo_ms, slo_stat=slo_stat, price=price,
                 accuracy_from=accuracy_from, measure=measure, measure_model=measure_model,
                 metric=accuracy_metric, ratio=min_accuracy_ratio, budgets=budgets, csv_path=csv_path,
                 json_path=json_path)
