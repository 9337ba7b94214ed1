"""What a policy's prepare found, in the trace metadata (traces/probe.py, meta.extra["policy_probe"]):
RazorAttention's retrieval heads round-trip through meta.json; traces without one (the pinned v1 and v2
assets) read as before and report none; a malformed probe is a TraceError naming the field."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from trace_factory import make_meta, random_run, tiny_model, write_trace

from traces import TraceError, open_trace
from traces.probe import PROBE_KEY, policy_probe, retrieval_heads_of, retrieval_probe
from traces.stats import trace_summary

ASSETS = Path(__file__).resolve().parent / "assets"
HEADS = np.array([[False, False], [True, False], [True, True]])  # (L=3, H=2)


def _trace(path: Path, probe: object) -> Path:
    model = tiny_model(3, 2)
    meta = make_meta(model)
    meta = replace(meta, runtime={**meta.runtime, "method": "razorattention"}, extra={PROBE_KEY: probe})
    return write_trace(path, meta, random_run(0, model, n_sequences=1, n_steps=2))


def test_retrieval_probe_round_trips_through_the_trace(tmp_path: Path) -> None:
    probe = retrieval_probe(HEADS, probe_tokens=1024)
    assert probe == {"retrieval_heads": [[], [0], [0, 1]], "retrieval_kv_heads": 3, "kv_heads": 6,
                     "retrieval_share": 0.5, "probe_tokens": 1024}
    reader = open_trace(_trace(tmp_path / "t", probe))
    assert policy_probe(reader.meta) == probe
    np.testing.assert_array_equal(retrieval_heads_of(reader.meta), HEADS)
    assert trace_summary(reader)["policy_probe"] == probe


@pytest.mark.parametrize("asset", ["v1_small", "v2_small"])
def test_pinned_assets_have_no_probe(asset: str) -> None:
    reader = open_trace(ASSETS / asset)
    assert policy_probe(reader.meta) == {} and retrieval_heads_of(reader.meta) is None
    assert trace_summary(reader)["policy_probe"] is None


@pytest.mark.parametrize(("heads", "match"), [
    ([[0], [1]], r"retrieval_heads must be a list of 3 lists .* of length 2"),
    ("all", r"retrieval_heads must be a list of 3 lists .*got str"),
    ([[], [2], []], r"retrieval_heads\[1\] must be a list of KV head indices 0-1, got \[2\]"),
    ([[], [True], []], r"retrieval_heads\[1\] must be a list of KV head indices"),
    ([[], 0, []], r"retrieval_heads\[1\] must be a list"),
])
def test_malformed_probe_names_the_field(tmp_path: Path, heads: object, match: str) -> None:
    reader = open_trace(_trace(tmp_path / "t", {"retrieval_heads": heads}))
    with pytest.raises(TraceError, match=r"t: meta\.extra\.policy_probe\." + match):
        retrieval_heads_of(reader.meta, str(reader.path))
