"""ShadowKV on the real default model (smollm2-135m, CPU): `dse trace` runs it on passkey and fidelity and
writes a trace of its own demand (selected and fetched chunks; the policy also reports fetched value tokens
and re-factorisations, which the trace keeps once its format carries them), and the budget and the rank
visibly move its fidelity against dense attention. Slow: 25 minutes on the loaded 2-core build machine
(load 10-16; passed there once)."""

from __future__ import annotations

import json

import pytest

from dse.cli import main

COMMON = ["--method", "shadowkv", "--context-tokens", "1024", "--page-size", "16", "--sink-tokens", "32",
          "--window-tokens", "32", "--device", "cpu"]


def _trace(tmp_path, name: str, args: list[str]) -> dict:
    out = tmp_path / name
    assert main(["trace", *args, *COMMON, "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())


def _fidelity(tmp_path, name: str, budget: int, *options: str) -> dict:
    return _trace(tmp_path, name, ["--task", "fidelity", "--samples", "1", "--decode-tokens", "40",
                                   "--budget-tokens", str(budget), *options])


@pytest.mark.slow
def test_passkey_runs_and_budget_and_rank_move_fidelity(tmp_path) -> None:
    passkey = _trace(tmp_path, "pk", ["--task", "passkey", "--samples", "2", "--budget-tokens", "256"])
    assert 0.0 <= passkey["accuracy"]["passkey_accuracy"] <= 1.0
    assert passkey["missed_pages_per_step"] > 0  # selected chunks' values were fetched
    small, large = _fidelity(tmp_path, "f128", 128), _fidelity(tmp_path, "f512", 512)
    for s, budget in ((small, 128), (large, 512)):
        assert s["attended_tokens_per_sparse_head_step"] <= budget
    assert large["accuracy"]["mean_kl"] < small["accuracy"]["mean_kl"]  # more budget, closer to dense
    low_rank = _fidelity(tmp_path, "f512r4", 512, "--option", "rank=4")
    assert low_rank["accuracy"]["mean_kl"] > large["accuracy"]["mean_kl"]  # rank 4 of 192: worse keys
