"""The report's "Methods compared" part: methods side by side on measured accuracy against latency
simulated from each run's own trace, per profile, the dropping/retrieval kind visible, each method's
best point and untuned baseline; untuned baselines of other methods read back from a real storage."""

from __future__ import annotations

from pathlib import Path

import optuna

from dse.report.compare import KIND_SYMBOLS, best_run, compared_methods, method_comparison_blocks
from dse.report.data import make_report_data, run_label
from dse.report.page import FigureBlock, NoteBlock, Section, TableBlock, render_page
from dse.report.pareto import pareto_section
from dse.results import BaselineResult, StudyResults, TrialResult, load_results


def _sim(latency_s: float, method: str) -> dict:
    return {
        "per_token_latency_s": {"mean": latency_s, "p50": latency_s, "p99": latency_s},
        "throughput_tokens_per_s": 1.0 / latency_s,
        "memory": {"gpu_bytes": 1, "host_bytes": 1, "fits": True, "max_batch": 4},
        "mapped_from": "smollm2-135m",
        "model": "llama-3.1-8b",
        "method": method,
        "implementation": "as-published",
        "software": "pytorch2-cuda12",
    }


def _config(method: str, budget: int, **extra: object) -> dict:
    return {"method": method, "page_size": 32, "budget_tokens": budget, "sink_tokens": 32,
            "window_tokens": 32, **extra}


def _trial(number: int, method: str, acc: float, lat: dict[str, float], **extra: object) -> TrialResult:
    return TrialResult(
        target_model="llama-3.1-8b", sim={p: _sim(s, method) for p, s in lat.items()}, sim_models={},
        sim_grid=[], number=number, state="COMPLETE", config=_config(method, 128, **extra),
        values=(acc, lat["a"]), accuracy={"passkey_accuracy": acc}, feasible=True,
    )


def _baseline(name: str, method: str, acc: float, lat: dict[str, float]) -> BaselineResult:
    sim_name = "dense" if method == "full" else method
    return BaselineResult(target_model="llama-3.1-8b", sim={p: _sim(s, sim_name) for p, s in lat.items()},
                          sim_models={}, sim_grid=[], name=name, config=_config(method, 128),
                          accuracy={"passkey_accuracy": acc})


def _results(trials: list[TrialResult], untuned: tuple[BaselineResult, ...] = ()) -> StudyResults:
    return StudyResults(
        study_name="m", storage_url="sqlite://", study_file="",
        config={"objectives": [{"metric": "passkey_accuracy"}], "hardware": ["a", "b"],
                "model": {"name": "smollm2-135m"}},
        objective_names=("passkey_accuracy", "latency_mean_s/a"), directions=("maximize", "minimize"),
        target_model="llama-3.1-8b", hardware=("a", "b"), trials=tuple(trials),
        dense=_baseline("dense", "full", 1.0, {"a": 0.05, "b": 0.04}),
        untuned_freekv=_baseline("untuned_freekv", "freekv", 0.7, {"a": 0.02, "b": 0.015}),
        untuned_methods=untuned,
    )


TRIALS = [
    _trial(0, "freekv", 0.9, {"a": 0.020, "b": 0.010}, tau=0.9),
    _trial(1, "freekv", 0.9, {"a": 0.015, "b": 0.012}, tau=0.8),
    _trial(2, "raas", 0.4, {"a": 0.008, "b": 0.006}, options={"alpha": 0.05}),
    _trial(3, "raas", 0.6, {"a": 0.009, "b": 0.007}, options={"alpha": 0.01}),
]


def test_methods_side_by_side_with_kind_markers_best_points_and_untuned_baselines() -> None:
    untuned_raas = _baseline("untuned_raas", "raas", 0.3, {"a": 0.007, "b": 0.005})
    data = make_report_data(_results(TRIALS, (untuned_raas,)))
    assert compared_methods(data) == ["freekv", "raas"]
    assert run_label(untuned_raas) == "untuned raas" and untuned_raas in data.baselines()
    # best point per profile: the most accurate, ties broken by the lower latency on that profile
    assert best_run(data, TRIALS[:2], "a").number == 1 and best_run(data, TRIALS[:2], "b").number == 0
    blocks = method_comparison_blocks(data)
    figures = [b for b in blocks if isinstance(b, FigureBlock)]
    assert [f.title for f in figures] == ["Methods compared on a", "Methods compared on b"]
    traces = {t.name: t for t in figures[0].figure.data}
    assert traces["freekv (retrieval)"].marker.symbol == KIND_SYMBOLS["retrieval"] == "circle"
    assert traces["raas (dropping)"].marker.symbol == KIND_SYMBOLS["dropping"] == "triangle-up"
    assert list(traces["raas (dropping)"].y) == [0.4, 0.6]
    assert list(traces["best raas"].x) == [9.0] and list(traces["best freekv"].x) == [15.0]
    assert list(traces["untuned raas"].y) == [0.3] and traces["untuned raas"].marker.symbol == "diamond"
    assert list(traces["untuned freekv"].y) == [0.7] and list(traces["dense"].y) == [1.0]
    assert figures[0].provenance.mapped_from == ("smollm2-135m",)  # the shape transplant, labelled
    table = next(b for b in blocks if isinstance(b, TableBlock))
    rows = {r[0]: r for r in table.rows}
    assert rows["raas"][:3] == ("raas", "dropping", "2") and rows["freekv"][1] == "retrieval"
    assert rows["raas"][3] == "0.600 @ 9.000 ms (trial 3)"
    assert rows["raas"][5] == "0.300 @ 7.000 ms (untuned raas)"
    assert not any(isinstance(b, NoteBlock) for b in blocks)  # every run replayed with its own model
    html = render_page("m", [], [pareto_section(data)])
    assert "Methods compared on a" in html and "untuned raas" in html


def test_a_run_priced_with_another_methods_model_is_flagged() -> None:
    foreign = _trial(4, "raas", 0.5, {"a": 0.01, "b": 0.01})
    foreign = TrialResult(**{**foreign.__dict__, "sim": {"a": _sim(0.01, "freekv"), "b": _sim(0.01, "raas")}})
    blocks = method_comparison_blocks(make_report_data(_results([*TRIALS, foreign])))
    notes = [b.text for b in blocks if isinstance(b, NoteBlock)]
    assert notes and "trial 4 on a (freekv for raas)" in notes[0]


def test_a_method_whose_model_prices_no_trace_is_said_so() -> None:
    raas = _trial(4, "raas", 0.5, {"a": 0.01, "b": 0.01})
    raas = TrialResult(**{**raas.__dict__, "sim": {p: {**res, "demand": "none (costs do not depend on a "
                                                        "trace)"} for p, res in raas.sim.items()}})
    blocks = method_comparison_blocks(make_report_data(_results([*TRIALS[:2], raas])))
    notes = [b.text for b in blocks if isinstance(b, NoteBlock)]
    assert len(notes) == 1 and notes[0].startswith("The simulator model of raas prices no trace")


def test_a_single_method_study_keeps_its_report_as_before() -> None:
    data = make_report_data(_results(TRIALS[:2]))
    assert compared_methods(data) == ["freekv"] and method_comparison_blocks(data) == []
    section = pareto_section(data)
    assert isinstance(section, Section)
    assert not any(getattr(b, "title", "").startswith("Methods compared") for b in section.blocks)


def test_untuned_baselines_of_other_methods_load_from_the_storage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(study_name="m", storage=url, directions=["maximize", "minimize"])
    config = {"hardware": ["a"], "model": {"name": "smollm2-135m"},
              "baselines": {"untuned": {"freekv": {}, "raas": {}, "h2o": {}}}}
    study.set_user_attr("study_config", config)
    attrs = {"config": _config("raas", 128), "accuracy": {"passkey_accuracy": 0.3},
             "sim": {"a": _sim(0.01, "raas")}}
    study.set_user_attr("untuned_raas", attrs)
    study.set_user_attr("untuned_freekv", {**attrs, "config": _config("freekv", 128)})
    results = load_results(url, "m")
    # freekv's is untuned_freekv; h2o was never measured (not stored): only what is stored is read
    assert [b.name for b in results.untuned_methods] == ["untuned_raas"]
    assert results.untuned_freekv is not None and results.untuned_methods[0].latency_s("a") == 0.01


def _with_samples(run, scores: list[float]):
    from dataclasses import replace

    samples = [{"id": f"passkey/1024/seed0/{i}", "score": s, "answer": str(s)} for i, s in enumerate(scores)]
    return replace(run, accuracy_samples={"passkey_accuracy": samples})


def test_untuned_baselines_are_paired_with_dense_and_say_whether_resolved() -> None:
    from dataclasses import replace

    from dse.accuracy.resolution import mcnemar_pairs_needed

    lost = _with_samples(_baseline("untuned_raas", "raas", 0.3, {"a": 0.007, "b": 0.005}), [0] * 7 + [1] * 3)
    results = _results(TRIALS, (lost,))
    results = replace(results, dense=_with_samples(results.dense, [1] * 10),
                      untuned_freekv=_with_samples(results.untuned_freekv, [0] * 2 + [1] * 8))
    table = next(b for b in method_comparison_blocks(make_report_data(results)) if isinstance(b, TableBlock))
    assert table.header[-1] == "untuned vs dense (paired, 95%)"
    rows = {r[0]: r for r in table.rows}
    # 7 losses, no wins of 10 pairs: McNemar p = 2 / 128 = 0.016, resolved
    assert rows["raas"][-1].startswith("-0.700 [") and ", p 0.016, resolved (n=10)" in rows["raas"][-1]
    # 2 losses: p = 0.5, not resolved; Connor with p01 = 0.2 gives the pairs needed
    needed = mcnemar_pairs_needed(0.0, 0.2)
    assert rows["freekv"][-1].endswith(f"p 0.5, not resolved: ~{needed:.0f} pairs needed (n=10)")
