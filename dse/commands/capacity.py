"""`dse capacity`: per hardware profile and method, the largest batch under a per-token latency SLO.

    dse capacity --model M --hardware P1,P2 --method freekv,dense,quest --input-tokens I
                 --output-tokens O --slo-ms X [--slo-stat mean|p99] [--demand TRACE|SPEC|preset:NAME]
                 [--implementation as-published|ideal] [--transplant-method] [--prices FILE] [--csv FILE]
                 [--json FILE] [--page-size ... --dense-layers ...] [--set FIELD=VALUE] [--option KEY=VALUE]

The search, the step sampling and the "what binds" rule are sim.capacity's (its docstring). Never imports
torch.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import click

from dse.commands.replay_options import (
    FLAGS,
    demand_option,
    implementation_option,
    replay_knob_options,
    transplant_option,
    what_if_options,
)

__all__ = ["command", "load_prices"]

_CSV_COLUMNS = (
    "hardware",
    "method",
    "demand_end",
    "batch",
    "per_token_mean_ms",
    "per_token_p99_ms",
    "tokens_per_s",
    "tokens_per_s_per_usd_hour",
    "prefill_s",
    "gpu_gib",
    "host_gib",
    "max_batch_memory",
    "memory_limit",
    "binds",
    "transplanted_method",
)


def load_prices(path: Path | None) -> dict[str, dict[str, Any]]:
    """`--prices FILE`: YAML {profile: {price_per_hour_usd: number, source: text}} -> that dict."""
    if path is None:
        return {}
    import yaml

    from sim.errors import SimInputError
    from sim.yaml_io import load_yaml, read_text_file

    try:
        data = load_yaml(read_text_file(path, "--prices"))
    except yaml.YAMLError as exc:
        raise SimInputError(f"--prices {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SimInputError(f"--prices {path}: expected a mapping profile -> {{price_per_hour_usd, source}}")
    out = {}
    for name, entry in data.items():
        price = entry.get("price_per_hour_usd") if isinstance(entry, dict) else None
        if not isinstance(price, (int, float)) or isinstance(price, bool) or price <= 0:
            raise SimInputError(
                f"--prices {path}: {name}.price_per_hour_usd must be a positive number (US dollars per hour)"
            )
        if not isinstance(entry.get("source"), str) or not entry["source"].strip():
            raise SimInputError(f"--prices {path}: {name}.source must say where the price comes from")
        out[str(name)] = {"price_per_hour_usd": float(price), "source": entry["source"]}
    return out


@click.command(name="capacity")
@click.option("--model", required=True, help="target model (registry name)")
@click.option("--hardware", required=True, help="comma-separated hardware profiles (dse hardware list)")
@click.option(
    "--method", "methods", default="freekv,dense", show_default=True,
    help="comma-separated methods with a simulator model (`dse methods`)",
)
@click.option("--input-tokens", required=True, type=click.IntRange(min=1))
@click.option("--output-tokens", required=True, type=click.IntRange(min=1))
@click.option(
    "--slo-ms",
    required=True,
    type=click.FloatRange(min=0, min_open=True),
    help="per-token (per decode step) latency SLO, milliseconds",
)
@click.option("--slo-stat", type=click.Choice(["mean", "p99"]), default="mean", show_default=True)
@demand_option
@implementation_option
@replay_knob_options
@what_if_options
@click.option(
    "--prices",
    type=click.Path(path_type=Path),
    help="YAML {profile: {price_per_hour_usd, source}}: adds tokens/s per dollar-hour",
)
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), help="write the rows as CSV")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="write the answer as JSON")
@click.option("--seed", default=0, show_default=True, type=int)
@transplant_option
def command(model: str, hardware: str, methods: str, input_tokens: int, output_tokens: int, slo_ms: float,
            slo_stat: str, demand: str | None, implementation: str, page_size: int | None,
            budget_tokens: int | None, sink_tokens: int | None, window_tokens: int | None,
            dense_layers: str | None, overrides: tuple[str, ...], options: tuple[str, ...],
            software: str | None, prices: Path | None, csv_path: Path | None, json_path: Path | None,
            seed: int, transplant_method: bool) -> None:
    """Per hardware profile and method: the largest batch whose per-token latency meets --slo-ms at the
    final context (input + output), its tokens/s, GPU and host memory, and what binds.

    Each method replays traces of its own runtime policy only; --transplant-method prices another
    policy's trace with it (labelled). A trace of dense attention replays with the methods that need no
    demand; the others are refused (exit 2)."""
    from dse.commands.replay_options import knobs_given, split_names, what_ifs
    from dse.paths import check_output_file
    from sim.replay import DemandSource, Question, answer

    for path, flag in ((csv_path, "--csv"), (json_path, "--json")):
        if path is not None:
            check_output_file(path, flag)
    price = load_prices(prices)
    ans = answer(Question(
        model=model, hardware=split_names(hardware, "--hardware"), demand=DemandSource.from_text(demand),
        methods=split_names(methods, "--method"), input_tokens=input_tokens, output_tokens=output_tokens,
        knobs=knobs_given(page_size, budget_tokens, sink_tokens, window_tokens, dense_layers),
        implementations=(implementation,), software=software, transplant_method=transplant_method,
        demand_ends=True, seed=seed, names=FLAGS, **what_ifs(overrides, options),
    ))
    rows, sampling_label = _rows(ans, slo_ms, slo_stat, seed, price)
    payload = _payload(ans, rows, sampling_label, price, slo_ms, slo_stat)
    _write(payload, rows, json_path, csv_path)
    _print(payload, bool(price))


def _rows(ans: Any, slo_ms: float, slo_stat: str, seed: int,
          price: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """One row per answer cell (profile, method, demand end): the capacity search's answer."""
    from sim.capacity import capacity

    rows, sampling_label = [], ""
    for cell in ans.cells:
        found = capacity(cell.config, cell.priced_demand, slo_ms / 1e3, slo_stat, seed)
        sampling_label = found.sampling.label() if found.sampling else sampling_label
        row = {"hardware": cell.hardware, "method": cell.method, "demand_end": cell.demand_end,
               **found.to_dict(),
               "transplanted_method": cell.transplanted_method}
        hourly = price.get(cell.hardware, {}).get("price_per_hour_usd")
        tps = row["tokens_per_s"]
        row["tokens_per_s_per_usd_hour"] = tps / hourly if hourly and tps else None
        rows.append(row)
    return rows, sampling_label


def _payload(ans: Any, rows: list[dict], sampling_label: str, price: dict, slo_ms: float,
             slo_stat: str) -> dict[str, Any]:
    q = ans.question
    return {
        "question": {
            "model": q.model, "hardware": list(q.hardware), "methods": list(ans.methods),
            "input_tokens": q.input_tokens, "output_tokens": q.output_tokens, "slo_ms": slo_ms,
            "slo_stat": slo_stat, "implementation": q.implementations[0],
            "transplant_method": q.transplant_method, "knobs": ans.knobs.to_dict()["values"],
        },
        "demand": {"label": ans.demand.label, "provenance": ans.demand.provenance},
        "step_sampling": sampling_label,
        "binds_rule": "sim/capacity.py docstring",
        "prices": price,
        "rows": rows,
        "notes": ans.table_notes(),
    }


def _write(payload: dict, rows: list[dict], json_path: Path | None, csv_path: Path | None) -> None:
    from dse.paths import write_text

    if json_path is not None:
        write_text(json_path, json.dumps(payload, indent=2, default=float), "--json")
    if csv_path is not None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=_CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        write_text(csv_path, buf.getvalue(), "--csv")


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _print(payload: dict, priced: bool) -> None:
    from rich.table import Table

    from dse.commands.sim_render import console as make_console

    q = payload["question"]
    console = make_console()
    console.print(
        f"[bold]{q['model']}[/], {q['input_tokens']} input + {q['output_tokens']} output tokens, per-token "
        f"{q['slo_stat']} latency <= {q['slo_ms']:g} ms, priced {q['implementation']}"
    )
    console.print(f"demand: {payload['demand']['label']}\n  provenance: {payload['demand']['provenance']}")
    console.print(f"steps: {payload['step_sampling']}")
    table = Table(title="largest batch under the SLO (batch = concurrent sequences)")
    cols = ["hardware", "method", "demand", "batch", "mean ms", "p99 ms", "tokens/s"]
    cols += ["tok/s per $/h"] if priced else []
    cols += ["GPU GiB", "host GiB", "mem max", "binds"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("hardware", "method", "demand", "binds") else "right")
    for r in payload["rows"]:
        end = r["demand_end"]
        cells = [
            r["hardware"],
            r["method"],
            ("-" if end.startswith("n/a") else end) + (" (transplanted)" if r["transplanted_method"] else ""),
            str(r["batch"]),
            _fmt(r["per_token_mean_ms"], ".1f"),
            _fmt(r["per_token_p99_ms"], ".1f"),
            _fmt(r["tokens_per_s"], ",.0f"),
        ]
        cells += [_fmt(r["tokens_per_s_per_usd_hour"], ",.0f")] if priced else []
        cells += [
            _fmt(r["gpu_gib"], ".1f"),
            _fmt(r["host_gib"], ".1f"),
            str(r["max_batch_memory"]),
            r["binds"],
        ]
        table.add_row(*cells)
    console.print(table)
    for note in payload["notes"]:
        console.print(f"[yellow]note:[/] {note}")
    console.print(
        "binds: memory when the answer is the memory bound, else the SLO with the largest share "
        "of the first batch over it (rule: sim/capacity.py)"
    )
