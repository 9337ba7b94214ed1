"""Serving-engine profiles: the per-iteration host time is interpolated as documented and added once to
every iteration the schedulers price, a shipped profile carries Vidur's measured points, and a bad profile
file is one error naming the file and the key (exit 2 from `dse serve`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.cli import main
from sim import SimConfig
from sim.serving import StepCosts
from sim.serving.engine import EngineError, list_engines, load_engine

ONE_TERM = """name: two-points
description: a test engine
terms:
  schedule:
    points_ms: [[8, 1.0], [16, 2.0]]
    source: "test numbers"
"""


def _write(tmp_path: Path, text: str, name: str = "two-points.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_interpolation_and_extension_by_hand(tmp_path: Path) -> None:
    engine = load_engine(_write(tmp_path, ONE_TERM))
    assert engine.iteration_s(12) == pytest.approx(1.5e-3)  # halfway between 8 and 16
    assert engine.iteration_s(4) == pytest.approx(0.5e-3)  # the first segment extended below 8
    assert engine.iteration_s(24) == pytest.approx(3.0e-3)  # the last segment extended above 16
    assert engine.iteration_s(0) == 0.0
    assert load_engine("none").iteration_s(64) == 0.0 and load_engine(None).name == "none"


def test_shipped_profile_is_vidurs_five_terms() -> None:
    engine = load_engine("sarathi-serve-a100")
    assert "sarathi-serve-a100" in list_engines() and "none" in list_engines()
    assert [t.name for t in engine.terms] == [
        "schedule", "sampler_e2e", "prepare_inputs_e2e", "process_model_outputs", "ray_comm_time"
    ]
    assert all("vidur" in t.source for t in engine.terms)
    # batch 32 (Vidur's cpu_overheads.csv@6d98aa8 line 18): 0.511 + 0.608 + 0.434 + 0.543 + 0.336 ms
    assert engine.iteration_s(32) == pytest.approx(2.432e-3)
    assert engine.iteration_s(32, "low") < engine.iteration_s(32) < engine.iteration_s(32, "high")
    assert engine.at_end("high").iteration_s(32) == pytest.approx(engine.iteration_s(32, "high"))
    assert load_engine("sarathi-serve-a100@high").iteration_s(32) == pytest.approx(5.1195e-3, abs=1e-7)
    assert load_engine("sarathi-serve-a100@low").name == "sarathi-serve-a100 (low end)"
    # high end at 32: 0.511 x 1.13 + 0.608 x 1.85 + 0.434 x 1.92 + 0.543 x 4.14 + 0.336 x 1.0 ms
    assert engine.iteration_s(32, "high") == pytest.approx(5.1195e-3, abs=1e-7)


def test_one_mixed_iteration_by_hand(tmp_path: Path) -> None:
    """A mixed iteration of 5 decode sequences and 2 prompt chunks pays the engine once, at 7 sequences;
    a decode step of 5 at 5, a prefill alone at 1, a chunk span's iterations at 5 + 1 each."""
    cfg = SimConfig(model="llama-3.1-8b", hardware="a100-80g-pcie", method="dense", input_tokens=4096,
                    output_tokens=16)
    bare = StepCosts(cfg, None)
    with_engine = StepCosts(cfg, None, engine=load_engine(_write(tmp_path, ONE_TERM)))
    chunks = [(256, 0, 1024), (128, 512, 640)]
    extra_s = with_engine.iteration_s(5, 2048.0, chunks) - bare.iteration_s(5, 2048.0, chunks)
    assert extra_s == pytest.approx((1.0 + (7 - 8) * (2.0 - 1.0) / 8) * 1e-3)  # 0.875 ms at 7 sequences
    assert with_engine.decode_s(5, 2048.0) - bare.decode_s(5, 2048.0) == pytest.approx(0.625e-3)
    assert with_engine.prefill_s(1024) - bare.prefill_s(1024) == pytest.approx(0.125e-3)
    spans = with_engine.chunk_span_s(256, [0, 256], 1024, 5, 2048.0) - bare.chunk_span_s(
        256, [0, 256], 1024, 5, 2048.0
    )
    assert spans == pytest.approx([0.75e-3, 0.75e-3])
    assert with_engine.iteration_s(0, 0.0, []) == 0.0


@pytest.mark.parametrize(
    "text, words",
    [
        (ONE_TERM.replace("terms:", "overhead: 1\nterms:"), ["unknown key(s) ['overhead']", "valid keys"]),
        (ONE_TERM.replace("    source:", "    mean_ms: 1\n    source:"), ["term 'schedule'", "'mean_ms'"]),
        (ONE_TERM.replace('"test numbers"', '"estimate: a guess"'), ["estimate needs 'range"]),
        (ONE_TERM.replace("[16, 2.0]", "[4, 2.0]"), ["strictly increasing"]),
        (ONE_TERM.replace("[16, 2.0]", "[16, -2.0]"), [">= 0"]),
    ],
)
def test_bad_profile_is_one_error_naming_file_and_key(tmp_path: Path, text: str, words: list[str]) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(EngineError) as err:
        load_engine(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    for w in words:
        assert w in message


def test_dse_serve_refuses_a_bad_engine_with_exit_2(tmp_path: Path, capsys) -> None:
    bad = _write(tmp_path, ONE_TERM.replace("terms:", "overhead: 1\nterms:"))
    base = ["serve", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--method", "dense",
            "--input-tokens", "1024", "--output-tokens", "8", "--arrival-rate", "1", "--n-requests", "10"]
    cases = ((str(bad), "unknown key(s) ['overhead']"), ("no-such-engine", "sarathi-serve-a100"))
    for engine, words in cases:
        assert main([*base, "--engine", engine]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and "Traceback" not in err


def test_dse_serve_names_the_engine(capsys) -> None:
    base = ["serve", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--method", "dense",
            "--input-tokens", "1024", "--output-tokens", "8", "--arrival-rate", "1", "--n-requests", "10",
            "--scheduler", "chunked"]
    assert main([*base, "--engine", "sarathi-serve-a100"]) == 0
    out = capsys.readouterr().out
    assert "engine sarathi-serve-a100 (host time per iteration): Sarathi-Serve's engine" in out
    assert main(base) == 0
    assert "engine none (host time per iteration): kernels only" in capsys.readouterr().out
    assert main([*base, "--engine", "sarathi-serve-a100@high"]) == 0
    assert "engine sarathi-serve-a100 (high end)" in capsys.readouterr().out
