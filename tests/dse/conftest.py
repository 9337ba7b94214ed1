"""Fixtures of the report tests (test_report_simulated.py, test_report_chromium.py): a study's results
table whose simulated results are real simulator runs on synthetic demand (no runtime needed), and the
report's sections drawn from it, built once per test session."""

from __future__ import annotations

import pytest

from dse.report.build import report_sections
from dse.report.data import ReportData, make_report_data
from dse.report.page import Section
from dse.results import StudyResults, TrialResult


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
