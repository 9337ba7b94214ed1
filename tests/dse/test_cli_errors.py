"""The bad inputs of a reliability audit of every command, replayed on every command: each exits with status
2, prints one paragraph and no traceback, and the message names the file, the field or the flag.

Every case here fails before any model runs (that is part of what is checked: `dse trace` checks its
arguments before loading the model, `dse sweep` validates the whole study before measuring)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from grid_study import tiny_grid_study

from dse.cli import main

ROOT = Path(__file__).resolve().parents[2]
SYN = ["--model", "llama-3.1-8b", "--hardware", "a100-40g-pcie4", "--output-tokens", "4"]
BINARY = bytes(range(256)) * 4


def _fails(capsys: pytest.CaptureFixture, args: list[str], *needles: str) -> str:
    """Run `dse ARGS`: exit 2, no traceback, every needle in the message; returns the message."""
    code = main(args)
    captured = capsys.readouterr()
    text = captured.err + captured.out
    assert code == 2, text
    assert "Traceback" not in text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A binary file, a non-UTF-8 text, a regular file (to put paths under), a valid study."""
    (tmp_path / "binary.yaml").write_bytes(BINARY)
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (tmp_path / "plain").write_text("not a directory\n")
    (tmp_path / "study.yaml").write_text(tiny_grid_study("audit"))
    return {p.name: p for p in tmp_path.iterdir()}


# -- dse sweep --------------------------------------------------------------------------------------


def test_sweep_binary_and_non_utf8_study_files(capsys, files) -> None:
    _fails(capsys, ["sweep", str(files["binary.yaml"])], f"study file {files['binary.yaml']}", "not UTF-8")
    _fails(capsys, ["sweep", str(files["latin1.yaml"])], f"study file {files['latin1.yaml']}", "not UTF-8")
    _fails(capsys, ["sweep", str(files["plain"].parent)], "is a directory")


def test_sweep_binary_study_file_through_the_installed_entry_point(files) -> None:
    proc = subprocess.run([sys.executable, "-m", "dse.cli", "sweep", str(files["binary.yaml"])], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "not UTF-8" in proc.stderr


def test_sweep_duplicate_key_is_an_error(capsys, tmp_path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(tiny_grid_study("dup") + "trials: 2\n")
    _fails(capsys, ["sweep", str(path)], str(path), "duplicate key 'trials'",
           "first at line 16, again at line 20")


def test_sweep_invalid_untuned_baseline_named_with_its_line(capsys, files) -> None:
    study = files["study.yaml"]
    text = study.read_text().replace(
        "untuned_freekv: null",
        "untuned_freekv: {page_size: 16, budget_tokens: 40, sink_tokens: 16, window_tokens: 16}",
    )
    study.write_text(text)
    _fails(capsys, ["sweep", str(study)], str(study), "line 18", "baselines.untuned_freekv",
           "budget_tokens counts sink and window and must be a multiple of page_size=16 of at least "
           "sink_tokens + window_tokens + page_size = 48, got 40")


def test_sweep_task_context_beyond_the_model_positions(capsys, files) -> None:
    study = files["study.yaml"]
    _fails(capsys, ["sweep", str(study), "--set", "tasks.0.context_tokens=9000"],
           "tasks[0].context_tokens", "8192 positions", "--set tasks.0.context_tokens=9000")


def test_sweep_storage_and_out_dir_under_a_regular_file(capsys, files) -> None:
    study, plain = files["study.yaml"], files["plain"]
    _fails(capsys, ["sweep", str(study), "--storage", f"sqlite:///{plain}/x.db"],
           f"sqlite:///{plain}/x.db", "Optuna storage")
    _fails(capsys, ["sweep", str(study), "--set", f"out_dir={plain}/out"], f"{plain}/out")
    _fails(capsys, ["sweep", str(study), "--set", f"out_dir={plain}", "--storage",
                    f"sqlite:///{plain.parent}/elsewhere.db"], f"out_dir {plain}", "is a file")


def test_sweep_dense_layers_beyond_the_model(capsys, files) -> None:
    _fails(capsys, ["sweep", str(files["study.yaml"]), "--set", "search.dense_layers=[0, 40]"],
           "search.dense_layers[1]", "30 layers")


# -- dse hardware -----------------------------------------------------------------------------------


def test_hardware_list_skips_a_binary_profile_and_warns_of_a_missing_directory(capsys, tmp_path,
                                                                              monkeypatch) -> None:
    user = tmp_path / "profiles"
    user.mkdir()
    (user / "junk.yaml").write_bytes(BINARY)
    monkeypatch.setenv("FREEKV_DSE_PROFILES", f"{user}:{tmp_path / 'missing'}")
    assert main(["hardware", "list"]) == 0
    out = capsys.readouterr().out
    assert "a100-40g-pcie4" in out  # the other profiles are still listed
    assert "skipped:" in out and "junk.yaml" in out and "not UTF-8" in out
    assert f"{tmp_path / 'missing'}" in out and "not a directory" in out.replace("\n", " ")


def test_profile_as_both_yaml_and_yml_is_an_error(capsys, tmp_path, monkeypatch) -> None:
    user = tmp_path / "profiles"
    user.mkdir()
    shipped = ROOT / "sim" / "profiles" / "a100-40g-pcie4.yaml"
    text = shipped.read_text().replace("name: a100-40g-pcie4", "name: twin")
    (user / "twin.yaml").write_text(text)
    (user / "twin.yml").write_text(text)
    monkeypatch.setenv("FREEKV_DSE_PROFILES", str(user))
    _fails(capsys, ["hardware", "show", "twin"], "twin.yaml and twin.yml")
    _fails(capsys, ["sim", "--synthetic", "correction=0.5,hit=0.8", "--model", "llama-3.1-8b",
                    "--hardware", "twin"], "defined twice")


def test_profile_with_a_duplicate_key_is_an_error(capsys, tmp_path) -> None:
    shipped = ROOT / "sim" / "profiles" / "a100-40g-pcie4.yaml"
    path = tmp_path / "dup.yaml"
    path.write_text(shipped.read_text() + "name: other\n")
    _fails(capsys, ["hardware", "show", str(path)], str(path), "duplicate key 'name'")


# -- dse sim ----------------------------------------------------------------------------------------


def test_sim_synthetic_file_invalid_binary_or_duplicated(capsys, tmp_path, files) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("correction: [0.5\n")
    _fails(capsys, ["sim", "--synthetic", str(bad), *SYN], f"synthetic spec file {bad}", "not valid YAML")
    _fails(capsys, ["sim", "--synthetic", str(files["binary.yaml"]), *SYN], "not UTF-8")
    dup = tmp_path / "dup.yaml"
    dup.write_text("correction: 0.5\nhit: 0.8\nhit: 0.9\n")
    _fails(capsys, ["sim", "--synthetic", str(dup), *SYN], "duplicate key 'hit'")
    words = tmp_path / "words.yaml"
    words.write_text("correction: high\nhit: [0.5, [0.1]]\n")
    _fails(capsys, ["sim", "--synthetic", str(words), *SYN], "'correction' must be share(s)")


def test_sim_timeline_outputs_that_cannot_be_written(capsys, tmp_path, files) -> None:
    syn = ["sim", "--synthetic", "correction=0.5,hit=0.8", *SYN]
    _fails(capsys, [*syn, "--timeline", str(tmp_path)], f"--timeline {tmp_path} is a directory")
    _fails(capsys, [*syn, "--chrome-trace", str(tmp_path)], "--chrome-trace", "is a directory")
    _fails(capsys, [*syn, "--chrome-trace", f"{files['plain']}/t.json"], "--chrome-trace", "is a file")
    _fails(capsys, [*syn, "--timeline", "/proc/no/such/place.html"], "--timeline")


def test_sim_messages_use_the_flags(capsys) -> None:
    syn = ["sim", "--synthetic", "correction=0.5,hit=0.8", *SYN]
    text = _fails(capsys, [*syn, "--batch", "0"], "--batch")
    assert "batch_size" not in text
    text = _fails(capsys, [*syn, "--sink-tokens", "17"], "--sink-tokens", "--page-size")
    assert "SimConfig" not in text and "sink_tokens" not in text


def test_sim_calibrate_out_is_checked_first(capsys, tmp_path) -> None:
    _fails(capsys, ["sim", "calibrate", str(tmp_path / "no-trace"), "--hardware", "a100-40g-pcie4",
                    "--out", str(tmp_path)], "--out", "is a directory")


# -- dse report -------------------------------------------------------------------------------------


def test_report_outputs_and_storage_under_a_regular_file(capsys, files) -> None:
    plain, study = files["plain"], str(files["study.yaml"])
    _fails(capsys, ["report", study, "--out", f"{plain}/r.html"], "--out", "is a file")
    _fails(capsys, ["report", study, "--out", str(plain.parent)], "--out", "is a directory")
    _fails(capsys, ["report", study, "--json", str(plain.parent)], "--json", "is a directory")
    _fails(capsys, ["report", f"sqlite:///{plain}/x.db"], f"{plain}/x.db")


# -- dse trace (all before the model is loaded) -----------------------------------------------------


def test_trace_checks_its_arguments_before_loading_the_model(capsys, tmp_path, files) -> None:
    _fails(capsys, ["trace", "--out", str(tmp_path / "t"), "--dense-layers", "0,99"], "--dense-layers",
           "30 layers")
    _fails(capsys, ["trace", "--out", f"{files['plain']}/t"], "--out", "is a file")
    _fails(capsys, ["trace", "--out", str(files["plain"])], "--out", "is a file")
    held = tmp_path / "held"
    (held / "trace").mkdir(parents=True)
    (held / "trace" / "meta.json").write_text("{}")
    text = _fails(capsys, ["trace", "--out", str(held)], "--overwrite")
    assert "overwrite=True" not in text
    text = _fails(capsys, ["trace", "--out", str(tmp_path / "t"), "--samples", "0"], "--samples")
    assert "n_samples" not in text


def test_trace_truncated_safetensors(capsys, tmp_path) -> None:
    from freekv_runtime.weights import cache_root

    found = [p for p in (cache_root() / "models").glob("*") if (p / "model.safetensors").is_file()]
    cached = found[0] if found else None
    if cached is None:
        pytest.skip("no converted model in the runtime cache to truncate")
    broken = tmp_path / "weights"
    broken.mkdir()
    for f in cached.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, broken / f.name)
    with open(cached / "model.safetensors", "rb") as src:
        (broken / "model.safetensors").write_bytes(src.read(1 << 20))
    _fails(capsys, ["trace", "--weights", str(broken), "--out", str(tmp_path / "t"), "--samples", "1",
                    "--context-tokens", "128", "--device", "cpu"], str(broken), "model.safetensors")


# -- an empty search --------------------------------------------------------------------------------


def test_empty_search_is_one_default_configuration_said_so(tmp_path) -> None:
    from dse.driver import Sweep
    from dse.study import load_study_file

    path = tmp_path / "empty.yaml"
    text = tiny_grid_study("empty")
    start, end = text.index("search:"), text.index("objectives:")
    path.write_text(text[:start] + "search: {}\n" + text[end:])
    study, yaml_text = load_study_file(path, [f"out_dir={tmp_path / 'out'}"])
    assert study.searches_nothing
    assert Sweep(study, yaml_text).budget == 1  # one configuration: one trial, not three copies
    study, _ = load_study_file(path, ["search.tau=[0.8]"])
    assert not study.searches_nothing


def test_sweep_dense_layer_beyond_a_replayed_model_found_before_measuring(capsys, files, tmp_path) -> None:
    sets = ["model.name=llama-3.1-8b", "extra_replay_models=[smollm2-135m]", "search.dense_layers=[31]",
            f"out_dir={tmp_path / 'out'}"]
    args = ["sweep", str(files["study.yaml"])] + [x for s in sets for x in ("--set", s)]
    _fails(capsys, args, "search.dense_layers [31]", "'smollm2-135m' has 30 layers")
    assert not (tmp_path / "out" / "baselines").exists() and not (tmp_path / "out" / "trials").exists()
