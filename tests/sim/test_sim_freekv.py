"""FreeKV, its ablations, dense and full offload: orderings that follow from the design, memory fit."""

from __future__ import annotations

import pytest

from sim import SimConfig, SimInputError, load_profile, run_simulation, synthetic_demand
from sim.memory import memory_fit
from sim.methods import get_method
from traces.models import get_model

MODEL = "llama-3.1-8b"


def _cfg(**kw) -> SimConfig:
    base = dict(
        model=MODEL,
        hardware="a100-40g-pcie4",
        method="freekv",
        batch_size=4,
        input_tokens=8192,
        output_tokens=64,
    )
    base.update(kw)
    return SimConfig(**base)


@pytest.fixture(scope="module")
def demand():
    return synthetic_demand("correction=0.5,hit=0.7,steps=64,seqs=4", model=MODEL, seed=2)


def _mean(method: str, demand, **kw) -> float:
    return run_simulation(_cfg(method=method, **kw), demand).latency_stats()["mean"]


def test_each_optimisation_helps(demand) -> None:
    full = _mean("freekv", demand)
    for ablation in ("freekv-nohl", "freekv-nodb", "freekv-nosr"):
        assert _mean(ablation, demand) >= full, ablation
    assert _mean("freekv-base", demand) >= max(_mean(a, demand) for a in ("freekv-nohl", "freekv-nosr"))


def test_fragmented_recall_moves_the_same_bytes_more_slowly(demand) -> None:
    hl = run_simulation(_cfg(), demand)
    nhd = run_simulation(_cfg(method="freekv-nohl"), demand)
    assert hl.link_bytes["h2d"] == pytest.approx(nhd.link_bytes["h2d"])
    assert nhd.link_busy_s["h2d"] > 1.2 * hl.link_busy_s["h2d"]


def test_without_speculation_all_recall_is_synchronous(demand) -> None:
    res = run_simulation(_cfg(method="freekv-nosr"), demand)
    assert "check" not in res.breakdown_s and res.critical_share()["recall"] > 0


def test_dense_out_of_memory_at_128k_batch_8() -> None:
    res = run_simulation(_cfg(method="dense", batch_size=8, input_tokens=131072 - 64, output_tokens=64))
    d = res.to_dict()
    assert d["memory"]["fits"] is False and d["memory"]["max_batch"] < 8
    assert any("out of memory" in n for n in d["notes"])
    cfg = _cfg(batch_size=8, input_tokens=131072 - 64)
    profile = load_profile("a100-40g-pcie4")
    freekv = memory_fit(get_method(cfg).memory(cfg, get_model(MODEL)), cfg, get_model(MODEL), profile)
    assert freekv.gpu_bytes < profile.gpu.memory_bytes  # FreeKV keeps only the budget on the GPU


def test_memory_closed_form_for_dense() -> None:
    cfg = _cfg(method="dense", batch_size=2, input_tokens=1000, output_tokens=24)
    model = get_model(MODEL)
    need = get_method(cfg).memory(cfg, model)
    assert need.gpu_per_seq_bytes == 1024 * model.kv_bytes_per_token(2)
    fit = memory_fit(need, cfg, model, load_profile("a100-40g-pcie4"))
    assert fit.weights_bytes == model.n_params() * 2
    assert fit.max_batch >= 2 and fit.fits


def test_dense_layers_attend_everything(demand) -> None:
    plain = run_simulation(_cfg(), demand)
    layer0 = run_simulation(_cfg(dense_layers=(0,)), demand)
    assert layer0.breakdown_s["attention"] > plain.breakdown_s["attention"]


def test_method_options_are_checked() -> None:
    with pytest.raises(SimInputError, match="staging_pages"):
        get_method(_cfg(method_options={"bogus": 1}))
    assert get_method(_cfg(method_options={"staging_pages": 8})).knobs.staging_pages == 8
    with pytest.raises(SimInputError, match="tau is a runtime knob .* of freekv, not read by the simulator"):
        get_method(_cfg(method_options={"tau": 0.8}))
    with pytest.raises(SimInputError, match="unknown method"):
        get_method(_cfg(method="nope"))


def test_freekv_needs_demand() -> None:
    with pytest.raises(SimInputError, match="needs recall demand"):
        run_simulation(_cfg())


@pytest.mark.parametrize("method", ["freekv", "freekv-nosr", "freekv-base"])
def test_no_check_select_or_recall_while_the_context_fits_the_budget(method: str) -> None:
    """600 in, budget 2048 (sink and window included): the first 1448 steps (contexts 601..2048) fit, so
    they run no check, selection or recall and are faster; the first step past the budget has them."""
    d = synthetic_demand("correction=0.6,hit=0.8,steps=256", model=MODEL, seed=0)
    # ideal mode: the phases of the algorithm, without the implementations' different host costs
    cfg = _cfg(method=method, batch_size=1, input_tokens=600, output_tokens=1600, implementation="ideal")
    fits = 2048 - 600
    res = run_simulation(cfg, d, timeline_steps=[0, fits - 1, fits])
    retrieval = {"check", "select_sync", "select_bg", "recall_sync", "recall_bg"}
    for step in (0, fits - 1):
        names = {e["name"] for e in res.timeline(step)}
        assert not names & retrieval and {"qkv", "attention", "ffn"} <= names, (step, names)
    assert {e["name"] for e in res.timeline(fits)} & retrieval
    lat = res.step_latency_s
    assert lat[:fits].max() < lat[fits:].mean()
    # the within-budget phase costs what dense attention over the same context costs, less a little
    dense = run_simulation(cfg.replace(method="dense", output_tokens=fits), None).step_latency_s
    assert lat[:fits].mean() == pytest.approx(dense.mean(), rel=0.05)
