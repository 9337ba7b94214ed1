"""`dse engine-fit`: fit a serving engine's overheads (a per-iteration `server` term and a per-request
overhead) to one measured low-load run, and write them as an engine profile for `dse serve --engine FILE`
(sim/serving/engine_fit.py has the form and the fit).

    dse engine-fit --measured RUN.csv [--run NAME | --where COLUMN=VALUE ...] --model M --hardware H
                   --out PROFILE.yaml [--base-engine none|NAME|FILE]
                   [--scheduler prefill-first|blocking|chunked]
                   [--max-seqs N] [--max-batched-tokens T] [--chunk-tokens C] [--tensor-parallel T]
                   [--gpu-memory-utilization F]
                   [--implementation ideal|as-published] [--name NAME]

Never imports torch.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from dse.commands.number_types import number
from dse.commands.replay_options import gpu_memory_option, implementation_option
from dse.commands.serve_options import SEQS, TENSOR_PARALLEL
from traces.numbers import SEED, TOKENS

__all__ = ["command"]


def _where(items: tuple[str, ...]) -> dict[str, str]:
    from sim.errors import SimInputError

    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SimInputError(f"--where {item!r}: expected COLUMN=VALUE (e.g. --where rate=1), one per "
                                "flag")
        out[key.strip()] = value.strip()
    return out


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _print_fit(fit, out: Path, measured: Path) -> None:  # noqa: ANN001 (sim.serving.engine_fit.EngineFit)
    print(f"engine fit to {measured}, run {fit.run} ({fit.n_requests} requests; {fit.evaluations} replays)")
    print(f"  server term: {fit.server_fixed_ms:.3f} ms + {fit.server_per_sequence_ms:.4f} ms x sequences "
          "per iteration")
    print(f"  request overhead: {fit.request_overhead_ms:.2f} ms before the request is queued")
    print(f"  fit error {fit.error:.1f} (soft-L1 sum of TTFT and TPOT log ratios / 0.1 over requests)")
    print(f"  {'ours / measured':34} {'base':>8} {'fitted':>8}")
    rows = [("TTFT median ratio", "ttft_ratio_median"), ("TTFT P10 ratio", "ttft_ratio_p10"),
            ("TTFT P90 ratio", "ttft_ratio_p90"),
            ("TTFT ratio, prompts < 256", "ttft_ratio_median_prompt_0_256"),
            ("TTFT ratio, prompts 256-1023", "ttft_ratio_median_prompt_256_1024"),
            ("TTFT ratio, prompts >= 1024", "ttft_ratio_median_prompt_1024_up"),
            ("TPOT median ratio", "tpot_ratio_median"), ("TPOT P10 ratio", "tpot_ratio_p10"),
            ("TPOT P90 ratio", "tpot_ratio_p90"), ("median |log ratio| TTFT", "ttft_abs_log_ratio_median"),
            ("median |log ratio| TPOT", "tpot_abs_log_ratio_median")]
    for label, key in rows:
        print(f"  {label:34} {_ratio(fit.base.get(key)):>8} {_ratio(fit.fitted.get(key)):>8}")
    (m50, b50), (m90, b90) = fit.base["ttft_p50_ms"], fit.base["ttft_p90_ms"]
    print(f"  TTFT P50 / P90 ms: measured {m50:.0f} / {m90:.0f}, base {b50:.0f} / {b90:.0f}, fitted "
          f"{fit.fitted['ttft_p50_ms'][1]:.0f} / {fit.fitted['ttft_p90_ms'][1]:.0f}")
    print(f"wrote {out}: use it with dse serve --engine {out}")


@click.command(name="engine-fit")
@click.option("--measured", type=click.Path(path_type=Path), required=True,
              help="CSV of one measured run: prompt_len, output_len, issue_time_s, ttft_ms, tpot_ms per "
              "request (client-side times; other columns allowed)")
@click.option("--run", "run_name", default=None, help="the run to fit, by the file's `run` column")
@click.option("--where", "where", multiple=True,
              help="COLUMN=VALUE: keep the rows with that value (repeatable; e.g. --where rate=1)")
@click.option("--model", required=True, help="the model the run served (registry name)")
@click.option("--hardware", required=True, help="the GPU it ran on (hardware profile name or YAML file)")
@click.option("--base-engine", default="none", show_default=True,
              help="host-time engine profile the fitted terms add to: none, a sim/engine_profiles name or a "
              "YAML path")
@click.option("--scheduler", type=click.Choice(["prefill-first", "blocking", "chunked"]),
              default="prefill-first", show_default=True,
              help="how the measured server scheduled (prefill-first: vLLM v0.2-v0.3)")
@click.option("--max-seqs", type=number(SEQS), default=None, help="the server's max_num_seqs [memory alone]")
@click.option("--max-batched-tokens", type=number(TOKENS), default=None,
              help="the server's max_num_batched_tokens (prefill-first) [memory alone]")
@click.option("--chunk-tokens", type=number(TOKENS), default=512, show_default=True,
              help="chunked: tokens per iteration")
@click.option("--tensor-parallel", type=number(TENSOR_PARALLEL), default=1, show_default=True,
              help="GPUs per replica the run was served on (the fitted profile holds at that degree)")
@gpu_memory_option
@implementation_option
@click.option("--out", type=click.Path(path_type=Path), required=True, help="write the fitted profile (YAML)")
@click.option("--name", default=None, help="the profile's name [the --out file's stem]")
@click.option("--seed", type=number(SEED), default=0, show_default=True,
              help="seed of the optimiser (differential evolution): the same seed, the same fit")
def command(measured: Path, run_name: str | None, where: tuple[str, ...], model: str, hardware: str,
            base_engine: str, scheduler: str, max_seqs: int | None, max_batched_tokens: int | None,
            chunk_tokens: int, tensor_parallel: int, gpu_memory_utilization: float, implementation: str,
            out: Path, name: str | None, seed: int) -> None:
    """Fit a serving engine's overheads to one measured LOW-load run: a per-iteration `server` term (a + b x
    sequences ms, host work every iteration pays) and a per-request overhead (ms between a request's issue
    and its arrival at the engine's queue: API server, tokenisation), on top of --base-engine, by replaying
    the run's exact requests and issue times through the serving model (scipy least squares on the log
    ratios of each request's TTFT and TPOT). Writes an engine profile for dse serve --engine FILE; warns
    when the run looks saturated."""
    from dse.paths import check_output_file, write_text
    from sim.config import SimConfig
    from sim.serving import SchedulerSettings, StepCosts
    from sim.serving.engine import load_engine
    from sim.serving.engine_fit import check_base, fit_engine
    from sim.serving.measured_run import load_measured_run

    check_output_file(out, "--out")
    base = load_engine(base_engine)
    check_base(base)
    run = load_measured_run(measured, run_name, _where(where))
    longest = int((run.prompt_len + run.output_len).argmax())
    cfg = SimConfig(model=model, hardware=hardware, method="dense", input_tokens=int(run.prompt_len[longest]),
                    output_tokens=int(run.output_len[longest]), implementation=implementation,
                    gpu_memory_utilization=gpu_memory_utilization)
    costs = StepCosts(cfg, None, engine=base, tensor_parallel=tensor_parallel)
    settings = SchedulerSettings(chunk_tokens=chunk_tokens, max_seqs=max_seqs,
                                 max_batched_tokens=max_batched_tokens)
    source = f"fitted by dse engine-fit to {measured}, run {run.name}, {len(run.prompt_len)} requests"
    fit = fit_engine(run, costs, base, scheduler, settings, name=name or out.stem, source=source, seed=seed,
                     description=f"{base.description} (base {base.name}); plus a server term and a request "
                     f"overhead {source} ({model}, {hardware}, {scheduler})")
    for warning in fit.warnings:
        click.echo(f"warning: {warning}", err=True)
    flags = [("--measured", measured), ("--run", run_name), *(("--where", w) for w in where),
             ("--model", model), ("--hardware", hardware), ("--base-engine", base_engine),
             ("--scheduler", scheduler),
             ("--max-seqs", max_seqs), ("--max-batched-tokens", max_batched_tokens),
             ("--chunk-tokens", chunk_tokens if scheduler == "chunked" else None),
             ("--tensor-parallel", tensor_parallel if tensor_parallel > 1 else None),
             ("--gpu-memory-utilization", gpu_memory_utilization), ("--implementation", implementation),
             ("--out", out), ("--name", name), ("--seed", seed if seed else None)]
    given = shlex.join(str(x) for flag, v in flags if v is not None for x in (flag, v))
    header = (f"Fitted by: dse engine-fit {given}\n"
              f"Base engine: {base.name}; model {model}, hardware {hardware}, scheduler {scheduler}, "
              f"{implementation}, dense.\n"
              "Fit residuals (ours / measured, base -> fitted): TTFT median "
              f"{fit.base['ttft_ratio_median']:.2f} -> {fit.fitted['ttft_ratio_median']:.2f}, TPOT median "
              f"{_ratio(fit.base['tpot_ratio_median'])} -> {_ratio(fit.fitted['tpot_ratio_median'])}.\n"
              "Form (sim/serving/engine_fit.py): server = a + b x sequences ms per iteration, request "
              "overhead r ms per request; a, b, r >= 0.")
    write_text(out, fit.to_yaml(header), "--out")
    load_engine(out)  # what was written loads as a profile
    _print_fit(fit, out, measured)
