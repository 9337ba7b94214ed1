"""RazorAttention on the real default model (smollm2-135m, CPU): `dse trace` probes the retrieval heads and
runs passkey and fidelity (the trace records the probe's retrieval heads); the budget and the compensation
knob visibly move fidelity against dense attention. Slow: about a minute per run."""

from __future__ import annotations

import json

import pytest

from dse.cli import main
from traces import open_trace

COMMON = ["--method", "razorattention", "--context-tokens", "1024", "--page-size", "16",
          "--sink-tokens", "32", "--window-tokens", "32", "--device", "cpu"]
FIDELITY = ["--task", "fidelity", "--samples", "1", "--decode-tokens", "16"]


def _trace(tmp_path, name: str, args: list[str]) -> dict:
    out = tmp_path / name
    assert main(["trace", *args, *COMMON, "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_passkey_runs_and_budget_and_compensation_move_fidelity(tmp_path) -> None:
    passkey = _trace(tmp_path, "pk", ["--task", "passkey", "--samples", "2", "--budget-tokens", "256"])
    assert 0.0 <= passkey["accuracy"]["passkey_accuracy"] <= 1.0
    assert passkey["missed_pages_per_step"] == 0  # nothing recalled over the host link
    # the probe's result is in the trace (meta.extra["policy_probe"], docs/methods.md: 23 of 90 KV heads)
    probe = open_trace(tmp_path / "pk" / "trace").meta.extra["policy_probe"]
    assert (probe["retrieval_kv_heads"], probe["kv_heads"]) == (23, 90) and passkey["policy_probe"] == probe
    kl = {}
    for budget in (128, 512):
        s = _trace(tmp_path, f"f{budget}", [*FIDELITY, "--budget-tokens", str(budget)])
        kl[budget] = s["accuracy"]["mean_kl"]
        # retrieval heads attend the whole context: the mean lies between the budget and the context
        assert budget < s["attended_tokens_per_sparse_head_step"] < 1024 + 16
    assert kl[512] < kl[128], kl  # a larger budget keeps more of dense attention
    plain = _trace(tmp_path, "f128none",
                   [*FIDELITY, "--budget-tokens", "128", "--option", "compensation=none"])
    assert plain["accuracy"]["mean_kl"] != kl[128]  # the compensation token changes the outputs
