"""`dse sweep` end to end on a tiny study: the real runtime (SmolLM2-135M on the CPU, passkey at 128
tokens) and the real simulator, stored in SQLite, read back with dse.results; then the same command
resumes and finds nothing left to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.cli import main
from dse.results import load_results
from traces import open_trace

TINY = """\
name: tiny
model: {name: smollm2-135m}
tasks:
  - {name: passkey, context_tokens: 128, samples: 1}
search:
  method: [freekv]
  tau: [0.8, 0.9]
  page_size: [16]
  budget_tokens: [64, 96]      # 64 < sink + window + one page: skipped, never run
  sink_tokens: [32]
  window_tokens: [32]
objectives:
  - metric: passkey_accuracy
  - latency: {hardware: a100-40g-pcie4}
constraints: {min_accuracy_ratio: 0.9}
workload: {input_tokens: 8192, output_tokens: 32}
hardware: [a100-40g-pcie4]
target_model: llama-3.1-8b
extra_replay_models: [smollm2-135m]
trials: 3                      # two valid configurations: at least one trial copies an identical one
sampler: {name: tpe, seed: 0}
baselines: {dense: true, untuned_freekv: null}
device: cpu
"""


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("sweep")
    path = tmp / "tiny.yaml"
    path.write_text(TINY)
    args = ["sweep", str(path), "--set", f"out_dir={tmp / 'out'}", "--no-progress"]
    assert main(args) == 0
    return path, f"sqlite:///{tmp / 'out' / 'study.db'}"


def test_every_trial_is_measured_and_simulated(tiny_sweep: tuple[Path, str]) -> None:
    _, url = tiny_sweep
    res = load_results(url)
    assert res.study_name == "tiny" and res.objective_names == (
        "passkey_accuracy",
        "latency_mean_s/a100-40g-pcie4",
    )
    assert len(res.completed) == 3 and not res.failed
    assert sum(t.duplicate_of is not None for t in res.completed) >= 1
    configs = {(t.config["tau"], t.config["budget_tokens"]) for t in res.completed}
    assert configs <= {(0.8, 96), (0.9, 96)}
    for t in res.trials:  # skipped: an invalid combination, or a configuration already taken (redrawn)
        if t.state == "PRUNED":
            assert (t.skipped or "").startswith(("invalid combination", "duplicate: trial #"))
    for t in res.completed:
        assert 0.0 <= t.accuracy["passkey_accuracy"] <= 1.0
        assert t.dense_accuracy == res.dense.accuracy
        assert open_trace(t.trace_dir).n_steps > 0
        assert 0.0 <= (t.correction_rate or 0.0) <= 1.0
        sim = t.sim["a100-40g-pcie4"]
        assert sim["mapped_from"] == "smollm2-135m" and sim["model"] == "llama-3.1-8b"
        assert t.sim_models["smollm2-135m"]["a100-40g-pcie4"]["mapped_from"] is None
        assert t.values == (t.accuracy["passkey_accuracy"], sim["per_token_latency_s"]["mean"])
        bound = 0.9 * res.dense.accuracy["passkey_accuracy"]
        assert t.feasible == (t.accuracy["passkey_accuracy"] >= bound)
        # per-prompt results: the same prompt ids as dense attention's, their mean the trial's accuracy
        samples, metric = t.accuracy_samples["passkey_accuracy"], "passkey_accuracy"
        assert [s["id"] for s in samples] == [s["id"] for s in res.dense.accuracy_samples[metric]]
        assert sum(s["score"] for s in samples) / len(samples) == pytest.approx(t.accuracy[metric])
        assert "accuracy_samples" not in t.trace_summary and "samples" not in t.accuracy_ci[metric]
    row = res.rows()[0]
    assert row["latency_s/a100-40g-pcie4"] > 0 and row["fits/a100-40g-pcie4"] is True
    assert res.pareto() or not any(t.feasible for t in res.completed)


def test_dense_is_measured_once_per_study(tiny_sweep: tuple[Path, str]) -> None:
    _, url = tiny_sweep
    res = load_results(url)
    assert res.dense is not None and "passkey_accuracy" in res.dense.accuracy
    assert res.dense.sim["a100-40g-pcie4"]["method"] == "dense"
    assert Path(res.dense.trace_dir or "").is_dir()
    assert res.untuned_freekv is None
    assert res.config["name"] == "tiny" and "sampler" in res.config and res.study_file == TINY


def test_rerun_resumes_without_repeating(tiny_sweep: tuple[Path, str], capsys: pytest.CaptureFixture) -> None:
    path, url = tiny_sweep
    before = load_results(url).trials
    out_dir = Path(url.removeprefix("sqlite:///")).parent
    assert main(["sweep", str(path), "--set", f"out_dir={out_dir}", "--no-progress"]) == 0
    assert "3/3 trials finished" in capsys.readouterr().err
    after = load_results(url).trials
    assert [(t.number, t.state, t.values) for t in after] == [(t.number, t.state, t.values) for t in before]


def test_compare_a_trial_with_dense_attention(tiny_sweep: tuple[Path, str], capsys: pytest.CaptureFixture
                                              ) -> None:
    path, url = tiny_sweep
    number = load_results(url).completed[0].number
    assert main(["compare", f"{url}:trial:{number}", f"{url}:dense", "--floor", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "passkey_accuracy: 1 paired prompt\n" in out and "floor 0.9 x B: undecided (n=1)" in out
    assert "passkey/128/seed0/0" in out or "agree on every paired prompt" in out
