"""`dse capacity`, `dse serve`, demand presets and replay notes, and the small CLI things (--version, --batch
lists, --csv, dse hardware list in 100 columns, dense-layer defaults of the runtime)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dse.cli import cli, main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from sim_trace_factory import make_trace  # noqa: E402

MODEL = ["--model", "llama-3.1-8b"]


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def test_capacity_one_command_table_csv_json(tmp_path: Path) -> None:
    out = _run(
        [
            "capacity",
            *MODEL,
            "--hardware",
            "h100-pcie5,a100-40g-pcie4",
            "--method",
            "freekv,dense",
            "--input-tokens",
            "16384",
            "--output-tokens",
            "64",
            "--slo-ms",
            "50",
            "--csv",
            str(tmp_path / "c.csv"),
            "--json",
            str(tmp_path / "c.json"),
        ]
    )
    text = " ".join(out.split())
    assert "best knobs with evidence" in text and "preset:freekv-tau0.9" in text and "its own preset" in text
    assert "ranked by speed alone" in text  # no floor, no evidence: said so
    rows = list(csv.DictReader((tmp_path / "c.csv").open()))
    assert len(rows) == 2 * 2  # one row per profile and method
    assert {r["latency_label"] for r in rows} == {"simulated"}
    assert {r["accuracy_label"] for r in rows} == {"none"}
    payload = json.loads((tmp_path / "c.json").read_text())
    assert payload["step_sampling"].startswith("all 64 decode steps")
    for r in payload["rows"]:
        assert r["batch"] <= r["max_batch_memory"]
        if r["batch"]:
            assert r["per_token_mean_ms"] <= 50
    freekv = next(r for r in payload["rows"] if r["method"] == "freekv" and r["hardware"] == "h100-pcie5")
    ends = {k: v["batch"] for k, v in freekv["demand_ends"].items()}
    assert ends["low"] <= freekv["batch"] <= ends["high"]  # fewer GPU-cache hits never help


def test_capacity_prices_give_tokens_per_dollar(tmp_path: Path) -> None:
    prices = tmp_path / "p.yaml"
    prices.write_text("h100-pcie5: {price_per_hour_usd: 2.0, source: 'example quote'}\n")
    _run(
        [
            "capacity",
            *MODEL,
            "--hardware",
            "h100-pcie5",
            "--method",
            "dense",
            "--input-tokens",
            "8192",
            "--output-tokens",
            "16",
            "--slo-ms",
            "50",
            "--prices",
            str(prices),
            "--json",
            str(tmp_path / "o.json"),
        ]
    )
    row = json.loads((tmp_path / "o.json").read_text())["rows"][0]
    assert row["tokens_per_s_per_usd_hour"] == pytest.approx(row["tokens_per_s"] / 2.0)
    prices.write_text("h100-pcie5: {price_per_hour_usd: 2.0}\n")
    assert (
        main(
            [
                "capacity",
                *MODEL,
                "--hardware",
                "h100-pcie5",
                "--method",
                "dense",
                "--input-tokens",
                "8192",
                "--output-tokens",
                "16",
                "--slo-ms",
                "50",
                "--prices",
                str(prices),
            ]
        )
        == 2
    )


@pytest.mark.parametrize(
    "args, field",
    [
        (["--method", "nosuch"], "unknown method"),
        (["--demand", "preset:nosuch"], "preset:freekv-tau0.9"),
        (["--hardware", ","], "--hardware"),
    ],
)
def test_capacity_bad_input_one_paragraph_exit_2(args: list[str], field: str, capsys) -> None:
    base = {"--hardware": "h100-pcie5", "--method": "freekv", "--demand": "preset:freekv-tau0.8"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    argv = ["capacity", *MODEL, "--input-tokens", "1000", "--output-tokens", "8", "--slo-ms", "50"]
    for k, v in base.items():
        argv += [k, v]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_serve_fixed_rate_and_search(tmp_path: Path) -> None:
    out = _run(
        [
            "serve",
            *MODEL,
            "--hardware",
            "h100-pcie5",
            "--method",
            "dense",
            "--input-tokens",
            "8192",
            "--output-tokens",
            "32",
            "--n-requests",
            "30",
            "--arrival-rate",
            "0.5",
            "--json",
            str(tmp_path / "s.json"),
        ]
    )
    assert "TTFT p99" in out and "prefill blocks decode" in out
    res = json.loads((tmp_path / "s.json").read_text())["results"][0]
    assert res["rate_per_s"] == 0.5 and res["stats"]["requests"] == 30
    _run(
        [
            "serve",
            *MODEL,
            "--hardware",
            "h100-pcie5",
            "--method",
            "dense",
            "--input-tokens",
            "8192",
            "--output-tokens",
            "32",
            "--n-requests",
            "30",
            "--ttft-slo-s",
            "3",
            "--tpot-slo-ms",
            "40",
            "--json",
            str(tmp_path / "s.json"),
        ]
    )
    res = json.loads((tmp_path / "s.json").read_text())["results"][0]
    assert res["mode"] == "highest rate under the SLOs" and res["rate_per_s"] > 0
    assert res["stats"]["ttft_p99_s"] <= 3 and res["stats"]["tpot_p99_s"] <= 0.04


def test_version() -> None:
    assert "freekv-dse" in _run(["--version"])


def test_sim_batch_list_and_csv(tmp_path: Path) -> None:
    out = _run(
        [
            "sim",
            *MODEL,
            "--hardware",
            "h100-pcie5",
            "--method",
            "dense",
            "--batch",
            "1,4,16",
            "--input-tokens",
            "2000",
            "--output-tokens",
            "8",
            "--csv",
            str(tmp_path / "s.csv"),
        ]
    )
    for b in (1, 4, 16):
        assert f"batch {b};" in out
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert [int(r["batch"]) for r in rows] == [1, 4, 16]
    assert float(rows[0]["mean_ms"]) < float(rows[2]["mean_ms"])
    assert main(["sim", *MODEL, "--hardware", "h100-pcie5", "--method", "dense", "--batch", "1,x"]) == 2


def test_sim_preset_and_runtime_dense_layer_default() -> None:
    out = json.loads(
        _run(
            [
                "sim",
                *MODEL,
                "--hardware",
                "h100-pcie5",
                "--synthetic",
                "preset:freekv-tau0.8",
                "--input-tokens",
                "8000",
                "--output-tokens",
                "8",
                "--json",
            ]
        )
    )
    assert out["config"]["dense_layers"] == [0]  # freekv_runtime.config.RuntimeConfig keeps layer 0 dense
    assert any("third-party" in n for n in out["notes"])
    from freekv_runtime.config import RuntimeConfig

    assert tuple(out["config"]["dense_layers"]) == RuntimeConfig().dense_layers
    help_text = _run(["sim", "run", "--help"])
    for key in ("correction", "hit", "step_rho", "preset:"):
        assert key in help_text


def test_hardware_list_fits_100_columns() -> None:
    out = _run(["hardware", "list"])
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "h100-pcie5" in out


def test_short_trace_replayed_longer_is_flagged(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t", n_steps=21, prompt_tokens=1000)
    out = json.loads(
        _run(
            [
                "sim",
                str(trace),
                "--model",
                "llama-3.1-8b",
                "--hardware",
                "h100-pcie5",
                "--input-tokens",
                "32768",
                "--output-tokens",
                "512",
                "--page-size",
                "16",
                "--json",
            ]
        )
    )
    notes = " | ".join(out["notes"])
    assert "replayed cyclically to 512 steps" in notes
    assert "replayed at up to 33280" in notes
    assert "page size 32; replayed with 16" in notes
    text = _run(
        [
            "capacity",
            "--model",
            "llama-3.1-8b",
            "--hardware",
            "h100-pcie5",
            "--method",
            "freekv",
            "--demand",
            str(trace),
            "--input-tokens",
            "32768",
            "--output-tokens",
            "512",
            "--slo-ms",
            "50",
        ]
    )
    assert "replayed cyclically" in text
