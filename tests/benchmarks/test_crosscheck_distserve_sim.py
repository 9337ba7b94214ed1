"""The DistServe simulator cross-check script: input errors (a run needs a DistServe checkout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.crosscheck_distserve_sim import FIG1_ROWS, main


def test_fig1_rows_are_the_distserve_figure1_rows() -> None:
    assert FIG1_ROWS == ("distserve-fig1-vllm", "distserve-fig1-prefill-only", "distserve-fig1-disaggregated")


def test_missing_checkout_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--distserve", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--distserve" in err and "simulate_dist.py" in err


def test_unknown_row_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--distserve", str(tmp_path), "--rows", "sarathi-5.2-mistral-strict"]) == 2
    assert "not a DistServe Figure 1 row" in capsys.readouterr().err


def test_bad_request_count_exits_2(tmp_path: Path) -> None:
    assert main(["--distserve", str(tmp_path), "--requests", "0"]) == 2


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("DISTSERVE_CHECKOUT"), reason="set DISTSERVE_CHECKOUT to a "
                    "LLMServe/DistServe checkout (82831f1) with pandas installed")
def test_prefill_only_matches_distserve_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--distserve", os.environ["DISTSERVE_CHECKOUT"], "--rows", "distserve-fig1-prefill-only",
                 "--requests", "400"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("distserve-fig1-prefill-only"))
    ours_over_theirs = float(line.split()[4])
    assert 0.8 <= ours_over_theirs <= 1.25
