"""`dse report STUDY_OR_STORAGE --out report.html`: one self-contained HTML report of a study."""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from dse.commands.number_types import number
from traces.numbers import MILLISECONDS, SEED

__all__ = ["command"]


@click.command(name="report")
@click.argument("source", metavar="STUDY_OR_STORAGE")
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="HTML file to write.",
)
@click.option(
    "--study",
    "study_name",
    default=None,
    help="Study name in the storage (default: the YAML's name, or the storage's only study).",
)
@click.option(
    "--slo-ms",
    type=number(MILLISECONDS),
    default=None,
    help="Per-token latency SLO in ms for the recommendations (default: the study's slo).",
)
@click.option(
    "--metric", default=None, help="Accuracy metric on the accuracy axis (default: first objective's)."
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the results table as JSON to this file.",
)
@click.option(
    "--hardware",
    default=None,
    metavar="P1,P2",
    help="Re-simulate the stored traces on these hardware profiles instead of the study's (no re-measuring).",
)
@click.option(
    "--workload",
    default=None,
    metavar="input=N,output=N,batch=B1/B2",
    help="Re-simulate the stored traces at this workload (any of the keys; several batches joined by /).",
)
@click.option("--seed", type=number(SEED), default=0, show_default=True, help="Seed of the simulator runs.")
def command(
    source: str,
    out: Path,
    study_name: str | None,
    slo_ms: float | None,
    metric: str | None,
    json_out: Path | None,
    hardware: str | None,
    workload: str | None,
    seed: int,
) -> None:
    """Write a report of STUDY_OR_STORAGE: a study YAML, an Optuna storage URL, or an SQLite file.

    Sections: accuracy vs latency (Pareto fronts, importances), why a configuration is fast or slow,
    the query-similarity observation on this model, and capacity planning per hardware profile.

    --hardware and --workload re-simulate every run's stored trace (measured accuracy kept) on other
    profiles or at another workload, e.g. `--hardware rtx-4090 --workload input=600,output=16384`.
    """
    from dse.paths import check_output_file, write_text
    from dse.report import build_report
    from dse.report.resimulate import parse_overrides
    from dse.results import StoredAttributeWarning

    if json_out is not None:
        check_output_file(json_out, "--json")
    overrides = parse_overrides(hardware, workload)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StoredAttributeWarning)
        summary = build_report(
            source, out, study_name=study_name, slo_ms=slo_ms, metric=metric, seed=seed, overrides=overrides
        )
        if json_out is not None:
            from dse.report.source import study_location
            from dse.results import load_results, to_json

            storage_url, _ = study_location(source, study_name)
            write_text(json_out, to_json(load_results(storage_url, summary.study_name)), "--json")
            click.echo(f"wrote {json_out}")
    shown: set[str] = set()
    for w in caught:  # trials or baselines whose stored attributes were not readable
        text = str(w.message)
        if issubclass(w.category, StoredAttributeWarning) and text not in shown:
            shown.add(text)
            click.echo(f"warning: {text}", err=True)
        elif not issubclass(w.category, StoredAttributeWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    click.echo(
        f"wrote {summary.path} ({summary.n_figures} figures in {summary.n_sections} sections, "
        f"{summary.size_bytes / 1e6:.1f} MB) in {summary.seconds:.1f} s"
    )
