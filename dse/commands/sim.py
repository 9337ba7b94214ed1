"""`dse sim`: replay a trace (or synthetic demand) on a hardware profile; `dse sim calibrate`.

    dse sim [run] [TRACE | --synthetic SPEC] --model M --hardware H --method freekv|all ... [--json]
        [--transplant-method]
    dse sim calibrate TRACE --hardware H [--out fitted.yaml] [--json]
    dse sim calibrate --microbench FILE --hardware H [--software S] --out DIR [--json]

Never imports torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from dse.commands.demand_option import transplant_option

__all__ = ["command"]


def _pairs(values: tuple[str, ...], option: str) -> dict[str, Any]:
    from dse.commands.key_values import key_values

    return key_values(values, option)


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


class _SimGroup(click.Group):
    """`dse sim ARGS` runs `dse sim run ARGS` unless the first word names a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_SimGroup)
def command() -> None:
    """Replay a trace (or a synthetic one) on a hardware profile: simulated latency, memory, timeline.

    \b
    dse sim [run] [TRACE | --synthetic SPEC] --model M --hardware H --method freekv|all [...]
    dse sim calibrate TRACE --hardware H [--out fitted.yaml]
    """


@command.command("run")
@click.argument("trace", required=False, type=click.Path(path_type=Path))
@click.option(
    "--synthetic",
    "synthetic",
    help="synthetic demand: 'correction=0.6,hit=0.8' (keys: correction, hit = share of selected pages "
    "already on the GPU; optional layer_sd, head_sd, step_sd, step_rho, steps, seqs, pages: see README), a "
    "YAML/JSON file of those keys, or preset:NAME (preset:freekv-tau0.9, preset:freekv-tau0.8: published "
    "rates with their provenance)",
)
@click.option(
    "--model", required=True, help="target model (registry name); a trace of another model is transplanted"
)
@click.option("--hardware", required=True, help="hardware profile name or YAML file (dse hardware list)")
@click.option(
    "--software",
    default=None,
    help="software profile name or YAML file (dse hardware software); default pytorch2-cuda12",
)
@click.option(
    "--implementation",
    type=click.Choice(["as-published", "ideal", "both"]),
    default=None,
    help="price methods as their public code runs them, or at hardware limits; default: as-published, "
    "both with --method all",
)
@click.option(
    "--method",
    default=None,
    help="method name, or 'all' to compare [the model of the trace's own policy; without a trace freekv]",
)
@click.option("--batch", "batch_text", default="1", show_default=True,
              help="batch size, or a comma-separated list (1,4,16): one result per batch")
@click.option("--input-tokens", default=600, show_default=True, type=click.IntRange(min=1))
@click.option("--output-tokens", default=16384, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--budget-tokens", type=click.IntRange(min=1), help="counts sink and window [the trace's, else 2048]"
)
@click.option("--page-size", type=click.IntRange(min=1), help="[the trace's, else 32]")
@click.option("--sink-tokens", type=click.IntRange(min=0), help="[the trace's, else 512]")
@click.option("--window-tokens", type=click.IntRange(min=0), help="[the trace's, else 512]")
@click.option("--tau", type=float, help="recompute corrections from recorded similarities [the trace's]")
@click.option(
    "--dense-layers",
    help="comma-separated layers kept dense, '' for none [the trace's, else 0: the runtime keeps layer 0 "
    "dense]",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    help="hardware override, e.g. link.h2d_effective_gbps=10, or software.FIELD=seconds",
)
@click.option("--option", "options", multiple=True, help="method option KEY=VALUE")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--engine", type=click.Choice(["aggregated", "simpy"]), default="aggregated", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print every output as JSON")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path),
              help="write one row per (batch, method, implementation) as CSV")
@click.option(
    "--timeline", "timeline_html", type=click.Path(path_type=Path), help="write a plotly HTML timeline"
)
@click.option(
    "--chrome-trace", type=click.Path(path_type=Path), help="write the timeline as Chrome trace JSON"
)
@click.option("--timeline-steps", default="", help="comma-separated steps for the timeline (default: last)")
@click.option(
    "--study",
    "study_source",
    default=None,
    help="replay a stored study run's trace: the study YAML, storage URL or SQLite file (with --trial)",
)
@click.option("--trial", default=None, help="with --study: a trial number, 'dense' or 'untuned'")
@transplant_option
def run_command(
    trace: Path | None,
    synthetic: str | None,
    model: str,
    hardware: str,
    software: str | None,
    implementation: str | None,
    method: str | None,
    batch_text: str,
    input_tokens: int,
    output_tokens: int,
    budget_tokens: int | None,
    page_size: int | None,
    sink_tokens: int | None,
    window_tokens: int | None,
    tau: float | None,
    dense_layers: str | None,
    overrides: tuple[str, ...],
    options: tuple[str, ...],
    seed: int,
    engine: str,
    as_json: bool,
    csv_path: Path | None,
    timeline_html: Path | None,
    chrome_trace: Path | None,
    timeline_steps: str,
    study_source: str | None,
    trial: str | None,
    transplant_method: bool,
) -> None:
    """Simulate METHOD on HARDWARE for MODEL, from TRACE, --study S --trial N, or --synthetic SPEC.

    With a TRACE, page size, budget, sink, window, tau and dense layers are the trace's unless given here
    (each override is reported with the trace's value). --study S --trial N replays the trace a stored
    study run recorded (N: a trial number, 'dense' or 'untuned'). Each method replays traces of its own
    runtime policy only; --transplant-method prices another policy's trace with it (labelled)."""
    from dse.commands import sim_inputs
    from sim import SimInputError, demand_from_trace, synthetic_demand
    from sim.methods import available_methods
    from traces.models import get_model

    if (study_source is None) != (trial is None):
        raise SimInputError("--study and --trial go together: --study STUDY --trial N (or dense, untuned)")
    if study_source is not None:
        if trace is not None or synthetic:
            raise SimInputError("give one demand: a TRACE, --study/--trial, or --synthetic SPEC")
        from dse.commands.sim_study import study_trace

        trace = study_trace(study_source, str(trial))
    if trace is not None and synthetic:
        raise SimInputError("give either a TRACE directory or --synthetic SPEC, not both")
    from dse.paths import check_output_file

    batches = _batches(batch_text)
    if len(batches) > 1 and (timeline_html or chrome_trace):
        raise SimInputError("--timeline/--chrome-trace take one batch size; give --batch a single number")
    for path, flag in ((timeline_html, "--timeline"), (chrome_trace, "--chrome-trace"), (csv_path, "--csv")):
        if path is not None:
            check_output_file(path, flag)
    sim_inputs.check_max_positions(model, input_tokens, output_tokens)
    given = dict(page_size=page_size, budget_tokens=budget_tokens, sink_tokens=sink_tokens,
                 window_tokens=window_tokens, tau=tau,
                 dense_layers=sim_inputs.parse_dense_layers(dense_layers))
    demand, runtime, cli_notes, trace_info = None, None, [], None
    if trace is not None:
        from traces import open_trace

        reader = open_trace(trace)
        runtime = dict(reader.meta.runtime)
        status = sim_inputs.trace_status_note(reader)
        cli_notes += [status] if status else []
        trace_info = {"path": str(trace), "complete": reader.complete, "truncated": reader.truncated,
                      "steps": reader.n_steps}
        demand = demand_from_trace(reader, target_model=model)  # dense attention: Demand.dense_attention
    elif synthetic:
        from sim.demand_presets import get_preset, is_preset

        if is_preset(synthetic):
            preset = get_preset(synthetic)
            cli_notes.append(
                f"demand preset:{preset.name} = {preset.spec()}: {preset.label}; {preset.source}"
            )
            synthetic = preset.spec()
        demand = synthetic_demand(synthetic, model=model, seed=seed)
    knobs = sim_inputs.resolve_knobs(given, runtime, get_model(model).n_layers)
    cli_notes += knobs.notes
    if trace_info is not None:
        trace_info["knobs"] = knobs.to_dict()
    sets = _pairs(overrides, "--set")
    base = dict(
        model=model,
        hardware=hardware,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        **knobs.values,
        hardware_overrides={k: v for k, v in sets.items() if not k.startswith("software.")},
        software_overrides={
            k.removeprefix("software."): v for k, v in sets.items() if k.startswith("software.")
        },
        method_options=_pairs(options, "--option"),
        transplant_method=transplant_method,
    )
    if software is not None:
        base["software"] = software
    if method is None:  # the model of the trace's own policy
        own = demand.method if demand is not None else None
        method = own or "freekv"
    mode = implementation or ("both" if method == "all" else "as-published")
    modes = ["as-published", "ideal"] if mode == "both" else [mode]
    last = output_tokens - 1
    try:
        steps = sorted({int(x) for x in timeline_steps.split(",") if x.strip()}) or [last]
    except ValueError:
        raise SimInputError(
            f"--timeline-steps must be comma-separated integers, got {timeline_steps!r}"
        ) from None
    methods = available_methods() if method == "all" else [method]
    if method == "all":
        from sim.replay_rules import replay_refusal, replayable_methods

        refusal = replay_refusal(methods, demand, transplant_method)
        methods = replayable_methods(methods, demand, transplant_method)[0]
        if refusal:
            cli_notes.append(f"not replayed: {refusal}")
    runs = [_run_batch(b, methods, modes, method, demand, base, seed, engine, steps) for b in batches]
    if csv_path is not None:
        _write_csv(csv_path, batches, runs)
    if len(batches) > 1:
        if as_json:
            click.echo(json.dumps({"batches": {str(b): _json_payload(r[0], r[1], modes, method, cli_notes,
                                                                        trace_info)
                                               for b, r in zip(batches, runs, strict=True)}},
                                  indent=2, default=float))
            return
        for note in cli_notes:
            click.echo(f"note: {note}")
        for by_mode, skipped in runs:
            if method == "all":
                _print_comparison(by_mode, skipped)
            else:
                for rs in by_mode.values():
                    _print_single(rs[method])
        return
    by_mode, skipped = runs[0]
    results = by_mode[modes[0]]
    _write_timelines(results, steps, timeline_html, chrome_trace)
    if as_json:
        click.echo(json.dumps(_json_payload(by_mode, skipped, modes, method, cli_notes, trace_info), indent=2,
                              default=float))
        return
    for note in cli_notes:
        click.echo(f"note: {note}")
    if method == "all":
        _print_comparison(by_mode, skipped)
    else:
        for rs in by_mode.values():
            _print_single(rs[method])


def _batches(text: str) -> list[int]:
    from sim import SimInputError

    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise SimInputError(
            f"--batch must be a positive integer or a comma-separated list (1,4,16), got {text!r}"
        )
    return list(dict.fromkeys(values))


def _run_batch(batch: int, methods: list[str], modes: list[str], method: str, demand: Any, base: dict,
               seed: int, engine: str, steps: list[int]) -> tuple[dict[str, dict], dict[str, str]]:
    """by_mode[implementation][method] -> SimResult at `batch`, and the methods skipped (why)."""
    from sim import SimConfig, SimInputError, run_simulation

    skipped: dict[str, str] = {}
    by_mode: dict[str, dict] = {m: {} for m in modes}
    for name in methods:
        if method == "all" and demand is None:
            from sim.methods import method_class

            if method_class(name).needs_demand:
                skipped[name] = "needs a trace or --synthetic"
                continue
        for impl in modes:
            cfg = _sim_config(SimConfig, method=name, implementation=impl, batch_size=batch, **base)
            try:
                by_mode[impl][name] = run_simulation(cfg, demand, seed, engine=engine, timeline_steps=steps)  # type: ignore[arg-type]
            except SimInputError as exc:
                if method != "all":
                    raise
                skipped[name] = str(exc)  # e.g. a method option that only some methods accept
    if not by_mode[modes[0]]:
        raise SimInputError(
            "no method could be simulated: " + "; ".join(f"{k}: {v}" for k, v in skipped.items())
        )
    return by_mode, skipped


_CSV_COLUMNS = ("batch", "method", "implementation", "oom", "mean_ms", "p50_ms", "p99_ms", "tokens_per_s",
                "prefill_s", "gpu_gib", "host_gib", "max_batch", "memory_limit", "demand")


def _write_csv(path: Path, batches: list[int], runs: list) -> None:
    import csv
    import io

    from dse.paths import write_text

    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(_CSV_COLUMNS)
    for batch, (by_mode, _) in zip(batches, runs, strict=True):
        for impl, results in by_mode.items():
            for name, res in results.items():
                d = res.to_dict()
                lat, mem = d["per_token_latency_s"] or {}, d["memory"]
                ms = [f"{lat[k] * 1e3:.4f}" if lat else "" for k in ("mean", "p50", "p99")]
                writer.writerow([batch, name, impl, res.oom, *ms,
                                 "" if res.oom else f"{d['throughput_tokens_per_s']:.3f}",
                                 "" if res.oom else f"{d['prefill_s']:.4f}",
                                 f"{mem['gpu_bytes'] / 2**30:.3f}", f"{mem['host_bytes'] / 2**30:.3f}",
                                 mem["max_batch"], mem["limit"], d["demand"]])
    write_text(path, buf.getvalue(), "--csv")


def _json_payload(by_mode: dict, skipped: dict, modes: list[str], method: str, cli_notes: list[str],
                  trace_info: Any) -> dict[str, Any]:
    results = by_mode[modes[0]]
    if method == "all":
        payload: dict[str, Any] = {
            "implementation": modes[0],
            "results": {k: r.to_dict() for k, r in results.items()},
            "speedup": _speedups(results),
            "skipped": skipped,
            "notes": cli_notes,
        }
        if len(modes) > 1:
            payload["results_by_implementation"] = {
                impl: {k: r.to_dict() for k, r in rs.items()} for impl, rs in by_mode.items()
            }
    elif len(modes) > 1:
        payload = {impl: rs[method].to_dict() for impl, rs in by_mode.items()}
        for one in payload.values():
            one["notes"] = cli_notes + one["notes"]
            one["trace"] = trace_info
    else:
        payload = results[method].to_dict()
        payload["notes"] = cli_notes + payload["notes"]
    if len(modes) == 1 or method == "all":
        payload["trace"] = trace_info
    return payload


# SimConfig fields as the user names them on this command line
_FLAGS = {
    "batch_size": "--batch", "input_tokens": "--input-tokens", "output_tokens": "--output-tokens",
    "budget_tokens": "--budget-tokens", "page_size": "--page-size", "sink_tokens": "--sink-tokens",
    "window_tokens": "--window-tokens", "dense_layers": "--dense-layers", "tau": "--tau",
    "hardware_overrides": "--set", "software_overrides": "--set", "method_options": "--option",
    "method": "--method", "model": "--model", "hardware": "--hardware", "software": "--software",
    "implementation": "--implementation",
}


def _sim_config(cls: Any, **kwargs: Any) -> Any:
    """SimConfig(**kwargs), its errors worded with this command's flags (`--batch`, not batch_size)."""
    import re

    from sim import SimInputError

    try:
        return cls(**kwargs)
    except SimInputError as exc:
        def flag(m: re.Match) -> str:
            return _FLAGS.get(m.group(1), m.group(0))

        text = re.sub(r"SimConfig\.([a-z_]+)", flag, str(exc))
        text = re.sub(r"\b(" + "|".join(k for k in _FLAGS if "_" in k) + r")\b", flag, text)
        raise SimInputError(text) from None


def _speedups(results: dict) -> dict[str, dict[str, float | None]]:
    """speedup[a][b] = mean latency of b / mean latency of a (how much faster a is than b); None where
    either is out of memory (no latency)."""
    lat = {k: r.latency_stats()["mean"] for k, r in results.items()}
    return {a: {b: None if results[a].oom or results[b].oom else lat[b] / lat[a] for b in lat} for a in lat}


def _write_timelines(results: dict, steps: list[int], html: Path | None, chrome: Path | None) -> None:
    if html is None and chrome is None:
        return
    from sim.timeline import timeline_figure, write_chrome_trace

    events = []
    for name, res in results.items():
        if res.oom:  # nothing was timed
            continue
        for step in steps:
            evs = res.timeline(step)
            if len(results) > 1:
                evs = [{**e, "stream": f"{name}/{e['stream']}"} for e in evs]
            events += evs
    if not events:
        from sim import SimInputError

        raise SimInputError("--timeline/--chrome-trace: nothing to draw, every method is out of memory")
    first = next(iter(results.values()))
    label = (
        f"{first.model} on {first.hardware}, batch {first.batch_size}; demand: {first.demand_label}; "
        f"priced {first.pricing_label}"
    )
    from dse.errors import DseError
    from dse.paths import describe_os_error

    try:
        if chrome is not None:
            write_chrome_trace(events, chrome, process_name=f"freekv-dse sim: {label}")
        if html is not None:
            title = f"stream timeline, steps {steps} ({', '.join(results)}): {label}"
            timeline_figure(events, title).write_html(str(html), include_plotlyjs=True)
    except OSError as exc:
        flag = "--chrome-trace" if chrome is not None and exc.filename == str(chrome) else "--timeline"
        raise DseError(f"{flag} {exc.filename}: cannot write ({describe_os_error(exc)})") from None


def _console():
    from rich.console import Console

    console = Console()
    if not console.is_terminal and console.width < 160:  # piped output: do not squeeze the tables
        console = Console(width=160)
    return console


def _print_single(res) -> None:
    from rich.table import Table

    d = res.to_dict()
    console = _console()
    lat = d["per_token_latency_s"]
    console.print(
        f"[bold]{res.method}[/] on [bold]{res.hardware}[/], {res.model}, batch {res.batch_size}; "
        f"demand: {d['demand']}; priced {res.pricing_label}"
    )
    if res.oom:
        console.print(f"[red]{res.oom_message}[/]")
        for note in d["notes"][1:]:
            console.print(f"[yellow]note:[/] {note}")
        return
    for note in d["notes"]:
        console.print(f"[yellow]note:[/] {note}")
    table = Table(title="per-token decode latency and throughput")
    shares = ("select share", "recall share", "host share")
    for col in ("mean ms", "p50 ms", "p99 ms", "prefill s", "tokens/s", *shares):
        table.add_column(col, justify="right")
    table.add_row(
        _ms(lat["mean"]),
        _ms(lat["p50"]),
        _ms(lat["p99"]),
        f"{d['prefill_s']:.3f}",
        f"{d['throughput_tokens_per_s']:.1f}",
        f"{d['critical_share']['select']:.1%}",
        f"{d['critical_share']['recall']:.1%}",
        f"{d['critical_share']['host']:.1%}",
    )
    console.print(table)
    bd = Table(title="critical-path breakdown per step")
    bd.add_column("operation")
    bd.add_column("ms", justify="right")
    bd.add_column("share", justify="right")
    total = sum(d["breakdown_s"].values()) or 1.0
    for op, v in sorted(d["breakdown_s"].items(), key=lambda kv: -kv[1]):
        bd.add_row(op, _ms(v), f"{v / total:.1%}")
    console.print(bd)
    mem = d["memory"]
    gib = 2**30
    console.print(
        f"memory: GPU {mem['gpu_bytes'] / gib:.2f} / {mem['gpu_capacity_bytes'] / gib:.1f} GiB, host "
        f"{mem['host_bytes'] / gib:.2f} / {mem['host_capacity_bytes'] / gib:.1f} GiB, "
        f"{'fits' if mem['fits'] else '[red]OUT OF MEMORY[/]'}; largest batch that fits: {mem['max_batch']} "
        f"(bound by {mem['limit']})"
    )
    util = d["link_utilisation"]
    console.print(f"host link utilisation: h2d {util['h2d']:.1%}, d2h {util['d2h']:.1%}")


def _print_comparison(by_mode: dict[str, dict], skipped: dict[str, str]) -> None:
    """One row per method; a mean-latency column per implementation mode (as-published, ideal)."""
    from rich.table import Table

    console = _console()
    modes = list(by_mode)
    results = by_mode[modes[0]]
    first = next(iter(results.values()))
    labels = {r.demand_label for r in results.values() if r.transplanted_from or r.synthetic}
    labels = labels or {r.demand_label for r in results.values() if not r.demand_label.startswith("none")}
    console.print(
        f"[bold]{first.model}[/] on [bold]{first.hardware}[/], batch {first.batch_size}; "
        f"demand: {', '.join(sorted(labels)) or 'none'}"
    )
    console.print(
        "pricing: "
        + "; ".join(f"{m}: {next(iter(rs.values())).pricing_label}" for m, rs in by_mode.items() if rs)
        + f". Other columns: {modes[0]}."
    )
    table = Table(title="methods compared (per-token decode latency)")
    mean_cols = [f"mean ms {m}" for m in modes]
    shares = ("select", "recall", "host")  # critical_share categories
    for col in ("method", *mean_cols, "p99 ms", "tokens/s", *shares, "memory", "top of breakdown"):
        table.add_column(col, justify="left" if col in ("method", "memory", "top of breakdown") else "right")
    for name, res in results.items():
        d = res.to_dict()
        lat, mem = d["per_token_latency_s"], d["memory"]
        if res.oom:
            table.add_row(name, *["-"] * (len(modes) + 5), f"[red]OOM[/] (max batch {mem['max_batch']})",
                          res.oom_message)
            continue
        top = sorted(d["breakdown_s"].items(), key=lambda kv: -kv[1])[:3]
        means = [_ms(by_mode[m][name].latency_stats()["mean"]) if name in by_mode[m] else "-" for m in modes]
        table.add_row(
            name,
            *means,
            _ms(lat["p99"]),
            f"{d['throughput_tokens_per_s']:.1f}",
            f"{d['critical_share']['select']:.1%}",
            f"{d['critical_share']['recall']:.1%}",
            f"{d['critical_share']['host']:.1%}",
            ("fits" if mem["fits"] else "[red]OOM[/]") + f" (max batch {mem['max_batch']})",
            ", ".join(f"{op} {_ms(v)}" for op, v in top),
        )
    console.print(table)
    sp = _speedups(results)
    st = Table(title=f"speedup ({modes[0]}): row method against column method (column latency / row latency)")
    st.add_column("")
    for b in sp:
        st.add_column(b, justify="right")
    for a, row in sp.items():
        st.add_row(a, *[f"{x:.2f}x" if x is not None and math.isfinite(x) else "-" for x in row.values()])
    console.print(st)
    for name, why in skipped.items():
        console.print(f"[yellow]skipped[/] {name}: {why}")
    for name, res in results.items():
        for note in res.notes:
            console.print(f"[yellow]{name}:[/] {note}")


@command.command("calibrate")
@click.argument("trace", type=click.Path(path_type=Path), required=False)
@click.option("--hardware", required=True, help="profile to fit (name or YAML file)")
@click.option(
    "--microbench",
    type=click.Path(path_type=Path),
    help="calibrate from a GPU microbenchmark JSON (schema freekv-dse-microbench/1) instead of a trace",
)
@click.option("--software", default=None, help="software profile to calibrate with --microbench")
@click.option("--train-fraction", default=0.6, show_default=True, type=float)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="write the fitted profile as YAML; with --microbench a directory for both profiles",
)
@click.option("--json", "as_json", is_flag=True)
def calibrate_command(
    trace: Path | None,
    hardware: str,
    microbench: Path | None,
    software: str | None,
    train_fraction: float,
    out: Path | None,
    as_json: bool,
) -> None:
    """Fit HARDWARE's achievable fractions and overheads to TRACE's measured GPU timings, or calibrate
    HARDWARE and a software profile from a microbenchmark file (--microbench FILE --out DIR)."""
    from dse.paths import check_output_file, write_text
    from sim.calibrate import calibrate
    from sim.errors import SimInputError

    if microbench is not None:
        if trace is not None:
            raise SimInputError("dse sim calibrate: give either a TRACE or --microbench FILE, not both")
        _calibrate_microbench(microbench, hardware, software, out, as_json)
        return
    if trace is None:
        raise SimInputError("dse sim calibrate needs a TRACE directory or --microbench FILE")
    if out is not None:
        check_output_file(out, "--out")
    cal = calibrate(trace, hardware, train_fraction)
    if out is not None:
        import yaml

        data = cal.profile.to_dict()
        write_text(out, yaml.safe_dump(data, sort_keys=False), "--out")
    if as_json:
        click.echo(json.dumps(cal.to_dict(), indent=2))
        return
    click.echo(f"calibrated {cal.profile.name} on {cal.n_train} steps, tested on {cal.n_test} held-out steps")
    for p in cal.before:
        click.echo(f"  {p}: {cal.before[p]:.4g} -> {cal.after[p]:.4g}")
    click.echo(
        f"step_total error: train {cal.train_error:.2%}, held-out {cal.test_error:.2%} "
        f"(uncalibrated {cal.test_error_before:.2%})"
    )
    for note in cal.notes:
        click.echo(f"note: {note}")


def _calibrate_microbench(
    path: Path, hardware: str, software: str | None, out: Path | None, as_json: bool
) -> None:
    from sim.calibrate_microbench import calibrate_microbench
    from sim.errors import SimInputError
    from sim.software import DEFAULT_SOFTWARE

    if out is None:
        raise SimInputError(
            "dse sim calibrate --microbench needs --out DIR (the calibrated hardware and software YAML "
            "files are written there)"
        )
    cal = calibrate_microbench(path, hardware, software or DEFAULT_SOFTWARE)
    hw_path, sw_path = cal.write(out)
    if as_json:
        click.echo(
            json.dumps({**cal.to_dict(), "files": [str(hw_path), str(sw_path)]}, indent=2, default=str)
        )
        return
    click.echo(f"wrote {hw_path} (hardware {cal.hardware.name}) and {sw_path} (software {cal.software.name})")
    for key, (before, after, _) in cal.changed.items():
        click.echo(f"  {key}: {before} -> {after}")
    for note in cal.notes:
        click.echo(f"note: {note}")
    click.echo(
        f"use: FREEKV_DSE_PROFILES={out} dse sim ... --hardware {cal.hardware.name} "
        f"--software {cal.software.name}"
    )
