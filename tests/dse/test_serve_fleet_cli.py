"""`dse serve` schedulers and fleets: every row names its scheduler, --target-rate answers the fewest GPUs
as a range over seeds with prices, a question nothing meets names the broken SLO by how much, and bad
input exits 2 with one paragraph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dse.cli import cli, main

BASE = [
    "serve",
    "--model",
    "llama-3.1-8b",
    "--hardware",
    "h100-sxm",
    "--method",
    "dense",
    "--input-tokens",
    "8192",
    "--output-tokens",
    "32",
]


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def test_target_rate_fleet_per_scheduler_with_prices(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100-sxm: {price_per_hour_usd: 4.0, source: 'test price'}\n")
    out = _run(
        [
            *BASE,
            "--target-rate",
            "4",
            "--tpot-slo-ms",
            "30",
            "--seeds",
            "2",
            "--n-requests",
            "60",
            "--prices",
            str(prices),
            "--json",
            str(tmp_path / "f.json"),
        ]
    )
    for name in ("blocking", "chunked", "disaggregated"):
        assert name in out
    assert "no TTFT SLO" in out and "$/h" in out
    payload = json.loads((tmp_path / "f.json").read_text())
    assert set(payload["schedulers"]) == {"blocking", "chunked", "disaggregated"}
    assert payload["slos"]["ttft_slo_s"] is None
    rows = {r["scheduler"]: r for r in payload["results"]}
    for r in rows.values():
        assert r["meets"] and 1 <= r["gpus_min"] <= r["gpus_max"] and len(r["per_seed"]) == 2
        assert r["usd_per_hour_min"] == pytest.approx(4.0 * r["gpus_min"])
        tokens_per_h = 4 * 32 * 3600
        assert r["usd_per_million_output_tokens_min"] == pytest.approx(
            r["usd_per_hour_min"] / tokens_per_h * 1e6
        )
    assert rows["disaggregated"]["prefill_share_min"] > 0
    assert rows["blocking"]["prefill_share_min"] is None
    from sim.validation_bands import band

    for r in payload["results"]:  # how sure: labels and the simulator's validation band per row
        assert r["latency_label"] == "simulated"
        assert r["validation_band"] == band(r["method"], "as-published").label()
    assert "validation band" in out


def test_nothing_meets_names_the_slo_and_by_how_much(tmp_path: Path) -> None:
    out = _run(
        [
            *BASE,
            "--scheduler",
            "blocking,chunked",
            "--tpot-slo-ms",
            "1",
            "--ttft-slo-s",
            "30",
            "--n-requests",
            "10",
            "--json",
            str(tmp_path / "n.json"),
        ]
    )
    assert "per-token" in out and "x the limit" in out and "none meets" not in out
    rows = json.loads((tmp_path / "n.json").read_text())["results"]
    assert [r["scheduler"] for r in rows] == ["blocking", "chunked"]
    for r in rows:
        assert r["rate_per_s"] == 0 and r["failures"][0]["slo"] == "TPOT"
        assert r["failures"][0]["value_s"] > r["failures"][0]["limit_s"] == 0.001


def test_fleet_that_cannot_meet_the_per_token_slo(tmp_path: Path) -> None:
    out = _run(
        [
            *BASE,
            "--scheduler",
            "disaggregated",
            "--target-rate",
            "1",
            "--tpot-slo-ms",
            "1",
            "--json",
            str(tmp_path / "i.json"),
        ]
    )
    assert "one sequence alone decodes at" in out and "no fleet meets it" in out
    row = json.loads((tmp_path / "i.json").read_text())["results"][0]
    assert not row["meets"] and row["impossible"]["slo"] == "TPOT"


def test_fixed_rate_on_a_disaggregated_fleet(tmp_path: Path) -> None:
    _run(
        [
            *BASE,
            "--scheduler",
            "disaggregated",
            "--arrival-rate",
            "2",
            "--gpus",
            "2",
            "--prefill-gpus",
            "1",
            "--n-requests",
            "20",
            "--kv-link-gbps",
            "25",
            "--json",
            str(tmp_path / "d.json"),
        ]
    )
    payload = json.loads((tmp_path / "d.json").read_text())
    row = payload["results"][0]
    assert row["scheduler"] == "disaggregated" and row["total_gpus"] == 3 and row["stats"]["finished"] == 20
    assert "25 GB/s" in payload["schedulers"]["disaggregated"]


def test_a_tbt_slo_on_a_vllm_style_gpu(tmp_path: Path) -> None:
    out = _run(
        [
            *BASE,
            "--scheduler",
            "prefill-first,chunked",
            "--max-seqs",
            "16",
            "--max-batched-tokens",
            "16384",
            "--token-slo-stat",
            "tbt-p99",
            "--tpot-slo-ms",
            "30",
            "--arrival-rate",
            "3",
            "--n-requests",
            "30",
            "--json",
            str(tmp_path / "t.json"),
        ]
    )
    assert "inter-token (TBT)" in out
    payload = json.loads((tmp_path / "t.json").read_text())
    slos = payload["slos"]
    assert slos["token_slo_stat"] == "tbt-p99" and "p99 inter-token (TBT) <= 30 ms" in slos["text"]
    assert "16 sequences per GPU" in payload["schedulers"]["prefill-first"]
    first, chunked = payload["results"]
    # prefill-first stalls the decode batch for whole prompts; chunked prefill spreads them
    assert first["stats"]["tbt_p99_s"] > chunked["stats"]["tbt_p99_s"]
    assert first["stats"]["max_batch"] <= 16 and chunked["stats"]["max_batch"] <= 16
    failed = [f for r in payload["results"] for f in r["failures"]]
    assert all(f["slo"] == "TBT" for f in failed if f["slo"] not in ("TTFT", "queueing"))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--scheduler", "fifo"], "--scheduler"),
        (["--scheduler", ","], "--scheduler"),
        (["--target-rate", "1", "--arrival-rate", "1"], "--target-rate"),
        (["--prices", "p.yaml"], "--prices"),
        (["--router", "random"], "--router"),
        (["--target-rate", "1", "--prices", "missing.yaml"], "missing.yaml"),
        (["--chunk-tokens", "0"], "--chunk-tokens"),
        (["--kv-link-gbps", "0"], "--kv-link-gbps"),
        (["--seeds", "0", "--target-rate", "1"], "--seeds"),
        (["--token-slo-stat", "tbt-p95"], "--token-slo-stat"),
        (["--max-seqs", "0"], "--max-seqs"),
        (["--max-batched-tokens", "0"], "--max-batched-tokens"),
    ],
)
def test_bad_input_exits_2(args: list[str], says: str, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*BASE, *args]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_fleet_cap_reached_names_the_ttft_p99(tmp_path: Path) -> None:
    out = _run(
        [
            *BASE,
            "--scheduler",
            "chunked",
            "--target-rate",
            "2",
            "--ttft-slo-s",
            "0.01",
            "--max-gpus",
            "3",
            "--seeds",
            "1",
            "--n-requests",
            "30",
            "--json",
            str(tmp_path / "c.json"),
        ]
    )
    assert "no fleet of up to 3 GPUs meets the SLOs: p99 TTFT" in out and "x the limit" in out
    row = json.loads((tmp_path / "c.json").read_text())["results"][0]
    assert not row["meets"] and row["failures"][0]["slo"] == "TTFT" and row["failures"][0]["value_s"] > 0.01
