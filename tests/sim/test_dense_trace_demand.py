"""A trace of dense attention holds no recall demand (sim/demand.py, sim/replay/rules.py): it loads into a
Demand that says so; demand-free models replay it, the others are refused in one paragraph, also when a
transplant is asked for; every consumer (engine, knob resolution, calibration) treats it the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sim_trace_factory import make_trace

from sim import SimConfig, SimInputError, demand_from_trace, run_simulation, synthetic_demand
from sim.calibrate import calibrate
from sim.demand import DENSE_POLICY
from sim.methods import available_methods, get_method, method_class
from sim.replay import resolve_knobs
from sim.replay.rules import demand_free_methods, replay_refusal, replayable_methods
from traces import open_trace
from traces.models import get_model

MODEL = "smollm2-135m"
ALL_LAYERS = tuple(range(get_model(MODEL).n_layers))


def _cfg(method: str, **kw) -> SimConfig:
    base = dict(model=MODEL, hardware="a100-40g-pcie4", method=method, batch_size=2, input_tokens=1200,
                output_tokens=16, page_size=32, budget_tokens=512, sink_tokens=64, window_tokens=64)
    return SimConfig(**{**base, **kw})


@pytest.fixture()
def dense_trace(tmp_path: Path) -> Path:
    return make_trace(tmp_path / "full", method="dense", dense_layers=ALL_LAYERS, n_steps=12, n_sequences=2)


def test_dense_trace_loads_as_a_demand_without_selection(dense_trace: Path) -> None:
    d = demand_from_trace(dense_trace)
    assert d.dense_attention and d.method == DENSE_POLICY == "dense"
    assert d.n_steps == (12, 12) and d.skipped_steps == (0, 0)  # every recorded step, none left out
    for corr, ratio, sim, evict in zip(d.corrected, d.fetch_ratio, d.similarity, d.evict_ratio, strict=True):
        assert corr.shape == (12, 30, 3) and not corr.any() and not ratio.any() and not evict.any()
        assert np.isnan(sim).all()
    # onto another model: the target's shape, labelled as a model transplant as any trace is
    moved = demand_from_trace(dense_trace, target_model="llama-3.1-8b")
    assert moved.corrected[0].shape == (12, 32, 8) and moved.mapped_from == MODEL
    assert moved.dense_attention
    # any policy that kept every layer dense selected nothing either: the same demand, its policy kept
    all_dense = demand_from_trace(make_trace(dense_trace.parent / "fk", dense_layers=ALL_LAYERS))
    assert all_dense.dense_attention and all_dense.source_runtime["method"] == "freekv"
    # a trace with compressed layers, and synthetic demand, are not dense attention
    assert not demand_from_trace(make_trace(dense_trace.parent / "sparse")).dense_attention
    assert not synthetic_demand("correction=0.5,hit=0.8,steps=8", model=MODEL, seed=0).dense_attention


def test_no_model_prices_dense_attention_demand(dense_trace: Path) -> None:
    d = demand_from_trace(dense_trace)
    free = demand_free_methods()
    assert {"dense", "full-offload", "quest", "h2o"} <= set(free) and "freekv" not in free
    for name in available_methods():
        method = get_method(_cfg(name))
        assert not method.uses_demand(d.method) and not method.uses_demand(d.method, transplant=True)
    kept, refused = replayable_methods(available_methods(), d, transplant=True)
    assert kept == free and refused == [n for n in available_methods() if method_class(n).needs_demand]
    assert replay_refusal(free, d, transplant=True) is None


@pytest.mark.parametrize("transplant", [False, True])
def test_demand_needing_models_are_refused_even_with_a_transplant(
    dense_trace: Path, transplant: bool
) -> None:
    d = demand_from_trace(dense_trace)
    with pytest.raises(SimInputError) as err:
        run_simulation(_cfg("freekv", transplant_method=transplant), d)
    text = str(err.value)
    assert text.startswith("--method freekv: the trace ") and "is of dense attention" in text
    assert "--transplant-method does not apply" in text and "\n" not in text
    many = replay_refusal(["dense", "freekv", "arkvale"], d, transplant)
    assert many is not None and many.startswith("--method freekv,arkvale: ") and "these models" in many


def test_demand_free_models_replay_it_as_without_a_trace(dense_trace: Path) -> None:
    d = demand_from_trace(dense_trace)
    for name in ("dense", "quest", "infinigen"):  # quest, infinigen: own demand optional, not this one
        cfg = _cfg(name, transplant_method=True)
        with_trace, without = run_simulation(cfg, d), run_simulation(cfg, None)
        np.testing.assert_array_equal(with_trace.step_latency_s, without.step_latency_s)
        assert with_trace.transplanted_method is None and with_trace.demand_label.startswith("none")
        assert any("dense attention (method dense)" in n for n in with_trace.notes)


def test_dense_traces_every_layer_is_not_a_knob(dense_trace: Path) -> None:
    """The dense policy records every layer as dense; replaying it with e.g. quest keeps the default."""
    runtime = open_trace(dense_trace).meta.runtime
    assert runtime["dense_layers"] == list(ALL_LAYERS)
    knobs = resolve_knobs({}, runtime, len(ALL_LAYERS))
    assert knobs.values["dense_layers"] == (0,) and knobs.source["dense_layers"] == "default"
    assert knobs.values["budget_tokens"] == 512 and knobs.source["budget_tokens"] == "trace"


def test_calibration_replays_a_dense_trace_with_the_dense_model(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t", method="dense", dense_layers=ALL_LAYERS, timings=True,
                       clock="cuda_event")
    cal = calibrate(trace, "a100-40g-pcie4")
    assert cal.n_train + cal.n_test == 24 and "step_total" in cal.keys
