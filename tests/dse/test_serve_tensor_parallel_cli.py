"""`dse serve --tensor-parallel`: the answer names the degree and counts GPUs as replicas x T, T = 1 is
the output without the flag, and bad degrees, GPUs without a measured interconnect and fleets of partial
replicas exit 2 with one paragraph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dse.cli import cli, main

YI = ["serve", "--model", "yi-34b", "--hardware", "a100-80g-pcie", "--method", "dense", "--input-tokens",
      "2048", "--output-tokens", "32", "--tpot-slo-ms", "100"]


def _json(args: list[str], path: Path) -> dict:
    result = CliRunner().invoke(cli, [*args, "--json", str(path)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return json.loads(path.read_text()) | {"_out": result.output}


def test_target_rate_answers_gpus_as_replicas_times_the_degree(tmp_path: Path) -> None:
    args = [*YI, "--scheduler", "chunked,disaggregated", "--target-rate", "0.5", "--seeds", "1",
            "--n-requests", "30", "--tensor-parallel", "2"]
    payload = _json(args, tmp_path / "tp.json")
    assert payload["tensor_parallel"]["degree"] == 2
    assert "tensor parallel 2 (2 GPUs per replica" in payload["_out"]
    for row in payload["results"]:
        assert row["meets"] and row["tensor_parallel"] == 2
        seed = row["per_seed"][0]
        assert seed["gpus"] == 2 * seed["replicas"] and row["gpus_min"] % 2 == 0
        if row["scheduler"] == "disaggregated":
            assert row["prefill_tensor_parallel"] == 2
            assert seed["prefill_gpus"] == 2 * seed["prefill_replicas"]


def test_tensor_parallel_1_is_the_output_without_the_flag(tmp_path: Path) -> None:
    args = [*YI, "--scheduler", "blocking,disaggregated", "--arrival-rate", "0.3", "--n-requests", "20"]
    plain = _json(args, tmp_path / "a.json")
    one = _json([*args, "--tensor-parallel", "1"], tmp_path / "b.json")
    assert plain.pop("_out") == one.pop("_out")
    assert plain == one and "tensor_parallel" not in plain
    assert all("tensor_parallel" not in r for r in plain["results"])


def test_disaggregated_pools_with_their_own_degrees(tmp_path: Path) -> None:
    args = [*YI, "--scheduler", "disaggregated", "--arrival-rate", "0.3", "--n-requests", "20",
            "--prefill-tensor-parallel", "2", "--gpus", "1", "--prefill-gpus", "4"]
    payload = _json(args, tmp_path / "d.json")
    row = payload["results"][0]
    assert (row["prefill_gpus"], row["gpus"], row["total_gpus"]) == (4, 1, 5)
    assert (row["prefill_tensor_parallel"], row["tensor_parallel"]) == (2, 1)
    text = payload["schedulers"]["disaggregated"]
    assert "tensor parallel 2 per prefill replica, 1 per decode replica" in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--tensor-parallel", "0"], "--tensor-parallel"),
        (["--tensor-parallel", "3"], "Valid degrees for this model: 1, 2, 4, 8"),
        (["--tensor-parallel", "8"], "measured with 2, 4 GPUs, not 8"),
        (["--tensor-parallel", "2", "--hardware", "l40s"], "no all-reduce measurement covers"),
        (["--tensor-parallel", "2", "--gpus", "3"], "must be a multiple of 2"),
        (["--prefill-tensor-parallel", "2", "--scheduler", "chunked"], "--scheduler disaggregated"),
        (["--hardware", "l40s"], "--tensor-parallel T"),  # 68 GB of weights: suggest splitting the model
    ],
)
def test_bad_input_exits_2(args: list[str], says: str, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*YI, "--arrival-rate", "0.3", "--n-requests", "10", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_whole_step_engine_refuses_tensor_parallelism(capsys) -> None:
    args = ["serve", "--model", "opt-13b", "--hardware", "a100-80g-sxm", "--method", "dense",
            "--input-tokens", "512", "--output-tokens", "16", "--scheduler", "blocking", "--arrival-rate",
            "1", "--n-requests", "10", "--engine", "distserve-vllm-opt13b-a100", "--tensor-parallel", "2"]
    assert main(args) == 2
    assert "measured at tensor parallel 1 only" in capsys.readouterr().err
