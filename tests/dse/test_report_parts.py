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


def _results(trials: list[TrialResult], slo: float | None = None, ratio: float | None = 0.5) -> StudyResults:
    config: dict = {
        "objectives": [{"metric": "passkey_accuracy"}],
        "hardware": ["a", "b"],
        "model": {"name": "smollm2-135m"},
        "workload": {"input_tokens": 1000, "output_tokens": 10, "batch_sizes": [1, 4]},
    }
    if ratio is not None:
        config["constraints"] = {"min_accuracy_ratio": ratio}
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


def test_recommendation_is_the_fastest_run_within_the_floor_and_the_slo_per_profile() -> None:
    trials = [
        _trial(0, 0.9, {"a": 0.010, "b": 0.030}),
        _trial(1, 1.0, {"a": 0.020, "b": 0.015}),
        _trial(2, 1.0, {"a": 0.008, "b": 0.008}, feasible=False),  # fastest, but below the floor
        _trial(3, 0.6, {"a": 0.009, "b": 0.05}),
    ]
    data = make_report_data(_results(trials, slo=0.019))
    rec_a, rec_b = recommend(data, "a"), recommend(data, "b")
    # no stored grid: each run at the study's batch; on a, trial 3 (111 tokens/s) beats trial 0 (100)
    assert rec_a.run is not None and rec_a.run.number == 3 and rec_a.runner_up.run.number == 0
    assert rec_a.n_infeasible == 1 and rec_a.n_over_slo == 2 and rec_a.n_meeting_slo == 2  # dense, 1 slow
    assert rec_a.chosen.point.batch == 1 and not rec_a.chosen.point.from_grid
    assert rec_a.chosen.floor.how == "point estimate: no per-prompt scores"
    assert "1 below the accuracy floor" in rec_a.losers()
    assert "1 qualify with fewer tokens/s" in rec_a.losers()
    assert rec_b.run is not None and rec_b.run.number == 1
    assert recommend(make_report_data(_results(trials, slo=0.001)), "a").run is None
    no_slo = make_report_data(_results(trials))
    assert no_slo.slo_s is None and recommend(no_slo, "a").run.number == 3  # any batch that fits counts
    assert "no SLO given" in recommend(no_slo, "a").rule
    assert make_report_data(_results(trials), slo_ms=9.5).slo_s == pytest.approx(0.0095)


def _grid(batches: dict[int, float], hw: str = "a", input_tokens: int = 1000) -> list[dict]:
    """A stored capacity grid (dse/objective.py replay): {batch: per-token latency}, None = out of memory;
    tokens/s = batch / latency."""
    out = []
    for batch, lat in batches.items():
        res = _oom_sim() if lat is None else {**_sim(lat), "throughput_tokens_per_s": batch / lat}
        out.append({"hardware": hw, "model": "llama-3.1-8b", "batch_size": batch,
                    "input_tokens": input_tokens, "output_tokens": 10, "result": res})
    return out


def test_each_run_is_taken_at_its_largest_batch_under_the_slo_from_its_stored_grid() -> None:
    from dataclasses import replace

    # trial 0 is the fastest at batch 1 but misses the SLO at batch 4; trial 1 meets it at batch 4 and
    # serves more tokens/s there; trial 2 is out of memory at batch 4 (batch 1 only)
    t0 = replace(_trial(0, 0.9, {"a": 0.010, "b": 0.010}), sim_grid=_grid({1: 0.010, 4: 0.050}))
    t1 = replace(_trial(1, 0.8, {"a": 0.015, "b": 0.015}), sim_grid=_grid({1: 0.015, 4: 0.018}))
    t2 = replace(_trial(2, 1.0, {"a": 0.009, "b": 0.009}), sim_grid=_grid({1: 0.009, 4: None}))
    other = _grid({1: 0.001, 4: 0.001}, input_tokens=500)  # another prompt length: not the study's
    t3 = replace(_trial(3, 0.9, {"a": 0.030, "b": 0.030}), sim_grid=other)
    data = make_report_data(_results([t0, t1, t2, t3], slo=0.02))
    rec = recommend(data, "a")
    by = {e.label: e for e in rec.entries}
    assert by["trial 0"].point.batch == 1 and by["trial 0"].point.from_grid
    assert by["trial 1"].point.batch == 4 and by["trial 1"].point.tokens_per_s == pytest.approx(4 / 0.018)
    assert by["trial 2"].point.batch == 1 and by["trial 2"].point.batches == (1, 4)
    assert by["trial 3"].outcome == "over_slo" and not by["trial 3"].point.from_grid
    assert by["trial 3"].point.source.endswith("the stored grid has no point at the study's prompt length")
    assert by["dense"].point.source == "study's batch 1 only: no stored grid"
    assert rec.run is t1 and rec.runner_up.run is t2  # 222 tokens/s at batch 4, then 111 at batch 1
    assert by["trial 1"].point.source == "of the stored batches 1, 4"
    # ties in tokens/s go to the more accurate run
    t4 = replace(_trial(4, 0.95, {"a": 0.015, "b": 0.015}), sim_grid=_grid({1: 0.015, 4: 0.018}))
    assert recommend(make_report_data(_results([t0, t1, t4], slo=0.02)), "a").run is t4
    # without an SLO: the largest batch that fits memory (trial 0 at batch 4: 80 tokens/s < trial 1's 222)
    no_slo = recommend(make_report_data(_results([t0, t1, t2])), "a")
    assert {e.label: e.point.batch for e in no_slo.entries}["trial 0"] == 4 and no_slo.run is t1


def test_the_floor_is_decided_on_paired_prompts_and_undecided_runs_are_named_not_kept() -> None:
    from dataclasses import replace

    def samples(scores: list[float]) -> dict:
        return {"passkey_accuracy": [{"id": f"p{i}", "score": s, "answer": ""} for i, s in enumerate(scores)]}

    def sampled(number: int, scores: list[float], lat: float) -> TrialResult:
        t = _trial(number, sum(scores) / len(scores), {"a": lat, "b": lat})
        return replace(t, accuracy_samples=samples(scores))

    results = _results([], slo=0.05, ratio=0.9)
    dense = replace(results.dense, accuracy_samples=samples([1.0] * 40))
    meets = sampled(0, [1.0] * 40, 0.020)  # 40 >= 3 / (1 - 0.9) = 30 paired prompts, never wrong
    below = sampled(1, [1.0] * 10 + [0.0] * 30, 0.010)  # the fastest, far below 0.9 x dense
    undecided = sampled(2, [1.0] * 9 + [0.0], 0.012)  # 10 paired prompts: d's interval contains 0
    few = replace(sampled(3, [1.0] * 40, 0.011),
                  accuracy_samples=samples([1.0] * 5))  # 5 prompts: too few to say 'meets'
    unscored = _trial(4, 1.0, {"a": 0.015, "b": 0.015})  # no per-prompt scores: the point estimate
    data = make_report_data(replace(results, dense=dense, trials=(meets, below, undecided, few, unscored)))
    rec = recommend(data, "a")
    by = {e.label: e for e in rec.entries}
    assert by["dense"].floor.verdict == "reference"
    assert by["trial 0"].floor.verdict == "meets" and by["trial 0"].floor.how == "paired, n=40"
    assert by["trial 1"].floor.verdict == "below" and by["trial 1"].outcome == "below"
    assert by["trial 3"].floor.verdict == "undecided" and by["trial 3"].floor.how == "paired, n=5"
    assert by["trial 4"].floor.how == "point estimate: no per-prompt scores"
    assert by["trial 4"].floor.verdict == "meets"
    assert by["trial 2"].floor.verdict == "undecided" and by["trial 2"].floor.how == "paired, n=10"
    assert [e.label for e in rec.undecided] == ["trial 2", "trial 3"] and rec.n_undecided == 2
    assert rec.n_infeasible == 1
    # trials 1, 3 and 2 (100, 90.9, 83.3 tokens/s) are faster than trial 4 (66.7) but not eligible
    assert rec.run is unscored and rec.runner_up.run is meets
    assert "2 undecided on the floor (trial 2, trial 3)" in rec.losers()
    assert "meets (paired, n=40: d " in by["trial 0"].floor.text()
    # when nothing else is eligible, the undecided runs are named in why_none
    strict = make_report_data(replace(results, dense=dense, trials=(few,), config={
        **results.config, "slo": {"per_token_latency_s": 0.012}}))
    why = recommend(strict, "a").why_none
    assert "1 are undecided on the floor (excluded: trial 3)" in why
    assert "1 fit but are slower than the SLO (12 ms/token) at every simulated batch" in why


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
    assert recommend(strict, "a").run.number == 1  # the faster of the two trials (both feasible)
    assert recommend(strict, "a").entries[1].floor.verdict == "below"


def test_when_nothing_qualifies_the_recommendation_says_why() -> None:
    trials = [_trial(0, 0.9, {"a": 0.030, "b": 0.030}, feasible=False),
              _trial(1, 0.8, {"a": 0.020, "b": 0.020}, feasible=False)]
    data = make_report_data(_results(trials, slo=0.001))
    rec = recommend(data, "a")
    assert rec.run is None and rec.n_runs == 3 and rec.n_infeasible == 2 and rec.n_over_slo == 1
    assert "2 of 3 runs are below the accuracy floor" in rec.why_none
    assert "1 fit but are slower than the SLO (1 ms/token) at every simulated batch" in rec.why_none
    rec_b = recommend(data, "b")  # dense has no result on b; the two trials are infeasible
    assert rec_b.run is None and "2 of 2 runs are below the accuracy floor" in rec_b.why_none


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
    assert recommend(data, "a").run.number == 0  # fits on a: the fastest
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
