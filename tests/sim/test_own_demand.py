"""Each method replays its own policy's demand: Demand.method, fetch/eviction/re-factorisation
mapping, the refusal of another policy's trace, the explicit transplant and its labels, `--method all`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sim_trace_factory import make_trace

from dse.cli import main
from dse.commands.sim import command
from sim import SimConfig, SimInputError, demand_from_trace, run_simulation, synthetic_demand
from sim.demand import batch_demand
from sim.engine import prepare
from traces import open_trace
from traces.models import get_model

MODEL = "smollm2-135m"
KNOBS = dict(page_size=32, budget_tokens=512, sink_tokens=64, window_tokens=64, dense_layers=(0,))


def _cfg(method: str, **kw) -> SimConfig:
    base = dict(model=MODEL, hardware="a100-40g-pcie4", method=method, batch_size=2, input_tokens=1200,
                output_tokens=24, **KNOBS)
    base.update(kw)
    return SimConfig(**base)


class _MovedReader:
    """A real trace reader whose step records carry the movement fields a format-2 trace records
    (fetched / evicted tokens, re-factorised heads), set per record by `moved(rec) -> dict`."""

    def __init__(self, path: Path, method: str, moved) -> None:
        self._reader = open_trace(path)
        runtime = {**self._reader.meta.runtime, "method": method}
        self.meta = dataclasses.replace(self._reader.meta, runtime=runtime)
        self.path = path
        self._moved = moved

    def steps(self):
        for rec in self._reader.steps():
            yield dataclasses.replace(rec, **self._moved(rec))

    def prefills(self):
        return self._reader.prefills()


def test_freekv_v1_trace_fetches_missed_pages_times_page_size(tmp_path: Path) -> None:
    d = demand_from_trace(make_trace(tmp_path / "t"))
    assert d.method == "freekv"
    bd = batch_demand(d, _cfg("freekv", batch_size=3), get_model(MODEL))
    # the trace's capacity is the config's: fetched tokens are exactly the missed pages x page size
    np.testing.assert_array_equal(bd.fetched_tokens, bd.missed_total * 32)
    np.testing.assert_array_equal(bd.fetched_sync_tokens, bd.missed_sync * 32)
    assert bd.evicted_tokens.sum() == 0 and bd.refactorised_heads.sum() == 0 and bd.method == "freekv"


def test_trace_without_method_is_freekv_and_synthetic_has_none(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t")
    reader = _MovedReader(path, "", lambda rec: {})
    reader.meta = dataclasses.replace(reader.meta, runtime={
        k: v for k, v in reader.meta.runtime.items() if k != "method"})
    assert demand_from_trace(reader).method == "freekv"
    assert synthetic_demand("correction=0.5,hit=0.8,steps=8", model=MODEL, seed=0).method is None


def test_another_policys_trace_is_refused_unless_transplanted(tmp_path: Path) -> None:
    demand = demand_from_trace(make_trace(tmp_path / "t", method="arkvale"))
    with pytest.raises(SimInputError, match=r"--method freekv.*'arkvale' policy.*--transplant-method"):
        run_simulation(_cfg("freekv"), demand)
    own = run_simulation(_cfg("arkvale"), demand)
    assert own.transplanted_method is None and "transplanted" not in own.demand_label
    moved = run_simulation(_cfg("freekv", transplant_method=True), demand)
    label = "demand of arkvale transplanted onto freekv"
    assert moved.transplanted_method == "arkvale" and label in moved.demand_label
    assert label in moved.notes and moved.to_dict()["transplanted_method"] == "arkvale"
    # methods that price no demand ignore whose trace it is
    assert run_simulation(_cfg("dense"), demand).transplanted_method is None


def test_synthetic_demand_serves_every_method() -> None:
    demand = synthetic_demand("correction=0.3,hit=0.8,steps=24", model=MODEL, seed=0)
    for method in ("freekv", "arkvale", "shadowkv"):
        res = run_simulation(_cfg(method), demand)
        assert res.transplanted_method is None and res.synthetic


def test_dropping_trace_fetches_nothing_and_reports_evictions(tmp_path: Path) -> None:
    """A dropping policy (H2O) never fetches; one token evicted per head and step past its budget."""
    def moved(rec):
        shape = rec.corrected.shape
        return {"fetched_tokens": np.zeros(shape, np.int32), "evicted_tokens": np.ones(shape, np.int32)}

    demand = demand_from_trace(_MovedReader(make_trace(tmp_path / "t"), "h2o", moved))
    assert demand.method == "h2o"
    model = get_model(MODEL)
    bd = batch_demand(demand, _cfg("h2o"), model)
    sparse = ~bd.dense_layer
    assert bd.fetched_tokens.sum() == 0 and bd.missed_total.sum() == 0
    assert (bd.evicted_tokens[:, sparse] == 2 * model.n_kv_heads).all()  # batch 2, every KV head
    res = run_simulation(_cfg("h2o"), demand)
    assert res.transplanted_method is None and res.link_bytes["h2d"] == 0


def test_shadowkv_prices_the_refactorisations_its_trace_recorded(tmp_path: Path) -> None:
    """Re-factorisation events of ShadowKV's own trace become SVD runs at those steps; none recorded:
    the options' schedule (SVD at prefill only by default)."""
    path = make_trace(tmp_path / "t")

    def moved(rec):
        shape = rec.corrected.shape
        return {"fetched_tokens": np.full(shape, 64, np.int32),
                "refactorised": np.full(shape, rec.step % 8 == 7)}

    own = demand_from_trace(_MovedReader(path, "shadowkv", moved))
    none = demand_from_trace(_MovedReader(path, "shadowkv", lambda rec: {}))
    cfg = _cfg("shadowkv", batch_size=1)
    svd = prepare(cfg, own).work["svd"].seconds
    sparse = ~prepare(cfg, own).ctx.demand.dense_layer
    steps = np.flatnonzero(svd[:, sparse].any(axis=1))
    np.testing.assert_array_equal(steps, [7, 15, 23])
    assert prepare(cfg, none).work["svd"].seconds.sum() == 0
    # fetched value tokens: 64 per head (the trace's), not FreeKV's missed pages
    fetch = prepare(cfg, own).work["fetch"].bytes_per_copy
    m = get_model(MODEL)
    assert fetch[:, sparse].max() == pytest.approx(64 * m.n_kv_heads * m.head_dim * 2)


def test_infinigen_prefetches_what_its_own_trace_fetched(tmp_path: Path) -> None:
    path = make_trace(tmp_path / "t")

    def moved(rec):
        return {"fetched_tokens": np.full(rec.corrected.shape, 96, np.int32)}

    own = demand_from_trace(_MovedReader(path, "infinigen", moved))
    freekv = demand_from_trace(path)
    cfg = _cfg("infinigen", batch_size=1)
    m = get_model(MODEL)
    traced = prepare(cfg, own).work["prefetch"]
    closed = prepare(cfg, None).work["prefetch"]
    per_head = 2 * m.head_dim * cfg.dtype_bytes
    layer = 1  # prefetches for layer 2
    assert float(np.sum(traced.bytes_per_copy[:, layer] * traced.n_copies[:, layer])) == pytest.approx(
        cfg.output_tokens * m.n_kv_heads * 96 * per_head)
    assert float(np.sum(closed.bytes_per_copy[:, layer] * closed.n_copies[:, layer])) == pytest.approx(
        cfg.output_tokens * m.n_kv_heads * 512 * per_head)
    res = run_simulation(cfg, freekv)  # another policy's trace: the closed form, said in a note
    assert any("closed-form" in n for n in res.notes) and res.demand_label.startswith("none")


def test_quest_offloaded_recalls_what_its_own_trace_fetched(tmp_path: Path) -> None:
    """Quest's offloaded variant: the trace's fetched pages are recalled synchronously; without Quest's own
    trace every selected page of every step; the default (all on GPU) recalls nothing."""
    path = make_trace(tmp_path / "t")

    def moved(rec):
        return {"fetched_tokens": np.full(rec.corrected.shape, 64, np.int32)}  # 2 pages per head

    own = demand_from_trace(_MovedReader(path, "quest", moved))
    cfg = _cfg("quest", batch_size=1, method_options={"offload": True, "selection": "per-kv-head"})
    m = get_model(MODEL)
    traced = prepare(cfg, own).work["recall"].n_copies
    closed = prepare(cfg, None).work["recall"].n_copies
    sparse = ~prepare(cfg, None).ctx.demand.dense_layer
    assert (traced[:, sparse] == 2 * m.n_kv_heads).all()
    assert (closed[:, sparse] == cfg.selected_pages * m.n_kv_heads).all()
    on_gpu = run_simulation(_cfg("quest", batch_size=1), own)
    offloaded = run_simulation(cfg, own)
    assert offloaded.memory.host_bytes > 0 and on_gpu.memory.host_bytes == 0
    assert offloaded.memory.gpu_bytes < on_gpu.memory.gpu_bytes
    assert offloaded.link_bytes["h2d"] > 0 and on_gpu.link_bytes["h2d"] == 0
    assert "recall" not in {op.name for op in prepare(_cfg("quest"), None).template}


def _cli(args: list[str]) -> dict:
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return json.loads(result.output)


SIM_ARGS = ["--model", MODEL, "--hardware", "a100-40g-pcie4", "--input-tokens", "1200", "--output-tokens",
            "16", "--implementation", "ideal"]


def test_cli_refuses_another_policys_trace_with_exit_2(tmp_path: Path, capsys) -> None:
    trace = make_trace(tmp_path / "t", method="quest")
    rc = main(["sim", str(trace), *SIM_ARGS, "--method", "arkvale"])
    err = capsys.readouterr().err
    assert rc == 2 and "--method arkvale" in err and "'quest' policy" in err and "Traceback" not in err
    out = _cli([str(trace), *SIM_ARGS, "--method", "arkvale", "--transplant-method", "--json"])
    assert out["transplanted_method"] == "quest"
    assert "demand of quest transplanted onto arkvale" in out["demand"]


def test_cli_method_defaults_to_the_traces_own_policy(tmp_path: Path) -> None:
    out = _cli([str(make_trace(tmp_path / "t", method="arkvale")), *SIM_ARGS, "--json"])
    assert out["method"] == "arkvale" and out["transplanted_method"] is None
    synthetic = _cli(["--synthetic", "correction=0.3,hit=0.8,steps=16", *SIM_ARGS, "--json"])
    assert synthetic["method"] == "freekv"


def test_cli_method_all_runs_own_and_demand_free_methods(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t")
    out = _cli([str(trace), *SIM_ARGS, "--method", "all", "--json"])
    ran = set(out["results"])
    assert {"freekv", "freekv-nohl", "dense", "h2o", "snapkv", "streamingllm"} <= ran
    assert not ran & {"arkvale", "shadowkv"}
    refused = [n for n in out["notes"] if n.startswith("not replayed: --method ")]
    assert len(refused) == 1 and "arkvale" in refused[0] and "shadowkv" in refused[0]
    assert "'freekv' policy" in refused[0] and "--transplant-method" in refused[0]
    every = _cli([str(trace), *SIM_ARGS, "--method", "all", "--transplant-method", "--json"])
    assert every["results"]["arkvale"]["transplanted_method"] == "freekv"
    assert every["results"]["freekv"]["transplanted_method"] is None


def test_cli_dense_attention_trace_replays_with_demand_free_models(tmp_path: Path, capsys) -> None:
    """A trace of the runtime's `dense` policy (every layer dense) holds no recall demand: dense replays it
    (also by default), a method that needs demand is refused with exit 2, never a traceback, also with
    --transplant-method; `--method all` runs the demand-free models and says why the others did not."""
    trace = make_trace(tmp_path / "t", method="dense", dense_layers=tuple(range(get_model(MODEL).n_layers)))
    for extra in (["--method", "dense"], []):
        out = _cli([str(trace), *SIM_ARGS, *extra, "--json"])
        assert out["method"] == "dense"
        assert any("dense attention (method dense)" in n for n in out["notes"])
    for extra in ([], ["--transplant-method"]):
        rc = main(["sim", str(trace), *SIM_ARGS, "--method", "freekv", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err
        assert "--method freekv: the trace" in err and "is of dense attention" in err
        assert "--transplant-method does not apply" in err and "dense, full-offload" in err
    every = _cli([str(trace), *SIM_ARGS, "--method", "all", "--transplant-method", "--json"])
    assert {"dense", "full-offload", "h2o"} <= set(every["results"]) and "freekv" not in every["results"]
    assert all(r["transplanted_method"] is None for r in every["results"].values())
    assert any(n.startswith("not replayed: --method freekv,") and "dense attention" in n
               for n in every["notes"])
