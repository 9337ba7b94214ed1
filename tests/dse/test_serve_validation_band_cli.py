"""`dse serve` names the serving model's validation band for the engine it assumed: under the table and in
--json, next to the step simulator's band per method."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dse.cli import cli
from sim.serving.validation_band import serving_band

BASE = ["serve", "--model", "llama-3.1-8b", "--method", "dense", "--input-tokens", "8192",
        "--output-tokens", "32", "--scheduler", "blocking", "--arrival-rate", "2", "--n-requests", "40"]


def _serve(tmp_path: Path, engine: str, hardware: str = "a100-80g-sxm") -> tuple[str, dict]:
    out = tmp_path / "serve.json"
    result = CliRunner().invoke(cli, [*BASE, "--hardware", hardware, "--engine", engine, "--json", str(out)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return " ".join(result.output.split()), json.loads(out.read_text())  # the console wraps long lines


def test_checked_engine_line_in_text_and_json(tmp_path: Path) -> None:
    text, payload = _serve(tmp_path, "sarathi-serve-a100")
    band = payload["serving_validation_band"]
    assert band == json.loads(json.dumps(serving_band("sarathi-serve-a100", None, ["a100-80g-sxm"])))
    assert band["checked_as"] == "sarathi-serve-a100" and band["kind"] == "host time"
    assert f"serving model's validation band, engine sarathi-serve-a100: {band['label']}" in text
    assert band["label"].endswith("[ideal pricing]")
    assert text.count("[ideal pricing]") == 1  # printed, not taken for console markup
    assert "simulator's validation band, dense: " in text  # the step simulator's band stays


def test_default_engine_on_other_hardware_and_an_unchecked_file_say_so(tmp_path: Path) -> None:
    text, payload = _serve(tmp_path, "none")
    assert payload["serving_validation_band"]["kind"] == "kernels only"
    text, payload = _serve(tmp_path, "none", "h100-sxm")  # the checks ran on A100s only
    band = payload["serving_validation_band"]
    assert band["checked_as"] is None and band["hardware_unchecked"] == ["h100-sxm"]
    assert "engine none: no measured serving run checks this engine on h100-sxm" in text
    profile = tmp_path / "my-engine.yaml"
    profile.write_text(
        "name: my-engine\ndescription: a test engine\nterms:\n"
        "  schedule:\n    points_ms: [[1, 1.0], [64, 2.0]]\n    source: a test measurement\n",
        encoding="utf-8",
    )
    text, payload = _serve(tmp_path, str(profile))
    band = payload["serving_validation_band"]
    assert band["engine"] == "my-engine" and band["checked_as"] is None
    assert "engine my-engine: no measured serving run checks this engine" in text
    assert "fit your server with `dse engine-fit`" in band["label"]
