"""Estimate ranges: software-profile `range` entries, the methods' estimate_ranges, and the answer priced
at the cheap and dear ends of every estimate (sim.estimate_ends)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim import SimConfig, synthetic_demand
from sim.estimate_ends import end_configs, estimate_spread, method_estimate_ranges
from sim.methods.infinigen import published_cpu_gather_s
from sim.software import (
    DEFAULT_SOFTWARE,
    SOFTWARE_FIELDS,
    SoftwareError,
    estimate_ends,
    list_software,
    load_software,
)
from traces import catalogue

MODEL = "llama-3.1-8b"


def _cfg(**changes) -> SimConfig:
    base = SimConfig(
        model=MODEL, hardware="a100-40g-pcie4", method="infinigen", input_tokens=4096, output_tokens=4
    )
    return base.replace(**changes)


def test_every_shipped_estimate_states_a_range_around_its_value() -> None:
    for name in list_software():
        prof = load_software(name)
        for key in SOFTWARE_FIELDS:
            if "estimate" in prof.sources[key]:
                assert key in prof.ranges, (name, key)
            if key in prof.ranges:
                low, high = prof.ranges[key]
                assert low <= getattr(prof, key) <= high, (name, key)


def test_a_range_must_contain_the_value_and_be_a_pair(tmp_path: Path) -> None:
    doc = load_software(DEFAULT_SOFTWARE).to_dict()
    for bad, message in (([1e-3, 2e-3], "must contain the value"), ([1e-6], "must be \\[low, high\\]")):
        doc["python_op_s"] = {"value": 3e-6, "source": "estimate: x", "range": bad}
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(doc))
        with pytest.raises(SoftwareError, match=message):
            load_software(path)


def test_an_override_is_no_estimate_and_keeps_its_value_at_both_ends() -> None:
    prof = load_software(DEFAULT_SOFTWARE)
    assert "python_op_s" in estimate_ends(prof)["low"]
    ends = end_configs(_cfg(software_overrides={"python_op_s": 1e-5}))
    for end in ("low", "high"):
        assert ends[end].software_overrides["python_op_s"] == 1e-5
    assert ends["low"].software_overrides["readback_s"] < ends["high"].software_overrides["readback_s"]


def test_method_constants_move_unless_the_config_sets_them() -> None:
    assert method_estimate_ranges("shadowkv") == {
        "svd_flops_fraction": (0.0625, 0.003),  # cheap end: A100 FP32 peak / FP16 tensor peak
        "uva_rate_fraction": (1.0, 0.6),
        "uva_read_latency_s": (1.0e-6, 4.0e-6),
        "device_load_latency_s": (3.0e-7, 8.0e-7),
        "l2_load_latency_s": (1.4e-7, 2.5e-7),
        "smem_step_latency_s": (1.4e-8, 8.5e-8),
        "l2_bandwidth_gbps": (5400.0, 2400.0),
    }
    ends = end_configs(_cfg(method="shadowkv"))
    assert ends["low"].method_options["svd_flops_fraction"] == 0.0625
    assert ends["high"].method_options["l2_load_latency_s"] == 2.5e-7
    assert ends["high"].method_options["l2_bandwidth_gbps"] == 2400.0
    assert ends["high"].method_options["svd_flops_fraction"] == 0.003
    kept = end_configs(_cfg(method="shadowkv", method_options={"svd_flops_fraction": 0.02}))
    assert kept["high"].method_options["svd_flops_fraction"] == 0.02


@pytest.mark.parametrize("method", catalogue.names(simulator=True))
def test_every_method_estimate_is_a_labelled_knob_whose_default_lies_in_its_range(method: str) -> None:
    knobs = catalogue.entry(method).knobs
    for name, ends in method_estimate_ranges(method).items():
        spec = knobs.spec(name)
        assert spec is not None, f"{method}: estimate_ranges names {name!r}, not a knob"
        assert "estimate" in spec.doc, f"{method}.{name}: the knob's doc must say it is an estimate"
        low, high = min(ends), max(ends)
        assert low <= spec.default <= high, f"{method}.{name}: default {spec.default} outside {ends}"


def test_spread_brackets_the_priced_answer() -> None:
    demand = synthetic_demand("correction=0.5,hit=0.8", model=MODEL, seed=0)
    s = estimate_spread(_cfg(), demand)
    assert s.low_s < s.base_s < s.high_s
    assert "torch_gather_row_s" in s.software_fields
    ideal = estimate_spread(_cfg(implementation="ideal"), demand)
    assert ideal.low_s == pytest.approx(ideal.base_s) == pytest.approx(ideal.high_s)
    assert ideal.software_fields == ()


def test_infinigen_host_gather_is_per_row_plus_the_copy_into_the_pinned_buffer() -> None:
    from types import SimpleNamespace

    sw = load_software(DEFAULT_SOFTWARE)

    def ctx(host_gbps: float) -> SimpleNamespace:
        host = SimpleNamespace(memory_bandwidth_gbps=host_gbps)
        return SimpleNamespace(software=sw, profile=SimpleNamespace(host=host))

    rows, kv_bytes = 16384.0, 16384.0 * 512
    got = float(published_cpu_gather_s(ctx(204.8), rows, kv_bytes))  # type: ignore[arg-type]
    assert got == pytest.approx(2 * rows * sw.torch_gather_row_s + kv_bytes / 1e9 * sw.host_copy_s_per_gb)
    slow = float(published_cpu_gather_s(ctx(10.0), rows, kv_bytes))  # type: ignore[arg-type]
    assert slow == pytest.approx(2 * 3.0 * kv_bytes / 10e9)  # both passes bound by the memory traffic


def test_a_profile_written_before_the_host_copy_fields_still_loads(tmp_path: Path) -> None:
    doc = load_software(DEFAULT_SOFTWARE).to_dict()
    del doc["torch_gather_row_s"], doc["host_copy_s_per_gb"]
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump({**doc, "name": "old"}))
    prof = load_software(path)
    assert prof.torch_gather_row_s == load_software(DEFAULT_SOFTWARE).torch_gather_row_s
    assert prof.sources["host_copy_s_per_gb"].startswith(f"not in {path}: {DEFAULT_SOFTWARE}'s value")
    assert "torch_gather_row_s" in prof.ranges
