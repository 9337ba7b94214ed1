"""A serving engine's request overhead and the fit of its overheads to a measured run: the overhead shifts a
lone request's TTFT by exactly itself and nothing else; absent, nothing changes; the fit recovers the
overheads of a run our own simulator generated with a known profile; a loaded run is flagged; `dse
engine-fit` writes a profile `dse serve` takes and refuses bad input with exit 2."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dse.cli import main
from sim import SimConfig
from sim.errors import SimInputError
from sim.serving import SchedulerSettings, StepCosts, simulate
from sim.serving.engine import EngineError, EngineProfile, EngineTerm, load_engine
from sim.serving.engine_fit import fit_engine, replay, saturation_warnings
from sim.serving.measured_run import COLUMNS, MeasuredRun, load_measured_run
from sim.serving.requests import Request

PROFILE = """name: with-overhead
description: a test engine
terms:
  schedule:
    points_ms: [[1, 1.0], [16, 2.5]]
    source: "test numbers"
"""
OVERHEAD = """request_overhead:
  ms: 30.0
  source: "test number"
  range: [0.5, 2.0]
"""


@pytest.fixture(scope="module")
def costs() -> StepCosts:
    cfg = SimConfig(
        model="opt-13b",
        hardware="a100-80g-sxm",
        method="dense",
        input_tokens=900,
        output_tokens=120,
        implementation="ideal",
    )
    return StepCosts(cfg, None)


def _with(costs: StepCosts, profile: EngineProfile) -> StepCosts:
    return StepCosts(costs.cfg, None, engine=profile)


def _write(tmp_path: Path, text: str, name: str = "with-overhead.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_profile_file_carries_the_request_overhead(tmp_path: Path) -> None:
    plain = load_engine(_write(tmp_path, PROFILE))
    assert plain.request_overhead_ms == 0.0 and plain.request_overhead_s == 0.0
    engine = load_engine(_write(tmp_path, PROFILE + OVERHEAD))
    assert engine.request_overhead_ms == 30.0 and engine.request_overhead_source == "test number"
    assert engine.at_end("high").request_overhead_ms == 60.0
    assert engine.at_end("low").request_overhead_ms == 15.0
    assert "30 ms per request before it is queued" in engine.label()
    assert all(load_engine(name).request_overhead_ms == 0.0 for name in ("none", "sarathi-serve-a100"))


@pytest.mark.parametrize(
    "text, words",
    [
        (
            OVERHEAD.replace("  source:", "  mean_ms: 30.0\n  source:"),
            ["request_overhead", "'mean_ms'", "valid keys: ms"],
        ),
        (OVERHEAD.replace("30.0", "-1.0"), ["request_overhead.ms", "greater than or equal to 0"]),
        (
            OVERHEAD.replace('"test number"', '"estimate: a guess"').replace("  range: [0.5, 2.0]\n", ""),
            ["estimate needs 'range"],
        ),
    ],
)
def test_bad_request_overhead_is_one_error_naming_the_key(
    tmp_path: Path, text: str, words: list[str]
) -> None:
    path = _write(tmp_path, PROFILE + text)
    with pytest.raises(EngineError) as err:
        load_engine(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    for w in words:
        assert w in message


@pytest.mark.parametrize("scheduler", ["blocking", "prefill-first", "chunked"])
def test_overhead_shifts_ttft_by_exactly_itself_at_low_load(costs: StepCosts, scheduler: str) -> None:
    """Requests 5 s apart never meet: each TTFT grows by the overhead, TPOT and every step stay the same."""
    reqs = [Request(5.0 * i, p, o) for i, (p, o) in enumerate([(512, 16), (64, 40), (900, 8), (300, 100)])]
    base = load_engine("sarathi-serve-a100")
    a = simulate(reqs, _with(costs, base), scheduler)
    b = simulate(reqs, _with(costs, replace(base, request_overhead_ms=30.0)), scheduler)
    assert b.ttft_s - a.ttft_s == pytest.approx(np.full(len(reqs), 0.030), abs=1e-12)
    assert b.tpot_s == pytest.approx(a.tpot_s, rel=1e-9)  # the same steps, 30 ms later (float rounding)
    assert np.sort(b.step_s) == pytest.approx(np.sort(a.step_s), rel=1e-9)
    assert b.prefill_queue_s - a.prefill_queue_s == pytest.approx(np.full(len(reqs), 0.030), abs=1e-12)


def test_no_overhead_changes_nothing_under_load(costs: StepCosts, tmp_path: Path) -> None:
    """A profile without the key and one with 0 ms give the same run as before, queueing included; a lone
    request's TTFT is still its prefill alone."""
    reqs = [Request(0.05 * i, 200 + 37 * i, 20 + 3 * i) for i in range(30)]  # 20 req/s: they queue
    plain = load_engine(_write(tmp_path, PROFILE))
    zero = load_engine(_write(tmp_path, PROFILE + OVERHEAD.replace("30.0", "0.0"), "zero.yaml"))
    a, b = (
        simulate(reqs, _with(costs, plain), "prefill-first"),
        simulate(reqs, _with(costs, zero), "prefill-first"),
    )
    assert np.array_equal(a.ttft_s, b.ttft_s) and np.array_equal(a.tpot_s, b.tpot_s)
    assert np.nanmax(a.prefill_queue_s) > 0.05  # it is a loaded run
    lone = simulate([Request(0.0, 512, 4)], costs)
    assert lone.ttft_s[0] == pytest.approx(costs.prefill_s(512))


def _synthetic(costs: StepCosts, truth: EngineProfile, gap_s: float, n: int = 30) -> MeasuredRun:
    """A run our own simulator serves with `truth`: its TTFT and TPOT are the 'measurement'."""
    rng = np.random.default_rng(0)
    prompts, outs = rng.choice([64, 300, 900], n), rng.choice([8, 40, 120], n)
    issue = np.cumsum(rng.exponential(gap_s, n))
    issue -= issue[0]
    blank = MeasuredRun("synthetic", prompts, outs, issue, np.ones(n), np.ones(n))
    ours = replay(blank, costs, truth, "prefill-first", SchedulerSettings())
    return replace(blank, ttft_ms=ours["ttft_ms"], tpot_ms=ours["tpot_ms"])


def test_fit_recovers_known_overheads_from_a_synthetic_run(costs: StepCosts) -> None:
    a, b, r = 5.0, 0.3, 30.0
    truth = EngineProfile(
        "truth", "t", (EngineTerm("server", (1, 64), (a + b, a + 64 * b), "s"),), request_overhead_ms=r
    )
    run = _synthetic(costs, truth, gap_s=0.5)
    fit = fit_engine(run, costs, load_engine("none"), "prefill-first", SchedulerSettings(), generations=30)
    assert fit.server_fixed_ms == pytest.approx(a, rel=0.05)
    assert fit.server_per_sequence_ms == pytest.approx(b, rel=0.1)
    assert fit.request_overhead_ms == pytest.approx(r, rel=0.05)
    assert fit.fitted["ttft_abs_log_ratio_median"] < 0.01 and fit.fitted["tpot_abs_log_ratio_median"] < 0.01
    assert fit.base["ttft_ratio_median"] < 0.9  # without the overheads ours was short
    assert fit.warnings == ()
    # the written profile loads and reproduces the fit
    assert [t.name for t in fit.profile.terms] == ["server"]
    assert fit.profile.iteration_s(10) == pytest.approx((fit.server_fixed_ms + 10 * b) / 1e3, rel=0.1)


def test_a_loaded_run_is_flagged(costs: StepCosts) -> None:
    none = load_engine("none")
    run = _synthetic(costs, none, gap_s=0.02, n=60)  # 50 req/s on one A100: a queue builds up
    ours = replay(run, costs, none, "prefill-first", SchedulerSettings())
    warnings = saturation_warnings(run, ours, costs, none)
    assert warnings and all("low-load run" in w for w in warnings)
    calm = _synthetic(costs, none, gap_s=2.0, n=20)
    calm_ours = replay(calm, costs, none, "prefill-first", SchedulerSettings())
    assert saturation_warnings(calm, calm_ours, costs, none) == []


def test_fit_refuses_a_whole_step_base_and_a_fitted_base(costs: StepCosts) -> None:
    run = _synthetic(costs, load_engine("none"), gap_s=2.0, n=10)
    with pytest.raises(SimInputError, match="whole-step"):
        fit_engine(run, costs, load_engine("distserve-vllm-opt13b-a100"))
    fitted = EngineProfile("f", "f", (EngineTerm("server", (1,), (1.0,), "s"),))
    with pytest.raises(SimInputError, match="already has a 'server' term"):
        fit_engine(run, costs, fitted)


def _csv(path: Path, rows: list[dict[str, object]]) -> Path:
    cols = list(rows[0])
    path.write_text(",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in rows))
    return path


def _rows(measured: MeasuredRun, **extra: object) -> list[dict[str, object]]:
    return [
        {
            **extra,
            "prompt_len": int(p),
            "output_len": int(o),
            "issue_time_s": float(t),
            "ttft_ms": float(f),
            "tpot_ms": float(g),
        }
        for p, o, t, f, g in zip(
            measured.prompt_len,
            measured.output_len,
            measured.issue_time_s,
            measured.ttft_ms,
            measured.tpot_ms,
            strict=True,
        )
    ]


def test_measured_run_file_picks_one_run(costs: StepCosts, tmp_path: Path) -> None:
    run = _synthetic(costs, load_engine("none"), gap_s=2.0, n=8)
    path = _csv(
        tmp_path / "runs.csv",
        _rows(run, run="a") + _rows(replace(run, issue_time_s=run.issue_time_s + 7), run="b"),
    )
    b = load_measured_run(path, "b")
    assert b.name == "b" and len(b.prompt_len) == 8 and b.issue_time_s[0] == 0  # counted from its first issue
    assert np.allclose(b.issue_time_s, run.issue_time_s) and np.array_equal(b.prompt_len, run.prompt_len)
    assert len(load_measured_run(path, where={"run": "a"}).prompt_len) == 8
    with pytest.raises(SimInputError, match="holds 2 runs"):
        load_measured_run(path)
    assert set(COLUMNS) <= set(_rows(run)[0])


def test_dse_engine_fit_writes_a_profile_dse_serve_takes(costs: StepCosts, tmp_path: Path, capsys) -> None:
    truth = EngineProfile(
        "t", "t", (EngineTerm("server", (1, 64), (4.0, 4.0), "s"),), request_overhead_ms=20.0
    )
    run = _synthetic(costs, truth, gap_s=1.0, n=12)
    measured = _csv(tmp_path / "run.csv", _rows(run, rate=1))
    out = tmp_path / "fitted.yaml"
    args = [
        "engine-fit",
        "--measured",
        str(measured),
        "--where",
        "rate=1",
        "--model",
        "opt-13b",
        "--hardware",
        "a100-80g-sxm",
        "--implementation",
        "ideal",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "request overhead" in printed and f"dse serve --engine {out}" in printed
    engine = load_engine(out)
    assert engine.request_overhead_ms == pytest.approx(20.0, rel=0.1) and "dse engine-fit" in out.read_text()
    assert f"run rate=1, {len(run.prompt_len)} requests" in engine.request_overhead_source
    serve = [
        "serve",
        "--model",
        "opt-13b",
        "--hardware",
        "a100-80g-sxm",
        "--method",
        "dense",
        "--input-tokens",
        "512",
        "--output-tokens",
        "8",
        "--arrival-rate",
        "1",
        "--n-requests",
        "10",
        "--scheduler",
        "prefill-first",
        "--engine",
        str(out),
    ]
    assert main(serve) == 0
    assert "fitted.yaml" not in capsys.readouterr().err


def _fit_args(measured: Path, tmp_path: Path, *extra: str) -> list[str]:
    """`dse engine-fit` on `measured` for OPT-13B on the A100 80GB SXM, writing into tmp_path."""
    return ["engine-fit", "--measured", str(measured), "--model", "opt-13b", "--hardware", "a100-80g-sxm",
            "--out", str(tmp_path / "o.yaml"), *extra]


@pytest.mark.parametrize(
    "change, words",
    [
        (
            lambda p: p.write_text("prompt_len,output_len,issue_time_s,ttft_ms\n1,2,0,5\n"),
            "missing column(s) ['tpot_ms']",
        ),
        (
            lambda p: p.write_text(",".join(COLUMNS) + "\n10,x,0,5,3\n"),
            "line 2: output_len must be an integer",
        ),
        (lambda p: p.write_text(",".join(COLUMNS) + "\n"), "it holds no row"),
    ],
)
def test_dse_engine_fit_bad_file_exits_2(tmp_path: Path, capsys, change, words: str) -> None:
    path = tmp_path / "bad.csv"
    change(path)
    assert main(_fit_args(path, tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and "Traceback" not in err and str(path) in err


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--where", "rate=9"], "no row"),
        (["--where", "gpu=a100"], "has no column 'gpu'"),
        (["--where", "rate"], "expected COLUMN=VALUE"),
        (["--run", "a"], "has no `run` column"),
        (["--base-engine", "distserve-vllm-opt13b-a100"], "whole-step"),
        (["--base-engine", "no-such-engine"], "unknown engine profile"),
    ],
)
def test_dse_engine_fit_bad_options_exit_2(tmp_path: Path, capsys, extra: list[str], words: str) -> None:
    path = _csv(
        tmp_path / "run.csv",
        [
            {
                "rate": 1,
                "prompt_len": 10,
                "output_len": 5,
                "issue_time_s": 0.0,
                "ttft_ms": 40.0,
                "tpot_ms": 20.0,
            }
        ],
    )
    assert main(_fit_args(path, tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and "Traceback" not in err
