"""LazyEviction's simulator model: the tokens it prices per step are the shared schedule's (the runtime
policy attends exactly those, tests/freekv_runtime/test_lazyeviction.py), it evicts only on the schedule's
steps, and its memory is the most a head holds."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import SimConfig
from sim.engine import run_simulation
from sim.methods import get_method
from sim.synthetic import synthetic_demand
from traces.lazy_schedule import lazy_attended_tokens
from traces.models import get_model

MODEL = "llama-3.1-8b"
STEPS = 64


def _cfg(**kw) -> SimConfig:
    base = dict(model=MODEL, hardware="a100-40g-pcie4", method="lazyeviction", batch_size=2,
                input_tokens=4096,
                output_tokens=STEPS, page_size=32, budget_tokens=1024, sink_tokens=32, window_tokens=32)
    base.update(kw)
    return SimConfig(**base)


@pytest.fixture(scope="module")
def demand():  # noqa: ANN201
    return synthetic_demand(f"correction=0.3,hit=0.8,steps={STEPS},seqs=2", model=MODEL, seed=0)


def test_evictions_follow_the_schedule(demand) -> None:  # noqa: ANN001
    for rule in ("peak", "published"):
        cfg = _cfg(method_options={"budget_rule": rule})
        out = run_simulation(cfg, demand, seed=0)
        held = lazy_attended_tokens(4096, STEPS, 1024, 32, rule)
        n_evictions = int((np.diff(held) < 0).sum())
        assert n_evictions == (2 if rule == "peak" else 1)  # peak: after step 1 and step 32
        assert out.breakdown_s["evict"] > 0


def test_published_budget_attends_more_than_peak(demand) -> None:  # noqa: ANN001
    peak = run_simulation(_cfg(method_options={"budget_rule": "peak"}), demand, seed=0)
    published = run_simulation(_cfg(method_options={"budget_rule": "published"}), demand, seed=0)
    # published attends the whole 4K prompt until step 32, peak at most the budget after step 1
    assert published.breakdown_s["attention"] > 1.5 * peak.breakdown_s["attention"]


def test_memory_is_the_most_a_head_holds() -> None:
    model = get_model(MODEL)
    for rule, prompt in (("peak", 512), ("peak", 4096), ("published", 512)):
        cfg = _cfg(input_tokens=prompt, method_options={"budget_rule": rule})
        need = get_method(cfg).memory(cfg, model)
        most = lazy_attended_tokens(prompt, STEPS, 1024, 32, rule).max()
        per_query_head = model.n_qo_heads * most * (2 * model.head_dim * cfg.dtype_bytes + 8)
        dense = prompt + STEPS
        dense_bytes = dense * 2 * model.n_kv_heads * model.head_dim * cfg.dtype_bytes
        n_dense = len(cfg.dense_layers)
        want = (model.n_layers - n_dense) * per_query_head + n_dense * dense_bytes
        assert need.gpu_per_seq_bytes == int(want)
        assert need.host_per_seq_bytes == 0
    per_head, grouped = _cfg(), _cfg(method_options={"selection": "per-kv-head"})
    assert (get_method(grouped).memory(grouped, model).gpu_per_seq_bytes
            < get_method(per_head).memory(per_head, model).gpu_per_seq_bytes)
