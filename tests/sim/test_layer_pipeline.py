"""The order of a document-cache fetch and a partial recompute: the stage-synchronous layer pipeline on
hand-computed cases, and each multi-context model's order as published and ideal."""

from __future__ import annotations

import numpy as np
import pytest

from sim.config import SimConfig
from sim.engine import prepare
from sim.methods.layer_pipeline import fetch_compute_s, layer_pipeline_s
from sim.synthetic import synthetic_demand

MODEL = "llama-3.1-8b"


@pytest.mark.parametrize(("fetch", "compute", "expected"), [
    ([1, 1, 1], [2, 2, 2], 1 + 2 + 2 + 2),  # compute-bound: only the first fetch shows
    ([3, 3, 3], [1, 1, 1], 3 + 3 + 3 + 1),  # fetch-bound: only the last compute shows
    ([1, 4, 1], [5, 1, 2], 1 + max(5, 4) + max(1, 1) + 2),
    ([2], [3], 5),  # one layer: fill then drain
    ([0, 0], [1, 2], 3),  # nothing fetched: the compute alone
])
def test_layer_pipeline_by_hand(fetch: list[float], compute: list[float], expected: float) -> None:
    assert layer_pipeline_s(np.array(fetch, float), np.array(compute, float)) == pytest.approx(expected)
    assert fetch_compute_s("sequential", np.array(fetch, float), np.array(compute, float)) == pytest.approx(
        sum(fetch) + sum(compute))


def test_layer_pipeline_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="two"):
        layer_pipeline_s(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="valid orders"):
        fetch_compute_s("overlapped", np.ones(2), np.ones(2))
    assert layer_pipeline_s(np.zeros(0), np.zeros(0)) == 0.0


def _prefill(method: str, implementation: str, **options: object):
    cfg = SimConfig(model=MODEL, hardware="h100-sxm", method=method, batch_size=1, input_tokens=8256,
                    output_tokens=16, method_options=dict(options), implementation=implementation)
    demand = synthetic_demand("correction=0,hit=1,steps=16,seqs=1", model=MODEL, seed=0)
    prep = prepare(cfg, demand, seed=0)
    return prep.method, prep.ctx, prep.method.prefill(prep.ctx)


def _fetched_bytes(method, ctx) -> float:  # noqa: ANN001
    k, n, seq, _ = method.resolved(ctx.cfg, ctx.model)
    return ctx.cfg.batch_size * method.knobs.hit_rate * k * n * seq * ctx.model.kv_bytes_per_token(
        ctx.cfg.dtype_bytes)


def _run_bytes(method, ctx) -> int:  # noqa: ANN001
    _, n, _, _ = method.resolved(ctx.cfg, ctx.model)
    return max(1, int(method.fetch_run_tokens(n) * ctx.model.head_dim * ctx.cfg.dtype_bytes))


def test_epic_fetches_first_as_published_and_pipelines_ideally() -> None:
    method, ctx, pub = _prefill("epic", "as-published")
    _, _, ideal = _prefill("epic", "ideal")
    fetched, run = _fetched_bytes(method, ctx), _run_bytes(method, ctx)
    assert pub["prefill_fetch"] == pytest.approx(float(ctx.cost.copy_s(fetched, run, "h2d")))
    # EPIC recomputes the same rows at every layer: each layer's compute is the mean
    L = ctx.model.n_layers
    compute = pub["prefill_recompute_linear"] + pub["prefill_recompute_attention"]
    per_fetch = np.full(L, float(ctx.cost.copy_s(fetched / L, run, "h2d")))
    expected = layer_pipeline_s(per_fetch, np.full(L, compute / L)) - compute
    assert ideal["prefill_fetch"] == pytest.approx(expected, rel=1e-9)
    assert ideal["prefill_fetch"] < pub["prefill_fetch"]
    assert ideal["prefill_recompute_linear"] == pub["prefill_recompute_linear"]


def test_cacheblend_is_layer_pipelined_as_published() -> None:
    method, ctx, pub = _prefill("cacheblend", "as-published")
    _, _, ideal = _prefill("cacheblend", "ideal")
    fetched, run = _fetched_bytes(method, ctx), _run_bytes(method, ctx)
    L = ctx.model.n_layers
    assert pub == ideal
    # exposed fetch: at least the fill (layer 0's fetch), less than the whole fetch
    assert float(ctx.cost.copy_s(fetched / L, run, "h2d")) * (1 - 1e-9) <= pub["prefill_fetch"]
    assert pub["prefill_fetch"] < float(ctx.cost.copy_s(fetched, run, "h2d"))


def test_samkv_fetches_its_anchors_before_the_pipeline_ideally() -> None:
    method, ctx, pub = _prefill("samkv", "as-published")
    _, _, ideal = _prefill("samkv", "ideal")
    fetched, run = _fetched_bytes(method, ctx), _run_bytes(method, ctx)
    _, n, seq, _ = method.resolved(ctx.cfg, ctx.model)
    share = method.pipelined_fetch_share(n, seq)
    anchors, _ = method._anchors(n)
    assert share == pytest.approx(1.0 - anchors / (seq * n))
    assert pub["prefill_fetch"] == pytest.approx(float(ctx.cost.copy_s(fetched, run, "h2d")))
    assert float(ctx.cost.copy_s(fetched * (1.0 - share), run, "h2d")) < ideal["prefill_fetch"]
    assert ideal["prefill_fetch"] < pub["prefill_fetch"]
