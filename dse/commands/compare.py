"""`dse compare RUN_A RUN_B`: two runs' accuracy on the same prompts, paired by prompt id.

    dse compare runs/freekv runs/dense                         every metric both runs scored
    dse compare studies/smoke.yaml:trial:3 studies/smoke.yaml:dense --metric passkey_accuracy --floor 0.9
    dse compare A B --failures 20 --json compare.json

A run: a `dse trace` output directory (or its summary.json), or a run of a study: STUDY:trial:N,
STUDY:dense, STUDY:untuned_freekv, STUDY:untuned_<method> (dse/accuracy/runs.py). RUN_B is the
reference. Per metric: prompts paired, each run's mean over them, mean(A) - mean(B) with its 95% paired
bootstrap interval, McNemar's exact p (0/1 scores), whether the difference is resolved at 95% and, if
not, how many paired prompts would resolve it (dse/accuracy/resolution.py), with --floor RATIO the
accuracy-floor verdict of A against B (dse/accuracy/floor.py, its rule printed), then up to --failures
prompts where A and B disagree (id, each run's score and answer). Never imports torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from dse.accuracy.paired import PairedComparison
from dse.accuracy.runs import RunSamples
from dse.commands.number_types import number
from dse.errors import DseError
from traces.numbers import COUNT, FRACTION, SEED

__all__ = ["command", "comparable_metrics"]

ANSWER_SHOWN = 70  # characters of an answer printed per disagreement (--json keeps all that was stored)


def comparable_metrics(a: RunSamples, b: RunSamples, metric: str | None) -> list[str]:
    """The metrics to compare: `metric`, or every metric both runs recorded per-prompt results of;
    DseError (one paragraph) when there is none."""
    for run in (a, b):
        if not run.samples:
            raise DseError(run.note or (
                f"{run.label} has no per-prompt results: it predates per-sample accuracy results "
                "(summary.json / study user attribute `accuracy_samples`); re-run it (`dse trace`, or "
                "`dse sweep` with a fresh out_dir) to compare it prompt by prompt"))
    if metric is not None:
        for run in (a, b):
            if metric in run.exact:
                raise DseError(f"{run.label}: {metric} is {run.exact[metric]}: no prompt was run, so there "
                               "are no per-prompt results to pair; compare with another run instead")
        for run in (a, b):
            if metric not in run.samples:
                measured = ", ".join(sorted(run.samples)) or "none"
                raise DseError(f"{run.label} has no per-prompt results of {metric!r}; measured: {measured}")
        return [metric]
    common = [m for m in a.samples if m in b.samples]
    if not common:
        raise DseError(f"the runs share no metric: {a.label} measured {', '.join(sorted(a.samples))}; "
                       f"{b.label} measured {', '.join(sorted(b.samples))}")
    return common


def _some_ids(run: RunSamples, metric: str) -> str:
    return ", ".join(str(s["id"]) for s in run.samples[metric][:2]) or "no prompt"


def _num(x: float | None, sign: bool = False) -> str:
    if x is None or math.isnan(x):
        return "-"
    return f"{x:+.3f}" if sign else f"{x:.3f}"


def _answer(text: str) -> str:
    flat = json.dumps(text, ensure_ascii=False)
    return flat if len(flat) <= ANSWER_SHOWN else flat[: ANSWER_SHOWN - 4] + '..."'


def _resolution_line(c: PairedComparison) -> str:
    """Whether A - B is resolved at 95%, and for an unresolved one the paired prompts that would be."""
    r = c.resolution
    if r is None or r.n < 2:
        return "  resolved at 95%: - (needs 2 paired prompts)"
    how = "McNemar exact test" if r.p is not None else "paired bootstrap interval"
    if r.resolved:
        return f"  resolved at 95%: yes ({how})"
    if r.needed is None:
        return (f"  resolved at 95%: no ({how}); no difference observed, so no sample size to resolve "
                f"one; {r.n} pairs resolve a drop of {_drop(r.n)} or more (0/1 scores, all losses)")
    size = "Connor 1987, from the discordant shares" if r.p is not None else "paired t, from the differences"
    return (f"  resolved at 95%: no ({how}); about {r.needed:.0f} paired prompts would resolve the "
            f"observed difference at 80% power ({size})")


def _drop(n: int) -> str:
    from dse.accuracy.resolution import detectable_drop

    d = detectable_drop(n)
    return "none (too few pairs)" if math.isinf(d) else f"{d:.0%}"


def _report(c: PairedComparison, failures: int) -> list[str]:
    lines = [f"{c.metric}: {c.n} paired prompt{'' if c.n == 1 else 's'}" + (
        f" ({c.only_a} only in A, {c.only_b} only in B, left out)" if c.only_a or c.only_b else "")]
    lines.append(f"  mean A {_num(c.mean_a)}   mean B {_num(c.mean_b)}")
    lines.append(f"  A - B {_num(c.diff, True)}, 95% paired bootstrap [{_num(c.diff_low, True)}, "
                 f"{_num(c.diff_high, True)}]" + ("" if c.n >= 2 else " (needs 2 paired prompts)"))
    if c.mcnemar_p is not None:
        lines.append(f"  McNemar exact p = {c.mcnemar_p:.3g} (A right where B wrong: {c.a_wins}; "
                     f"B right where A wrong: {c.b_wins})")
    else:
        lines.append("  McNemar: - (scores are not all 0/1)")
    lines.append(_resolution_line(c))
    if c.floor is not None:
        from dse.accuracy.floor import rule_text

        lines.append(f"  floor {c.floor.ratio:g} x B: {c.floor.short()}: {c.floor.reason}")
        lines.append(f"    ({rule_text(c.floor.ratio)})")
    shown = c.disagreements[:failures]
    if not c.disagreements:
        lines.append("  A and B agree on every paired prompt")
    elif failures > 0:
        lines.append(f"  prompts where A and B disagree ({len(shown)} of {len(c.disagreements)} shown):")
        for d in shown:
            lines.append(f"    {d.id}")
            lines.append(f"      A {_num(d.a_score)} {_answer(d.a_answer)}")
            lines.append(f"      B {_num(d.b_score)} {_answer(d.b_answer)}")
    else:
        lines.append(f"  {len(c.disagreements)} prompts where A and B disagree (--failures N lists them)")
    return lines


@click.command(name="compare")
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@click.option("--metric", default=None,
              help="Compare this metric only (default: every metric both runs scored).")
@click.option("--floor", "floor_ratio", type=number(FRACTION), default=None,
              metavar="RATIO", help="Also decide whether A keeps RATIO x B's accuracy (B the reference, "
              "e.g. dense attention), by the paired floor rule of dse/accuracy/floor.py.")
@click.option("--failures", type=number(COUNT), default=10, show_default=True,
              help="Prompts where A and B disagree to list, per metric.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the comparison (every disagreement) as JSON to this file.")
@click.option("--study", "study_name", default=None,
              help="Study name, for a STUDY reference to a storage that holds several studies.")
@click.option("--seed", type=number(SEED), default=0, show_default=True, help="Seed of the bootstrap.")
def command(run_a: str, run_b: str, metric: str | None, floor_ratio: float | None, failures: int,
            json_out: Path | None, study_name: str | None, seed: int) -> None:
    """Compare RUN_A with RUN_B (the reference) prompt by prompt.

    A run is a `dse trace` output directory (or its summary.json), or a run of a study:
    STUDY:trial:N, STUDY:dense, STUDY:untuned_freekv or STUDY:untuned_<method>, with STUDY a study YAML,
    an Optuna storage URL or an SQLite file written by `dse sweep`.
    """
    from dse.accuracy.paired import compare_metric
    from dse.accuracy.runs import load_run
    from dse.paths import check_output_file, write_text

    if json_out is not None:
        check_output_file(json_out, "--json")
    a, b = load_run(run_a, study_name), load_run(run_b, study_name)
    metrics = comparable_metrics(a, b, metric)
    comparisons = [compare_metric(m, a.samples[m], b.samples[m], floor_ratio, seed) for m in metrics]
    if all(c.n == 0 for c in comparisons):
        raise DseError(
            f"no prompt id is common to both runs ({', '.join(metrics)}): they ran different prompts (task, "
            f"context length, params or seed differ), e.g. A has {_some_ids(a, metrics[0])} and B has "
            f"{_some_ids(b, metrics[0])}; compare runs of the same task spec and seed")
    click.echo(f"A: {a.label}\nB: {b.label} (reference)")
    for c in comparisons:
        click.echo("\n".join(_report(c, failures)))
    if json_out is not None:
        data = {"a": a.label, "b": b.label, "metrics": {c.metric: c.to_dict() for c in comparisons}}
        write_text(json_out, json.dumps(data, indent=1) + "\n", "--json")
        click.echo(f"wrote {json_out}")
