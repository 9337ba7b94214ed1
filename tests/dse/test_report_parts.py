"""Unit tests of the report's parts: Pareto front, recommendation, step choice, page assembly, inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import plotly.graph_objects as go
import pytest

from dse.errors import DseError
from dse.report.data import describe_config, make_report_data, run_label
from dse.report.page import FigureBlock, NoteBlock, Section, TableBlock, count_figures, render_page
from dse.report.pareto import pareto_front
from dse.report.provenance import Provenance, mapped_sources
from dse.report.recommend import recommend
from dse.report.source import study_location
from dse.report.steps import choose_steps
from dse.results import BaselineResult, StudyResults, TrialResult


def test_pareto_front_keeps_only_non_dominated_points_by_latency() -> None:
    points = [(3.0, 0.9), (1.0, 0.5), (2.0, 0.5), (2.5, 0.95), (1.0, 0.7), (4.0, 0.95)]
    # (1.0, 0.7) beats (1.0, 0.5) and (2.0, 0.5); (2.5, 0.95) beats (3.0, 0.9) and ties (4.0, 0.95) faster.
    assert pareto_front(points) == [4, 3]
    assert pareto_front([]) == []
    assert pareto_front([(1.0, 0.1)]) == [0]


def _sim(latency_s: float, model: str = "llama-3.1-8b", mapped: str | None = "smollm2-135m") -> dict:
    return {
        "per_token_latency_s": {"mean": latency_s, "p50": latency_s, "p99": latency_s * 1.2},
        "throughput_tokens_per_s": 1.0 / latency_s,
        "breakdown_s": {"attention": latency_s},
        "memory": {"gpu_bytes": 1, "host_bytes": 1, "fits": True, "max_batch": 4},
        "mapped_from": mapped,
        "model": model,
    }


def _trial(
    number: int,
    acc: float,
    lat: dict[str, float],
    feasible: bool = True,
    tau: float = 0.9,
    duplicate_of: int | None = None,
) -> TrialResult:
    return TrialResult(
        target_model="llama-3.1-8b",
        sim={hw: _sim(s) for hw, s in lat.items()},
        sim_models={},
        sim_grid=[],
        number=number,
        state="COMPLETE",
        config={
            "method": "freekv",
            "tau": tau,
            "page_size": 32,
            "budget_tokens": 256,
            "sink_tokens": 32,
            "window_tokens": 32,
        },
        values=(acc, lat["a"]),
        accuracy={"passkey_accuracy": acc},
        feasible=feasible,
        duplicate_of=duplicate_of,
    )


def _results(trials: list[TrialResult], slo: float | None = None) -> StudyResults:
    config = {
        "objectives": [{"metric": "passkey_accuracy"}],
        "hardware": ["a", "b"],
        "model": {"name": "smollm2-135m"},
    }
    if slo is not None:
        config["slo"] = {"per_token_latency_s": slo}
    dense = BaselineResult(
        target_model="llama-3.1-8b",
        sim={"a": _sim(0.05)},
        sim_models={},
        sim_grid=[],
        name="dense",
        config={"method": "full"},
        accuracy={"passkey_accuracy": 1.0},
    )
    return StudyResults(
        study_name="s",
        storage_url="sqlite://",
        config=config,
        study_file="",
        objective_names=("passkey_accuracy", "latency_mean_s/a"),
        directions=("maximize", "minimize"),
        target_model="llama-3.1-8b",
        hardware=("a", "b"),
        trials=tuple(trials),
        dense=dense,
        untuned_freekv=None,
    )


def test_recommendation_is_the_most_accurate_feasible_trial_within_the_slo_per_profile() -> None:
    trials = [
        _trial(0, 0.9, {"a": 0.010, "b": 0.030}),
        _trial(1, 1.0, {"a": 0.020, "b": 0.015}),
        _trial(2, 1.0, {"a": 0.012, "b": 0.012}, feasible=False),
        _trial(3, 0.9, {"a": 0.009, "b": 0.05}),
    ]
    data = make_report_data(_results(trials, slo=0.019))
    rec_a, rec_b = recommend(data, "a"), recommend(data, "b")
    assert rec_a.run is not None and rec_a.run.number == 3  # trial 1 misses the SLO on a; 3 ties 0, faster
    assert rec_b.run is not None and rec_b.run.number == 1
    assert recommend(make_report_data(_results(trials, slo=0.001)), "a").run is None
    no_slo = make_report_data(_results(trials))
    assert no_slo.slo_s is None and recommend(no_slo, "a").run.number == 1
    assert make_report_data(_results(trials), slo_ms=9.5).slo_s == pytest.approx(0.0095)


def test_baselines_take_part_in_the_recommendation_and_the_front() -> None:
    from dataclasses import replace

    from dse.report.breakdown import featured_runs

    trials = [_trial(0, 0.9, {"a": 0.030, "b": 0.030}), _trial(1, 0.8, {"a": 0.020, "b": 0.020})]
    results = _results(trials, slo=0.04)
    untuned = replace(results.dense, name="untuned_freekv", config={"method": "freekv", "tau": 0.9},
                      sim={"a": _sim(0.010), "b": _sim(0.010)}, accuracy={"passkey_accuracy": 0.95})
    results = replace(results, untuned_freekv=untuned)
    data = make_report_data(results)
    rec = recommend(data, "a")
    assert rec.run is untuned  # it dominates both trials: more accurate and faster
    assert [run_label(r) for r in data.scored_runs("a")][:2] == ["dense", "untuned FreeKV"]
    assert "untuned FreeKV" in [run_label(r) for r in featured_runs(data, "a")]
    # the accuracy constraint applies to baselines too: 0.95 < 0.98 x dense's 1.0 excludes untuned FreeKV
    strict = make_report_data(replace(results, config={**results.config,
                                                      "constraints": {"min_accuracy_ratio": 0.98}}))
    assert data.feasible(untuned) and strict.feasible(untuned) is False
    assert recommend(strict, "a").run.number == 0


def test_when_nothing_qualifies_the_recommendation_says_why() -> None:
    trials = [_trial(0, 0.9, {"a": 0.030, "b": 0.030}, feasible=False),
              _trial(1, 0.8, {"a": 0.020, "b": 0.020}, feasible=False)]
    data = make_report_data(_results(trials, slo=0.001))
    rec = recommend(data, "a")
    assert rec.run is None and rec.n_runs == 3 and rec.n_infeasible == 2 and rec.n_over_slo == 1
    assert "2 of 3 runs miss the accuracy constraint" in rec.why_none
    assert "1 fit but are slower than the SLO (1 ms/token)" in rec.why_none
    rec_b = recommend(data, "b")  # dense has no result on b; the two trials are infeasible
    assert rec_b.run is None and "2 of 2 runs miss the accuracy constraint" in rec_b.why_none


def test_report_data_drops_duplicates_and_rejects_unknown_metric() -> None:
    trials = [_trial(0, 0.9, {"a": 0.01, "b": 0.02}), _trial(1, 0.9, {"a": 0.01, "b": 0.02}, duplicate_of=0)]
    data = make_report_data(_results(trials))
    assert [t.number for t in data.trials] == [0]
    assert data.profiles == ("a", "b") and data.measured_model == "smollm2-135m"
    assert data.accuracy_metric == "passkey_accuracy"
    with pytest.raises(DseError, match="top1_agreement.*passkey_accuracy"):
        make_report_data(_results(trials), metric="top1_agreement")
    assert describe_config(trials[0].config) == "freekv tau=0.9 p=32 B=256 S=32 W=32"


def test_provenance_badges_and_mapped_sources() -> None:
    with pytest.raises(ValueError, match="at least one measured or simulated"):
        Provenance()
    html = Provenance(
        measured=("accuracy <b>",),
        simulated=("latency on a",),
        mapped_from=("smollm2-135m",),
        synthetic=("correction=0.5",),
    ).badges_html()
    for kind in ("measured", "simulated", "mapped", "synthetic"):
        assert f"badge-{kind}" in html
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert mapped_sources([_sim(1.0), _sim(1.0, mapped=None)]) == ("smollm2-135m",)
    old = {**_sim(1.0, mapped=None), "transplanted_from": "qwen-2.5-7b"}  # stored before the rename
    assert mapped_sources([old, _sim(1.0)]) == ("qwen-2.5-7b", "smollm2-135m")


def test_page_inlines_plotly_once_and_counts_figures() -> None:
    prov = Provenance(simulated=("x",))
    fig = FigureBlock("f <1>", go.Figure(go.Scatter(x=[1, 2], y=[3, 4])), "caption & more", prov)
    table = TableBlock("t", ("a", "b"), (("1", "<2>"),), "c", prov)
    sections = [
        Section("one", "One", "q?", (fig, NoteBlock("note"))),
        Section("two", "Two", "q2?", (fig, table)),
    ]
    html = render_page("Title", [("study", "s")], sections)
    assert count_figures(sections) == 2
    assert html.count("Plotly.newPlot(") == 2 and 'id="figure-1"' in html and 'id="figure-2"' in html
    assert html.count("<script") == 3  # the plotly.js bundle once, then one per figure
    assert "<script src=" not in html and "cdn.plot.ly" not in html.split("</head>")[1]
    assert "f &lt;1&gt;" in html and "caption &amp; more" in html and "&lt;2&gt;" in html
    with pytest.raises(ValueError, match="cells"):
        TableBlock("t", ("a", "b"), (("1",),), "c", prov)


def test_choose_steps_picks_an_uncorrected_and_the_most_corrected_step() -> None:
    choice = choose_steps(np.array([9, 5, 0, 9, 1, 0, 9]))
    assert choice is not None and choice.distinct
    assert (choice.typical, choice.typical_heads) == (2, 0)  # the earliest step with no corrected head
    assert (choice.corrected, choice.corrected_heads) == (0, 9)  # the earliest of the maxima
    assert choice.n_steps == 7 and choice.median_heads == 5
    # the old choice (median) picked step 1 twice here: the median and the maximum are both 9
    many = choose_steps(np.array([0, 9, 9, 9, 9]))
    assert many is not None and (many.typical, many.corrected) == (0, 1)
    same = choose_steps(np.array([3, 3, 3]))
    assert same is not None and not same.distinct and same.typical == same.corrected == 0
    assert choose_steps(np.zeros(0)) is None


def test_study_location_errors_name_what_is_valid(tmp_path: Path) -> None:
    with pytest.raises(DseError, match="not an existing file or a storage URL"):
        study_location(str(tmp_path / "missing.db"))
    assert study_location("sqlite:///x.db", "s") == ("sqlite:///x.db", "s")
    db = tmp_path / "two.db"
    url = f"sqlite:///{db}"
    for name in ("a", "b"):
        optuna.create_study(study_name=name, storage=url)
    assert study_location(str(db)) == (url, None)
    from dse.report import build_report

    with pytest.raises(DseError, match="2 studies"):
        build_report(str(db), tmp_path / "r.html")
    with pytest.raises(DseError, match="no complete trial"):
        build_report(str(db), tmp_path / "r.html", study_name="a")


def _oom_sim(model: str = "llama-3.1-8b") -> dict:
    """SimResult.to_dict() of a batch that does not fit: no latency, throughput or breakdown."""
    return {
        "oom": True,
        "oom_message": "out of memory: needs 90.0 GiB of GPU memory, has 40.0; largest batch that fits: 0",
        "per_token_latency_s": None,
        "throughput_tokens_per_s": None,
        "breakdown_s": {},
        "memory": {"gpu_bytes": 90, "host_bytes": 1, "fits": False, "max_batch": 0},
        "mapped_from": None,
        "model": model,
    }


def test_out_of_memory_results_are_never_ranked_or_plotted_as_latencies() -> None:
    from dse.report.breakdown import breakdown_figure
    from dse.report.methods import _table

    oom_on_b = _trial(0, 1.0, {"a": 0.010, "b": 0.010})
    oom_on_b.sim["b"] = _oom_sim()
    fits = _trial(1, 0.9, {"a": 0.020, "b": 0.020})
    results = _results([oom_on_b, fits], slo=0.05)
    results.dense.sim["b"] = _oom_sim()
    data = make_report_data(results)
    assert oom_on_b.latency_s("b") is None and oom_on_b.throughput_tokens_per_s("b") is None
    assert oom_on_b.oom("b") and not oom_on_b.oom("a")
    row = oom_on_b.row()
    assert row["latency_s/b"] is None and row["oom/b"] is True and row["fits/b"] is False
    assert row["latency_s/a"] == pytest.approx(0.010) and row["oom/a"] is False
    assert recommend(data, "a").run.number == 0  # fits on a: the most accurate
    assert recommend(data, "b").run.number == 1  # out of memory on b: not a candidate there
    assert results.best_under_slo("b", 0.05, "passkey_accuracy").number == 1
    fig = breakdown_figure(data, "b")  # the dense baseline is out of memory on b: left out
    assert all("dense" not in str(trace.y) for trace in fig.figure.data)
    priced = {"b": {"dense": _oom_sim(), "freekv": _sim(0.02)}}  # the study's mode, then the other
    table = _table(priced, priced, ["as-published", "ideal"], ["dense", "freekv"], {}, data,
                   Provenance(simulated=("x",)))
    assert table.rows[0][2] == "out of memory" and table.rows[1][2] == "20.000 / 24.000"
    assert table.rows[0][3] == "out of memory" and table.rows[1][3] == "20.000 / 24.000"


def test_an_exact_dense_fidelity_is_labelled_not_measured() -> None:
    from dataclasses import replace

    from dse.objective import EXACT_LABEL
    from dse.report.capacity import _accuracy_cell

    results = _results([_trial(0, 0.9, {"a": 0.030, "b": 0.030})])
    dense = replace(results.dense, trace_summary={"accuracy_exact": {"passkey_accuracy": EXACT_LABEL}})
    data = make_report_data(replace(results, dense=dense))
    assert _accuracy_cell(data, dense) == f"1.000 ({EXACT_LABEL})"
    assert _accuracy_cell(data, data.trials[0]) == "0.900"
