"""Build a study report: read the results table, draw every section, write one HTML file.

    from dse.report import build_report
    summary = build_report("studies/smoke.yaml", Path("report.html"))
    summary.n_figures, summary.size_bytes, summary.seconds

The page is self-contained (plotly.js inlined once) and works offline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from dse.errors import DseError
from dse.paths import check_output_file, describe_os_error
from dse.report.capacity import capacity_section
from dse.report.data import ReportData, make_report_data
from dse.report.observation import observation_section
from dse.report.page import Section, count_figures, render_page
from dse.report.pareto import pareto_section
from dse.report.resimulate import Overrides, resimulate
from dse.report.simulate import plan_replays
from dse.report.source import study_location
from dse.report.why import why_section
from dse.results import load_results
from traces.atomic_write import atomic_write_text

__all__ = ["ReportSummary", "build_report", "report_sections"]


@dataclass(frozen=True)
class ReportSummary:
    path: Path
    study_name: str
    n_sections: int
    n_figures: int
    size_bytes: int
    seconds: float


def report_sections(data: ReportData, seed: int = 0) -> list[Section]:
    """Every section, in reading order. seed: for the simulator runs of the capacity section."""
    replays = plan_replays(data, seed)
    return [
        pareto_section(data),
        why_section(data, replays, seed),
        observation_section(data),
        capacity_section(data, replays, seed),
    ]


def build_report(
    source: str,
    out: Path,
    study_name: str | None = None,
    slo_ms: float | None = None,
    metric: str | None = None,
    seed: int = 0,
    overrides: Overrides | None = None,
) -> ReportSummary:
    """source: a study YAML, an Optuna storage URL or an SQLite file; writes `out` (parents created).
    overrides: other hardware profiles / workload to re-simulate the stored traces on (resimulate.py)."""
    t0 = time.perf_counter()
    check_output_file(out, "--out")  # before the work: the report takes a while to build
    storage_url, name = study_location(source, study_name)
    results = load_results(storage_url, name)
    if overrides is not None and overrides.any:
        results = resimulate(results, overrides, seed)
    data = make_report_data(results, slo_ms=slo_ms, metric=metric)
    sections = report_sections(data, seed)
    html = render_page(f"freekv-dse report: {data.name}", _facts(data), sections)
    out = check_output_file(out, "--out")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, html)  # a failed write leaves the last good report as it was
    except OSError as exc:
        raise DseError(
            f"--out {out}: cannot write the report ({describe_os_error(exc)}); any previous report there is "
            "unchanged"
        ) from None
    return ReportSummary(
        path=out,
        study_name=data.name,
        n_sections=len(sections),
        n_figures=count_figures(sections),
        size_bytes=out.stat().st_size,
        seconds=time.perf_counter() - t0,
    )


def _facts(data: ReportData) -> list[tuple[str, str]]:
    res = data.results
    workload = res.config.get("workload") or {}
    facts = [
        ("study", f"{data.name} ({res.storage_url})"),
        ("measured on", data.measured_model),
        ("latency simulated for", data.model),
        ("hardware profiles", ", ".join(data.profiles)),
        ("trials", f"{len(res.completed)} complete, {len(data.trials)} distinct, {len(res.failed)} failed"),
        (
            "objectives",
            ", ".join(f"{n} ({d})" for n, d in zip(res.objective_names, res.directions, strict=True)),
        ),
        ("accuracy axis", data.accuracy_metric),
        ("latency SLO", "none given" if data.slo_s is None else f"{data.slo_s * 1e3:g} ms per token"),
    ]
    if res.config.get("resimulated"):
        facts.append(
            (
                "re-simulated",
                "from the stored traces (accuracy as measured, nothing re-measured): "
                f"{res.config['resimulated']}",
            )
        )
    if workload:
        facts.append(
            (
                "workload",
                f"input {workload.get('input_tokens')} tokens, output "
                f"{workload.get('output_tokens')} tokens, batch {workload.get('batch_sizes')}",
            )
        )
    return facts
