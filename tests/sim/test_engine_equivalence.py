"""The aggregated engine (closed forms + compiled stream recurrence) equals the fine-grained SimPy
model (every op and every copy a SimPy process): for every available method on a small case, and on
random templates with host time, host-issued and pool-issued transfers, staging and shared copy engines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import SimConfig, synthetic_demand
from sim.actors import simulate_simpy
from sim.copy_engines import CopyEngines
from sim.engine import prepare
from sim.methods import available_methods
from sim.methods.base import Dep, Kernel, OpSpec, Transfer
from sim.schedule import run_schedule

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def demand():
    return synthetic_demand("correction=0.5,hit=0.6,steps=16,seqs=2", model=MODEL, seed=5)


def _assert_equal(template, work, sync_s, engines, record) -> None:
    agg = run_schedule(template, work, sync_s, record_steps=record, copy_engines=engines)
    fine = simulate_simpy(template, work, sync_s, record_steps=record, copy_engines=engines)
    np.testing.assert_allclose(agg.step_end_s, fine.step_end_s, rtol=1e-9, atol=1e-15)
    # op-level events agree too: same ops on the same lanes at the same times
    a = sorted((e[0], e[1], e[4], e[5], round(e[2], 12), round(e[3], 12)) for e in agg.events)
    f = sorted((e[0], e[1], e[4], e[5], round(e[2], 12), round(e[3], 12)) for e in fine.events)
    assert [x[:4] for x in a] == [x[:4] for x in f]
    np.testing.assert_allclose(
        np.array([x[4:] for x in a]).reshape(-1, 2), np.array([x[4:] for x in f]).reshape(-1, 2), atol=1e-12
    )
    for d in ("h2d", "d2h"):
        assert agg.link_busy_s[d] == pytest.approx(fine.link_busy_s[d], rel=1e-9, abs=1e-15)


# method variants whose template differs from the default's: (method, method_options)
VARIANTS = [(m, {}) for m in available_methods()] + [("quest", {"offload": True})]


@pytest.mark.parametrize(("method", "options"), VARIANTS, ids=lambda v: str(v) if v else "")
def test_aggregated_equals_fine_grained(method: str, options: dict, demand) -> None:
    cfg = SimConfig(
        model=MODEL,
        hardware="a100-40g-pcie4",
        method=method,
        method_options=options,
        batch_size=2,
        input_tokens=1300,
        output_tokens=3,
        page_size=32,
        budget_tokens=768,
        sink_tokens=128,
        window_tokens=128,
    )
    prep = prepare(cfg, demand, seed=0)
    engines = CopyEngines.from_profile(prep.ctx.profile)
    _assert_equal(prep.template, prep.work, prep.ctx.profile.host.sync_s, engines, [0, 1, 2])


def test_fine_grained_records_every_copy(demand) -> None:
    cfg = SimConfig(
        model=MODEL,
        hardware="a100-40g-pcie4",
        method="freekv",
        batch_size=1,
        input_tokens=1300,
        output_tokens=2,
        page_size=32,
        budget_tokens=768,
        sink_tokens=128,
        window_tokens=128,
    )
    prep = prepare(cfg, demand, seed=0)
    fine = simulate_simpy(
        prep.template, prep.work, prep.ctx.profile.host.sync_s, record_steps=[1], record_copies=True
    )
    expected = int(
        prep.work["recall_sync"].n_copies[1].sum()
        + prep.work["recall_bg"].n_copies[1].sum()
        + prep.work["offload"].n_copies[1].sum()
    )
    assert len(fine.copy_events) == expected > 0


STREAMS = ("compute", "side", "recall_sync", "recall_bg", "offload")


@st.composite
def _case(draw):
    """A random template (3-7 ops) with random work on a random (S, L) grid and copy-engine spec."""
    n_steps, n_layers = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    shape = (n_steps, n_layers)
    n_ops = draw(st.integers(3, 7))
    names = [f"op{i}" for i in range(n_ops)]
    small = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0])

    def array(values, zero_share=0.3):
        vals = draw(st.lists(values, min_size=n_steps * n_layers, max_size=n_steps * n_layers))
        arr = np.array(vals, dtype=np.float64).reshape(shape)
        mask = np.array(draw(st.lists(st.floats(0, 1), min_size=arr.size, max_size=arr.size))).reshape(shape)
        return np.where(mask < zero_share, 0.0, arr)

    template, work = [], {}
    for i, name in enumerate(names):
        deps = []
        for j in draw(st.lists(st.integers(0, n_ops - 1), max_size=2, unique=True)):
            lag = draw(st.sampled_from(["layer", "prev_layer", "prev_step"]))
            if lag == "layer" and j >= i:
                lag = "prev_layer"
            deps.append(Dep(names[j], lag))
        is_transfer = draw(st.booleans())
        if is_transfer:
            streams = (draw(st.sampled_from(STREAMS)),)
            if draw(st.booleans()):
                streams = (*streams, draw(st.sampled_from(("h2d", "d2h"))))  # tolerated, stripped
        else:
            streams = tuple(draw(st.lists(st.sampled_from(STREAMS), max_size=2, unique=True)))
        host_s = draw(st.one_of(small, st.just(None)))
        host = array(small) if host_s is None else host_s
        if is_transfer:
            issuer = draw(st.sampled_from(["pool", "host"]))
            chunk = draw(st.integers(0, 3))
            copy_s = draw(st.one_of(small.filter(lambda v: v > 0), st.just(None)))
            work[name] = Transfer(
                direction=draw(st.sampled_from(["h2d", "d2h"])),
                n_copies=array(st.integers(1, 7)).astype(np.int64),
                copy_s=array(small.filter(lambda v: v > 0), 0.0) if copy_s is None else copy_s,
                bytes_per_copy=1024.0,
                issue_s=draw(small),
                issue_threads=1 if issuer == "host" else draw(st.integers(1, 3)),
                chunk_copies=chunk,
                buffers=draw(st.sampled_from([1, 2])) if chunk else 0,
                convert_fixed_s=draw(small) if chunk else 0.0,
                convert_per_copy_s=draw(small) if chunk else 0.0,
                host_s=host,
                issuer=issuer,
            )
        else:
            work[name] = Kernel(array(small), host_s=host)
        template.append(
            OpSpec(name, streams, tuple(deps), host_sync=draw(st.booleans()) and draw(st.booleans()))
        )
    engines = CopyEngines(
        copy_engines=draw(st.integers(1, 3)),
        engines_per_direction=draw(st.integers(1, 2)),
        dma_latency_s=draw(st.sampled_from([0.0, 0.25, 0.5])),
    )
    return tuple(template), work, draw(small), engines, list(range(n_steps))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_random_templates_equal(case) -> None:
    template, work, sync_s, engines, record = case
    _assert_equal(template, work, sync_s, engines, record)
    # the breakdown accounts for the whole compute stream: busy time plus blamed idle time
    res = run_schedule(template, work, sync_s, copy_engines=engines)
    if any("compute" in op.resources for op in template):
        total = sum(res.busy_s.values()) + sum(res.stall_s.values())
        assert total == pytest.approx(float(res.step_end_s[-1]), rel=1e-12, abs=1e-12)
