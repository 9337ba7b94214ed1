"""Per-prompt results read back without torch, and `dse compare` on hand-written runs: trace output
directories (summary.json) and study runs (STUDY:trial:N, STUDY:dense), old formats without per-prompt
results included, and its bad inputs (exit 2, one paragraph, no traceback)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from dse.accuracy.runs import parse_study_ref
from dse.accuracy.samples import load_summary_samples
from dse.cli import cli, main
from dse.errors import DseError
from dse.objective import Evaluation
from dse.results import load_results

METRIC = "passkey_accuracy"


def _samples(scores: list[float], answer: str = "The pass key is 12345", task: str = "passkey/1024/seed0"
             ) -> list[dict]:
    return [{"id": f"{task}/{i}", "score": s, "answer": f"{answer} ({i})"} for i, s in enumerate(scores)]


def _run(path: Path, scores: list[float] | None, **extra: object) -> Path:
    """A trace output directory whose summary.json holds these per-prompt scores (None: an old summary)."""
    path.mkdir(parents=True)
    summary: dict = {"accuracy": {METRIC: None if scores is None else sum(scores) / len(scores)}, **extra}
    if scores is not None:
        summary["accuracy_samples"] = {METRIC: _samples(scores)}
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def _fails(capsys: pytest.CaptureFixture, args: list[str], *needles: str) -> None:
    code = main(["compare", *args])
    text = capsys.readouterr().err
    assert code == 2, text
    assert "Traceback" not in text and text.startswith("error: ") and text.count("\n") == 1
    for needle in needles:
        assert needle in text, (needle, text)


def test_summary_samples_are_read_back_and_old_summaries_give_none(tmp_path: Path) -> None:
    run = _run(tmp_path / "new", [1, 0, 1])
    assert load_summary_samples(run) == {METRIC: {"passkey/1024/seed0/0": 1.0, "passkey/1024/seed0/1": 0.0,
                                                  "passkey/1024/seed0/2": 1.0}}
    assert load_summary_samples(run / "summary.json") == load_summary_samples(run)
    assert load_summary_samples(_run(tmp_path / "old", None)) == {}
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text("{not json")
    with pytest.raises(DseError, match=f"cannot read {tmp_path / 'bad' / 'summary.json'}"):
        load_summary_samples(tmp_path / "bad")
    with pytest.raises(DseError, match="holds no summary.json"):
        load_summary_samples(tmp_path)


def test_compare_two_trace_directories(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", [1, 0, 1, 1, 0, 1, 1, 1, 0, 1])
    b = _run(tmp_path / "b", [1] * 10)
    out = tmp_path / "cmp.json"
    result = CliRunner().invoke(cli, ["compare", str(a), str(b), "--floor", "0.9", "--failures", "2",
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    text = result.output
    assert f"A: {a}\nB: {b} (reference)" in text and "passkey_accuracy: 10 paired prompts" in text
    assert "mean A 0.700   mean B 1.000" in text and "A - B -0.300, 95% paired bootstrap [" in text
    assert "McNemar exact p = 0.25 (A right where B wrong: 0; B right where A wrong: 3)" in text
    assert "floor 0.9 x B: undecided" in text
    assert "prompts where A and B disagree (2 of 3 shown):" in text
    assert "passkey/1024/seed0/1" in text and '"The pass key is 12345 (1)"' in text
    data = json.loads(out.read_text())["metrics"][METRIC]
    assert (data["n"], data["a_wins"], data["b_wins"], data["n_disagreements"]) == (10, 0, 3, 3)
    assert [d["id"] for d in data["disagreements"]] == [f"passkey/1024/seed0/{i}" for i in (1, 4, 8)]
    assert data["floor"]["verdict"] == "undecided"


def test_compare_refuses_runs_it_cannot_pair(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = _run(tmp_path / "a", [1, 0, 1])
    old = _run(tmp_path / "old", None)
    _fails(capsys, [str(a), str(tmp_path / "missing")], f"{tmp_path / 'missing'} does not exist",
           "STUDY:trial:N")
    _fails(capsys, [str(a), str(old)], f"{old} has no per-prompt results", "predates", "re-run")
    _fails(capsys, [str(a), str(a), "--metric", "vt_score"], "no per-prompt results of 'vt_score'",
           "measured: passkey_accuracy")
    other = tmp_path / "other"
    other.mkdir()
    summary = {"accuracy_samples": {METRIC: _samples([1, 1], task="x")}}
    (other / "summary.json").write_text(json.dumps(summary))
    _fails(capsys, [str(a), str(other)], "no prompt id is common", "x/0")
    rw = _run(tmp_path / "rw", None, random_weights=3)
    _fails(capsys, [str(rw), str(a)], "random weights")


def _study(tmp_path: Path) -> str:
    """A study storage as `dse sweep` writes it: trial 0 stored before per-prompt results existed,
    trial 1 with them; the dense baseline with passkey results and fidelity exact by definition."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(study_name="s", storage=url, directions=["maximize"])
    study.set_user_attr("study_config", {"model": {"name": "smollm2-135m"}, "hardware": []})
    study.set_user_attr("dense", {
        "config": {"method": "dense"}, "accuracy": {METRIC: 1.0, "top1_agreement": 1.0},
        "accuracy_samples": {METRIC: _samples([1, 1, 1, 1])},
        "trace_summary": {"accuracy_exact": {"top1_agreement": "dense vs dense, exact by definition"}}})
    old = {"config": {"method": "freekv"}, "accuracy": {METRIC: 0.75}, "accuracy_ci": {}}
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, values=[0.75],
                                              user_attrs=old))
    new = {**old, "accuracy_samples": {METRIC: _samples([1, 0, 1, 1])}}
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, values=[0.75],
                                              user_attrs=new))
    return url


def test_results_of_trials_stored_before_per_prompt_results_still_load(tmp_path: Path) -> None:
    res = load_results(_study(tmp_path), "s")
    assert res.trials[0].accuracy_samples == {} and res.trials[0].accuracy == {METRIC: 0.75}
    assert [s["score"] for s in res.trials[1].accuracy_samples[METRIC]] == [1, 0, 1, 1]
    assert res.dense is not None and len(res.dense.accuracy_samples[METRIC]) == 4
    ev = Evaluation({}, {METRIC: 1.0}, {}, {}, {}, accuracy_samples={METRIC: _samples([1])})
    assert ev.attrs("m")["accuracy_samples"] == {METRIC: _samples([1])}
    assert Evaluation({}, {}, {}, {}, {}).accuracy_samples == {}  # a measurement saved before


def test_compare_study_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    url = _study(tmp_path)
    assert parse_study_ref(f"{url}:trial:1") == (url, "trial:1")
    assert parse_study_ref(f"{url}:untuned_raas") == (url, "untuned_raas")
    assert parse_study_ref(str(tmp_path)) is None and parse_study_ref("runs/x") is None
    assert main(["compare", f"{url}:trial:1", f"{url}:dense", "--metric", METRIC]) == 0
    out = capsys.readouterr().out
    assert "passkey_accuracy: 4 paired prompts" in out and "mean A 0.750   mean B 1.000" in out
    _fails(capsys, [f"{url}:trial:0", f"{url}:dense"], f"{url}:trial:0 has no per-prompt results", "predates")
    _fails(capsys, [f"{url}:trial:1", f"{url}:dense", "--metric", "top1_agreement"],
           "exact by definition", "no prompt was run")
    _fails(capsys, [f"{url}:trial:7", f"{url}:dense"], "no trial 7 (trials 0-1)")
    _fails(capsys, [f"{url}:trial:1", f"{url}:untuned_freekv"], "no untuned_freekv baseline (it has: dense)")


def test_compare_never_imports_torch(tmp_path: Path, fresh_python: Callable[[str], None]) -> None:
    a, b = _run(tmp_path / "a", [1, 0]), _run(tmp_path / "b", [1, 1])
    code = ("import sys; from dse.cli import main; "
            f"code = main(['compare', {str(a)!r}, {str(b)!r}, '--floor', '0.9']); "
            "assert code == 0 and 'torch' not in sys.modules, code")
    fresh_python(code)
