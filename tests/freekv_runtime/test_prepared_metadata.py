"""What a policy's `prepare` found reaches the trace (`KVPolicy.prepared_metadata`, recorded by `run_trace` as
meta.extra["policy_probe"], traces/probe.py): RazorAttention's retrieval heads on a real run of the default
model's architecture (smollm2-135m, 2 layers, seeded random weights: fast), the same heads a policy
prepared on that model finds; InfiniGen's calibration summary; nothing for policies that probe nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_policy_conformance import SHAPE, tiny_model

from dse.commands.trace import _print_summary
from freekv_runtime.api import TraceRequest, run_trace
from freekv_runtime.config import RuntimeConfig
from freekv_runtime.model import ModelAdapter
from freekv_runtime.policies import make_policy
from freekv_runtime.random_weights import load_random_model
from freekv_runtime.tasks import TaskSpec
from sim import demand_from_trace
from traces import open_trace
from traces.probe import PROBE_KEY, retrieval_heads_of

RAZOR = RuntimeConfig(method="razorattention", page_size=16, budget_tokens=96, sink_tokens=16,
                      window_tokens=32)


def test_razorattention_trace_records_its_probe(tmp_path, capsys) -> None:
    outcome = run_trace(TraceRequest(
        model="smollm2-135m", task=TaskSpec("passkey", context_tokens=320, n_samples=1, decode_tokens=4),
        runtime=RAZOR, out_dir=tmp_path / "run", device="cpu", random_weights=0, layers=2, random_init="cpu"))
    meta = open_trace(outcome.trace_dir).meta
    probe = meta.extra[PROBE_KEY]
    # the same model, prepared by a fresh policy: the probe is deterministic, so the heads must agree
    loaded = load_random_model("smollm2-135m", 0, "cpu", torch.float32, 2, "cpu")
    policy = make_policy(RAZOR)
    policy.prepare(ModelAdapter(loaded.model))
    heads = policy.retrieval_heads
    assert heads is not None and heads.shape == (2, 3)
    np.testing.assert_array_equal(retrieval_heads_of(meta), heads)
    assert probe["retrieval_share"] == pytest.approx(heads.mean())
    counts = (probe["retrieval_kv_heads"], probe["kv_heads"], probe["probe_tokens"])
    assert counts == (int(heads.sum()), 6, 1024)
    assert meta.extra["random_weights"] == 0  # the other extra entries are kept
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["policy_probe"] == probe
    assert demand_from_trace(outcome.trace_dir).retrieval_share == pytest.approx(heads.mean())
    _print_summary(summary)  # `dse trace`'s table
    share = f"{heads.mean():.3f}"
    printed = " ".join(capsys.readouterr().out.split())
    assert f"retrieval KV heads (probe) │ {int(heads.sum())} of 6 ({share})" in printed


def test_infinigen_publishes_its_calibration() -> None:
    config = RuntimeConfig(method="infinigen", page_size=4, budget_tokens=32, sink_tokens=4, window_tokens=4,
                           dense_layers=(0,), knobs={"partial_ratio": 0.25, "calib_tokens": 64})
    policy = make_policy(config)
    assert policy.prepared_metadata() == {}  # nothing before prepare
    policy.prepare(tiny_model())
    probe = policy.prepared_metadata()
    json.dumps(probe, allow_nan=False)
    cols = int(SHAPE.head_dim * 0.25)  # the query's and the key's top columns, their union
    assert {k: probe[k] for k in ("calibration_tokens", "partial_ratio", "skewed_layers", "head_dim")} == {
        "calibration_tokens": 64, "partial_ratio": 0.25, "skewed_layers": SHAPE.n_layers - 2,  # 0, 1 dense
        "head_dim": SHAPE.head_dim}
    assert cols <= probe["partial_columns_mean"] <= 2 * cols


@pytest.mark.parametrize("method", ["full", "freekv", "quest", "streamingllm"])
def test_policies_without_a_probe_publish_nothing(method: str) -> None:
    policy = make_policy(RuntimeConfig(method=method))
    policy.prepare(tiny_model())
    assert policy.prepared_metadata() == {}
