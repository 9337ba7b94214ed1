"""The decoder-layer skeleton (sim/methods/decoder_layer.py): every model runs the shared layer, own ops sit
where they are declared, and the shared ops' host costs follow the model's decoder recipe."""

from __future__ import annotations

import numpy as np
import pytest

from sim import SimConfig, synthetic_demand
from sim.engine import prepare
from sim.methods import method_class, method_names
from sim.methods.base import Dep, OpSpec
from sim.methods.decoder_layer import SHARED_OPS, DecoderMethod, OwnOps, decoder_template
from sim.methods.eager import FREEKV_DECODER, HF_DECODER

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def demand():
    return synthetic_demand("correction=0.5,hit=0.8,steps=4,seqs=1", model=MODEL, seed=0)


def _prep(method: str, demand, implementation: str = "as-published", **options):
    cfg = SimConfig(model=MODEL, hardware="a100-40g-pcie4", method=method, input_tokens=3000,
                    output_tokens=4, budget_tokens=512, sink_tokens=64, window_tokens=64,
                    dense_layers=(0,), implementation=implementation, method_options=options)
    return prepare(cfg, demand)


@pytest.mark.parametrize("implementation", ["as-published", "ideal"])
@pytest.mark.parametrize("name", method_names())
def test_every_model_runs_the_shared_layer(name: str, implementation: str, demand) -> None:
    assert issubclass(method_class(name), DecoderMethod)
    prep = _prep(name, demand, implementation)
    names = [op.name for op in prep.template]
    assert [n for n in names if n in SHARED_OPS] == list(SHARED_OPS)
    assert names[-1] == "lm_head" and prep.template[-1].host_sync
    for op in prep.template:
        if op.name in SHARED_OPS:
            assert op.resources == ("compute",) and op.category == "compute"
    lm_head = np.asarray(prep.work["lm_head"].seconds)
    assert np.all(lm_head[:, :-1] == 0.0) and np.all(lm_head[:, -1] > 0.0)
    if implementation == "ideal":
        assert all(np.all(np.asarray(prep.work[op].host_s) == 0.0) for op in SHARED_OPS)


def test_own_ops_sit_where_declared() -> None:
    own = OwnOps(
        before_qkv=(OpSpec("a", ()),),
        after_qkv=(OpSpec("b", ("side",)),),
        after_attention=(OpSpec("c", ("side",)),),
        after_out_proj=(OpSpec("d", ()),),
        after_ffn=(OpSpec("e", ()),),
        attention_deps=(Dep("b"),),
        syncs=frozenset({"ffn"}),
    )
    template = decoder_template(own)
    assert [op.name for op in template] == ["a", "qkv", "b", "attention", "c", "out_proj", "d", "ffn", "e",
                                            "lm_head"]
    by_name = {op.name: op for op in template}
    assert by_name["attention"].deps == (Dep("b"),)
    assert [op.name for op in template if op.host_sync] == ["ffn", "lm_head"]


def test_syncs_name_shared_ops_only() -> None:
    with pytest.raises(ValueError, match="shared op"):
        OwnOps(syncs=frozenset({"select"}))


def test_own_work_may_not_replace_a_shared_op(demand) -> None:
    prep = _prep("dense", demand)

    class Clash(type(prep.method)):
        def own_work(self, ctx):
            return {"qkv": prep.work["qkv"]}

    with pytest.raises(ValueError, match="shared ops"):
        Clash(prep.method.knobs).work(prep.ctx)


@pytest.mark.parametrize(("runtime", "recipe"), [("hf", HF_DECODER), ("freekv", FREEKV_DECODER)])
def test_recipe_prices_the_shared_ops(runtime: str, recipe, demand) -> None:
    prep = _prep("dense", demand, runtime=runtime)
    sw, work = prep.ctx.software, prep.work
    qkv = np.asarray(work["qkv"].host_s)
    prepare_s = recipe.step_prepare(prep.ctx.model.n_layers).seconds(sw)
    assert np.allclose(qkv[:, 0], recipe.qkv.seconds(sw) + prepare_s)
    assert np.all(qkv[:, 1:] == recipe.qkv.seconds(sw))
    assert work["attention"].host_s == recipe.attention.seconds(sw)
    assert np.all(np.asarray(work["lm_head"].host_s)[:, -1] == recipe.step.seconds(sw))
    assert (prepare_s > 0.0) == (runtime == "freekv")
