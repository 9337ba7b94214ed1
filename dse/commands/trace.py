"""`dse trace`: run the real model with a KV policy on a task; measured accuracy, a trace, summary.json.

Example: `dse trace --model smollm2-135m --task passkey --context-tokens 4096 --budget-tokens 1024
--page-size 16 --sink-tokens 64 --window-tokens 64 --tau 0.9 --out runs/x`.
Timing without real weights: `dse trace --model llama-3.1-8b --random-weights 0 --device cuda --dtype bfloat16
...` (add `--layers 2` for a small CPU run); accuracy is then withheld as meaningless.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dse.commands.number_types import number
from dse.errors import DseError
from traces.catalogue import CATALOGUE, names
from traces.catalogue.retrieval import GROUP_POOLINGS, PAGE_SUMMARIES
from traces.numbers import BATCH, CONTEXT_TOKENS, COSINE, LAYERS, SAMPLES, SEED, TOKENS
from traces.user_files import check_input_path

__all__ = ["command"]

_POS = number(TOKENS)
_NONNEG = number(CONTEXT_TOKENS)


def _having(knob: str) -> str:
    """The methods with a runtime policy that read `knob`, for help texts."""
    return ", ".join(e.name for e in CATALOGUE.values() if e.policy is not None
                     and (spec := e.knobs.spec(knob)) is not None and spec.reads("runtime"))


def _dense_layers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise DseError(
            f"--dense-layers must be comma-separated layer indices such as '0' or '0,1' (or '' for none), "
            f"got {text!r}"
        ) from None


def _options(values: tuple[str, ...]) -> dict[str, Any]:
    """--option KEY=VALUE pairs -> the method's knobs (RuntimeConfig.knobs checks names and values)."""
    from dse.commands.key_values import key_values

    return key_values(values, "--option", "kernel_size=7, a method knob")


def _check_before_loading(model: str, dense_layers: tuple[int, ...], out_dir: Path, overwrite: bool) -> None:
    """What can be checked without the model: its layers, the output directory, an existing trace."""
    from dse.paths import check_output_dir
    from traces.models import get_model

    n_layers = get_model(model).n_layers
    bad = [i for i in dense_layers if not 0 <= i < n_layers]
    if bad:
        raise DseError(
            f"--dense-layers {','.join(map(str, dense_layers))}: layer(s) {bad} do not exist; model "
            f"{model!r} has {n_layers} layers (0-{n_layers - 1})"
        )
    check_output_dir(out_dir, "--out")
    trace_dir = out_dir / "trace"
    held = [name for name in ("meta.json", "records.bin") if (trace_dir / name).exists()]
    if held and not overwrite:
        raise DseError(
            f"--out {out_dir}: {trace_dir} already holds a trace ({', '.join(held)}); choose another --out "
            "or pass --overwrite to replace it"
        )


def _task_params(items: tuple[str, ...]) -> dict[str, Any]:
    import yaml

    from sim.yaml_io import load_yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DseError(f"--param must be KEY=VALUE (e.g. --param num_hops=6), got {item!r}")
        try:
            out[key.strip()] = load_yaml(value, f"--param {key.strip()}")
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"dse trace: {summary['model']}", show_header=True)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    intervals = summary.get("accuracy_ci") or {}
    for metric, value in summary["accuracy"].items():
        ci = intervals.get(metric) or {}
        text = _fmt(value)
        if "accuracy_note" in summary:
            text = "meaningless: random weights"
        elif ci.get("low") is not None:
            text += f" [{_fmt(ci['low'])}, {_fmt(ci['high'])}] (95% {ci['method']}, n={ci['n']})"
        elif ci:
            text += f" (n={ci['n']}, no interval)"
        table.add_row(f"accuracy: {metric}", text)
    sim = summary.get("similarity_overall") or {}
    fetched = summary.get("fetched_tokens_per_step")
    fetched_sync = summary.get("fetched_tokens_per_step_sync")
    rows = [
        ("sequences / decode steps", f"{summary['n_sequences']} / {summary['steps']}"),
        ("steps within the budget (no check)", str(summary.get("steps_within_budget", 0))),
        ("layers x KV heads (dense layers)",
         f"{summary['layers']} x {summary['kv_heads']} ({len(summary['dense_layers'])})"),
        ("correction rate (heads)", _fmt(summary["correction_rate"])),
        ("(step, layer) checks with a correction", _fmt(summary["corrected_check_share"])),
        ("GPU-cache hit rate", _fmt(summary["hit_rate"])),
        ("query similarity mean [min, max]",
         f"{_fmt(sim.get('mean'))} [{_fmt(sim.get('min'))}, {_fmt(sim.get('max'))}]"),
        ("missed pages per step", _fmt(summary["missed_pages_per_step"], 1)),
        ("fetched tokens per step (synchronous)", f"{_fmt(fetched, 1)} ({_fmt(fetched_sync, 1)})"),
        ("evicted tokens per step", _fmt(summary.get("evicted_tokens_per_step"), 1)),
    ]
    if summary.get("refactorised_heads_per_step"):
        rows.append(("re-factorised heads per step", _fmt(summary["refactorised_heads_per_step"], 2)))
    probe = summary.get("policy_probe") or {}
    if "retrieval_kv_heads" in probe:  # RazorAttention's probe (traces/probe.py)
        rows.append(("retrieval KV heads (probe)", f"{probe['retrieval_kv_heads']} of {probe['kv_heads']} "
                                                   f"({_fmt(probe['retrieval_share'])})"))
    step_mean = summary["timings_s"]["step_mean"]
    if "step_total" in step_mean:
        rows.append((f"decode ms/token ({summary['timings_s']['clock']} clock)",
                     _fmt(step_mean["step_total"] * 1e3, 1)))
    rows.append(("wall time s", _fmt(summary["wall_s"], 1)))
    if summary.get("samples_per_s") is not None:
        rows.append(("samples per s (traced sequences)", _fmt(summary["samples_per_s"], 3)))
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


@click.command(name="trace")
@click.option("--model", default="smollm2-135m", show_default=True,
              help="Registry model name, or the path of a local model whose metadata gives its shape: a "
              ".gguf file (the first part NAME-00001-of-0000N.gguf of a split one) or a Hugging Face "
              "directory with config.json (docs/models.md).")
@click.option("--task", "task_name", default="passkey", show_default=True,
              help="A task of freekv_runtime.tasks.TASKS: passkey, fidelity, longgen, niah_single, "
                   "niah_multikey, "
                   "niah_multivalue, niah_multiquery, vt, cwe, fwe, the multi-context rag_facts, or a "
                   "benchmark loader (longbench_v2, ruler_jsonl, longgenbench, math500, aime24, gpqa, "
                   "rag_qa; see docs/tasks.md).")
@click.option("--context-tokens", type=number(TOKENS), default=2048, show_default=True,
              help="KV-cache tokens at the last decode step of a sample (prompt + decode tokens).")
@click.option("--budget-tokens", type=number(TOKENS), default=None,
              help="Tokens attended per KV head, sink and window included [RuntimeConfig default].")
@click.option("--page-size", type=_POS, default=None, help="Tokens per page [RuntimeConfig default].")
@click.option("--sink-tokens", type=_NONNEG, default=None, help="Sink tokens [RuntimeConfig default].")
@click.option("--window-tokens", type=_NONNEG, default=None,
              help="Local window tokens [RuntimeConfig default].")
@click.option("--tau", type=number(COSINE), default=None,
              help=f"Correction threshold, the knob tau of {_having('tau')} [the method's default].")
@click.option("--group-pooling", type=click.Choice(GROUP_POOLINGS), default=None,
              help="Pooling of a GQA group's page scores, the knob group_pooling of "
                   f"{_having('group_pooling')} [the method's own].")
@click.option("--page-summary", type=click.Choice(PAGE_SUMMARIES), default=None,
              help=f"Per-page key summary, min/max or centre +- mean radius, the knob page_summary of "
                   f"{_having('page_summary')} [the method's own].")
@click.option("--method", default="freekv", show_default=True,
              help=f"KV method with a runtime policy: {', '.join(names(runtime=True))} (`dse methods` lists "
              "them with their knobs).")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE",
              help="A knob of the method that the runtime reads, repeatable: e.g. snapkv "
              "observation_tokens=32, raas alpha=0.05 (`dse methods METHOD` lists them).")
@click.option("--dense-layers", default="0", show_default=True, help="Comma-separated dense layers.")
@click.option("--weights", type=click.Path(path_type=Path), default=None,
              help="Local HF directory (config.json + safetensors) or .gguf file.")
@click.option("--random-weights", type=number(SEED), default=None, metavar="SEED",
              help="No real weights: the registry architecture with random weights from SEED, built on the "
              "device (timing runs; accuracy is withheld as meaningless). Tokenizer: UTF-8 bytes.")
@click.option("--layers", type=number(LAYERS), default=None,
              help="With --random-weights: keep only the first N decoder layers (small test runs; recorded).")
@click.option("--random-init", type=click.Choice(["device", "cpu"]), default="device", show_default=True,
              help="With --random-weights: draw the weights on the device, or on the CPU (same weights on "
              "every device, slower).")
@click.option("--samples", type=number(SAMPLES), default=4, show_default=True,
              help="Task samples (sequences).")
@click.option("--decode-tokens", type=_POS, default=None, help="Decode tokens per sample [task default].")
@click.option("--filler", type=click.Choice(["repeat", "natural"]), default=None,
              help="Passkey filler text [repeat].")
@click.option("--template", type=click.Choice(["plain", "chat"]), default=None,
              help="Passkey prompt: plain, or inside the model's chat template [plain].")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Task parameter (repeatable), e.g. --param num_hops=6 --param data=/path/file.jsonl; "
                   "VALUE is read as YAML (numbers, lists).")
@click.option("--batch-size", type=number(BATCH), default=8, show_default=True,
              help="Samples run together (equal prompt lengths); 1 runs them one by one.")
@click.option("--seed", type=number(SEED), default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default="float32", show_default=True)
@click.option("--measure-attention-mass", is_flag=True, help="Record attention mass per step (slower).")
@click.option("--overwrite", is_flag=True, help="Replace a trace already in OUT/trace.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output directory: OUT/trace and OUT/summary.json.")
def command(
    model: str, task_name: str, context_tokens: int, budget_tokens: int | None, page_size: int | None,
    sink_tokens: int | None, window_tokens: int | None, tau: float | None, group_pooling: str | None,
    page_summary: str | None, method: str, options: tuple[str, ...],
    dense_layers: str, weights: Path | None, random_weights: int | None, layers: int | None,
    random_init: str, samples: int, decode_tokens: int | None, filler: str | None,
    template: str | None, params: tuple[str, ...], batch_size: int, seed: int, device: str, dtype: str,
    measure_attention_mass: bool,
    overwrite: bool, out_dir: Path,
) -> None:
    """Run the real model with a KV policy on a task: prints accuracy and a trace summary, writes
    OUT/trace (the per-step trace) and OUT/summary.json."""
    if weights is not None:  # before importing the runtime (torch): a bad path is refused at once
        check_input_path(weights, "--weights")
    from freekv_runtime.api import TraceRequest, run_trace
    from freekv_runtime.config import RuntimeConfig
    from freekv_runtime.tasks import TaskSpec

    _check_before_loading(model, _dense_layers(dense_layers), out_dir, overwrite)

    shared = {"budget_tokens": budget_tokens, "page_size": page_size, "sink_tokens": sink_tokens,
              "window_tokens": window_tokens}
    flags = {"tau": tau, "group_pooling": group_pooling, "page_summary": page_summary}
    runtime = RuntimeConfig(
        method=method, dense_layers=_dense_layers(dense_layers),
        measure_attention_mass=measure_attention_mass,
        knobs={**{k: v for k, v in flags.items() if v is not None}, **_options(options)},
        **{k: v for k, v in shared.items() if v is not None},
    )
    task = TaskSpec(
        name=task_name, context_tokens=context_tokens, n_samples=samples, decode_tokens=decode_tokens,
        params={
            **{k: v for k, v in {"filler": filler, "template": template}.items() if v is not None},
            **_task_params(params),
        },
    )
    outcome = run_trace(TraceRequest(
        model=model, weights=weights, task=task, runtime=runtime, out_dir=out_dir, seed=seed,
        device=device, dtype=dtype, overwrite=overwrite, random_weights=random_weights, layers=layers,
        random_init=random_init, batch_size=batch_size,
    ))
    _print_summary(outcome.summary)
    for note in [*outcome.summary.get("policy_notes", []), *outcome.summary.get("task_notes", [])]:
        click.echo(f"note: {note}")
    if "accuracy_note" in outcome.summary:
        click.echo(f"accuracy: {outcome.summary['accuracy_note']}")
    click.echo(f"wrote {outcome.trace_dir} and {out_dir / 'summary.json'}")
