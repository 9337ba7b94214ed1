"""Fixtures of the report tests (test_report_simulated.py, test_report_chromium.py): a study's results
table whose simulated results are real simulator runs on synthetic demand (no runtime needed), and the
report's sections drawn from it, built once per test session."""

from __future__ import annotations

import pytest

from dse.report.build import report_sections
from dse.report.data import ReportData, make_report_data
from dse.report.page import Section
from dse.results import BaselineResult, StudyResults, TrialResult


def _simulated_trial(number: int, tau: float, correction: float, hit: float, acc: float) -> TrialResult:
    """A trial whose simulated results are real simulator runs on synthetic demand at the given rates,
    and whose trace directory is absent (so the report replays synthetic demand at those rates)."""
    from sim import SimConfig, run_simulation, synthetic_demand

    knobs = {"page_size": 32, "budget_tokens": 1024, "sink_tokens": 128, "window_tokens": 128}
    demand = synthetic_demand(f"correction={correction},hit={hit}", model="llama-3.1-8b", seed=number)
    sim = {
        hw: run_simulation(
            SimConfig(
                model="llama-3.1-8b", hardware=hw, batch_size=1, input_tokens=8192, output_tokens=32, **knobs
            ),
            demand,
            seed=0,
        ).to_dict()
        for hw in ("a100-40g-pcie4", "h100-pcie5")
    }
    n_layers = 32
    summary = {
        "correction_rate": correction,
        "hit_rate": hit,
        "correction_rate_per_layer": [None] + [correction] * (n_layers - 1),
        "mean_similarity": [[None] * 8] + [[0.9 - 0.01 * h for h in range(8)]] * (n_layers - 1),
    }
    return TrialResult(
        target_model="llama-3.1-8b",
        sim=sim,
        sim_models={},
        sim_grid=[],
        number=number,
        state="COMPLETE",
        config={"method": "freekv", "tau": tau, **knobs},
        values=(acc, sim["a100-40g-pcie4"]["per_token_latency_s"]["mean"]),
        accuracy={"passkey_accuracy": acc},
        trace_dir="/nonexistent/trace",
        trace_summary=summary,
        feasible=True,
    )


@pytest.fixture(scope="session")
def simulated_data() -> ReportData:
    """A study's results table whose simulated results are real simulator runs (synthetic demand at
    the given rates, no trace directory on disk); accuracies are inputs of the test."""
    trials = [_simulated_trial(0, 0.8, 0.2, 0.85, 0.9), _simulated_trial(1, 0.9, 0.6, 0.8, 1.0)]
    config = {
        "objectives": [{"metric": "passkey_accuracy"}, {"latency": {"hardware": "a100-40g-pcie4"}}],
        "hardware": ["a100-40g-pcie4", "h100-pcie5"],
        "model": {"name": "llama-3.1-8b"},
        "workload": {"input_tokens": 8192, "output_tokens": 32, "batch_sizes": [1, 4]},
        "search": {"dense_layers": [0]},
        "slo": {"per_token_latency_s": 1.0},
    }
    results = StudyResults(
        study_name="s",
        storage_url="sqlite://",
        config=config,
        study_file="",
        objective_names=("passkey_accuracy", "latency"),
        directions=("maximize", "minimize"),
        target_model="llama-3.1-8b",
        hardware=("a100-40g-pcie4", "h100-pcie5"),
        trials=tuple(trials),
        dense=None,
        untuned_freekv=None,
    )
    return make_report_data(results)


@pytest.fixture(scope="session")
def simulated_sections(simulated_data: ReportData) -> list[Section]:
    return report_sections(simulated_data)


SampledTrial = TrialResult  # per-prompt scores in accuracy_samples ({metric: [{"id", "score", "answer"}]})
SampledBaseline = BaselineResult


_FLOOR_BATCHES = (1, 4, 8)
_FLOOR_PROFILES = ("a100-40g-pcie4", "rtx-4090")


def _floor_sims(method: str, knobs: dict, correction: float | None, number: int) -> tuple[dict, list[dict]]:
    """(sim, sim_grid) as `dse sweep` stores them: real simulator runs of llama-3.1-8b at 32K tokens on two
    profiles, batches 1, 4, 8 (the study's batch sizes), on synthetic demand at `correction`."""
    from sim import SimConfig, run_simulation, synthetic_demand

    demand = (None if correction is None else
              synthetic_demand(f"correction={correction},hit=0.8", model="llama-3.1-8b", seed=number))
    sim: dict = {}
    grid: list[dict] = []
    for hw in _FLOOR_PROFILES:
        for batch in _FLOOR_BATCHES:
            cfg = SimConfig(model="llama-3.1-8b", hardware=hw, method=method, batch_size=batch,
                            input_tokens=32768, output_tokens=32, **knobs)
            res = run_simulation(cfg, demand, seed=0).to_dict()
            grid.append({"hardware": hw, "model": "llama-3.1-8b", "batch_size": batch, "input_tokens": 32768,
                         "output_tokens": 32, "result": res})
            if batch == _FLOOR_BATCHES[0]:
                sim[hw] = res
    return sim, grid


def _prompts(scores: list[float]) -> dict:
    return {"passkey_accuracy": [{"id": f"p{i}", "score": s, "answer": ""} for i, s in enumerate(scores)]}


@pytest.fixture(scope="session")
def floor_data() -> ReportData:
    """A study whose runs the recommendation tells apart by its rule: dense attention (the floor's
    reference, 40 prompts) and four FreeKV trials with stored grids (batches 1, 4, 8 at 32K tokens, real
    simulator runs): trial 0, the fastest (budget 512), far below the floor on paired prompts; trial 1
    (budget 512) with only 5 paired prompts (undecided); trial 2 (budget 1024) meeting it on 40; trial 3
    (budget 2048, over the SLO past batch 1) without per-prompt scores (its stored point verdict). Floor
    0.9 x dense, SLO 50 ms/token."""
    plans = [(512, 0.05, [1.0] * 10 + [0.0] * 30), (512, 0.4, [1.0] * 5), (1024, 0.2, [1.0] * 40),
             (2048, 0.05, None)]
    trials = []
    for number, (budget, correction, scores) in enumerate(plans):
        knobs = {"page_size": 32, "budget_tokens": budget, "sink_tokens": 128, "window_tokens": 128}
        sim, grid = _floor_sims("freekv", knobs, correction, number)
        acc = 0.95 if scores is None else sum(scores) / len(scores)
        trials.append(SampledTrial(
            target_model="llama-3.1-8b", sim=sim, sim_models={}, sim_grid=grid, number=number,
            state="COMPLETE", config={"method": "freekv", "tau": 0.9, **knobs},
            values=(acc, sim[_FLOOR_PROFILES[0]]["per_token_latency_s"]["mean"]),
            accuracy={"passkey_accuracy": acc},
            accuracy_ci={"passkey_accuracy": {"value": acc, "low": acc - 0.05, "high": min(1.0, acc + 0.05)}},
            trace_dir="/nonexistent/trace",
            trace_summary={"correction_rate": correction, "hit_rate": 0.8},
            constraints={"min_accuracy_ratio:passkey_accuracy": 0.9 - acc}, feasible=acc >= 0.9,
            accuracy_samples={} if scores is None else _prompts(scores),
        ))
    sim, grid = _floor_sims("dense", knobs, None, 0)
    dense = SampledBaseline(target_model="llama-3.1-8b", sim=sim, sim_models={}, sim_grid=grid, name="dense",
                            config={"method": "dense"}, accuracy={"passkey_accuracy": 1.0},
                            accuracy_samples=_prompts([1.0] * 40))
    config = {
        "objectives": [{"metric": "passkey_accuracy"}, {"latency": {"hardware": _FLOOR_PROFILES[0]}}],
        "hardware": list(_FLOOR_PROFILES),
        "model": {"name": "llama-3.1-8b"},
        "workload": {"input_tokens": 32768, "output_tokens": 32, "batch_sizes": list(_FLOOR_BATCHES)},
        "search": {"dense_layers": [0]},
        "constraints": {"min_accuracy_ratio": 0.9},
        "slo": {"per_token_latency_s": 0.05},
    }
    results = StudyResults(
        study_name="floor", storage_url="sqlite://", config=config, study_file="",
        objective_names=("passkey_accuracy", "latency"), directions=("maximize", "minimize"),
        target_model="llama-3.1-8b", hardware=_FLOOR_PROFILES, trials=tuple(trials), dense=dense,
        untuned_freekv=None,
    )
    return make_report_data(results)
