"""`dse capacity` with accuracy evidence from trace output directories: each row carries the measured
accuracy and the paired floor's verdict, the floor excludes what is shown below it, and notes name a
knob the candidate's evidence sets as the candidate's, not as a flag the user never gave."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from dse.cli import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_trace_factory import make_trace  # noqa: E402

N_PROMPTS = 30  # the rule of three: "meets" at ratio 0.9 needs n >= 3 / (1 - 0.9)


def _run_dir(root: Path, name: str, method: str, scores: list[float], planned: dict | None = None) -> Path:
    """A `dse trace`-shaped output directory: a trace and its summary.json with per-prompt scores."""
    out = root / name
    trace = make_trace(out / "trace", method=method, budget_tokens=256, sink_tokens=32, window_tokens=32)
    mean = sum(scores) / len(scores)
    summary = {
        "accuracy": {"passkey_accuracy": mean},
        "accuracy_ci": {"passkey_accuracy": {"value": mean, "low": mean, "high": mean, "n": len(scores)}},
        "accuracy_samples": {"passkey_accuracy": [
            {"id": f"p{i}", "score": s, "answer": "x"} for i, s in enumerate(scores)]},
        "trace_dir": str(trace),
    }
    if planned is not None:
        summary["planned"] = {"knobs": planned}
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return out


def test_rows_carry_accuracy_and_the_floor_excludes_a_config_shown_below_it(tmp_path: Path) -> None:
    dense = _run_dir(tmp_path, "dense", "dense", [1.0] * N_PROMPTS)
    kept = _run_dir(tmp_path, "quest-kept", "quest", [1.0] * N_PROMPTS,
                    planned={"budget_tokens": 2048, "page_size": 32, "sink_tokens": 256,
                             "window_tokens": 256})
    lost = _run_dir(tmp_path, "freekv-lost", "freekv", [0.0] * N_PROMPTS)
    result = CliRunner().invoke(cli, [
        "capacity", "--model", "llama-3.1-8b", "--hardware", "a100-40g-pcie4",
        "--method", "dense,quest,freekv",
        "--input-tokens", "8192", "--output-tokens", "32", "--slo-ms", "200",
        "--accuracy-from", str(dense), "--accuracy-from", str(kept), "--accuracy-from", str(lost),
        "--min-accuracy-ratio", "0.9", "--json", str(tmp_path / "c.json")])
    assert result.exit_code == 0, result.output + repr(result.exception)
    payload = json.loads((tmp_path / "c.json").read_text())
    rows = {r["method"]: r for r in payload["rows"]}
    assert rows["freekv"]["accuracy"] == 0.0 and rows["freekv"]["floor_verdict"].startswith("below")
    assert rows["quest"]["accuracy"] == 1.0 and rows["quest"]["floor_verdict"].startswith("meets")
    assert rows["dense"]["accuracy_label"] == "measured"
    assert "B=2048" in rows["quest"]["knobs"]  # the planned knobs, not the measured trace's 256
    notes = " ".join(payload["notes"])
    assert "the candidate's budget_tokens 2048 overrides the trace's budget_tokens 256" in notes, notes
    assert "--budget-tokens" not in notes  # the user gave no such flag
    text = " ".join(result.output.split())
    assert "below" in text and "freekv" in text
