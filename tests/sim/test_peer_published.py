"""As-published models of the peer methods (Quest, ArkVale, ShadowKV, InfiniGen): host-side software
costs from their public code (sim/methods/host_costs.py; docs/methods.md), against the ideal models."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

from sim.config import SimConfig
from sim.demand import Demand
from sim.engine import prepare, run_simulation
from sim.methods import method_class
from sim.methods.base import Transfer
from sim.synthetic import synthetic_demand

PUBLISHED = ("quest", "arkvale", "shadowkv", "infinigen")
MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def demand() -> Demand:
    return synthetic_demand("correction=0.5,hit=0.7,steps=64,seqs=2", model=MODEL, seed=1)


def _cfg(method: str, implementation: str, **kw) -> SimConfig:
    base = dict(
        model=MODEL,
        hardware="a100-80g-sxm",
        method=method,
        batch_size=2,
        input_tokens=8000,
        output_tokens=64,
        implementation=implementation,
    )
    base.update(kw)
    return SimConfig(**base)  # type: ignore[arg-type]


def _host_total(method: str, implementation: str, demand: Demand, **kw) -> float:
    """Main-thread seconds of the work items: every op's host_s (where the op happens) plus the copies
    the main thread issues itself (issuer "host": n_copies * issue_s)."""
    prep = prepare(_cfg(method, implementation, **kw), demand)
    shape = prep.ctx.shape
    total = 0.0
    for item in prep.work.values():
        total += float(np.sum(np.broadcast_to(item.host_s, shape)))
        if isinstance(item, Transfer) and item.issuer == "host":
            total += float(np.sum(item.n_copies)) * item.issue_s
    return total


@pytest.mark.parametrize("method", PUBLISHED)
def test_ideal_mode_charges_no_software_cost(method: str, demand: Demand) -> None:
    assert _host_total(method, "ideal", demand) == 0.0
    assert _host_total(method, "as-published", demand) > 0.0


@pytest.mark.parametrize("method", PUBLISHED)
def test_as_published_is_never_faster_than_ideal(method: str, demand: Demand) -> None:
    ideal = run_simulation(_cfg(method, "ideal"), demand).step_latency_s.sum()
    pub = run_simulation(_cfg(method, "as-published"), demand).step_latency_s.sum()
    assert pub >= ideal * (1 - 1e-9)


@pytest.mark.parametrize("method", PUBLISHED)
def test_every_as_published_module_cites_the_public_code(method: str) -> None:
    doc = inspect.getmodule(method_class(method)).__doc__ or ""
    assert "As published" in doc
    assert len(re.findall(r"\.py:\d+", doc)) >= 5, "each charged cost names file:line of the public code"


def test_arkvale_recall_loop_is_host_bound_and_grows_with_recalls() -> None:
    """ArkVale's Python recall loop reads GPU scalars back per page (infer_state.py:415-423): its host
    time grows with the recalled pages, while the ideal model only pays the copies."""
    few = synthetic_demand("correction=1.0,hit=0.95,steps=64,seqs=2", model=MODEL, seed=1)
    many = synthetic_demand("correction=1.0,hit=0.5,steps=64,seqs=2", model=MODEL, seed=1)
    h_few = _host_total("arkvale", "as-published", few)
    h_many = _host_total("arkvale", "as-published", many)
    assert h_many > 2 * h_few
    work = prepare(_cfg("arkvale", "as-published"), many).work["recall"]
    assert isinstance(work, Transfer) and work.issuer == "host"
    gap_many = (
        run_simulation(_cfg("arkvale", "as-published"), many).step_latency_s.mean()
        - run_simulation(_cfg("arkvale", "ideal"), many).step_latency_s.mean()
    )
    gap_few = (
        run_simulation(_cfg("arkvale", "as-published"), few).step_latency_s.mean()
        - run_simulation(_cfg("arkvale", "ideal"), few).step_latency_s.mean()
    )
    assert gap_many > gap_few > 0


def test_infinigen_as_published_syncs_every_sub_layer(demand: Demand) -> None:
    """FlexGen's loop synchronises the device after each sub-layer (flex_opt.py:1070); the sync after the
    MLP is torch.cuda.synchronize() (:932-934), so it also waits for the prefetch stream."""
    pub = {op.name: op for op in prepare(_cfg("infinigen", "as-published"), demand).template}
    ideal = {op.name: op for op in prepare(_cfg("infinigen", "ideal"), demand).template}
    assert pub["out_proj"].host_sync and pub["ffn_sync"].host_sync and pub["speculate"].host_sync
    assert {dep.op for dep in pub["ffn_sync"].deps} == {"ffn", "prefetch"}
    assert not ideal["ffn"].host_sync and "ffn_sync" not in ideal


def test_shadowkv_outlier_chunks_follow_the_sparse_budget() -> None:
    from sim.methods.shadowkv import outlier_chunks

    assert [outlier_chunks(b) for b in (1024, 2048, 4096)] == [24, 48, 96]


def _rebuild(prep) -> tuple[tuple[str, ...], np.ndarray]:
    ops = {op.name: op for op in prep.template}
    return tuple(dep.op for dep in ops["rebuild"].deps), np.asarray(prep.work["rebuild"].seconds)


@pytest.mark.parametrize(
    ("batch", "waits", "slowed"), [(2, False, False), (12, False, True), (14, True, False)]
)
def test_shadowkv_rebuild_shares_sms_with_the_uva_gather(
    demand: Demand, batch: int, waits: bool, slowed: bool
) -> None:
    """As published, the value gather (2 blocks of ~65 KB shared memory per sequence and KV head, launched
    first) leaves the key rebuild's 80 KB CTAs only the SMs with room beside it (sim/sm_occupancy.py): on an
    A100 (108 SMs, 164 KB) batch 2 leaves every SM, batch 12 (192 blocks) 24 of them, batch 14 (224) none,
    and then the rebuild waits for the fetch. Ideal mode and profiles without SM facts overlap freely."""
    pub = prepare(_cfg("shadowkv", "as-published", batch_size=batch), demand)
    ideal = prepare(_cfg("shadowkv", "ideal", batch_size=batch), demand)
    deps, seconds = _rebuild(pub)
    ideal_deps, _ = _rebuild(ideal)
    assert ("fetch" in deps) == waits and "fetch" not in ideal_deps
    bare = _cfg(
        "shadowkv", "as-published", batch_size=batch, hardware_overrides={"gpu.sm_count": 10**6}
    )
    bare_deps, alone_seconds = _rebuild(prepare(bare, demand))
    assert "fetch" not in bare_deps  # a huge GPU: the gather never fills it
    sparse = seconds > 0
    assert sparse.any()
    if slowed:  # against the same rebuild with every SM to itself
        assert np.all(seconds[sparse] > 1.5 * alone_seconds[sparse])
    else:
        np.testing.assert_allclose(seconds, alone_seconds)


def test_shadowkv_rebuild_covers_whole_tiles_and_moves_the_hits(demand: Demand) -> None:
    """The CUTLASS rebuild skips only 128-row tiles made wholly of hits, and the hits' keys are copied to the
    front of the buffer first: more work than the misses alone, less than rebuilding the whole budget."""
    from sim.methods.shadowkv_kernels import REBUILD_TILE_ROWS

    cfg = _cfg("shadowkv", "ideal", budget_tokens=2048 + 64 + 64, sink_tokens=64, window_tokens=64)
    prep = prepare(cfg, demand)
    rebuild = np.asarray(prep.work["rebuild"].seconds)
    missed = np.asarray(prep.ctx.demand.fetched_tokens, dtype=float)
    sparse = missed > 0
    assert sparse.any() and REBUILD_TILE_ROWS == 128
    cost, m, b = prep.ctx.cost, prep.ctx.model, cfg.batch_size
    d, r, dt = m.head_dim, 160, cfg.dtype_bytes
    sv_bytes = b * m.n_kv_heads * r * d * dt
    misses_only = cost.kernel_s(2.0 * missed * r * d, missed * (r + 3 * d) * dt + sv_bytes, 2)
    rows = b * m.n_kv_heads * 2048.0  # every budget row rebuilt and every one also copied as a hit
    whole = cost.kernel_s(2.0 * rows * r * d, rows * (r + 3 * d) * dt + sv_bytes + 2 * rows * d * dt, 2)
    assert np.all(rebuild[sparse] >= misses_only[sparse])
    assert np.all(rebuild[sparse] <= whole)
