"""Demand from traces (own model and mapped onto another), synthetic demand, batch aggregation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sim_trace_factory import make_trace

from sim import SimConfig, SimInputError, demand_from_trace, run_simulation, synthetic_demand
from sim.demand import batch_demand, head_map, layer_map
from traces import open_trace
from traces.models import get_model


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory) -> Path:
    return make_trace(tmp_path_factory.mktemp("t") / "trace", n_steps=20, n_sequences=2, seed=1)


def test_layer_and_head_maps() -> None:
    assert layer_map(32, 30).tolist()[:3] == [0, 1, 2] and layer_map(32, 30)[-1] == 29
    assert layer_map(4, 30, {0}).tolist() == [1, 10, 19, 29]  # source layer 0 was dense: nearest used
    assert head_map(8, 3).tolist() == [0, 0, 0, 1, 1, 1, 2, 2]


def test_trace_demand_matches_records(trace_dir: Path) -> None:
    d = demand_from_trace(trace_dir)
    assert d.mapped_from is None and d.model == "smollm2-135m"
    assert d.n_steps == (20, 20)
    reader = open_trace(trace_dir)
    first = next(iter(reader.steps()))
    np.testing.assert_array_equal(d.corrected[0][0][1:], first.corrected[1:])
    # layer 0 was dense in the trace: a config that compresses it takes the nearest traced layer (1)
    np.testing.assert_array_equal(d.corrected[0][0][0], first.corrected[1])
    sel, mis = first.selected_counts()[1:], first.missed_counts()[1:]
    np.testing.assert_allclose(d.fetch_ratio[0][0][1:], mis / sel, rtol=1e-6)


def test_a_trace_mapped_onto_another_model_is_labelled_everywhere(trace_dir: Path) -> None:
    d = demand_from_trace(trace_dir, target_model="llama-3.1-8b")
    assert d.mapped_from == "smollm2-135m" and d.model == "llama-3.1-8b"
    assert d.corrected[0].shape == (20, 32, 8)
    cfg = SimConfig(
        model="llama-3.1-8b",
        hardware="a100-40g-pcie4",
        batch_size=2,
        input_tokens=1200,
        output_tokens=50,
        budget_tokens=1024,
        sink_tokens=128,
        window_tokens=128,
    )
    res = run_simulation(cfg, d).to_dict()
    assert res["mapped_from"] == "smollm2-135m"
    assert "mapped from smollm2-135m" in res["demand"]
    assert any("mapped from smollm2-135m's layers and heads" in n for n in res["notes"])


def test_steps_cycle_and_pages_rescale(trace_dir: Path) -> None:
    d = demand_from_trace(trace_dir)
    model = get_model("smollm2-135m")
    cfg = SimConfig(
        model="smollm2-135m",
        hardware="a100-40g-pcie4",
        batch_size=1,
        input_tokens=5000,
        output_tokens=45,
        budget_tokens=1024 + 128,
        sink_tokens=64,
        window_tokens=64,
        page_size=32,
    )
    bd = batch_demand(d, cfg, model)
    assert bd.corrected_heads.shape == (45, 30)
    np.testing.assert_array_equal(bd.corrected_heads[:20], bd.corrected_heads[20:40])  # cycled
    # the target selects 32 pages per head (the trace 12): missed pages scale with the recorded ratio
    src = d.fetch_ratio[0][3, 5]
    corr = d.corrected[0][3, 5]
    assert bd.missed_sync[3, 5] == int(np.rint(src * 32)[corr].sum())
    assert bd.missed_bg[3, 5] == int(np.rint(src * 32)[~corr].sum())


def test_tau_recomputes_corrections(trace_dir: Path) -> None:
    d = demand_from_trace(trace_dir)
    model = get_model("smollm2-135m")
    base = dict(
        model="smollm2-135m",
        hardware="a100-40g-pcie4",
        input_tokens=1200,
        output_tokens=20,
        budget_tokens=512,
        sink_tokens=64,
        window_tokens=64,
    )
    recorded = batch_demand(d, SimConfig(**base), model)
    same = batch_demand(d, SimConfig(**base, tau=0.9), model)  # the trace was recorded at tau 0.9
    np.testing.assert_array_equal(recorded.corrected_heads, same.corrected_heads)
    none = batch_demand(d, SimConfig(**base, tau=0.5), model)
    assert none.corrected_heads.sum() == 0 and none.missed_sync.sum() == 0
    with pytest.raises(SimInputError, match="tau"):
        batch_demand(
            synthetic_demand("correction=0.5,hit=0.5,steps=8", "smollm2-135m"),
            SimConfig(**base, tau=0.9),
            model,
        )


def test_synthetic_rates_and_seed() -> None:
    d = synthetic_demand("correction=0.6,hit=0.8,steps=512,seqs=2", model="llama-3.1-8b", seed=0)
    corr = np.concatenate(d.corrected)
    assert corr.mean() == pytest.approx(0.6, abs=0.02)
    assert 1 - np.concatenate(d.fetch_ratio).mean() == pytest.approx(0.8, abs=0.02)
    assert corr.mean(axis=(0, 2)).std() > 0.02  # rates vary per layer
    again = synthetic_demand("correction=0.6,hit=0.8,steps=512,seqs=2", model="llama-3.1-8b", seed=0)
    np.testing.assert_array_equal(corr, np.concatenate(again.corrected))


def test_synthetic_spec_file_per_layer(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    rates = [0.0] * 15 + [1.0] * 15
    spec.write_text(f"correction: {rates}\nhit: 0.5\nsteps: 64\n")
    d = synthetic_demand(str(spec), model="smollm2-135m", seed=1)
    corr = np.concatenate(d.corrected)
    assert corr[:, :15].sum() == 0 and corr[:, 15:].all()


@pytest.mark.parametrize(
    "spec, match",
    [
        ("correction=0.6", "'hit' is required"),
        ("correction=1.5,hit=0.5", "share"),
        ("correction=0.5,hit=0.5,bogus=1", "unknown keys"),
        ("correction:0.5", "key=value"),
    ],
)
def test_bad_synthetic_specs(spec: str, match: str) -> None:
    with pytest.raises(SimInputError, match=match):
        synthetic_demand(spec, model="smollm2-135m")


def test_demand_model_mismatch_is_an_error(trace_dir: Path) -> None:
    d = demand_from_trace(trace_dir)
    cfg = SimConfig(model="llama-3.1-8b", hardware="a100-40g-pcie4", output_tokens=4)
    with pytest.raises(SimInputError, match="target_model"):
        run_simulation(cfg, d)


@pytest.mark.parametrize("page_size", [16, 32])
def test_candidate_pages_agree_with_the_runtime_store(page_size: int) -> None:
    """sim.demand's candidate pages equal the runtime store's candidate range ([sink, cur - window + 1),
    cur = (n - 1) // p) for contexts that are and are not page multiples."""
    torch = pytest.importorskip("torch")
    from freekv_runtime.kv_store import PagedKVStore
    from freekv_runtime.recall import DeviceStreams

    p, sink, window, budget = page_size, 2 * page_size, 3 * page_size, 16 * page_size
    cpu = torch.device("cpu")
    store = PagedKVStore(1, 1, 8, p, sink // p, window // p, (budget - sink - window) // p, cpu,
                         torch.float32, DeviceStreams(cpu))
    cfg = SimConfig(model="smollm2-135m", hardware="a100-40g-pcie4", input_tokens=p, output_tokens=40 * p,
                    page_size=p, budget_tokens=budget, sink_tokens=sink, window_tokens=window)
    bd = batch_demand(None, cfg, get_model("smollm2-135m"))
    multiples = non_multiples = 0
    for context, candidates in zip(bd.context_tokens.tolist(), bd.candidate_pages.tolist(), strict=True):
        store.n_tokens = context
        lo, hi = store.candidate_range()
        assert candidates == hi - lo, context
        multiples += context % p == 0
        non_multiples += context % p != 0 and hi > lo
    assert multiples > 10 and non_multiples > 100
    # e.g. 7 full pages and one token: 8 pages, 8 - 2 - 3 = 3 candidates (the old formula said 2)
    assert int(bd.candidate_pages[bd.context_tokens == 7 * p + 1][0]) == 3


def test_no_demand_while_the_context_fits_the_budget(trace_dir: Path) -> None:
    """Steps whose context fits the budget (ceil(n / p) <= budget / p) have no corrections, selections or
    misses; the first step past it (context budget + 1) has them."""
    d = demand_from_trace(trace_dir)
    model = get_model("smollm2-135m")
    cfg = SimConfig(model="smollm2-135m", hardware="a100-40g-pcie4", batch_size=2, input_tokens=400,
                    output_tokens=300, budget_tokens=512, sink_tokens=64, window_tokens=64, page_size=32)
    bd = batch_demand(d, cfg, model)
    within = bd.context_tokens <= 512
    np.testing.assert_array_equal(bd.over_budget, ~within)
    assert within.sum() == 112 and bd.context_tokens[~within][0] == 513
    for arr in (bd.corrected_heads, bd.selected_pages, bd.missed_sync, bd.missed_bg):
        assert arr[within].sum() == 0 and arr[~within].sum() > 0
    assert (bd.selected_per_head[within] == 0).all() and (bd.selected_per_head[~within] == 12).all()
    # past the budget, step s replays the same source step as it did before (offset unchanged)
    tail = batch_demand(d, cfg.replace(input_tokens=600, output_tokens=188), model)
    np.testing.assert_array_equal(tail.selected_pages, bd.selected_pages[~within])


def test_trace_steps_within_its_own_budget_are_not_replayed(tmp_path: Path) -> None:
    """A trace recorded with checks while its context fit the budget (older runtimes did): those steps
    are dropped from the demand, the steps past its budget kept."""
    path = make_trace(tmp_path / "t", n_steps=40, prompt_tokens=500, budget_tokens=512, seed=3)
    d = demand_from_trace(path)
    assert d.n_steps == (40 - 12,) and d.skipped_steps == (12,)  # contexts 501..512 fit the budget
    steps = [rec for rec in open_trace(path).steps() if rec.context_tokens > 512]
    np.testing.assert_array_equal(d.corrected[0][0][1:], steps[0].corrected[1:])  # layer 0 dense
    # a trace with no step past its budget is replayed as recorded
    short = demand_from_trace(make_trace(tmp_path / "s", n_steps=5, prompt_tokens=300, budget_tokens=512))
    assert short.n_steps == (5,) and short.skipped_steps == (0,)
