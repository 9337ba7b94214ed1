"""Quest and ArkVale on the real default model (smollm2-135m, CPU): `dse trace` runs each one and writes a
trace of its own demand (every step's recalls synchronous, fetched and evicted tokens recorded), and the
budget visibly moves its fidelity against dense attention. Slow: about a minute per run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dse.cli import main

COMMON = ["--context-tokens", "1024", "--page-size", "16", "--sink-tokens", "32", "--window-tokens", "32",
          "--device", "cpu"]


def _trace(tmp_path, name: str, args: list[str]) -> dict:
    out = tmp_path / name
    assert main(["trace", *args, *COMMON, "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("method", ["quest", "arkvale"])
def test_passkey_trace_records_synchronous_recalls_and_budget_moves_fidelity(tmp_path, method: str) -> None:
    from traces.reader import TraceReader

    passkey = _trace(tmp_path, "pk", ["--method", method, "--task", "passkey", "--samples", "1",
                                      "--budget-tokens", "256"])
    assert 0.0 <= passkey["accuracy"]["passkey_accuracy"] <= 1.0
    assert passkey["missed_pages_per_step"] > 0
    reader = TraceReader(tmp_path / "pk" / "trace")
    assert reader.meta.runtime["method"] == method
    missed = 0
    for rec in reader.steps():
        assert np.asarray(rec.corrected)[1:].all() and not np.asarray(rec.corrected)[0].any()
        assert (np.asarray(rec.attended_tokens)[1:] <= 256).all()
        for sel_layer, miss_layer in zip(rec.selected[1:], rec.missed[1:], strict=True):
            for sel, miss in zip(sel_layer, miss_layer, strict=True):
                assert set(miss) <= set(sel)
                missed += len(miss)
        if rec.fetched_tokens is not None:  # stored from trace format 2 on
            sizes = np.asarray([[len(m) * 16 for m in layer] for layer in rec.missed])
            np.testing.assert_array_equal(rec.fetched_tokens, sizes)
            assert (np.asarray(rec.evicted_tokens) <= np.asarray(rec.fetched_tokens)).all()
    assert missed > 0
    kl = {}
    for budget in (128, 512):
        s = _trace(tmp_path, f"f{budget}", ["--method", method, "--task", "fidelity", "--samples", "1",
                                           "--decode-tokens", "16", "--budget-tokens", str(budget)])
        kl[budget] = s["accuracy"]["mean_kl"]
    assert kl[512] < kl[128], kl  # a larger budget keeps more of dense attention
