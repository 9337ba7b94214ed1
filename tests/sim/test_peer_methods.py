"""Peer methods (Quest, ArkVale, ShadowKV, InfiniGen and the dropping RaaS, RazorAttention, StreamingLLM,
H2O, SnapKV): properties of their designs.

Each test states a consequence of the method's design (docs/methods.md) and checks the simulator shows
it on synthetic demand; the last tests check every peer against the fine-grained SimPy engine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.config import SimConfig
from sim.demand import Demand
from sim.engine import run_simulation
from sim.errors import SimInputError
from sim.methods import METHODS, available_methods, get_method, method_class
from sim.synthetic import synthetic_demand
from traces.catalogue import CATALOGUE, names
from traces.models import get_model

# every catalogue method with a runtime policy and a model, but FreeKV and dense attention: a new method
# joins these tests by its catalogue entry
# single-context decode peers; the multi-context methods (document caches fetched at prefill) are tested
# in test_multi_context_models.py
PEERS = tuple(n for n in names(searchable=True)
              if n not in ("freekv", "dense") and CATALOGUE[n].kind != "multi-context")
MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def demand() -> Demand:
    return synthetic_demand("correction=0.3,hit=0.8,steps=256,seqs=2", model=MODEL, seed=0)


@pytest.fixture(scope="module")
def demand_all_hits() -> Demand:
    return synthetic_demand("correction=0.3,hit=0.99,steps=256,seqs=2", model=MODEL, seed=0)


def _cfg(method: str, **kw) -> SimConfig:
    base = dict(
        model=MODEL,
        hardware="a100-40g-pcie4",
        method=method,
        batch_size=2,
        input_tokens=8192,
        output_tokens=64,
        page_size=32,
        budget_tokens=2048,
        sink_tokens=512,
        window_tokens=512,
    )
    base.update(kw)
    return SimConfig(**base)


def _run(method: str, demand: Demand, **kw):
    return run_simulation(_cfg(method, **kw), demand, seed=0)


def _keeps_kv_on_host(name: str) -> bool:
    """Whether the method's model keeps KV in host memory (its memory need at the default config)."""
    cfg = _cfg(name)
    return get_method(cfg).memory(cfg, get_model(MODEL)).host_per_seq_bytes > 0


ON_GPU = tuple(n for n in PEERS if not _keeps_kv_on_host(n))
OFFLOADING = tuple(n for n in PEERS if _keeps_kv_on_host(n))


def test_peers_split_as_their_designs_say() -> None:
    assert {"arkvale", "shadowkv", "infinigen"} <= set(OFFLOADING)
    assert {"quest", "raas", "razorattention", "streamingllm", "h2o", "snapkv"} <= set(ON_GPU)


def _critical_s(out: dict, category: str) -> float:
    """Seconds per step on the critical path of the ops of `category`, with the host thread's time for
    them ("<op>.host": as published, e.g. ArkVale's Python recall loop, the host is what is late)."""
    cats = out["breakdown_category"]
    return sum(v for op, v in out["breakdown_s"].items() if cats.get(op.removesuffix(".host")) == category)


def _op_s(out: dict, op: str) -> float:
    """Critical-path seconds of `op`: its GPU/copy time and its host time ("<op>.host")."""
    return out["breakdown_s"].get(op, 0.0) + out["breakdown_s"].get(f"{op}.host", 0.0)


# ----- every peer -----


def test_every_peer_is_registered_and_importable() -> None:
    for name in PEERS:
        assert name in METHODS and name in available_methods()
        cls = method_class(name)
        assert CATALOGUE[name].summary and cls.sources


@pytest.mark.parametrize("name", PEERS)
def test_runs_on_synthetic_demand_and_is_deterministic(name: str, demand: Demand) -> None:
    a, b = _run(name, demand), _run(name, demand)
    out = a.to_dict()
    assert out["method"] == name and out["hardware"] == "a100-40g-pcie4"
    assert out["per_token_latency_s"]["mean"] > 0 and out["prefill_s"] > 0
    assert out["memory"]["gpu_bytes"] > 0 and out["memory"]["fits"]
    assert np.array_equal(a.step_latency_s, b.step_latency_s)
    assert a.step_latency_s.shape == (64,)


@pytest.mark.parametrize("name", PEERS)
def test_unknown_and_bad_options_are_clear_errors(name: str, demand: Demand) -> None:
    with pytest.raises(SimInputError, match=f"method_options: 'no_such_knob' is not a knob of {name}; valid"):
        _run(name, demand, method_options={"no_such_knob": 1})
    knob = CATALOGUE[name].knobs.names("simulator")[0]
    with pytest.raises(SimInputError, match=f"method_options: {name} knob {knob} must be"):
        _run(name, demand, method_options={knob: "not a value"})


@pytest.mark.parametrize("implementation", ["as-published", "ideal"])
@pytest.mark.parametrize("name", PEERS)
def test_latency_not_lower_when_link_bandwidth_falls(name: str, implementation: str, demand: Demand) -> None:
    slow_link = {"link.h2d_effective_gbps": 8.0, "link.d2h_effective_gbps": 8.0}
    fast = _run(name, demand, implementation=implementation).step_latency_s.mean()
    slow = _run(
        name, demand, implementation=implementation, hardware_overrides=slow_link
    ).step_latency_s.mean()
    assert slow >= fast * (1 - 1e-12)
    if name in ON_GPU:
        assert slow == pytest.approx(fast, rel=1e-12)  # nothing crosses the link
    elif name == "arkvale" and implementation == "as-published":
        # host-bound (test_arkvale_as_published_is_host_bound): the host waits for each copy, so the
        # link still shows, but weakly
        assert fast * 1.05 > slow > fast
    else:
        assert slow > fast * 1.02  # recall sits on their critical path


@pytest.mark.parametrize("name", ON_GPU)
def test_on_gpu_methods_use_no_host_link_or_host_memory(name: str, demand: Demand) -> None:
    out = _run(name, demand).to_dict()
    assert out["link_utilisation"] == {"h2d": 0.0, "d2h": 0.0}
    assert out["memory"]["host_bytes"] == 0
    assert out["critical_share"]["recall"] == 0.0


@pytest.mark.parametrize("name", OFFLOADING)
def test_offloading_methods_keep_kv_in_host_memory(name: str, demand: Demand) -> None:
    out = _run(name, demand).to_dict()
    assert out["memory"]["host_bytes"] > 0
    assert out["link_utilisation"]["h2d"] > 0
    assert _critical_s(out, "recall") > 0  # the copies or the host work issuing them


# ----- Quest -----


def test_quest_latency_grows_with_context_through_selection() -> None:
    short = _run("quest", None, input_tokens=4096).to_dict()
    long = _run("quest", None, input_tokens=65536).to_dict()
    assert long["breakdown_s"]["select"] > 4 * short["breakdown_s"]["select"]
    assert long["per_token_latency_s"]["mean"] > short["per_token_latency_s"]["mean"]
    # sparse attention reads the budget, not the context
    assert long["breakdown_s"]["attention"] == pytest.approx(short["breakdown_s"]["attention"], rel=1e-9)


def test_quest_keeps_full_kv_on_gpu_and_pays_per_query_head_traffic() -> None:
    dense = _run("dense", None).to_dict()["memory"]
    quest = _run("quest", None).to_dict()
    assert quest["memory"]["kv_gpu_bytes"] > dense["kv_gpu_bytes"]  # full KV plus min/max summaries
    grouped = _run("quest", None, method_options={"selection": "per-kv-head"}).to_dict()
    # GQA (G = 4 for Llama-3.1-8B): per-query-head page sets read ~G times the KV of one set per KV head
    ratio = quest["breakdown_s"]["attention"] / grouped["breakdown_s"]["attention"]
    assert 2.0 < ratio <= 4.0
    assert quest["breakdown_s"]["select"] > grouped["breakdown_s"]["select"]


# ----- ArkVale -----


@pytest.mark.parametrize("implementation", ["as-published", "ideal"])
def test_arkvale_recall_follows_cache_misses(
    implementation: str, demand: Demand, demand_all_hits: Demand
) -> None:
    misses = _run("arkvale", demand, implementation=implementation).to_dict()
    hits = _run("arkvale", demand_all_hits, implementation=implementation).to_dict()
    assert _op_s(hits, "recall") < 0.2 * _op_s(misses, "recall")
    assert hits["per_token_latency_s"]["mean"] < misses["per_token_latency_s"]["mean"]


@pytest.mark.parametrize("implementation", ["as-published", "ideal"])
def test_arkvale_whole_page_groups_avoid_fragmentation(implementation: str, demand: Demand) -> None:
    per_head = _run("arkvale", demand, implementation=implementation).to_dict()
    whole = _run(
        "arkvale", demand, implementation=implementation, method_options={"group_heads": 8}
    ).to_dict()
    assert _op_s(whole, "recall") < _op_s(per_head, "recall")
    with pytest.raises(SimInputError, match="group_heads=3 must divide"):
        _run("arkvale", demand, method_options={"group_heads": 3})


@pytest.mark.parametrize("implementation", ["as-published", "ideal"])
def test_arkvale_is_blocking_unlike_freekv(implementation: str, demand: Demand) -> None:
    """Same demand and link: without speculation every miss is on the critical path."""
    ark = _run("arkvale", demand, implementation=implementation).to_dict()
    free = _run("freekv", demand, implementation=implementation).to_dict()

    def share(out: dict) -> float:
        return _critical_s(out, "recall") / sum(out["breakdown_s"].values())

    assert share(ark) > share(free)


def test_arkvale_as_published_is_host_bound(demand: Demand) -> None:
    """As published (per-KV-head groups, as the FreeKV runtime's ArkVale baseline runs it), the Python
    recall loop's read-backs, one page at a time, dominate the step: most of the critical path is the
    host thread (the recall loop first), and the ideal model of the same design is several times faster."""
    pub = _run("arkvale", demand).to_dict()
    ideal = _run("arkvale", demand, implementation="ideal").to_dict()
    assert pub["critical_share"]["host"] > 0.5 and ideal["critical_share"]["host"] == 0.0
    assert max(pub["breakdown_s"], key=pub["breakdown_s"].get) == "recall.host"
    assert pub["per_token_latency_s"]["mean"] > 3 * ideal["per_token_latency_s"]["mean"]


# ----- ShadowKV -----


def test_shadowkv_gpu_memory_below_dense_and_host_holds_values_only(demand: Demand) -> None:
    cfg = dict(input_tokens=65536, output_tokens=32)
    dense = _run("dense", None, **cfg).to_dict()["memory"]
    shadow = _run("shadowkv", demand, **cfg).to_dict()["memory"]
    assert shadow["kv_gpu_bytes"] < 0.35 * dense["kv_gpu_bytes"]
    assert shadow["max_batch"] > dense["max_batch"]
    arkvale = _run("arkvale", demand, **cfg).to_dict()["memory"]
    assert shadow["host_bytes"] == pytest.approx(arkvale["host_bytes"] / 2, rel=1e-6)  # values, not keys


def test_shadowkv_rebuilds_keys_on_the_critical_path(demand: Demand) -> None:
    out = _run("shadowkv", demand).to_dict()
    assert out["breakdown_s"]["rebuild"] > 0 and out["breakdown_s"]["select"] > 0
    higher_rank = _run("shadowkv", demand, method_options={"rank": 640}).to_dict()
    assert higher_rank["breakdown_s"]["rebuild"] > out["breakdown_s"]["rebuild"]


def test_shadowkv_runs_svd_at_prefill_only_by_default_as_its_code_does(demand: Demand) -> None:
    res = _run("shadowkv", demand, output_tokens=96)
    out = res.to_dict()
    assert out["breakdown_s"].get("svd", 0.0) == 0.0 and out["prefill_breakdown_s"]["prefill_svd"] > 0
    stats = out["per_token_latency_s"]
    assert stats["p99"] >= stats["mean"]  # no rare blocking step lifts the mean above the tail
    lat = res.step_latency_s
    assert lat[-1] > lat[0]  # generated tokens stay in full on the GPU: attention reads more each step
    longer = _run("shadowkv", demand, output_tokens=960).to_dict()
    assert longer["memory"]["gpu_bytes"] > out["memory"]["gpu_bytes"]  # ... and GPU memory holds them all
    # the FreeKV paper's protocol: re-run every W generated tokens (a blocking step each time)
    window = _run("shadowkv", demand, output_tokens=96, method_options={"svd_every_window": True})
    spikes = np.flatnonzero(window.step_latency_s > 1.5 * np.median(window.step_latency_s))
    w = int(window.config["window_tokens"])
    assert list(spikes) == [k for k in range(96) if (k + 1) % w == 0]
    with pytest.raises(SimInputError, match="exclude each other"):
        _run("shadowkv", demand, method_options={"svd_every_window": True, "svd_interval_tokens": 8})


def test_shadowkv_reruns_svd_every_interval(demand: Demand) -> None:
    res = _run("shadowkv", demand, output_tokens=96, method_options={"svd_interval_tokens": 32})
    lat = res.step_latency_s
    spikes = np.flatnonzero(lat > 1.5 * np.median(lat))
    assert list(spikes) == [31, 63, 95]
    rarer = _run("shadowkv", demand, output_tokens=96, method_options={"svd_interval_tokens": 64})
    assert rarer.step_latency_s.mean() < lat.mean()


# ----- InfiniGen -----


def test_infinigen_prefetch_ignores_cache_hits(demand: Demand, demand_all_hits: Demand) -> None:
    a = _run("infinigen", demand).to_dict()
    b = _run("infinigen", demand_all_hits).to_dict()
    assert a["per_token_latency_s"] == b["per_token_latency_s"]  # no reuse of resident tokens


def test_infinigen_dma_gather_pays_for_token_granular_runs(demand: Demand) -> None:
    # a design alternative (the code gathers on the CPU): priced at hardware limits, where only the link
    # is in the way; as published the host's per-sub-layer syncs and copy calls hide most of it
    ideal = {"implementation": "ideal"}
    fine = _run("infinigen", demand, method_options={"gather": "dma"}, **ideal).to_dict()
    coarse = _run(
        "infinigen", demand, method_options={"gather": "dma", "run_bytes": 16384}, **ideal
    ).to_dict()
    assert coarse["per_token_latency_s"]["mean"] < 0.9 * fine["per_token_latency_s"]["mean"]


def test_infinigen_cpu_gather_depends_on_host_memory_bandwidth(demand: Demand) -> None:
    slow_host = {"host.memory_bandwidth_gbps": 20.0}
    cpu = _run("infinigen", demand).step_latency_s.mean()
    cpu_slow = _run("infinigen", demand, hardware_overrides=slow_host).step_latency_s.mean()
    dma = _run("infinigen", demand, method_options={"gather": "dma"}).step_latency_s.mean()
    dma_slow = _run(
        "infinigen", demand, method_options={"gather": "dma"}, hardware_overrides=slow_host
    ).step_latency_s.mean()
    assert cpu_slow > 1.1 * cpu
    assert dma_slow == pytest.approx(dma, rel=1e-12)


def test_infinigen_prefetch_overlaps_the_previous_layer(demand: Demand) -> None:
    """Latency is below the serial sum of compute and prefetch: the prefetch hides behind a layer."""
    res = _run("infinigen", demand, batch_size=1, input_tokens=4096, budget_tokens=1536)
    out = res.to_dict()
    step = out["per_token_latency_s"]["mean"]
    hidden_work = ("prefetch", "speculate", "gather")
    compute = sum(v for k, v in out["breakdown_s"].items() if k not in hidden_work)
    events = res.timeline(10)
    prefetch = sum(e["end_s"] - e["start_s"] for e in map(_event, events) if e["name"].startswith("prefetch"))
    assert prefetch > 0
    assert step < compute + prefetch


def _event(e) -> dict:
    return e if isinstance(e, dict) else {"name": e.name, "start_s": e.start_s, "end_s": e.end_s}


# ----- RaaS -----


def test_raas_harness_cost_and_memory_do_not_grow_with_context() -> None:
    harness = {"prompt": "harness"}  # the FreeKV harness's RaaS: the budget covers the prompt
    short = _run("raas", None, input_tokens=8192, method_options=harness).to_dict()
    long = _run("raas", None, input_tokens=65536, method_options=harness).to_dict()
    assert long["per_token_latency_s"]["mean"] == pytest.approx(
        short["per_token_latency_s"]["mean"], rel=1e-9
    )
    assert long["memory"]["kv_gpu_bytes"] == short["memory"]["kv_gpu_bytes"]
    per_query_head = _run("raas", None, method_options={**harness, "group_consistent": False}).to_dict()
    assert per_query_head["memory"]["kv_gpu_bytes"] == pytest.approx(
        4 * short["memory"]["kv_gpu_bytes"], rel=0.01
    )


def test_raas_as_published_keeps_the_prompt() -> None:
    """The default (the paper's rule, the runtime's default): the prompt is kept, the budget bounds the
    decoded tokens, so memory grows with the prompt by its KV on every sparse layer and KV head."""
    short = _run("raas", None, input_tokens=8192).to_dict()
    long = _run("raas", None, input_tokens=65536).to_dict()
    harness = _run("raas", None, input_tokens=8192, method_options={"prompt": "harness"}).to_dict()
    assert long["per_token_latency_s"]["mean"] > short["per_token_latency_s"]["mean"]
    kv = [r["memory"]["kv_gpu_bytes"] for r in (harness, short, long)]
    assert kv[0] < kv[1] < kv[2]
    m, cfg = get_model(MODEL), _cfg("raas")
    sparse_layers = m.n_layers - len(cfg.dense_layers)
    per_prompt_token = cfg.batch_size * 2 * m.head_dim * cfg.dtype_bytes * m.n_kv_heads * sparse_layers
    grown = long["memory"]["kv_gpu_bytes"] - short["memory"]["kv_gpu_bytes"]
    assert grown == pytest.approx((65536 - 8192) * per_prompt_token, rel=1e-6)


# ----- RazorAttention -----


def test_razorattention_memory_reflects_the_heads_it_keeps() -> None:
    # ideal mode: as published, dense and RazorAttention run different code (different host costs)
    cfg = dict(input_tokens=32768, output_tokens=32, implementation="ideal")
    dense = _run("dense", None, **cfg).to_dict()
    razor = _run("razorattention", None, **cfg).to_dict()
    everything = _run("razorattention", None, method_options={"retrieval_fraction": 1.0}, **cfg).to_dict()
    nothing = _run("razorattention", None, method_options={"retrieval_fraction": 0.0}, **cfg).to_dict()
    assert (
        nothing["memory"]["kv_gpu_bytes"] < razor["memory"]["kv_gpu_bytes"] < dense["memory"]["kv_gpu_bytes"]
    )
    assert everything["memory"]["kv_gpu_bytes"] == pytest.approx(dense["memory"]["kv_gpu_bytes"], rel=1e-6)
    assert everything["per_token_latency_s"]["mean"] == pytest.approx(
        dense["per_token_latency_s"]["mean"], rel=1e-9
    )
    # 15% retrieval heads keep all N tokens, the others sink + max(S0, ceil(N / 5)) + 1 (the paper's
    # window, traces/kept_tokens.py): 0.15 + 0.85 x (512 + 6560 + 1) / 32800 = 0.333 of dense
    n = 32768 + 32
    share = razor["memory"]["kv_gpu_bytes"] / dense["memory"]["kv_gpu_bytes"]
    assert share == pytest.approx(0.15 + 0.85 * (512 + math.ceil(n / 5) + 1) / n, rel=1e-3)


# ----- engines agree -----


@pytest.mark.parametrize("name", PEERS)
def test_simpy_engine_agrees_with_aggregated(name: str) -> None:
    small = synthetic_demand("correction=0.4,hit=0.7,steps=64,seqs=2", model="smollm2-135m", seed=1)
    cfg = SimConfig(
        model="smollm2-135m",
        hardware="h100-sxm",
        method=name,
        batch_size=2,
        input_tokens=2500,
        output_tokens=12,
        page_size=32,
        budget_tokens=1024,
        sink_tokens=128,
        window_tokens=128,
        method_options={"svd_interval_tokens": 5} if name == "shadowkv" else {},
    )
    fast = run_simulation(cfg, small, seed=0)
    fine = run_simulation(cfg, small, seed=0, engine="simpy")
    np.testing.assert_allclose(fine.step_latency_s, fast.step_latency_s, rtol=1e-9, atol=1e-12)
