"""Knob scaling for a stand-in measurement, --measure parsing, and each method's own demand preset."""

from __future__ import annotations

import pytest

from dse.accuracy.measure import MeasureSpec, scale_knobs
from dse.errors import DseError
from sim.demand_presets import get_preset, own_preset
from sim.replay.own_demand import own_source
from traces.retrieval_knobs import convention_violation


def test_scaled_knobs_keep_the_budget_share_and_the_convention() -> None:
    planned = {"budget_tokens": 2048, "page_size": 32, "sink_tokens": 512, "window_tokens": 512}
    for context in (1024, 2048, 4096, 16384):
        k = scale_knobs(planned, 66560, context)
        bad = convention_violation(k["page_size"], k["budget_tokens"], k["sink_tokens"], k["window_tokens"])
        assert bad is None
        assert k["budget_tokens"] <= max(2048 * context / 66560 * 1.5, 3 * 32)
    assert scale_knobs(planned, 2048, 4096) == planned  # never scaled up


def test_measure_spec_parses_and_refuses() -> None:
    assert MeasureSpec.parse("passkey:40:1024") == MeasureSpec("passkey", 40, 1024)
    assert MeasureSpec.parse("niah_single").samples == MeasureSpec.samples
    for bad in ("", "passkey:x", "passkey:1", "a:2:3:4"):
        with pytest.raises(DseError, match="--measure"):
            MeasureSpec.parse(bad)


def test_each_method_owns_its_preset() -> None:
    assert own_preset("freekv", 0.8) == "preset:freekv-tau0.8"
    assert own_preset("freekv") == "preset:freekv-tau0.9"
    assert get_preset(own_preset("shadowkv")).method == "shadowkv"
    assert own_preset("dense") is None
    assert own_source("shadowkv").spec == "preset:shadowkv-paper"
    assert own_source("dense").empty and own_source("snapkv").empty


def test_another_methods_preset_is_labelled(tmp_path) -> None:
    from sim.replay import DemandSource, Question, answer

    ans = answer(Question(model="llama-3.1-8b", hardware=("h100-sxm",), methods=("shadowkv", "freekv"),
                          demand=DemandSource(spec="preset:freekv-tau0.9"), input_tokens=4096,
                          output_tokens=8))
    labels = {c.method: c.transplant for c in ans.cells if c.demand_end == "central"}
    assert "preset:freekv-tau0.9 (freekv's) priced with shadowkv" in labels["shadowkv"]
    assert labels["freekv"] is None


def test_a_cached_measurement_is_reused_only_by_the_same_runtime_code(tmp_path, monkeypatch) -> None:
    """The cache key covers the runtime, kernels and catalogue sources: a changed policy default or task
    scoring (code, not knobs) measures again instead of reusing a run of other code."""
    from dse.accuracy import measure

    spec = MeasureSpec("passkey", 12, 1024)
    key = measure._run_key("smollm2-135m", spec, "quest", {"budget_tokens": 96})
    root = tmp_path / "repo"
    for package in ("freekv_runtime", "kernels", "traces/catalogue"):
        (root / package).mkdir(parents=True)
        (root / package / "a.py").write_text("X = 1\n")
    fake = root / "dse" / "accuracy" / "measure.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    monkeypatch.setattr(measure, "__file__", str(fake))
    measure.runtime_fingerprint.cache_clear()
    before = measure.runtime_fingerprint()
    (root / "freekv_runtime" / "a.py").write_text("X = 2\n")
    measure.runtime_fingerprint.cache_clear()
    assert measure.runtime_fingerprint() != before
    assert measure._run_key("smollm2-135m", spec, "quest", {"budget_tokens": 96}) != key
    measure.runtime_fingerprint.cache_clear()
