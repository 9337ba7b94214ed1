"""`dse sim` and `dse sim calibrate` end to end (click runner), and calibration on simulated timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sim_trace_factory import make_trace

from dse.cli import main
from dse.commands.sim import command
from sim import SimInputError, load_profile
from sim.calibrate import calibrate, write_simulated_trace

COMMON = [
    "--model",
    "llama-3.1-8b",
    "--hardware",
    "a100-40g-pcie4",
    "--batch",
    "2",
    "--input-tokens",
    "4000",
    "--output-tokens",
    "40",
    "--budget-tokens",
    "1024",
    "--sink-tokens",
    "128",
    "--window-tokens",
    "128",
]


def _run(args: list[str]):
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def test_json_output_parses_and_has_every_field() -> None:
    out = json.loads(_run(["--synthetic", "correction=0.5,hit=0.8,steps=32", *COMMON, "--json"]).output)
    for key in (
        "per_token_latency_s",
        "prefill_s",
        "throughput_tokens_per_s",
        "breakdown_s",
        "critical_share",
        "link_utilisation",
        "memory",
        "mapped_from",
        "synthetic",
        "method",
        "hardware",
        "model",
    ):
        assert key in out
    assert set(out["per_token_latency_s"]) == {"mean", "p50", "p99", "max"}
    assert {"gpu_bytes", "host_bytes", "fits", "max_batch"} <= set(out["memory"])
    assert out["synthetic"] == "correction=0.5,hit=0.8,steps=32"


def test_method_all_compares_and_writes_timelines(tmp_path: Path) -> None:
    html, chrome = tmp_path / "t.html", tmp_path / "t.json"
    out = _run(
        [
            "--synthetic",
            "correction=0.5,hit=0.8,steps=32",
            *COMMON,
            "--method",
            "all",
            "--timeline",
            str(html),
            "--chrome-trace",
            str(chrome),
            "--timeline-steps",
            "3,39",
        ]
    ).output
    assert "speedup" in out and "freekv-nohl" in out and "dense" in out
    events = json.loads(chrome.read_text())["traceEvents"]
    assert any(e.get("name") == "attention" and e["ph"] == "X" for e in events)
    assert html.stat().st_size > 10_000
    data = json.loads(
        _run(["--synthetic", "correction=0.5,hit=0.8,steps=32", *COMMON, "--method", "all", "--json"]).output
    )
    assert data["speedup"]["freekv"]["freekv"] == pytest.approx(1.0)


def test_trace_transplant_via_cli(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "tr", n_steps=12)
    out = json.loads(_run([str(trace), *COMMON, "--json"]).output)
    assert out["mapped_from"] == "smollm2-135m"
    text = _run([str(trace), *COMMON]).output
    assert "mapped from smollm2-135m" in text


def _smollm(trace: Path, *extra: str) -> list[str]:
    return [str(trace), "--model", "smollm2-135m", "--hardware", "a100-40g-pcie4", "--input-tokens", "1200",
            "--output-tokens", "30", *extra]


def test_trace_metadata_gives_the_knobs_unless_overridden(tmp_path: Path) -> None:
    """Page size, budget, sink, window, tau and dense layers come from the trace's metadata; an option
    given on the command line wins and is reported with the trace's value."""
    trace = make_trace(tmp_path / "tr", n_steps=12, page_size=16, budget_tokens=640, sink_tokens=32,
                       window_tokens=48, tau=0.85, dense_layers=(0, 1))
    out = json.loads(_run([*_smollm(trace), "--json"]).output)
    assert {k: out["config"][k] for k in ("page_size", "budget_tokens", "sink_tokens", "window_tokens",
                                          "tau", "dense_layers")} == {
        "page_size": 16, "budget_tokens": 640, "sink_tokens": 32, "window_tokens": 48, "tau": 0.85,
        "dense_layers": [0, 1]}
    assert out["trace"]["knobs"]["source"]["budget_tokens"] == "trace" and out["trace"]["complete"]
    assert not any("overrides" in n for n in out["notes"])
    over = json.loads(_run([*_smollm(trace, "--budget-tokens", "1024", "--tau", "0.85", "--dense-layers",
                                     ""), "--json"]).output)
    assert over["config"]["budget_tokens"] == 1024 and over["config"]["dense_layers"] == []
    assert over["config"]["page_size"] == 16  # not given: still the trace's
    assert "--budget-tokens 1024 overrides the trace's budget_tokens 640" in over["notes"]
    assert "--dense-layers none overrides the trace's dense_layers 0,1" in over["notes"]
    assert not any("--tau" in n for n in over["notes"])  # same value as the trace: nothing to say
    text = _run(_smollm(trace, "--sink-tokens", "64")).output
    assert "note: --sink-tokens 64 overrides the trace's sink_tokens 32" in text
    # without a trace the defaults apply (the FreeKV paper's setup)
    syn = json.loads(_run(["--synthetic", "correction=0.5,hit=0.8,steps=8", "--model", "llama-3.1-8b",
                           "--hardware", "a100-40g-pcie4", "--output-tokens", "4", "--json"]).output)
    cfg = syn["config"]
    assert (cfg["budget_tokens"], cfg["page_size"], cfg["tau"]) == (2048, 32, None)
    assert syn["trace"] is None


def _end_frame_offset(records: Path) -> int:
    """Byte offset of the END frame in records.bin (the writer's last frame when it closed)."""
    from traces.format import Kind, iter_frames, scan_records

    scan = scan_records(records)
    return [f.offset for f in iter_frames(records, scan.valid_bytes) if f.kind == Kind.END][0]


def test_truncated_and_incomplete_traces_are_noted(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "tr", n_steps=12)
    records = trace / "records.bin"
    data = records.read_bytes()
    end = _end_frame_offset(records)
    records.write_bytes(data[: end - 60])  # no END frame, and the last step torn
    out = json.loads(_run([*_smollm(trace), "--json"]).output)
    assert out["trace"]["truncated"] and not out["trace"]["complete"] and out["trace"]["steps"] == 11
    assert any("is truncated" in n and "its 11 whole steps" in n for n in out["notes"])
    assert "is truncated" in _run(_smollm(trace)).output
    records.write_bytes(data[:end])  # every step whole, no END frame: a killed writer
    out = json.loads(_run([*_smollm(trace), "--json"]).output)
    assert not out["trace"]["complete"] and not out["trace"]["truncated"]
    assert any("is incomplete" in n and "the 12 steps" in n for n in out["notes"])
    assert "is incomplete" in _run(_smollm(trace)).output
    records.write_bytes(data)
    notes = json.loads(_run([*_smollm(trace), "--json"]).output)["notes"]
    assert not any("is truncated" in n or "is incomplete" in n for n in notes)


def test_context_past_the_models_positions_is_refused(capsys) -> None:
    rc = main(["sim", "--synthetic", "correction=0.5,hit=0.8", "--model", "smollm2-135m", "--hardware",
               "a100-40g-pcie4", "--input-tokens", "600", "--output-tokens", "16384"])
    err = capsys.readouterr().err
    assert rc == 2 and "16984 tokens exceeds the 8192 positions of model 'smollm2-135m'" in err
    assert "Traceback" not in err


def test_fine_grained_engine_via_cli() -> None:
    args = "--synthetic correction=0.5,hit=0.8,steps=8 --model llama-3.1-8b --hardware a100-40g-pcie4 "
    args += "--batch 2 --input-tokens 4000 --output-tokens 2 --budget-tokens 768 --sink-tokens 128 "
    args += "--window-tokens 128"
    args = args.split()
    agg = json.loads(_run([*args, "--json"]).output)
    fine = json.loads(_run([*args, "--engine", "simpy", "--json"]).output)
    assert fine["engine"] == "simpy"
    assert fine["per_token_latency_s"]["mean"] == pytest.approx(agg["per_token_latency_s"]["mean"], rel=1e-9)


def test_dense_without_demand_and_oom_message() -> None:
    text = _run(
        [
            "--model",
            "llama-3.1-8b",
            "--hardware",
            "a100-40g-pcie4",
            "--method",
            "dense",
            "--batch",
            "8",
            "--input-tokens",
            "131000",
            "--output-tokens",
            "8",
        ]
    ).output
    assert ("out of memory: needs 144.0 GiB of GPU memory, has 36.0 usable (0.9 of 40.0); largest batch that "
            "fits: 1") in text
    assert "mean ms" not in text  # no latency table


def test_user_errors_print_one_paragraph(capsys) -> None:
    rc = main(["sim", "--model", "llama-3.1-8b", "--hardware", "a100-40g-pcie4", "--output-tokens", "8"])
    assert rc == 2 and "needs recall demand" in capsys.readouterr().err
    rc = main(["sim", "--synthetic", "correction=2,hit=0.5", "--model", "llama-3.1-8b", "--hardware", "nope"])
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and "Traceback" not in err


def test_calibrate_refuses_wall_clock(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "wall", n_steps=10, timings=True)
    with pytest.raises(SimInputError, match="CUDA-event"):
        calibrate(trace, "a100-40g-pcie4")


def test_calibration_recovers_a_perturbed_profile(tmp_path: Path) -> None:
    base = load_profile("a100-40g-pcie4")
    truth = base.with_overrides(
        {
            "gpu.achievable_bandwidth_fraction": base.gpu.achievable_bandwidth_fraction * 0.8,
            "gpu.kernel_launch_s": base.gpu.kernel_launch_s * 1.5,
            "link.copy_issue_s": base.link.copy_issue_s * 2.0,
        }
    )
    src = make_trace(tmp_path / "src", n_steps=30, seed=4)
    measured = tmp_path / "measured"
    write_simulated_trace(measured, src, truth)
    cal = calibrate(measured, "a100-40g-pcie4")
    assert cal.test_error_before > 0.05
    assert cal.test_error < 0.01
    for key in ("gpu.achievable_bandwidth_fraction", "gpu.kernel_launch_s"):
        part, _, name = key.partition(".")
        want = getattr(getattr(truth, part), name)
        assert cal.after[key] == pytest.approx(want, rel=0.15), key
    assert cal.profile.sources["gpu.kernel_launch_s"].startswith("calibrated: ")
    out = _run(
        [
            "calibrate",
            str(measured),
            "--hardware",
            "a100-40g-pcie4",
            "--json",
            "--out",
            str(tmp_path / "fitted.yaml"),
        ]
    ).output
    assert json.loads(out)["test_error"] < 0.01
    assert load_profile(tmp_path / "fitted.yaml").name == "a100-40g-pcie4"


def test_out_of_memory_in_json_and_in_the_comparison() -> None:
    args = ["--synthetic", "correction=0.5,hit=0.8,steps=8", "--model", "llama-3.1-8b", "--hardware",
            "a100-40g-pcie4", "--batch", "8", "--input-tokens", "120000", "--output-tokens", "8"]
    out = json.loads(_run([*args, "--method", "dense", "--json"]).output)
    assert out["oom"] is True and out["memory"]["fits"] is False and out["memory"]["max_batch"] == 1
    assert out["oom_message"].startswith("out of memory: needs ")
    assert out["per_token_latency_s"] is None and out["throughput_tokens_per_s"] is None
    assert out["prefill_s"] is None and out["breakdown_s"] == {}
    fits = json.loads(_run([*args, "--method", "freekv", "--json"]).output)
    assert fits["oom"] is False and fits["per_token_latency_s"]["mean"] > 0
    both = json.loads(_run([*args, "--method", "all", "--json"]).output)
    assert both["results"]["dense"]["oom"] and not both["results"]["freekv"]["oom"]
    assert both["speedup"]["freekv"]["dense"] is None and both["speedup"]["freekv"]["freekv"] == 1.0
    text = _run([*args, "--method", "all"]).output
    assert "OOM (max batch 1)" in text and "out of memory: needs" in text
