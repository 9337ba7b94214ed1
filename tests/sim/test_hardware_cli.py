"""`dse hardware list / show`: every shipped profile listed, every field shown with its source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dse.commands.hardware import command
from sim.hardware import PROFILES_ENV, HardwareError, list_profiles, load_profile


@pytest.fixture(autouse=True)
def _no_user_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILES_ENV, raising=False)


def test_list_shows_every_profile() -> None:
    result = CliRunner().invoke(command, ["list"])
    assert result.exit_code == 0, result.output
    for name in list_profiles():
        assert name in result.output
    assert "25.8" in result.output  # a100-40g-pcie4 effective h2d
    assert "nvlink-c2c" in result.output


def test_show_prints_every_field_with_source() -> None:
    result = CliRunner().invoke(command, ["show", "a100-40g-pcie4"])
    assert result.exit_code == 0, result.output
    profile = load_profile("a100-40g-pcie4")
    for dotted in profile.sources:
        assert f"  {dotted.split('.')[1]}: " in result.output
    assert result.output.count("source: ") == len(profile.sources)
    assert "AMD EPYC 7302" in result.output and "16 KiB" in result.output


def test_show_json_round_trips_values_and_sources() -> None:
    result = CliRunner().invoke(command, ["show", "h100-sxm", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    profile = load_profile("h100-sxm")
    assert data["gpu"]["hbm_bandwidth_gbps"]["value"] == profile.gpu.hbm_bandwidth_gbps
    assert data["link"]["run_efficiency"]["value"][0] == list(profile.link.run_efficiency[0])
    assert all("source" in v or "calibrated" in v for v in data["host"].values() if isinstance(v, dict))


def test_show_unknown_profile_raises_the_user_error() -> None:
    result = CliRunner().invoke(command, ["show", "a100-41g"])
    assert isinstance(result.exception, HardwareError)
    assert "available" in str(result.exception)


def test_dse_prints_hardware_errors_without_traceback() -> None:
    """End to end, as a user runs it (a subprocess: the CLI's own sys.path, not pytest's)."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != PROFILES_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "dse.cli", "hardware", "show", "a100-41g"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "unknown hardware profile 'a100-41g'" in proc.stderr and "a100-40g-pcie4" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_list_skips_a_broken_user_file_and_shows_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken.yaml").write_text("name: broken\ndescription: half a profile\n")
    monkeypatch.setenv(PROFILES_ENV, str(tmp_path))
    result = CliRunner().invoke(command, ["list"])
    assert result.exit_code == 0, result.output
    assert "skipped" in result.output and "broken.yaml" in result.output and "gpu: missing" in result.output
    assert "a100-40g-pcie4" in result.output and str(tmp_path) in result.output


def test_show_accepts_a_file_path(tmp_path: Path) -> None:
    data = load_profile("rtx-4090").to_dict()
    data["name"] = "my-desktop"
    path = tmp_path / "my-desktop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(command, ["show", str(path)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("my-desktop: ") and "GeForce RTX 4090" in result.output
