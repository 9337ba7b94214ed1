"""`dse trace`: a tiny real run writes a readable trace and summary.json; user errors exit 2, no traceback."""

from __future__ import annotations

import json

import pytest

from dse.cli import main
from traces import open_trace

TINY = ["--task", "passkey", "--context-tokens", "160", "--samples", "1", "--decode-tokens", "3",
        "--budget-tokens", "96", "--page-size", "16", "--sink-tokens", "16", "--window-tokens", "16",
        "--device", "cpu"]


def test_trace_full_tiny_run(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["trace", "--method", "full", *TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "passkey_accuracy" in printed and "wrote" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["accuracy"]) == {"passkey_accuracy"}
    reader = open_trace(out / "trace")
    assert reader.complete and reader.n_steps == 2 and reader.meta.runtime["budget_tokens"] == 96


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
    code = main(["trace", "--method", "full", *TINY, *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err and err.startswith("error: ")
