"""The multi-context models' pricing: document caches fetched from host memory on a hit, misses prefilled,
recompute priced as the prefill of the recomputed rows, decode and memory over the kept tokens; a trace's
recorded shares replace each method's rule."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.config import SimConfig
from sim.demand.records import RagShares
from sim.engine import run_simulation
from sim.methods import get_method
from sim.synthetic import synthetic_demand
from traces.models import get_model

MODEL = "llama-3.1-8b"
METHODS = ("rag-no-recompute", "rag-full-recompute", "cacheblend", "epic", "samkv")


def _cfg(method: str, **options: object) -> SimConfig:
    return SimConfig(model=MODEL, hardware="h100-sxm", method=method, batch_size=1, input_tokens=8256,
                     output_tokens=16, method_options=dict(options))


def _run(method: str, **options: object):
    demand = synthetic_demand("correction=0,hit=1,steps=16,seqs=1", model=MODEL, seed=0)
    return run_simulation(_cfg(method, **options), demand, seed=0)


@pytest.mark.parametrize("method", METHODS)
def test_every_multi_context_method_simulates(method: str) -> None:
    out = _run(method)
    assert out.prefill_s > 0 and np.isfinite(out.step_latency_s).all()


def test_full_recompute_is_a_dense_prefill_and_reuse_is_the_cheapest_ttft() -> None:
    full, none = _run("rag-full-recompute"), _run("rag-no-recompute")
    dense = _run("dense")
    assert full.prefill_s == pytest.approx(dense.prefill_s)
    assert none.prefill_s < _run("epic").prefill_s < _run("cacheblend").prefill_s < full.prefill_s
    assert none.prefill_breakdown_s["prefill_fetch"] > 0  # the caches cross the host link


def test_misses_are_prefilled_and_hits_fetched() -> None:
    hit, miss = _run("rag-no-recompute"), _run("rag-no-recompute", hit_rate=0.0)
    assert hit.prefill_breakdown_s["prefill_documents"] == 0
    assert miss.prefill_breakdown_s["prefill_fetch"] == 0
    assert miss.prefill_breakdown_s["prefill_documents"] > 0
    assert miss.prefill_s > hit.prefill_s


def test_cacheblend_rule_recomputes_all_to_the_check_layer() -> None:
    method = get_method(_cfg("cacheblend", recompute_ratio=0.2, ratio_decay=0.5))
    seq, ratios = method.rule_shares(6, 1000.0)
    assert seq == 1.0 and ratios.tolist() == [1.0, 1.0, 0.2, 0.1, 0.05, 0.025]


def test_samkv_fetches_and_keeps_less_from_a_trace() -> None:
    cfg = _cfg("samkv")
    model = get_model(MODEL)
    shares = RagShares(documents=4, document_share=0.99, sequence_ratio=0.25,
                       recompute_ratio=np.full(model.n_layers, 0.15))
    sam = replace(get_method(cfg), shares=shares)
    reuse = get_method(_cfg("rag-no-recompute"))
    assert sam.memory(cfg, model).gpu_per_seq_bytes < reuse.memory(cfg, model).gpu_per_seq_bytes
    assert sam.memory(cfg, model).host_per_seq_bytes == pytest.approx(
        reuse.memory(cfg, model).host_per_seq_bytes, rel=0.02)
    assert "from the trace" in sam.notes()[0]
