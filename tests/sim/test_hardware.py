"""Hardware profiles: shipped files load and cite sources; malformed files fail naming file and field."""

from __future__ import annotations

import copy
import math
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from sim.hardware import (
    PROFILES_ENV,
    HardwareError,
    HardwareProfile,
    find_profile_file,
    list_profiles,
    load_profile,
)

SHIPPED = (
    "a100-40g-pcie4", "a100-80g-sxm", "a100-80g-pcie", "h100-pcie5", "h100-sxm", "h200", "l40s", "rtx-4090",
    "rtx-6000-ada", "gh200",
)


def _numeric_fields(profile: HardwareProfile) -> list[str]:
    out = []
    for part in ("gpu", "link", "host"):
        for f in fields(getattr(profile, part)):
            if not isinstance(getattr(getattr(profile, part), f.name), str):
                out.append(f"{part}.{f.name}")
    return out


@pytest.fixture(autouse=True)
def _no_user_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILES_ENV, raising=False)


@pytest.fixture()
def raw_a100() -> dict:
    return yaml.safe_load(find_profile_file("a100-40g-pcie4").read_text())


def _write(tmp_path: Path, raw: object, name: str = "broken.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


# ----- shipped profiles -----


def test_every_shipped_profile_is_listed_and_loads() -> None:
    names = list_profiles()
    assert set(SHIPPED) <= set(names)
    for name in SHIPPED:
        profile = load_profile(name)
        assert profile.name == name
        assert profile.description


@pytest.mark.parametrize("name", SHIPPED)
def test_every_number_has_a_source(name: str) -> None:
    profile = load_profile(name)
    numeric = _numeric_fields(profile)
    assert set(profile.sources) == set(numeric)
    for dotted, text in profile.sources.items():
        assert len(text.strip()) > 15, f"{name} {dotted}: source too thin: {text!r}"
        if text.lower().startswith("estimate"):
            assert ":" in text and len(text) > 40, f"{name} {dotted}: an estimate must say its reasoning"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_numbers_are_physically_consistent(name: str) -> None:
    p = load_profile(name)
    link = p.link
    assert link.h2d_effective_gbps <= link.h2d_peak_gbps and link.d2h_effective_gbps <= link.d2h_peak_gbps
    effs = [e for _, e in link.run_efficiency]
    assert effs == sorted(effs), "efficiency must not fall as runs get longer"
    assert link.efficiency(256) < link.efficiency(16 * 1024) <= 1.0
    assert 1e-7 < link.copy_issue_s < 1e-4 and 1e-7 < link.dma_latency_s < 1e-4
    assert 1e-6 <= p.gpu.kernel_launch_s < 2e-5
    assert p.gpu.hbm_bandwidth_gbps > 10 * link.h2d_effective_gbps or link.kind == "nvlink-c2c"
    assert p.host.memory_bytes > 2**30 and p.gpu.memory_bytes > 2**30


def test_freekv_testbed_numbers() -> None:
    """The paper's testbed: A100 40GB, PCIe Gen4 (~25-26 GB/s pinned), EPYC 7302 (8 x DDR4-3200)."""
    p = load_profile("a100-40g-pcie4")
    assert p.gpu.memory_bytes == 40 * 2**30
    assert p.gpu.hbm_bandwidth_gbps == 1555 and p.gpu.peak_fp16_tflops == 312
    assert p.link.kind == "pcie4" and 25 <= p.link.h2d_effective_gbps <= 26.5
    assert p.host.memory_bandwidth_gbps == pytest.approx(8 * 3200e6 * 8 / 1e9)
    # a fixed cost per contiguous run: 64 B runs lose half the link, 16 KiB head-page runs (HND) ~nothing
    assert p.link.efficiency(64) <= 0.5 < p.link.efficiency(256) < 0.95 < p.link.efficiency(16 * 1024)


def test_faster_link_suffers_more_from_small_runs() -> None:
    gen4, gen5 = load_profile("a100-40g-pcie4").link, load_profile("h100-sxm").link
    assert gen5.h2d_effective_gbps > gen4.h2d_effective_gbps
    assert gen5.efficiency(256) < gen4.efficiency(256)


# ----- link model -----


def test_efficiency_interpolates_in_log2_and_clamps() -> None:
    link = load_profile("a100-40g-pcie4").link.__class__(
        kind="pcie4",
        h2d_peak_gbps=32,
        d2h_peak_gbps=32,
        h2d_effective_gbps=25,
        d2h_effective_gbps=20,
        copy_issue_s=3e-6,
        dma_latency_s=2e-6,
        copy_engines=2,
        run_efficiency=((64, 0.2), (1024, 0.6)),
    )
    assert link.efficiency(16) == 0.2 and link.efficiency(1 << 30) == 0.6
    assert link.efficiency(256) == pytest.approx(0.2 + 0.4 * (math.log2(256) - 6) / 4)
    with pytest.raises(ValueError):
        link.efficiency(0)


def test_copy_time_formula() -> None:
    link = load_profile("a100-40g-pcie4").link
    n, run = 32 * 16384, 16384
    expected = link.dma_latency_s + n / (link.h2d_effective_gbps * 1e9 * link.efficiency(run))
    assert link.copy_time_s(n, run, "h2d") == pytest.approx(expected)
    d2h = link.dma_latency_s + n / (link.d2h_effective_gbps * 1e9 * link.efficiency(run))
    assert link.copy_time_s(n, run, "d2h") == pytest.approx(d2h)
    assert link.copy_time_s(0, run, "h2d") == 0.0
    # the same bytes in 256 B runs take longer than in 16 KiB runs
    assert link.copy_time_s(n, 256, "h2d") > 1.15 * link.copy_time_s(n, run, "h2d")
    with pytest.raises(ValueError):
        link.copy_time_s(n, run, "sideways")


# ----- malformed files -----

MUTATIONS = {
    "missing source": (
        lambda r: r["gpu"]["hbm_bandwidth_gbps"].pop("source"),
        "gpu.hbm_bandwidth_gbps",
        "source",
    ),
    "empty source": (
        lambda r: r["gpu"]["hbm_bandwidth_gbps"].update(source="  "),
        "gpu.hbm_bandwidth_gbps",
        "source",
    ),
    "source and calibrated": (
        lambda r: r["link"]["copy_issue_s"].update(calibrated="x"),
        "link.copy_issue_s",
        "exactly one",
    ),
    "bare number": (lambda r: r["link"].update(h2d_peak_gbps=31.5), "link.h2d_peak_gbps", "source"),
    "optional number without source": (lambda r: r["gpu"].update(sm_count=108), "gpu.sm_count", "source"),
    "unknown key": (
        lambda r: r["gpu"].update(hbm_gbps={"value": 1, "source": "x"}),
        "gpu.hbm_gbps",
        "hbm_bandwidth_gbps",
    ),
    "unknown inner key": (lambda r: r["host"]["sync_s"].update(unit="s"), "host.sync_s.unit", "valid keys"),
    "missing field": (lambda r: r["host"].pop("sync_s"), "host.sync_s", "missing"),
    "missing section": (lambda r: r.pop("link"), "link", "missing"),
    "wrong type": (
        lambda r: r["gpu"]["peak_fp16_tflops"].update(value="312"),
        "gpu.peak_fp16_tflops",
        "number",
    ),
    "number as YAML string": (
        lambda r: r["gpu"]["kernel_launch_s"].update(value="4e-6"),
        "gpu.kernel_launch_s",
        "signed exponent",
    ),
    "boolean": (lambda r: r["link"]["copy_engines"].update(value=True), "link.copy_engines", "integer"),
    "non-positive": (
        lambda r: r["gpu"]["kernel_launch_s"].update(value=0),
        "gpu.kernel_launch_s",
        "greater than 0",
    ),
    "negative": (lambda r: r["host"]["memory_bytes"].update(value=-5), "host.memory_bytes", "greater than 0"),
    "fraction above one": (
        lambda r: r["gpu"]["achievable_bandwidth_fraction"].update(value=1.5),
        "gpu.achievable_bandwidth_fraction",
        "less than or equal to 1",
    ),
    "fractional int": (
        lambda r: r["gpu"]["memory_bytes"].update(value=1.5e9 + 0.5),
        "gpu.memory_bytes",
        "integer",
    ),
    "curve not increasing": (
        lambda r: r["link"]["run_efficiency"].update(value=[[256, 0.3], [64, 0.1]]),
        "link.run_efficiency",
        "increasing",
    ),
    "curve one point": (
        lambda r: r["link"]["run_efficiency"].update(value=[[256, 0.3]]),
        "link.run_efficiency",
        "two",
    ),
    "unknown link kind": (lambda r: r["link"].update(kind="pcie9"), "link.kind", "pcie4"),
    "effective above peak": (
        lambda r: r["link"]["h2d_effective_gbps"].update(value=40),
        "link.h2d_effective_gbps",
        "must not exceed",
    ),
}


@pytest.mark.parametrize("case", list(MUTATIONS))
def test_malformed_file_error_names_file_and_field(case: str, raw_a100: dict, tmp_path: Path) -> None:
    mutate, field_name, hint = MUTATIONS[case]
    raw = copy.deepcopy(raw_a100)
    mutate(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(HardwareError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message
    assert field_name in message
    assert hint.lower() in message.lower()


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu: [unclosed\n")
    with pytest.raises(HardwareError, match="not valid YAML"):
        load_profile(bad)
    listed = _write(tmp_path, [1, 2], "list.yaml")
    with pytest.raises(HardwareError, match="mapping"):
        load_profile(listed)
    with pytest.raises(HardwareError, match="does not exist"):
        load_profile(tmp_path / "absent.yaml")


def test_unknown_name_lists_available() -> None:
    with pytest.raises(HardwareError) as info:
        load_profile("a100-41g")
    assert "a100-40g-pcie4" in str(info.value) and "h200" in str(info.value)
    assert PROFILES_ENV in str(info.value)


def test_calibrated_values_are_accepted(raw_a100: dict, tmp_path: Path) -> None:
    raw = copy.deepcopy(raw_a100)
    raw["link"]["h2d_effective_gbps"] = {"value": 24.1, "calibrated": "bandwidthTest on our box, 2026-01"}
    profile = load_profile(_write(tmp_path, raw))
    assert profile.link.h2d_effective_gbps == 24.1
    assert profile.sources["link.h2d_effective_gbps"].startswith("calibrated: ")


# ----- user directories -----


def test_user_directory_profiles_are_found_and_shadow_shipped(
    raw_a100: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    mine = copy.deepcopy(raw_a100)
    mine["name"] = "my-box"
    _write(second, mine, "my-box.yaml")
    shadow = copy.deepcopy(raw_a100)
    shadow["link"]["h2d_effective_gbps"] = {"value": 20.0, "calibrated": "our own bandwidthTest"}
    _write(first, shadow, "a100-40g-pcie4.yaml")
    import os

    monkeypatch.setenv(PROFILES_ENV, f"{first}{os.pathsep}{second}")
    assert "my-box" in list_profiles() and "h200" in list_profiles()
    assert load_profile("my-box").name == "my-box"
    assert load_profile("a100-40g-pcie4").link.h2d_effective_gbps == 20.0
    assert find_profile_file("a100-40g-pcie4") == first / "a100-40g-pcie4.yaml"


def test_user_profile_name_must_match_file(raw_a100: dict, tmp_path: Path, monkeypatch) -> None:
    _write(tmp_path, raw_a100, "other-name.yaml")  # name inside stays a100-40g-pcie4
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path))
    with pytest.raises(HardwareError, match="'name'"):
        load_profile("other-name")


# ----- overrides and round trip -----


def test_with_overrides_replaces_and_revalidates() -> None:
    base = load_profile("a100-40g-pcie4")
    slow = base.with_overrides({"link.h2d_effective_gbps": 10})
    assert slow.link.h2d_effective_gbps == 10.0 and base.link.h2d_effective_gbps == 25.8
    assert slow.sources["link.h2d_effective_gbps"].startswith("override (was 25.8")
    assert slow.gpu == base.gpu
    assert base.with_overrides(**{"gpu.kernel_launch_s": 1e-6}).gpu.kernel_launch_s == 1e-6
    with pytest.raises(HardwareError, match="gpu.kernel_launch_s"):
        base.with_overrides({"gpu.kernel_launch_s": -1})
    with pytest.raises(HardwareError, match="unknown field.*link.copy_issue_s"):
        base.with_overrides({"link.copy_issue": 1e-6})


def test_sm_fields_are_optional_and_overridable(raw_a100: dict, tmp_path: Path) -> None:
    """gpu.sm_count and gpu.shared_memory_per_sm_bytes may be left out (older user profiles load); the
    shipped profiles give both (test_every_number_has_a_source), and an override can add them."""
    del raw_a100["gpu"]["sm_count"], raw_a100["gpu"]["shared_memory_per_sm_bytes"]
    bare = load_profile(_write(tmp_path, raw_a100, "a100-40g-pcie4.yaml"))
    assert bare.gpu.sm_count is None and bare.gpu.shared_memory_per_sm_bytes is None
    assert "sm_count" not in bare.to_dict()["gpu"]
    added = bare.with_overrides({"gpu.sm_count": 108})
    assert added.gpu.sm_count == 108 and added.sources["gpu.sm_count"].startswith("override")
    assert load_profile("a100-40g-pcie4").gpu.sm_count == 108


@pytest.mark.parametrize("name", SHIPPED)
def test_to_dict_round_trips(name: str, tmp_path: Path) -> None:
    profile = load_profile(name)
    again = load_profile(_write(tmp_path, profile.to_dict(), f"{name}.yaml"))
    assert again == profile
