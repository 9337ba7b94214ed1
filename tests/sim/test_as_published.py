"""Method work items in the two implementation modes: as-published host costs follow the public code
(sim/methods/freekv_published.py, eager.py); ideal mode charges none of them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim import SimConfig, synthetic_demand
from sim.engine import prepare
from sim.methods.base import Kernel, Transfer
from sim.methods.eager import FREEKV_QKV, HF_FFN, HF_QKV
from sim.methods.freekv_published import RECALL_CALL_FLAGS, RECALL_GROUP, SELECT, WAIT_AND_CHECK
from sim.methods.host_costs import HostOps

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def demand():
    return synthetic_demand("correction=0.6,hit=0.8,steps=8,seqs=1", model=MODEL, seed=1)


def _ctx(method: str, demand, **kw):
    cfg = SimConfig(
        model=MODEL, hardware="a100-40g-pcie4", method=method, input_tokens=8192, output_tokens=8, **kw
    )
    return prepare(cfg, demand)


def _with_demand(prep, **arrays):
    """The method's work for the same config with some (S, L) demand arrays replaced."""
    ctx = dataclasses.replace(prep.ctx, demand=dataclasses.replace(prep.ctx.demand, **arrays))
    return prep.method.work(ctx), ctx


def _host(item) -> np.ndarray:
    return np.broadcast_to(np.asarray(item.host_s, dtype=np.float64), np.shape(_amount(item)))


def _amount(item) -> np.ndarray:
    return np.asarray(item.seconds if isinstance(item, Kernel) else item.n_copies)


def test_synchronous_correction_recall_of_23_head_pages(demand) -> None:
    prep = _ctx("freekv", demand)
    s, layer = 3, 5
    shape = prep.ctx.shape
    missed_sync = np.zeros(shape, dtype=np.int64)
    missed_sync[s, layer] = 23
    corrected = np.zeros(shape, dtype=np.int64)
    corrected[s, layer] = 4
    work, ctx = _with_demand(
        prep, missed_sync=missed_sync, corrected_heads=corrected, any_corrected=corrected > 0
    )
    sw = ctx.software
    rec = work["recall_sync"]
    assert isinstance(rec, Transfer)
    assert rec.issuer == "host" and rec.issue_threads == 1
    assert rec.issue_s == sw.memcpy_async_call_s  # recall_cpuhnd_2buf.cu 140: one call per head-page
    assert int(rec.n_copies[s, layer]) == 23 and rec.bytes_per_copy == 2 * 32 * 128 * 2  # 16 KiB
    # read-back of rids + second final stream sync + glue + the managed flags' page fault (79), then per
    # group one index and one launch
    want = RECALL_CALL_FLAGS.seconds(sw) + 4 * RECALL_GROUP.seconds(sw)
    assert _host(rec)[s, layer] == pytest.approx(want)
    main_thread = 23 * rec.issue_s + _host(rec)[s, layer]
    assert main_thread == pytest.approx(
        23 * sw.memcpy_async_call_s
        + sw.readback_s
        + sw.stream_sync_s
        + sw.managed_page_fault_s
        + 6 * sw.python_op_s
        + 4 * (sw.python_op_s + sw.cpp_kernel_launch_s)
    )
    # the next check kernel writes the flags the host just read: a page fault on the GPU, once
    check = np.asarray(work["check"].seconds)
    assert check[s, layer + 1] - check[s, layer + 2] == pytest.approx(sw.managed_page_fault_s)
    assert check[s, layer] == pytest.approx(check[s, layer + 2])
    assert _host(rec)[s, layer + 1] == 0.0  # nothing recalled there: nothing charged
    # the selection is read back and the recall waited for (host syncs)
    flags = {op.name: op.host_sync for op in prep.method.template(ctx)}
    assert flags["select_sync"] and flags["recall_sync"] and flags["check"]
    assert _host(work["select_sync"])[s, layer] == pytest.approx(SELECT.seconds(sw))


def test_ideal_mode_charges_no_software_cost(demand) -> None:
    prep = _ctx("freekv", demand, implementation="ideal")
    work, ctx = prep.work, prep.ctx
    link, host = ctx.profile.link, ctx.profile.host
    for name, item in work.items():
        assert np.all(_host(item) == 0.0), name
        if isinstance(item, Transfer):
            assert item.issuer == "pool" and item.issue_s == link.copy_issue_s
    assert work["recall_sync"].issue_threads == host.issue_threads
    flags = {op.name: op.host_sync for op in prep.method.template(ctx)}
    assert not flags["select_sync"] and not flags["recall_sync"]


def test_as_published_per_layer_costs_follow_the_recipes(demand) -> None:
    prep = _ctx("freekv", demand)
    work, sw, shape = prep.work, prep.ctx.software, prep.ctx.shape
    qkv = _host(work["qkv"])
    assert qkv[0, 1] == pytest.approx(FREEKV_QKV.seconds(sw))
    assert qkv[0, 0] > qkv[0, 1]  # layer 0 also prepares the step (infer_state.py 640-774)
    sparse = np.asarray(work["check"].seconds) > 0
    assert np.allclose(_host(work["check"])[sparse], WAIT_AND_CHECK.seconds(sw))
    lm = _host(work["lm_head"])
    assert np.all(lm[:, :-1] == 0.0) and np.all(lm[:, -1] > 0.0)
    # background recall: issued by one pool worker, one cudaMemcpyAsync per head-page plus its share
    bg = work["recall_bg"]
    assert bg.issuer == "pool" and bg.issue_threads == 1 and bg.issue_s > sw.memcpy_async_call_s
    assert np.shape(_host(bg)) == shape


def test_ablations_pay_what_their_code_paths_pay(demand) -> None:
    base = _ctx("freekv", demand).work["recall_sync"]
    nohl = _ctx("freekv-nohl", demand)
    rec = nohl.work["recall_sync"]
    sw = nohl.ctx.software
    # recall.cu 170-187: per head-page 2*p cudaMemcpy2DAsync of one 256-byte row, in place
    assert rec.bytes_per_copy == 128 * 2 and rec.issue_s == sw.memcpy2d_async_call_s and rec.chunk_copies == 0
    both = (np.asarray(base.n_copies) > 0) & (np.asarray(rec.n_copies) > 0)
    assert np.all(np.asarray(rec.n_copies)[both] % 64 == 0)
    nodb = _ctx("freekv-nodb", demand)
    one = nodb.work["recall_sync"]
    assert one.buffers == 1 and base.buffers == 2
    # recall.cu 310: one cudaStreamSynchronize per group on top of the double-buffered costs
    has = np.asarray(one.n_copies) > 0
    assert np.all(_host(one)[has] > _host(base)[has])
    nosr = _ctx("freekv-nosr", demand)
    assert "check" not in nosr.work and nosr.work["recall_sync"].issuer == "host"


def test_decoder_baselines_pay_eager_dispatch(demand) -> None:
    dense = _ctx("dense", demand)
    sw = dense.ctx.software
    assert _host(dense.work["qkv"])[0, 0] == pytest.approx(HF_QKV.seconds(sw))
    assert _host(dense.work["ffn"])[0, 0] == pytest.approx(HF_FFN.seconds(sw))
    fk = _ctx("dense", demand, method_options={"runtime": "freekv"})
    assert _host(fk.work["qkv"])[0, 1] == pytest.approx(FREEKV_QKV.seconds(sw))
    for method in ("dense", "full-offload", "raas", "razorattention"):
        ideal = _ctx(method, demand, implementation="ideal")
        assert all(np.all(_host(w) == 0.0) for w in ideal.work.values()), method
        pub = _ctx(method, demand)
        assert sum(float(np.sum(_host(w))) for w in pub.work.values()) > 0.0, method
    off = _ctx("full-offload", demand)
    assert off.work["fetch"].issuer == "host" and off.work["fetch"].issue_s == sw.torch_copy_call_s
    assert next(op for op in off.method.template(off.ctx) if op.name == "qkv").host_sync


def test_host_ops_price_each_count() -> None:
    from sim.software import load_software

    sw = load_software("pytorch2-cuda12")
    ops = HostOps(torch_ops=2, memcpy_calls=3, readbacks=1)
    assert ops.seconds(sw) == pytest.approx(
        2 * sw.torch_op_dispatch_s + 3 * sw.memcpy_async_call_s + sw.readback_s
    )
    assert (ops + ops).seconds(sw) == pytest.approx(2 * ops.seconds(sw))


def test_correction_recall_shares_the_background_streams_as_published(demand) -> None:
    pub = _ctx("freekv", demand)
    ops = {op.name: op for op in pub.method.template(pub.ctx)}
    assert ops["recall_sync"].resources[0] == "recall_bg" == ops["recall_bg"].resources[0]
    ideal = _ctx("freekv", demand, implementation="ideal")
    ops = {op.name: op for op in ideal.method.template(ideal.ctx)}
    assert ops["recall_sync"].resources[0] == "recall_sync"
