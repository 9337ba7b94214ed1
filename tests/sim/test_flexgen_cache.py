"""FlexGen's pageable KV cache (sim/methods/flexgen_cache.py): full-offload's `runtime` "flexgen" and
InfiniGen's as-published whole-cache loads of the layers it does not speculate."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import SimConfig
from sim.engine import prepare, run_simulation
from sim.hardware import load_profile
from sim.methods.base import Transfer
from sim.software import load_software
from traces.models import get_model

MODEL = "opt-13b"
HW = "rtx-a6000-pcie3"


def _cfg(method: str, mode: str, batch: int = 3, **kw) -> SimConfig:
    base = dict(
        gpu_memory_utilization=1.0, model=MODEL, hardware=HW, method=method, batch_size=batch,
        input_tokens=1000, output_tokens=6, page_size=1, sink_tokens=0, window_tokens=1, budget_tokens=50,
        implementation=mode,
    )
    base.update(kw)
    return SimConfig(**base)  # type: ignore[arg-type]


def _layer_bytes(batch: int, context: np.ndarray) -> np.ndarray:
    """K + V bytes of one layer's past for the whole batch (fp16)."""
    return batch * (context - 1) * get_model(MODEL).kv_bytes_per_token(2) / get_model(MODEL).n_layers


def test_flexgen_fetch_is_the_whole_past_at_the_slower_of_link_and_staging() -> None:
    cfg = _cfg("full-offload", "as-published", method_options={"runtime": "flexgen"})
    prep = prepare(cfg, None)
    fetch = prep.work["fetch"]
    assert isinstance(fetch, Transfer) and fetch.issuer == "host"
    ops = {op.name: op for op in prep.template}
    assert ops["fetch"].host_sync and ops["writeback"].host_sync  # pageable: the caller waits
    assert ops["out_proj"].host_sync and ops["ffn"].host_sync  # FlexGen's sync after each sub-layer
    context = prep.ctx.demand.context_tokens.astype(np.float64)
    per_copy = _layer_bytes(cfg.batch_size, context) / 2
    assert np.asarray(fetch.n_copies)[:, 5] == pytest.approx(np.full(len(context), 2))
    assert np.asarray(fetch.bytes_per_copy)[:, 5] == pytest.approx(per_copy)
    link = load_profile(HW).link.h2d_effective_gbps * 1e9
    staging = load_software("pytorch2-cuda12").pageable_staging_s_per_gb / 1e9
    assert 1 / staging < link  # one host thread stages slower than the PCIe 3.0 link: staging binds
    assert np.asarray(fetch.copy_s)[:, 5] == pytest.approx(per_copy * staging, rel=1e-6)


def test_flexgen_step_is_its_serial_whole_cache_loads_and_runtime_changes_only_as_published() -> None:
    flex = run_simulation(_cfg("full-offload", "as-published", method_options={"runtime": "flexgen"}))
    hf = run_simulation(_cfg("full-offload", "as-published"))
    assert flex.breakdown_s["fetch"] > 0.7 * float(flex.step_latency_s.mean())  # transfer-bound, no overlap
    assert float(flex.step_latency_s.mean()) > float(hf.step_latency_s.mean())  # pageable, serial loads
    options = ({}, {"runtime": "flexgen"})
    ideal = [run_simulation(_cfg("full-offload", "ideal", method_options=o)) for o in options]
    assert np.array_equal(ideal[0].step_latency_s, ideal[1].step_latency_s)


@pytest.mark.parametrize("dense_layer_1, whole_layers", [(True, 2), (False, 1)])
def test_infinigen_as_published_loads_the_layers_it_does_not_speculate(dense_layer_1, whole_layers) -> None:
    opts = {"dense_layer_1": dense_layer_1}
    prep = prepare(_cfg("infinigen", "as-published", method_options=opts), None)
    load = prep.work["load"]
    assert isinstance(load, Transfer)
    loaded = np.asarray(load.n_copies).sum(axis=0) > 0
    assert list(np.flatnonzero(loaded)) == list(range(whole_layers))
    assert {op.name: op for op in prep.template}["load"].host_sync
    assert "load" not in prepare(_cfg("infinigen", "ideal", method_options=opts), None).work
    res = run_simulation(_cfg("infinigen", "as-published", method_options=opts))
    ideal = run_simulation(_cfg("infinigen", "ideal", method_options=opts))
    assert res.breakdown_s["load"] > 0 and "load" not in ideal.breakdown_s


def test_infinigen_as_published_grows_the_partial_key_cache_every_step() -> None:
    pub = prepare(_cfg("infinigen", "as-published", batch=8, input_tokens=4000), None)
    ideal = prepare(_cfg("infinigen", "ideal", batch=8, input_tokens=4000), None)
    spec_pub = np.asarray(pub.work["speculate"].seconds)
    spec_ideal = np.asarray(ideal.work["speculate"].seconds)
    assert np.all(spec_pub >= spec_ideal)
    assert spec_pub[:, -1].min() > 0 and spec_ideal[:, -1].max() == 0  # last layer: the cat, no speculation
