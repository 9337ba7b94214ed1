"""The simulator's RazorAttention model replays the retrieval heads its own trace's probe measured
(meta.extra["policy_probe"]): per layer on the traced model, through the layer map when mapped onto
another model; method_options.retrieval_fraction wins; the notes say where the share came from. Exact
arithmetic on the attended tokens and the memory kept."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sim_trace_factory import make_trace

from dse.commands.sim import command
from sim import SimConfig, SimInputError, demand_from_trace, run_simulation, synthetic_demand
from sim.capacity import memory_at
from sim.demand import layer_map
from sim.engine import prepare
from sim.methods import get_method
from traces.models import get_model
from traces.probe import PROBE_KEY, retrieval_probe

MODEL = "smollm2-135m"  # 30 layers x 3 KV heads, head_dim 64
L, H = 30, 3
COUNTS = np.arange(L) % 4  # retrieval KV heads per layer: 0, 1, 2, 3, 0, ...
HEADS = np.arange(H)[None, :] < COUNTS[:, None]  # (L, H) bool
SHARES = COUNTS / H  # per layer
INPUT, OUTPUT, BUDGET = 1200, 24, 512


def _trace(path: Path, probe: bool = True) -> Path:
    extra = {PROBE_KEY: retrieval_probe(HEADS, 1024)} if probe else {}
    return make_trace(path, method="razorattention", n_steps=8, budget_tokens=BUDGET, extra=extra)


def _cfg(**kw) -> SimConfig:
    base = dict(model=MODEL, hardware="a100-40g-pcie4", method="razorattention", batch_size=1,
                input_tokens=INPUT, output_tokens=OUTPUT, page_size=32, budget_tokens=BUDGET, sink_tokens=64,
                window_tokens=64, dense_layers=(0,), implementation="ideal")
    base.update(kw)
    return SimConfig(**base)


def _expected_tokens(shares: np.ndarray, dense: tuple[int, ...] = (0,)) -> np.ndarray:
    """(S, L) tokens each KV head attends on average, by hand: a share f of the heads attends the whole
    context, the others sink + S0 + the compensation token = budget (S0 = budget - sink - 1, larger than
    ceil(N / 5) at these contexts: the paper's window is S0 here); dense layers everything."""
    ctx = (INPUT + np.arange(OUTPUT) + 1.0)[:, None]
    assert (np.ceil(ctx / 5) < BUDGET - 64 - 1).all()
    kept = shares[None, :] * ctx + (1 - shares[None, :]) * np.minimum(ctx, BUDGET)
    kept[:, list(dense)] = np.broadcast_to(ctx, (OUTPUT, 1))
    return kept


def test_demand_carries_the_probe(tmp_path: Path) -> None:
    d = demand_from_trace(_trace(tmp_path / "t"))
    assert d.method == "razorattention" and d.retrieval_share == pytest.approx(HEADS.mean())
    np.testing.assert_allclose(d.retrieval_share_per_layer, SHARES)
    old = demand_from_trace(_trace(tmp_path / "old", probe=False))
    assert old.retrieval_share is None and old.retrieval_share_per_layer is None


def test_measured_shares_set_the_attended_tokens_and_memory(tmp_path: Path) -> None:
    cfg, demand = _cfg(), demand_from_trace(_trace(tmp_path / "t"))
    prep = prepare(cfg, demand)
    want = prep.ctx.cost.attention_s(_expected_tokens(SHARES))
    np.testing.assert_allclose(prep.work["attention"].seconds, want, rtol=1e-12)
    # a layer whose heads all retrieve attends like a dense layer; one without any like the budget
    full, none = prep.ctx.cost.attention_s(INPUT + 1.0), prep.ctx.cost.attention_s(float(BUDGET))
    assert prep.work["attention"].seconds[0, 3] == pytest.approx(full)
    assert prep.work["attention"].seconds[0, 4] == pytest.approx(none)
    paper = prepare(cfg, None).work["attention"].seconds  # no trace: 0.15 everywhere
    np.testing.assert_allclose(paper, prep.ctx.cost.attention_s(_expected_tokens(np.full(L, 0.15))))
    # memory: K and V of what is kept at the last context, 2 x 3 heads x 64 x 2 bytes per token and layer
    ctx = INPUT + OUTPUT
    kept = SHARES * ctx + (1 - SHARES) * BUDGET
    kept[0] = ctx
    gpu = 2 * H * 64 * 2 * kept.sum()
    assert prep.method.memory(cfg, get_model(MODEL)).gpu_per_seq_bytes == round(gpu)
    res = run_simulation(cfg, demand)
    assert res.memory.kv_gpu_bytes == memory_at(cfg, demand).kv_gpu_bytes
    assert memory_at(cfg, demand).kv_gpu_bytes != memory_at(cfg).kv_gpu_bytes  # the paper's 0.15
    assert any("retrieval-head probe measured 47.8% of smollm2-135m's KV heads, used per layer" in n
               for n in res.notes), res.notes  # 43 of 90 KV heads
    assert res.demand_label == str(tmp_path / "t")


def test_user_fraction_wins_and_says_what_was_measured(tmp_path: Path) -> None:
    cfg = _cfg(method_options={"retrieval_fraction": 0.15})
    demand = demand_from_trace(_trace(tmp_path / "t"))
    prep = prepare(cfg, demand)
    np.testing.assert_array_equal(prep.method.fractions(L), np.full(L, 0.15))
    np.testing.assert_allclose(prep.work["attention"].seconds,
                               prep.ctx.cost.attention_s(_expected_tokens(np.full(L, 0.15))), rtol=1e-12)
    notes = run_simulation(cfg, demand).notes
    assert ("razorattention retrieval_fraction 0.15 from method_options (the trace's retrieval-head probe "
            "measured 47.8% of smollm2-135m's KV heads)") in notes


def test_notes_without_a_probe(tmp_path: Path) -> None:
    old = run_simulation(_cfg(), demand_from_trace(_trace(tmp_path / "old", probe=False))).notes
    assert ("razorattention retrieval_fraction 0.15 (the FreeKV paper's setup): the trace records no "
            "retrieval-head probe") in old
    assert "razorattention retrieval_fraction 0.15 (the FreeKV paper's setup): no trace" in \
        run_simulation(_cfg(), None).notes
    synthetic = synthetic_demand("correction=0.5,hit=0.8,steps=8", model=MODEL)
    assert any(n.endswith(": synthetic demand") for n in run_simulation(_cfg(), synthetic).notes)


def test_transplant_maps_the_shares_per_layer(tmp_path: Path) -> None:
    target = get_model("llama-3.1-8b")
    demand = demand_from_trace(_trace(tmp_path / "t"), target.name)
    assert demand.retrieval_share == pytest.approx(HEADS.mean())  # the share transfers as it is
    mapped = SHARES[layer_map(target.n_layers, L)]
    np.testing.assert_allclose(demand.retrieval_share_per_layer, mapped)
    cfg = _cfg(model=target.name)
    prep = prepare(cfg, demand)
    np.testing.assert_allclose(prep.method.fractions(target.n_layers), mapped)
    assert any("its layers mapped onto llama-3.1-8b's" in n for n in run_simulation(cfg, demand).notes)


def test_measured_fields_are_not_user_options() -> None:
    with pytest.raises(SimInputError, match="'measured_per_layer' is not a knob of razorattention; "
                                            "valid knobs: .*retrieval_fraction"):
        get_method(_cfg(method_options={"measured_per_layer": [0.5] * L}))


def test_cli_notes_the_measured_share(tmp_path: Path) -> None:
    args = [str(_trace(tmp_path / "t")), "--model", MODEL, "--hardware", "a100-40g-pcie4", "--input-tokens",
            str(INPUT), "--output-tokens", "8", "--json"]
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["method"] == "razorattention"
    assert any("retrieval-head probe measured 47.8%" in n for n in out["notes"]), out["notes"]
