"""`dse capacity` and `dse serve` take every trace as `dse sim` does: a real trace of dense attention
(recorded here with the real runtime) replays with the demand-free models and is refused, exit 2 in one
paragraph, for the others; a trace of another policy is refused unless --transplant-method, and then
labelled as a transplant."""

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

MODEL = ["--model", "smollm2-135m", "--hardware", "h100-pcie5"]
TINY = ["--task", "passkey", "--context-tokens", "160", "--samples", "1", "--decode-tokens", "3",
        "--budget-tokens", "96", "--page-size", "16", "--sink-tokens", "16", "--window-tokens", "16",
        "--device", "cpu"]
CAPACITY = ["capacity", *MODEL, "--input-tokens", "1200", "--output-tokens", "16", "--slo-ms", "50"]
SERVE = ["serve", *MODEL, "--input-tokens", "1200", "--output-tokens", "16", "--n-requests", "6",
         "--arrival-rate", "1", "--scheduler", "blocking"]


@pytest.fixture(scope="module")
def dense_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace of the runtime's dense policy (`dse trace --method dense`) on the default model, tiny."""
    out = tmp_path_factory.mktemp("dense") / "run"
    assert main(["trace", "--method", "dense", *TINY, "--out", str(out)]) == 0
    return out / "trace"


@pytest.fixture(scope="module")
def arkvale_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace of the ArkVale policy (meta.runtime method arkvale), written with traces.TraceWriter."""
    return make_trace(tmp_path_factory.mktemp("arkvale") / "t", method="arkvale")


def _run(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one-paragraph error of a refused command line (exit 2, no traceback)."""
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: ") and err.count("\n") == 1
    return err


def test_capacity_replays_a_dense_trace_with_demand_free_models(dense_trace: Path, tmp_path: Path) -> None:
    out = _run([*CAPACITY, "--method", "dense,quest", "--demand", str(dense_trace),
                "--json", str(tmp_path / "c.json"), "--csv", str(tmp_path / "c.csv")])
    assert "dense attention: no recall demand" in out
    payload = json.loads((tmp_path / "c.json").read_text())
    assert [r["method"] for r in payload["rows"]] == ["dense", "quest"]
    for row in payload["rows"]:
        assert row["demand_ends"] == {} and row["transplanted_method"] is None
        assert 0 < row["batch"] <= row["max_batch_memory"]
        assert row["latency_label"] == "simulated" and row["accuracy_label"] == "none"
    assert "B=96" in payload["rows"][1]["knobs"]  # the trace's own knobs
    assert {r["transplanted_method"] for r in csv.DictReader((tmp_path / "c.csv").open())} == {""}


@pytest.mark.parametrize("transplant", [[], ["--transplant-method"]])
def test_capacity_refuses_a_dense_trace_for_models_that_need_demand(
    dense_trace: Path, transplant: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused([*CAPACITY, "--method", "dense,freekv,arkvale", "--demand", str(dense_trace),
                    *transplant], capsys)
    assert "--method freekv,arkvale: the trace" in err and "is of dense attention" in err
    assert "--transplant-method does not apply" in err and "dense, full-offload" in err


def test_serve_replays_a_dense_trace_and_refuses_freekv(
    dense_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _run([*SERVE, "--method", "dense", "--demand", str(dense_trace),
                "--json", str(tmp_path / "s.json")])
    assert "dense attention: no recall demand" in out
    res = json.loads((tmp_path / "s.json").read_text())["results"][0]
    assert res["stats"]["requests"] == 6 and res["transplanted_method"] is None
    for transplant in ([], ["--transplant-method"]):
        err = _refused([*SERVE, "--method", "freekv", "--demand", str(dense_trace), *transplant], capsys)
        assert "--method freekv: the trace" in err and "is of dense attention" in err


def test_capacity_transplant_method(arkvale_trace: Path, tmp_path: Path, capsys) -> None:
    args = [*CAPACITY, "--method", "freekv,dense,arkvale", "--demand", str(arkvale_trace)]
    err = _refused(args, capsys)  # one message for the refused method, before any simulation
    assert "--method freekv: the trace" in err and "'arkvale' policy" in err and "--transplant-method" in err
    out = _run([*args, "--transplant-method", "--json", str(tmp_path / "c.json")])
    assert "demand of arkvale transplanted onto freekv" in out and "(transplanted)" in out
    payload = json.loads((tmp_path / "c.json").read_text())
    moved = {r["method"]: r["transplanted_method"] for r in payload["rows"]}
    assert moved == {"freekv": "arkvale", "dense": None, "arkvale": None}
    assert payload["question"]["transplant_method"] is True
    assert "demand of arkvale transplanted onto freekv" in payload["notes"]


def test_serve_transplant_method(arkvale_trace: Path, tmp_path: Path, capsys) -> None:
    args = [*SERVE, "--method", "shadowkv,freekv", "--demand", str(arkvale_trace)]
    err = _refused(args, capsys)
    assert "--method shadowkv,freekv: the trace" in err and "these models replay only" in err
    out = _run([*args, "--transplant-method", "--json", str(tmp_path / "s.json")])
    assert "demand of arkvale transplanted onto freekv" in out
    payload = json.loads((tmp_path / "s.json").read_text())
    assert [r["transplanted_method"] for r in payload["results"]] == ["arkvale", "arkvale"]
    assert payload["notes"] == ["GPU memory usable: 0.9 of each GPU's memory for weights, activations and KV "
                                "(--gpu-memory-utilization 0.9, the default: vLLM's for its flag of the same "
                                "name); the rest is headroom",
                                "demand of arkvale transplanted onto shadowkv",
                                "demand of arkvale transplanted onto freekv"]
    own = _run([*SERVE, "--method", "arkvale", "--demand", str(arkvale_trace)])  # its own policy's trace
    assert "transplanted" not in own


def test_report_resimulates_a_dense_run_from_its_trace(dense_trace: Path, tmp_path: Path) -> None:
    """`dse report --hardware/--workload`: the dense baseline's real trace goes through the same path as
    every trace (Demand.dense_attention) and is replayed by the dense model; the trial by its own."""
    from dse.report.resimulate import Overrides, resimulate
    from dse.results import BaselineResult, StudyResults, TrialResult
    from sim import SimConfig, demand_from_trace, run_simulation

    knobs = {"page_size": 32, "budget_tokens": 512, "sink_tokens": 64, "window_tokens": 64}
    trial_trace = make_trace(tmp_path / "freekv")
    cfg = SimConfig(model="llama-3.1-8b", hardware="a100-40g-pcie4", input_tokens=1200, output_tokens=8,
                    **knobs)
    sim = {"a100-40g-pcie4": run_simulation(cfg, demand_from_trace(trial_trace, "llama-3.1-8b")).to_dict()}
    trial = TrialResult(target_model="llama-3.1-8b", sim=sim, sim_models={}, sim_grid=[], number=0,
                        state="COMPLETE", config={"method": "freekv", **knobs}, values=(1.0, 0.01),
                        accuracy={"passkey_accuracy": 1.0}, trace_dir=str(trial_trace), feasible=True)
    dense = BaselineResult(target_model="llama-3.1-8b", sim={}, sim_models={}, sim_grid=[], name="dense",
                           config={"method": "full"}, accuracy={"passkey_accuracy": 1.0},
                           trace_dir=str(dense_trace))
    results = StudyResults(
        study_name="s", storage_url="sqlite://", study_file="", target_model="llama-3.1-8b",
        config={"objectives": [{"metric": "passkey_accuracy"}, {"latency": {"hardware": "a100-40g-pcie4"}}],
                "hardware": ["a100-40g-pcie4"], "model": {"name": "smollm2-135m"},
                "workload": {"input_tokens": 1200, "output_tokens": 8, "batch_sizes": [1]},
                "search": {"dense_layers": [0]}},
        objective_names=("passkey_accuracy", "latency"), directions=("maximize", "minimize"),
        hardware=("a100-40g-pcie4",), trials=(trial,), dense=dense, untuned_freekv=None,
    )
    out = resimulate(results, Overrides(hardware=("h100-pcie5",), workload=None))
    replayed = out.dense.sim["h100-pcie5"]
    assert replayed["method"] == "dense" and replayed["demand"].startswith("none")
    assert any("dense attention (method dense)" in n for n in replayed["notes"])
    assert out.trials[0].sim["h100-pcie5"]["method"] == "freekv"
