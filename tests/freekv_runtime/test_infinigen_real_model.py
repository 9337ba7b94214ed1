"""InfiniGen on the real default model (smollm2-135m, CPU): `dse trace` runs it on passkey and fidelity,
writes a trace of its own demand (tokens prefetched per step), and the budget moves its fidelity against
dense attention. Slow: a few minutes on a busy 2-core machine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dse.cli import main
from traces.reader import open_trace

COMMON = ["--context-tokens", "1024", "--page-size", "16", "--sink-tokens", "32", "--window-tokens", "32",
          "--device", "cpu", "--method", "infinigen"]


def _trace(tmp_path, name: str, args: list[str]) -> dict:
    out = tmp_path / name
    assert main(["trace", *args, *COMMON, "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_passkey_runs_writes_its_prefetches_and_budget_moves_fidelity(tmp_path) -> None:
    passkey = _trace(tmp_path, "pk", ["--task", "passkey", "--samples", "1", "--budget-tokens", "256"])
    assert 0.0 <= passkey["accuracy"]["passkey_accuracy"] <= 1.0
    trace = open_trace(tmp_path / "pk" / "trace")
    steps = list(trace.steps())  # fetched_tokens (L, H) per step
    assert steps
    if trace.meta.format_version >= 2:  # format 1 (before the format bump) has no field for them
        fetched = np.concatenate([step.fetched_tokens[1:].ravel() for step in steps])
        assert 0 < fetched.max() <= 256 - 64  # prefetched tokens, capped by budget - sink - window
    kl = {}
    for budget in (128, 512):
        s = _trace(tmp_path, f"f{budget}", ["--task", "fidelity", "--samples", "1", "--decode-tokens", "8",
                                           "--budget-tokens", str(budget)])
        kl[budget] = s["accuracy"]["mean_kl"]
        assert s["attended_tokens_per_sparse_head_step"] <= budget
    assert kl[512] < kl[128], kl  # a larger budget keeps more of dense attention
