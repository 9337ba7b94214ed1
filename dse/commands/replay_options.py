"""The options `dse sim`, `dse capacity` and `dse serve` share, and the one table naming each replay
field by its flag (errors and notes of the replay service speak in flags: sim.replay.Question.names).

    @replay_knob_options
    @what_if_options
    @click.command()
    def command(..., page_size, budget_tokens, sink_tokens, window_tokens, dense_layers, overrides, options,
                software, transplant_method): ...
    question = Question(..., knobs=knobs_given(page_size=..., ...), names=FLAGS, ...)

Never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from dse.commands.number_types import number
from traces.numbers import CONTEXT_TOKENS, TOKENS

__all__ = ["FLAGS", "DEMAND_HELP", "demand_option", "transplant_option", "implementation_option",
           "replay_knob_options", "what_if_options", "knobs_given", "what_ifs", "split_names",
           "gpu_memory_option"]

# replay field (sim.SimConfig / sim.replay.Question) -> the flag that sets it
FLAGS: dict[str, str] = {
    "batch_size": "--batch", "input_tokens": "--input-tokens", "output_tokens": "--output-tokens",
    "budget_tokens": "--budget-tokens", "page_size": "--page-size", "sink_tokens": "--sink-tokens",
    "window_tokens": "--window-tokens", "dense_layers": "--dense-layers", "tau": "--tau",
    "hardware_overrides": "--set", "software_overrides": "--set", "method_options": "--option",
    "method": "--method", "model": "--model", "hardware": "--hardware", "software": "--software",
    "implementation": "--implementation", "transplant_method": "--transplant-method",
    "gpu_memory_utilization": "--gpu-memory-utilization",
}

DEMAND_HELP = (
    "recall demand: a trace directory, a synthetic spec ('correction=0.59,hit=0.8', keys as in "
    "dse sim --help), or preset:NAME (preset:freekv-tau0.9, preset:freekv-tau0.8: published rates, with "
    "the answer also at their low and high ends) [preset:freekv-tau0.9]"
)
TRANSPLANT_HELP = (
    "price a trace of one runtime policy with another method's model (refused otherwise); labelled "
    "'demand of <trace method> transplanted onto <method>' in every output"
)


def demand_option(command: Callable) -> Callable:
    """`--demand TRACE|SPEC|preset:NAME` of dse capacity and serve (sim.replay.DemandSource.from_text)."""
    return click.option("--demand", default=None, help=DEMAND_HELP)(command)


def transplant_option(command: Callable) -> Callable:
    """The `--transplant-method` flag (SimConfig.transplant_method) of dse sim, capacity and serve."""
    return click.option("--transplant-method", is_flag=True, help=TRANSPLANT_HELP)(command)


def gpu_memory_option(command: Callable) -> Callable:
    """`--gpu-memory-utilization F` (sim.replay.Question.gpu_memory_utilization, SimConfig's): the share of
    each GPU's memory the engine may fill, vLLM's flag of the same name and default."""
    from sim.config import DEFAULT_GPU_MEMORY_UTILIZATION

    return click.option(
        "--gpu-memory-utilization", type=click.FloatRange(0, 1, min_open=True),
        default=DEFAULT_GPU_MEMORY_UTILIZATION, show_default=True,
        help="share of each GPU's memory usable for weights, activations and KV, the rest kept as headroom "
        "(vLLM's --gpu-memory-utilization, same default)",
    )(command)


def implementation_option(command: Callable) -> Callable:
    """`--implementation as-published|ideal` (SimConfig.implementation) of dse capacity and serve; dse sim
    also takes `both`."""
    return click.option(
        "--implementation",
        type=click.Choice(["as-published", "ideal"]),
        default="as-published",
        show_default=True,
    )(command)


def replay_knob_options(command: Callable) -> Callable:
    """--page-size, --budget-tokens, --sink-tokens, --window-tokens, --dense-layers: the shared retrieval
    knobs (traces.retrieval_knobs), each the trace's unless given, else the default."""
    from sim.replay import KNOB_DEFAULTS

    d = KNOB_DEFAULTS
    options = [
        click.option("--page-size", type=number(TOKENS), help=f"[the trace's, else {d['page_size']}]"),
        click.option("--budget-tokens", type=number(TOKENS),
                     help=f"counts sink and window [the trace's, else {d['budget_tokens']}]"),
        click.option("--sink-tokens", type=number(CONTEXT_TOKENS),
                     help=f"[the trace's, else {d['sink_tokens']}]"),
        click.option("--window-tokens", type=number(CONTEXT_TOKENS),
                     help=f"[the trace's, else {d['window_tokens']}]"),
        click.option("--dense-layers", help="comma-separated layers kept dense, '' for none [the trace's, "
                     f"else {','.join(map(str, d['dense_layers']))}: the runtime keeps layer 0 dense]"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def what_if_options(command: Callable) -> Callable:
    """--set (hardware.FIELD / link.FIELD ... and software.FIELD what-ifs), --option (method knobs the
    simulator reads), --software."""
    options = [
        click.option("--set", "overrides", multiple=True,
                     help="hardware override, e.g. link.h2d_effective_gbps=10, or software.FIELD=seconds"),
        click.option("--option", "options", multiple=True,
                     help="method knob KEY=VALUE the simulator reads (`dse methods METHOD` lists them)"),
        click.option("--software", default=None,
                     help="software profile name or YAML file (dse hardware software) [pytorch2-cuda12]"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def knobs_given(page_size: int | None, budget_tokens: int | None, sink_tokens: int | None,
                window_tokens: int | None, dense_layers: str | None,
                tau: float | None = None) -> dict[str, Any]:
    """The knobs given on the command line (None: not given) for sim.replay.Question.knobs."""
    from sim.replay import parse_dense_layers

    return dict(page_size=page_size, budget_tokens=budget_tokens, sink_tokens=sink_tokens,
                window_tokens=window_tokens, tau=tau,
                dense_layers=parse_dense_layers(dense_layers, FLAGS["dense_layers"]))


def what_ifs(overrides: tuple[str, ...], options: tuple[str, ...]) -> dict[str, Any]:
    """Question fields of --set and --option: hardware_overrides, software_overrides, method_options."""
    from dse.commands.key_values import key_values

    sets = key_values(overrides, "--set")
    return {
        "hardware_overrides": {k: v for k, v in sets.items() if not k.startswith("software.")},
        "software_overrides": {k.removeprefix("software."): v for k, v in sets.items()
                               if k.startswith("software.")},
        "method_options": key_values(options, "--option"),
    }


def split_names(text: str, flag: str) -> tuple[str, ...]:
    """'a,b' -> ('a', 'b'); nothing named is a SimInputError naming the flag."""
    from sim.errors import SimInputError

    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise SimInputError(f"{flag} needs at least one comma-separated name, got {text!r}")
    return items
