"""Closed forms of the cost model, checked against hand arithmetic and against the SimPy copy pipeline."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sim.actors import transfer_process
from sim.cost_model import CostModel, transfer_duration_s
from sim.hardware import load_profile
from sim.methods.base import Transfer
from traces.models import get_model


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-40g-pcie4")


def test_one_copy_is_issue_plus_latency_plus_bytes_over_bandwidth(a100) -> None:
    link = a100.link
    n_bytes = 16384
    expected = (
        link.copy_issue_s
        + link.dma_latency_s
        + n_bytes / (link.h2d_effective_gbps * 1e9 * link.efficiency(n_bytes))
    )
    cost = CostModel(get_model("llama-3.1-8b"), a100, batch=1)
    copy_s = float(cost.copy_s(n_bytes, n_bytes, "h2d"))
    got = transfer_duration_s(np.array([1]), copy_s, link.copy_issue_s, issue_threads=4)
    assert got[0] == pytest.approx(expected, rel=1e-12)


def test_engine_bound_and_issue_bound_pipelines() -> None:
    # engine-bound: first issue then n engine slots; issue-bound: n issues then one engine slot
    assert transfer_duration_s(np.array([10]), 5.0, 1.0, 1)[0] == pytest.approx(1.0 + 10 * 5.0)
    assert transfer_duration_s(np.array([10]), 1.0, 5.0, 1)[0] == pytest.approx(10 * 5.0 + 1.0)
    # two threads halve the issue time: pairs issued at 5, 10, ..., 25; the last pair copies one by one
    assert transfer_duration_s(np.array([10]), 1.0, 5.0, 2)[0] == pytest.approx(25.0 + 2 * 1.0)
    # double buffering: DMA of chunk i+1 overlaps conversion of chunk i
    no_db = transfer_duration_s(np.array([8]), 1.0, 0.0, 1, chunk_copies=2, buffers=1, convert_fixed_s=2.0)
    db = transfer_duration_s(np.array([8]), 1.0, 0.0, 1, chunk_copies=2, buffers=2, convert_fixed_s=2.0)
    assert no_db[0] == pytest.approx(4 * (2.0 + 2.0))
    assert db[0] == pytest.approx(2.0 + 4 * 2.0)  # conversion-bound: first chunk's copy, then 4 conversions
    assert transfer_duration_s(np.array([0]), 1.0, 1.0, 1)[0] == 0.0


def _simpy_transfer(tr: Transfer) -> float:
    env = simpy.Environment()
    env.process(transfer_process(env, tr, 0, 0))
    env.run()
    return env.now


@pytest.mark.parametrize("seed", range(12))
def test_closed_form_equals_copy_by_copy_simulation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    chunk = int(rng.integers(0, 9))
    tr = Transfer(
        direction="h2d",
        n_copies=np.array([[n]]),
        copy_s=float(rng.uniform(0.5, 3.0)),
        bytes_per_copy=1.0,
        issue_s=float(rng.uniform(0.1, 4.0)),
        issue_threads=int(rng.integers(1, 5)),
        chunk_copies=chunk,
        buffers=int(rng.integers(1, 3)) if chunk else 0,
        convert_fixed_s=float(rng.uniform(0, 3)) if chunk else 0.0,
        convert_per_copy_s=float(rng.uniform(0, 0.5)) if chunk else 0.0,
    )
    closed = transfer_duration_s(
        tr.n_copies,
        tr.copy_s,
        tr.issue_s,
        tr.issue_threads,
        tr.chunk_copies,
        tr.buffers,
        tr.convert_fixed_s,
        tr.convert_per_copy_s,
    )
    assert closed[0, 0] == pytest.approx(_simpy_transfer(tr), rel=1e-12)


def test_roofline_scales_with_batch_and_bandwidth(a100) -> None:
    model = get_model("llama-3.1-8b")
    c1, c4 = CostModel(model, a100, 1), CostModel(model, a100, 4)
    assert c4.ffn_s() >= c1.ffn_s() and float(c4.attention_s(4096)) > float(c1.attention_s(4096))
    slow = CostModel(model, a100.with_overrides({"gpu.hbm_bandwidth_gbps": 500.0}), 1)
    assert slow.ffn_s() > c1.ffn_s()
    # decode FFN of an 8B model is memory bound: weight bytes over achievable bandwidth (+ launches)
    weights = 3 * model.hidden_size * model.ffn_size * 2
    launches = 5 * a100.gpu.kernel_launch_s
    assert c1.ffn_s() == pytest.approx(weights / c1.hbm_bytes_per_s + launches, rel=0.01)
