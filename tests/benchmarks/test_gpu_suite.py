"""benchmarks/gpu_suite.py on a machine without CUDA: every part reports skipped with its reason,
outputs land under --out, microbench.json validates; the timeline and trace-comparison maths."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "traces"))

import gpu_suite  # noqa: E402
from gpu_parts.microbench import SCHEMA, validate  # noqa: E402
from gpu_parts.parity import compare_traces  # noqa: E402
from gpu_parts.timeline import analyze_events, intersection_s, union  # noqa: E402
from trace_factory import make_meta, random_run, tiny_model, write_trace  # noqa: E402

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU behaviour of the suite")


def _event(cat: str, ts_us: float, dur_us: float, stream: int, name: str = "k", **args: int) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts_us,
        "dur": dur_us,
        "args": {"stream": stream, **args},
    }


def test_timeline_overlap_and_bandwidth() -> None:
    events = [
        _event("kernel", 0, 100, 7),
        _event("kernel", 200, 100, 7),  # compute stream: 200 us busy
        _event("kernel", 120, 30, 21),  # a conversion kernel on a side stream
        _event("gpu_memcpy", 50, 100, 20, "Memcpy HtoD (Pinned -> Device)", bytes=1_000_000),
        _event("gpu_memcpy", 140, 20, 20, "Memcpy HtoD (Pinned -> Device)", bytes=200_000),
        _event("gpu_memcpy", 300, 10, 0, "Memcpy DtoH (Device -> Pinned)", bytes=4),
    ]
    got = analyze_events(events)
    assert got["compute_stream"] == 7 and got["h2d_copies"] == 2
    assert got["h2d_busy_s"] == pytest.approx(110e-6)  # 50..160 us
    assert got["recall_compute_overlap"] == pytest.approx(50 / 110)  # 50..100 us under a kernel of stream 7
    assert got["h2d_gbps_while_copying"] == pytest.approx(1.2e6 / 110e-6 / 1e9)
    assert got["side_stream_kernel_s"] == {"21": pytest.approx(30e-6)} and got["d2h_bytes"] == 4
    assert analyze_events([])["error"].startswith("no kernel events")


def test_interval_helpers() -> None:
    assert union([(3, 4), (0, 1), (0.5, 2)]) == [(0, 2), (3, 4)]
    assert intersection_s([(0, 2), (3, 4)], [(1, 3.5)]) == pytest.approx(1.5)


def test_compare_traces_same_and_different(tmp_path) -> None:
    model = tiny_model(n_layers=3, n_kv_heads=2)
    meta = make_meta(model)
    a = write_trace(tmp_path / "a", meta, random_run(0, model, n_sequences=2, n_steps=4))
    b = write_trace(tmp_path / "b", meta, random_run(0, model, n_sequences=2, n_steps=4))
    c = write_trace(tmp_path / "c", meta, random_run(1, model, n_sequences=2, n_steps=4))
    same = compare_traces(a, b)
    assert same["identical"] and same["counts"]["steps"] == 8 and same["first_divergence"] is None
    assert same["similarity_max_abs_diff"] == 0.0
    other = compare_traces(a, c)
    assert not other["identical"] and other["counts"]["selected"] > 0
    assert other["first_divergence"]["kind"] == "initial_selected" and len(other["mismatches_listed"]) <= 20


def test_microbench_schema_validation() -> None:
    doc = {
        "schema": SCHEMA,
        "machine": {},
        "tables": {"h2d_copy": []},
        "software": {"memcpy_async_call_s": 2e-6},
        "hardware": {"link.run_efficiency": [[256, 0.4]]},
    }
    assert validate(doc) == []
    bad = {**doc, "software": {"memcpy_call": 1.0}, "hardware": {"link.h2d_effective_gbps": -1}}
    problems = validate(bad)
    assert any("software.memcpy_call is not a field name" in p for p in problems)
    assert any("non-negative" in p for p in problems)
    assert validate({**doc, "tables": {"h2d_copy": [{"api": "torch_copy"}]}})


@NO_CUDA
def test_fast_parts_on_cpu(tmp_path) -> None:
    """microbench and kernels: host-side items measured (device cpu), CUDA items skipped with reasons."""
    assert gpu_suite.main(["--out", str(tmp_path), "--parts", "microbench,kernels", "--quick"]) == 0
    suite = json.loads((tmp_path / "suite.json").read_text())
    assert [suite["parts"][p]["status"] for p in ("microbench", "kernels")] == ["skipped", "skipped"]
    assert "no CUDA device" in suite["parts"]["kernels"]["reason"]
    doc = json.loads((tmp_path / "microbench.json").read_text())
    assert validate(doc) == [] and doc["device"] == "cpu" and doc["machine"]["gpu"] is None
    assert 0 < doc["software"]["thread_handoff_s"] < 0.1
    assert "memcpy_async_call_s" in doc["skipped"] and "link.h2d_effective_gbps" in doc["skipped"]
    assert "tables.topk" in doc["skipped"] and "tables.uva_gather" in doc["skipped"]
    host_paths = {"tables.svd", "tables.memcpy2d_one_row", "tables.readback", "tables.pageable_copy"}
    assert host_paths <= set(doc["skipped"])


def test_a_failing_part_is_recorded_and_the_suite_goes_on(tmp_path, monkeypatch) -> None:
    def broken(out: Path, opts: object) -> dict:
        raise ValueError("broken on purpose")

    monkeypatch.setitem(gpu_suite.PARTS, "tests", broken)
    assert gpu_suite.main(["--out", str(tmp_path), "--parts", "tests,kernels", "--quick"]) == 0
    parts = json.loads((tmp_path / "suite.json").read_text())["parts"]
    assert parts["tests"]["status"] == "failed" and "ValueError: broken on purpose" in parts["tests"]["error"]
    assert parts["kernels"]["status"] in ("skipped", "ok", "partial")


@pytest.mark.parametrize(
    "args",
    [["--parts", "nope"], ["--taus", "2"], ["--contexts", "0"], ["--steps", "0"], ["--methods", "nope"],
     ["--methods", ","], ["--parity-methods", "freekv-nohl"]],
)
def test_bad_arguments_exit_2(tmp_path, args, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        gpu_suite.main(["--out", str(tmp_path), *args])
    assert exc.value.code == 2 or "error:" in str(exc.value.code)


def test_method_lists_expand_from_the_catalogue() -> None:
    from gpu_parts.methods import parse_methods

    from traces.catalogue import names

    peers = parse_methods("peers", "--methods")
    assert "freekv" not in peers and {"quest", "arkvale", "shadowkv", "infinigen"} <= set(peers)
    assert set(peers) == set(names(kind="retrieval", runtime=True)) - {"freekv"}
    assert parse_methods("dense,freekv,peers,full", "--methods") == ("dense", "freekv", *peers)
    assert parse_methods("all", "--parity-methods") == names(runtime=True)
    with pytest.raises(ValueError, match="--methods: 'freekv-nohl' is not a runtime policy"):
        parse_methods("freekv-nohl", "--methods")


@pytest.mark.slow
@NO_CUDA
def test_every_policy_runs_through_the_decode_and_parity_parts_on_cpu(tmp_path) -> None:
    """Each runtime policy through the suite's decode and parity code (CPU smoke shapes), no row failing."""
    from traces.catalogue import names

    argv = ["--out", str(tmp_path), "--quick", "--parts", "decode,parity", "--methods", "all",
            "--parity-methods", "all", "--batches", "1", "--taus", "0.9"]
    assert gpu_suite.main(argv) == 0
    table = json.loads((tmp_path / "decode" / "table.json").read_text())
    assert {r.get("method") for r in table["rows"]} == set(names(runtime=True))
    assert [r["config"] for r in table["rows"] if "error" in r] == []
    parity = json.loads((tmp_path / "parity" / "parity.json").read_text())
    assert list(parity["methods"]) == list(names(runtime=True))
    assert {m: r["error"] for m, r in parity["methods"].items() if "error" in r} == {}
    assert parity["status"] == "skipped"


@pytest.mark.slow
@NO_CUDA
def test_whole_suite_quick_on_cpu(tmp_path) -> None:
    """All five parts on the CPU (~50 s on 2 cores): each skipped with its reason, outputs written."""
    assert gpu_suite.main(["--out", str(tmp_path), "--quick"]) == 0
    parts = json.loads((tmp_path / "suite.json").read_text())["parts"]
    assert set(parts) == set(gpu_suite.PARTS)
    assert all(p["status"] == "skipped" and "no CUDA device" in p["reason"] for p in parts.values())
    assert (tmp_path / "tests" / "gpu.xml").is_file()
    assert (tmp_path / "parity" / "freekv" / "cpu" / "trace" / "meta.json").is_file()
    table = json.loads((tmp_path / "decode" / "table.json").read_text())
    assert len(table["rows"]) == 6 and all("ms_per_token" in r for r in table["rows"])
    assert "not a GPU number" in (tmp_path / "decode" / "table.md").read_text()
    freekv = [r for r in table["rows"] if r["method"] == "freekv"]
    assert all(np.isfinite(r["ms_per_token"]) and r["recall_head_pages_per_step"] >= 0 for r in freekv)


def test_microbench_derivations_from_copy_rows() -> None:
    """Latency and run efficiency as the cost model prices a copy: latency + bytes / (bw * efficiency)."""
    from gpu_parts.microbench_cuda import _derive

    bw, latency = 50e9, 2e-6
    efficiency = {256: 1.0, 16384: 0.9, 1 << 20: 0.97}
    rows = [
        {
            "api": "memcpy_async",
            "bytes_per_copy": size,
            "copies": 100,
            "host_s_per_copy": 2e-6,
            "device_s_per_copy": latency + size / (bw * eff),
            "wall_s_per_copy": 3e-6,
            "gbps": 1.0,
        }
        for size, eff in efficiency.items()
    ] + [
        {
            "api": "batched",
            "bytes_per_copy": 256,
            "copies": n,
            "host_s_per_copy": (5e-6 + n * 1e-7) / n,
            "host_s_per_call": 5e-6 + n * 1e-7,
            "device_s_per_copy": 1e-6,
            "wall_s_per_copy": 1e-6,
            "gbps": 1.0,
        }
        for n in (16, 1024)
    ]
    doc = {
        "schema": SCHEMA,
        "machine": {},
        "software": {},
        "hardware": {"link.h2d_effective_gbps": 50.0},
        "tables": {"h2d_copy": rows},
    }
    _derive(doc)
    hw, sw = doc["hardware"], doc["software"]
    assert hw["link.dma_latency_s"] == pytest.approx(latency)
    assert dict(hw["link.run_efficiency"]) == pytest.approx(efficiency)
    assert sw["memcpy_async_call_s"] == pytest.approx(2e-6)
    assert sw["batched_copy_call_s"] == pytest.approx(5e-6) and sw[
        "batched_copy_per_copy_s"
    ] == pytest.approx(1e-7)
    assert doc["tables"]["rows_vs_runs"][0]["as_one_16KiB_run_s"] == rows[1]["device_s_per_copy"]
    assert validate(doc) == []
