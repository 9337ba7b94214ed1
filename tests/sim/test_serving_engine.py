"""Serving-engine profiles: the per-iteration host time is interpolated as documented and added once to
every iteration the schedulers price, a shipped profile carries Vidur's measured points, and a bad profile
file is one error naming the file and the key (exit 2 from `dse serve`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.cli import main
from sim import SimConfig
from sim.errors import SimInputError
from sim.serving import StepCosts, poisson_requests, simulate
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


STEP = """name: steps
description: a whole-step test engine
step_time:
  model: opt-13b
  hardware: a100-80g-sxm
  source: "test numbers"
  prefill: {fixed_ms: 10.0, per_token_ms: 0.1, per_token_squared_ms: 0.001, constant_ms: 1.0}
  decode:
    - {below_batch: 4, fixed_ms: 20.0, per_token_ms: 0.01, per_sequence_ms: 1.0}
    - {fixed_ms: 5.0, per_token_ms: 0.02, per_sequence_ms: 2.0}
  per_iteration: {fixed_ms: 2.0, per_context_token_ms: 0.5}
"""


def _opt13b(method: str = "dense", model: str = "opt-13b") -> SimConfig:
    return SimConfig(model=model, hardware="a100-80g-sxm", method=method, input_tokens=512, output_tokens=64)


def test_a_whole_step_profile_prices_iterations_by_hand(tmp_path: Path) -> None:
    costs = StepCosts(_opt13b(), None, engine=load_engine(_write(tmp_path, STEP, "steps.yaml")))
    assert costs.engine_profile.prices == "whole steps" and "(whole steps)" in costs.engine_profile.label()
    # prefill of 10 and 20 tokens: 10 + 0.1 * 30 + 0.001 * 500 + 1 + (2 + 0.5 * 30) ms
    assert costs.prefill_batch_s([10, 20]) == pytest.approx(31.5e-3)
    assert costs.iteration_s(0, 0.0, [(10, 0, 10), (20, 0, 20)]) == pytest.approx(31.5e-3)
    assert costs.prefill_s(10) == pytest.approx((10 + 1 + 0.1 + 1 + 2 + 5) * 1e-3)
    # decode of 3 at context 9 (small-batch fit): 20 + 0.01 * 3 * 10 + 1 * 3 + (2 + 0.5 * 27) ms
    assert costs.decode_s(3, 9.0) == pytest.approx(38.8e-3)
    # 4 sequences take the last segment: 5 + 0.02 * 40 + 2 * 4 + (2 + 0.5 * 36)
    assert costs.decode_s(4, 9.0) == pytest.approx(33.8e-3)
    with pytest.raises(SimInputError, match="no mixed"):
        costs.iteration_s(2, 9.0, [(10, 0, 10)])
    with pytest.raises(SimInputError, match="no mixed"):
        costs.iteration_s(0, 0.0, [(5, 0, 10)])


def test_distserves_profiles_are_shipped_with_their_source() -> None:
    """DistServe's vLLM fit for OPT-13B on one A100 (profiler-a100-80g.vllm.json@82831f1 lines 5-19) with
    time_estimator.py's +1 ms and worker.py's Ray overhead: a 512-token prefill and a decode step of one."""
    vllm = load_engine("distserve-vllm-opt13b-a100")
    assert vllm.step_time is not None and "82831f1" in vllm.step_time.source
    prefill_ms = 22.052204789310185 + 0.14050923870128956 * 512 + 8.076584822611088e-06 * 512**2
    prefill_ms += 1 + 2 + 0.0512
    assert vllm.step_time.prefill_s([512]) == pytest.approx(prefill_ms / 1e3)
    decode_ms = 23.475041008414784 + 0.000592934466077393 * 513 + 0.060726861260369455 + 2 + 0.0512
    assert vllm.step_time.decode_s(1, 512.0) == pytest.approx(decode_ms / 1e3)
    own = load_engine("distserve-opt13b-a100").step_time
    assert own is not None and own.prefill_s([512, 512]) < 2 * own.prefill_s([512])  # batching amortises
    assert {"distserve-vllm-opt13b-a100", "distserve-opt13b-a100"} <= set(list_engines())
    with pytest.raises(EngineError, match="no ranges"):
        load_engine("distserve-opt13b-a100@high")


def test_a_whole_step_profile_refuses_what_it_was_not_measured_on(tmp_path: Path) -> None:
    engine = load_engine(_write(tmp_path, STEP, "steps.yaml"))
    for cfg, words in ((_opt13b(model="llama-3.1-8b"), "model 'llama-3.1-8b'"),
                       (_opt13b(method="quest"), "method 'quest'")):
        with pytest.raises(SimInputError, match=words):
            StepCosts(cfg, None, engine=engine)
    costs = StepCosts(_opt13b(), None, engine=engine)
    with pytest.raises(SimInputError, match="chunked"):
        simulate(poisson_requests(1.0, 4, 512, 4, seed=0), costs, "chunked")


@pytest.mark.parametrize(
    "text, words",
    [
        (STEP.replace("  source:", "  speed: 1\n  source:"), ["step_time: unknown key(s) ['speed']"]),
        (STEP.replace("constant_ms: 1.0}", "constant_ms: 1.0, c: 2}"), ["prefill: unknown key(s) ['c']"]),
        (STEP.replace("per_token_ms: 0.1,", "per_token_ms: -0.1,"), ["step_time.prefill.per_token_ms", "0"]),
        (STEP.replace("- {below_batch: 4, ", "- {"), ["every segment but the last needs 'below_batch'"]),
        (STEP.replace("  model: opt-13b\n", ""), ["step_time.model: missing"]),
        (ONE_TERM + STEP.split("\n", 2)[2], ["not both"]),
    ],
)
def test_a_bad_whole_step_profile_is_one_error(tmp_path: Path, text: str, words: list[str]) -> None:
    path = _write(tmp_path, text, "steps.yaml")
    with pytest.raises(EngineError) as err:
        load_engine(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    for w in words:
        assert w in message, message


def test_dse_serve_runs_a_whole_step_profile_and_refuses_what_it_cannot_price(capsys) -> None:
    base = ["serve", "--model", "opt-13b", "--hardware", "a100-80g-sxm", "--method", "dense",
            "--input-tokens", "512", "--output-tokens", "8", "--arrival-rate", "1", "--n-requests", "10",
            "--engine", "distserve-vllm-opt13b-a100"]
    assert main([*base, "--scheduler", "prefill-first"]) == 0
    assert "engine distserve-vllm-opt13b-a100 (whole steps)" in capsys.readouterr().out
    for extra, words in ((["--scheduler", "chunked"], "no mixed"),
                         (["--scheduler", "blocking", "--hardware", "h100-sxm"], "hardware 'h100-sxm'")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and "Traceback" not in err
