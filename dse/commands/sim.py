"""`dse sim`: replay a trace (or synthetic demand) on a hardware profile; `dse sim calibrate`.

    dse sim [run] [TRACE | --synthetic SPEC] --model M --hardware H --method freekv|all ... [--json]
        [--transplant-method]
    dse sim calibrate TRACE --hardware H [--out fitted.yaml] [--json]
    dse sim calibrate --microbench FILE --hardware H [--software S] --out DIR [--json]

Options become a sim.replay.Question; the Answer's cells are simulated here and shown by
dse.commands.sim_render. Never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from dse.commands.model_options import model_options
from dse.commands.number_types import number
from dse.commands.replay_options import (
    FLAGS,
    gpu_memory_option,
    replay_knob_options,
    transplant_option,
    what_if_options,
)
from dse.commands.sim_calibrate import calibrate_command
from traces.numbers import COSINE, SEED, TOKENS

__all__ = ["command"]


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


command.add_command(calibrate_command)


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
    "--model", default=None,
    help="target model (registry name, a model file's: --model-file, or the path of a .gguf file or HF "
    "directory whose metadata gives the shape); a trace of another model is mapped onto its layers and heads"
)
@model_options
@click.option("--hardware", required=True, help="hardware profile name or YAML file (dse hardware list)")
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
    help="a method with a simulator model (`dse methods`), or 'all' to compare [the model of the trace's "
    "own policy; without a trace freekv]",
)
@click.option("--batch", "batch_text", default="1", show_default=True,
              help="batch size, or a comma-separated list (1,4,16): one result per batch")
@click.option("--input-tokens", default=600, show_default=True, type=number(TOKENS))
@click.option("--output-tokens", default=16384, show_default=True, type=number(TOKENS))
@replay_knob_options
@click.option("--tau", type=number(COSINE),
              help="recompute corrections from recorded similarities [the trace's]")
@what_if_options
@gpu_memory_option
@click.option("--seed", default=0, show_default=True, type=number(SEED))
@click.option("--estimate-ranges/--no-estimate-ranges", "estimate_ranges", default=None,
              help="also price as-published answers with every estimated constant at the cheap and at the "
              "dear end of its stated range (low/high ms per token) [on, off with --method all]")
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
def run_command(trace: Path | None, synthetic: str | None, model: str | None, model_file: Path | None,
                max_positions: int | None, rope_scaling: str | None, hardware: str,
                implementation: str | None, method: str | None, batch_text: str, input_tokens: int,
                output_tokens: int, page_size: int | None, budget_tokens: int | None, sink_tokens: int | None,
                window_tokens: int | None, dense_layers: str | None, tau: float | None,
                overrides: tuple[str, ...], options: tuple[str, ...], software: str | None,
                gpu_memory_utilization: float, seed: int, estimate_ranges: bool | None, engine: str,
                as_json: bool, csv_path: Path | None, timeline_html: Path | None, chrome_trace: Path | None,
                timeline_steps: str, study_source: str | None, trial: str | None,
                transplant_method: bool) -> None:
    """Simulate METHOD on HARDWARE for MODEL, from TRACE, --study S --trial N, or --synthetic SPEC.

    With a TRACE, page size, budget, sink, window, tau and dense layers are the trace's unless given here
    (each override is reported with the trace's value). --study S --trial N replays the trace a stored
    study run recorded (N: a trial number, 'dense' or 'untuned'). Each method replays traces of its own
    runtime policy only; --transplant-method prices another policy's trace with it (labelled)."""
    from dse.commands.model_options import choose_model
    from dse.commands.replay_options import knobs_given, what_ifs
    from sim.replay import Question, answer

    model = choose_model(model, model_file, max_positions, rope_scaling)
    batches = _batches(batch_text)
    _check_outputs(batches, timeline_html, chrome_trace, csv_path)
    mode = implementation or ("both" if method == "all" else "as-published")
    question = Question(
        model=model, hardware=(hardware,), demand=_demand(trace, synthetic, study_source, trial),
        methods=() if method in (None, "all") else (method,), every_method=method == "all",
        input_tokens=input_tokens, output_tokens=output_tokens, batches=tuple(batches),
        knobs=knobs_given(page_size, budget_tokens, sink_tokens, window_tokens, dense_layers, tau),
        implementations=("as-published", "ideal") if mode == "both" else (mode,), software=software,
        transplant_method=transplant_method, seed=seed, names=FLAGS, **what_ifs(overrides, options),
        gpu_memory_utilization=gpu_memory_utilization,
    )
    ans = answer(question)
    steps = _timeline_steps(timeline_steps, output_tokens)
    runs = [_simulate(ans, batch, seed, engine, steps) for batch in batches]
    ends = []
    if estimate_ranges if estimate_ranges is not None else method != "all":
        from dse.commands.sim_estimates import spreads

        ends = [spreads(ans, b, seed, engine, r[0]) for b, r in zip(batches, runs, strict=True)]
    _show(ans, batches, runs, method == "all", as_json, csv_path, (timeline_html, chrome_trace, steps), ends)


def _demand(trace: Path | None, synthetic: str | None, study_source: str | None, trial: str | None) -> Any:
    """The sim.replay.DemandSource of TRACE, --synthetic or --study/--trial (one of them, or none)."""
    from sim import SimInputError
    from sim.replay import DemandSource

    if (study_source is None) != (trial is None):
        raise SimInputError("--study and --trial go together: --study STUDY --trial N (or dense, untuned)")
    if study_source is not None:
        if trace is not None or synthetic:
            raise SimInputError("give one demand: a TRACE, --study/--trial, or --synthetic SPEC")
        from dse.commands.sim_study import study_trace

        trace = study_trace(study_source, str(trial))
    if trace is not None and synthetic:
        raise SimInputError("give either a TRACE directory or --synthetic SPEC, not both")
    return DemandSource(trace=trace, spec=synthetic or None)


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


def _check_outputs(batches: list[int], html: Path | None, chrome: Path | None, csv_path: Path | None) -> None:
    from dse.paths import check_output_file
    from sim import SimInputError

    if len(batches) > 1 and (html or chrome):
        raise SimInputError("--timeline/--chrome-trace take one batch size; give --batch a single number")
    for path, flag in ((html, "--timeline"), (chrome, "--chrome-trace"), (csv_path, "--csv")):
        if path is not None:
            check_output_file(path, flag)


def _timeline_steps(text: str, output_tokens: int) -> list[int]:
    from sim import SimInputError

    try:
        return sorted({int(x) for x in text.split(",") if x.strip()}) or [output_tokens - 1]
    except ValueError:
        raise SimInputError(f"--timeline-steps must be comma-separated integers, got {text!r}") from None


def _simulate(ans: Any, batch: int, seed: int, engine: str,
              steps: list[int]) -> tuple[dict[str, dict], dict[str, str]]:
    """by_mode[implementation][method] -> SimResult of the answer's cells at `batch`, and the methods
    skipped (why); with every method, a method the simulator refuses is skipped with its reason."""
    from sim import SimInputError, run_simulation

    skipped = dict(ans.skipped)
    by_mode: dict[str, dict] = {impl: {} for impl in ans.question.implementations}
    for cell in (c for c in ans.cells if c.batch == batch):
        if cell.method in skipped:
            continue
        try:
            by_mode[cell.implementation][cell.method] = run_simulation(
                cell.config, cell.demand, seed, engine=engine, timeline_steps=steps)  # type: ignore[arg-type]
        except SimInputError as exc:
            if not ans.question.every_method:
                raise
            skipped[cell.method] = str(exc)
    first = by_mode[ans.question.implementations[0]]
    for results in by_mode.values():
        for name in [n for n in results if n in skipped]:
            del results[name]
    if not first:
        raise SimInputError(
            "no method could be simulated: " + "; ".join(f"{k}: {v}" for k, v in skipped.items())
        )
    return by_mode, skipped


def _show(ans: Any, batches: list[int], runs: list, every: bool, as_json: bool, csv_path: Path | None,
          timeline: tuple, ends: list) -> None:
    """Print the results (tables or JSON), write the CSV and the timeline; `ends`: per batch, the
    estimate-range spreads (dse.commands.sim_estimates), or empty."""
    from dse.commands import sim_render as render
    from dse.commands.sim_estimates import print_spreads, spreads_json

    modes = list(ans.question.implementations)
    method = "all" if every else ans.methods[0]
    notes, trace_info = list(ans.notes), ans.provenance()["trace"]
    if csv_path is not None:
        render.write_csv(csv_path, batches, runs)
    if len(batches) == 1:
        render.write_timelines(runs[0][0][modes[0]], timeline[2], timeline[0], timeline[1])
    if as_json:
        payloads = [render.json_payload(r[0], r[1], modes, method, notes, trace_info) for r in runs]
        for payload, found in zip(payloads, ends, strict=False):  # beside the as-published result
            target = payload["as-published"] if len(modes) > 1 and not every else payload
            target["estimate_ranges"] = spreads_json(found)
        out = payloads[0] if len(batches) == 1 else {
            "batches": {str(b): p for b, p in zip(batches, payloads, strict=True)}}
        click.echo(json.dumps(out, indent=2, default=float))
        return
    for note in notes:
        click.echo(f"note: {note}")
    for i, (by_mode, skipped) in enumerate(runs):
        if every:
            render.print_comparison(by_mode, skipped)
        else:
            for results in by_mode.values():
                render.print_single(results[method])
        if i < len(ends):
            print_spreads(ends[i], batches[i])
