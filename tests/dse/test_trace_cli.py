"""`dse trace`: a tiny real run writes a readable trace and summary.json; user errors exit 2, no traceback."""

from __future__ import annotations

import json

import pytest

from dse.cli import main
from traces import open_trace

TINY = ["--task", "passkey", "--context-tokens", "160", "--samples", "1", "--decode-tokens", "3",
        "--budget-tokens", "96", "--page-size", "16", "--sink-tokens", "16", "--window-tokens", "16",
        "--device", "cpu"]


def test_trace_dense_tiny_run_by_its_old_name_too(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["trace", "--method", "full", *TINY, "--out", str(out)]) == 0  # "full": dense's old name
    printed = capsys.readouterr().out
    assert "passkey_accuracy" in printed and "wrote" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["accuracy"]) == {"passkey_accuracy"}
    reader = open_trace(out / "trace")
    assert reader.complete and reader.n_steps == 2 and reader.meta.runtime["budget_tokens"] == 96
    assert reader.meta.runtime["method"] == "dense"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-5"], "unknown model 'gpt-5'"),
        (["--model", "llama-3.1-8b"], "no weights found for model 'llama-3.1-8b'"),
        (["--budget-tokens", "40"], "budget_tokens counts sink and window"),
        (["--weights", "/nonexistent/dir"], "--weights /nonexistent/dir does not exist"),
        (["--dense-layers", "a,b"], "--dense-layers must be comma-separated"),
    ],
)
def test_trace_user_errors(tmp_path, capsys, monkeypatch, args, message) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    code = main(["trace", "--method", "dense", *TINY, *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err and err.startswith("error: ")


def test_trace_records_the_selection_design(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    args = ["trace", "--method", "freekv", *TINY, "--group-pooling", "mean", "--page-summary", "box"]
    assert main([*args, "--out", str(out)]) == 0
    runtime = open_trace(out / "trace").meta.runtime
    assert runtime["knobs"]["group_pooling"] == "mean" and runtime["knobs"]["page_summary"] == "box"


@pytest.mark.parametrize(("args", "message"), [
    (["--group-pooling", "avgSM"], "'avgSM' is not one of"),
    (["--page-summary", "quest"], "'quest' is not one of"),
    (["--method", "lru"], "unknown method 'lru': valid runtime policies are freekv, dense, quest"),
    (["--method", "quest", "--tau", "0.8"], "'tau' is not a knob of quest"),
])
def test_trace_selection_design_and_method_errors(tmp_path, capsys, args, message) -> None:
    code = main(["trace", *TINY, *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(("args", "message"), [
    (["--method", "snapkv", "--option", "kernel_size=4"], "snapkv knob kernel_size must be an odd integer"),
    (["--method", "raas", "--option", "beta=1"], "'beta' is not a knob of raas"),
    (["--method", "quest", "--option", "offload=true"], "offload is a simulator knob"),
    (["--method", "h2o", "--option", "novalue"], "--option expects KEY=VALUE"),
])
def test_trace_method_option_errors(tmp_path, capsys, args, message) -> None:
    code = main(["trace", *TINY, *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_trace_method_option_reaches_the_policy(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["trace", *TINY, "--method", "snapkv", "--option", "observation_tokens=16", "--option",
                 "pooling=max", "--out", str(out)]) == 0
    meta = open_trace(out / "trace").meta
    want = {"selection": "per-query-head", "observation_tokens": 16, "kernel_size": 5, "pooling": "max"}
    assert meta.runtime["knobs"] == want
    assert meta.method_knobs == meta.runtime["knobs"] and meta.method == "snapkv"


def test_trace_new_task_prints_intervals(tmp_path, capsys) -> None:
    out = tmp_path / "niah"
    args = ["trace", "--task", "niah_single", "--context-tokens", "200", "--samples", "2", "--decode-tokens",
            "3", "--budget-tokens", "96", "--page-size", "16", "--sink-tokens", "16", "--window-tokens", "16",
            "--param", "haystack=noise", "--device", "cpu", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "niah_single_score" in printed and "95%" in printed and "wilson" in printed  # the table may wrap
    summary = json.loads((out / "summary.json").read_text())
    ci = summary["accuracy_ci"]["niah_single_score"]
    assert ci["n"] == 2 and ci["method"] == "wilson" and ci["low"] <= summary["accuracy"]["niah_single_score"]
    assert open_trace(out / "trace").meta.runtime["batch_size"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "math500"], "no data for task 'math500': looked in"),
        (["--task", "gpqa", "--param", "data=/nonexistent/gpqa.csv"], "gpqa.csv (does not exist)"),
        (["--task", "vt", "--param", "num_hops"], "--param must be KEY=VALUE"),
        (["--task", "qa"], "unknown task 'qa'"),
    ],
)
def test_trace_task_errors(tmp_path, capsys, monkeypatch, args, message) -> None:
    for var in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "HF_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var))
    code = main(["trace", "--method", "dense", "--context-tokens", "512", *args, "--out",
                 str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
