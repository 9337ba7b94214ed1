"""The whole report drawn from a results table whose simulated results are real simulator runs on
synthetic demand (no runtime, no browser): every section's content; re-simulation of stored results on
other profiles and workloads; the CLI's error for a missing study. Rendering in Chromium:
test_report_chromium.py; the shared fixtures: conftest.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dse.cli import main as dse_main
from dse.report.data import ReportData, make_report_data
from dse.report.page import FigureBlock, Section, render_page


def test_sections_replay_synthetic_demand_at_measured_rates_when_traces_are_absent(
    simulated_data: ReportData, simulated_sections: list[Section]
) -> None:
    data, sections = simulated_data, simulated_sections
    assert [s.anchor for s in sections] == ["pareto", "why", "observation", "capacity"]
    html = render_page("t", [], sections)
    # trial 0 is recommended: both meet the SLO (1 s/token), trial 0 corrects less and has more tokens/s
    assert "synthetic demand: correction=0.2000,hit=0.8500" in html
    assert "Parameter importances need at least 10 distinct complete trials" in html
    titles = [b.title for s in sections for b in s.blocks if isinstance(b, FigureBlock)]
    assert sum(t.startswith("Stream timeline") for t in titles) == 2
    steps = {re.search(r"\(step (\d+)\)", t).group(1) for t in titles if t.startswith("Stream timeline")}
    assert len(steps) == 2  # the typical and the corrected step are different steps
    assert sum(t.startswith("GPU memory needed") for t in titles) == 2
    assert "Methods side by side" in titles
    # every simulated latency says how it was priced; the methods table shows both implementation modes
    assert "latency priced as-published (pytorch2-cuda12)" in html
    blocks = [b for s in sections for b in s.blocks]
    table = next(b for b in blocks if getattr(b, "title", "") == "Methods side by side (table)")
    assert "ms/token mean / p99 on a100-40g-pcie4 (as-published)" in table.header
    assert "ms/token mean / p99 on a100-40g-pcie4 (ideal)" in table.header
    # Retrieval keeps only the budget on the GPU: at 128K context far more sequences fit than with dense KV.
    from dse.report.grid import capacity_grid
    from dse.report.simulate import plan_replays

    replays = plan_replays(data)
    replay = replays["a100-40g-pcie4"]
    assert (
        replay is not None and replay[0].number == 0 and replays["h100-pcie5"][1] is replay[1]
    )  # built once
    grid = capacity_grid(data, "a100-40g-pcie4", *replay)
    assert grid.synthetic is not None and grid.mapped_from is None
    assert grid.output_tokens == 32  # the study's whole decode, not a few steps
    longest = grid.contexts[-1]
    assert grid.max_batch[("freekv", longest)] > grid.max_batch[("dense", longest)] >= 0
    fits = [r["memory"]["fits"] for _, r in grid.by_batch["dense"]]
    assert fits == sorted(fits, reverse=True)  # once a batch does not fit, larger ones do not either


def test_stored_results_resimulate_on_other_profiles_and_workloads(simulated_data: ReportData) -> None:
    from dse.report.resimulate import Overrides, resimulate

    overrides = Overrides(hardware=("rtx-4090",), workload={"input_tokens": 600, "output_tokens": 16384})
    results = resimulate(simulated_data.results, overrides)
    assert results.hardware == ("rtx-4090",) and results.config["workload"]["output_tokens"] == 16384
    for trial in results.trials:
        res = trial.sim["rtx-4090"]
        assert set(trial.sim) == {"rtx-4090"} and res["config"]["output_tokens"] == 16384
        assert "of 16384 decode steps" in res["sampled"]["label"]
        assert trial.accuracy == next(t for t in simulated_data.trials if t.number == trial.number).accuracy
    data = make_report_data(results)
    assert data.profiles == ("rtx-4090",)


def test_cli_reports_a_missing_study_in_one_paragraph(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert dse_main(["report", str(tmp_path / "nope.db"), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ")
        and "not an existing file or a storage URL" in err
        and "Traceback" not in err
    )
