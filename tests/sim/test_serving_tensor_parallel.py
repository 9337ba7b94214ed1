"""Tensor parallelism in the serving model: one GPU's shard of the model, the all-reduces priced from the
measured NCCL points, tensor parallel 1 exactly as before, memory per GPU, and fleets counted in GPUs."""

from __future__ import annotations

import pytest

from sim import SimConfig
from sim.errors import SimInputError
from sim.serving import SchedulerSettings, Slos, StepCosts, fewest_gpus, poisson_requests, simulate
from sim.serving.pool_search import fewest_total
from sim.serving.tensor_parallel import (
    NCCL_LAUNCH_S,
    TensorParallel,
    interconnect_for,
    interconnects,
    shard_spec,
)
from traces.models import get_model

YI = SimConfig(model="yi-34b", hardware="a100-80g-pcie", method="dense", input_tokens=2048, output_tokens=64)


@pytest.fixture(scope="module")
def yi_costs() -> dict[int, StepCosts]:
    return {t: StepCosts(YI, None, tensor_parallel=t) for t in (1, 2)}


def test_shard_spec_splits_heads_ffn_and_vocabulary() -> None:
    yi = get_model("yi-34b")
    half = shard_spec(yi, 2)
    assert (half.n_qo_heads, half.n_kv_heads, half.ffn_size, half.vocab_size) == (28, 4, 10240, 32000)
    assert (half.n_layers, half.hidden_size, half.head_dim) == (60, 7168, 128)
    assert half.name == "yi-34b@tp2" and shard_spec(yi, 1) is yi
    # fewer KV heads than GPUs: each KV head replicated on t / n_kv GPUs (vLLM's QKVParallelLinear)
    assert (shard_spec(yi, 56).n_qo_heads, shard_spec(yi, 56).n_kv_heads) == (1, 1)
    # the weights one GPU holds: everything but the replicated norms split in two
    norms = (2 * yi.n_layers + 1) * yi.hidden_size
    assert half.n_params() == (yi.n_params() - norms) // 2 + norms
    assert half.kv_bytes_per_token() * 2 == yi.kv_bytes_per_token()
    # an OPT FFN that does not split evenly is rounded up (vLLM pads nothing here: 13653 is our SwiGLU width)
    assert shard_spec(get_model("opt-13b"), 2).ffn_size == 6827


@pytest.mark.parametrize(("model", "degree"), [("yi-34b", 3), ("qwen-2.5-7b", 8), ("llama-3.1-8b", 3)])
def test_a_degree_that_does_not_split_the_heads_is_refused(model: str, degree: int) -> None:
    says = rf"--tensor-parallel {degree}: .*Valid degrees for this model: 1, 2"
    with pytest.raises(SimInputError, match=says):
        shard_spec(get_model(model), degree)
    with pytest.raises(SimInputError, match="positive number of GPUs"):
        shard_spec(get_model(model), 0)


def test_a_gpu_with_no_measured_interconnect_is_refused() -> None:
    assert interconnect_for("l40s") is None
    assert interconnect_for("a100-80g-pcie").name == "a100_pairwise_nvlink"
    with pytest.raises(SimInputError, match="no all-reduce measurement covers the GPUs of hardware profile"):
        TensorParallel.of(get_model("yi-34b"), "l40s", 2)
    with pytest.raises(SimInputError, match="measured with 2, 4 GPUs, not 8"):
        TensorParallel.of(get_model("yi-34b"), "a100-80g-pcie", 8)
    assert TensorParallel.of(get_model("yi-34b"), "l40s", 1).collectives_s(512, 1) == 0.0


def test_the_all_reduce_fit_stays_within_its_stated_error_of_the_measured_points() -> None:
    for ic in interconnects().values():
        for workers, fit in ic.workers.items():
            assert len(fit.points) >= 10, (ic.name, workers)
            lo, hi = fit.fit_error
            assert -0.5 < lo <= 0 <= hi < 0.5, (ic.name, workers)
            for n_bytes, measured_s in fit.points:
                err = fit.time_s(n_bytes) / measured_s - 1
                assert lo - 1e-3 <= err <= hi + 1e-3, (ic.name, workers, n_bytes)
            # bandwidths under the links' per-direction peaks (bytes, not fp16 elements)
            assert fit.bandwidth_bytes_per_s < 450e9


def test_collectives_are_two_all_reduces_per_layer_and_the_logits_gather() -> None:
    yi = get_model("yi-34b")
    tp = TensorParallel.of(yi, "a100-80g-pcie", 2)
    fit = interconnects()["a100_pairwise_nvlink"].workers[2]
    per_layer = 2 * (fit.latency_s + 32 * 7168 * 2 / fit.bandwidth_bytes_per_s + NCCL_LAUNCH_S)
    logits = fit.latency_s + 32 * 64000 * 2 / fit.bandwidth_bytes_per_s
    assert tp.collectives_s(32, 32) == pytest.approx(60 * per_layer + logits, rel=1e-12)
    assert tp.collectives_s(0, 0) == 0.0


def test_tensor_parallel_1_prices_exactly_as_before() -> None:
    cfg = SimConfig(model="llama-3.1-8b", hardware="h100-sxm", method="dense", input_tokens=4096,
                    output_tokens=64)
    before, one = StepCosts(cfg, None), StepCosts(cfg, None, tensor_parallel=1)
    assert one.cfg == cfg and one.tp.degree == 1
    for b in (1, 7, 32):
        assert one.decode_s(b, 3000) == before.decode_s(b, 3000)
    assert one.prefill_batch_s([4096, 512]) == before.prefill_batch_s([4096, 512])
    chunks = [(512, 1024, 4096), (200, 0, 200)]
    assert one.iteration_s(16, 2500, chunks) == before.iteration_s(16, 2500, chunks)
    assert one.gpu_fixed_bytes == before.gpu_fixed_bytes
    assert one.per_seq_bytes(4096, 64) == before.per_seq_bytes(4096, 64)


def test_tp2_decode_is_faster_than_tp1_but_more_than_half(yi_costs: dict[int, StepCosts]) -> None:
    one, two = yi_costs[1], yi_costs[2]
    for batch in (1, 32):
        t1, t2 = one.decode_s(batch, 4096), two.decode_s(batch, 4096)
        assert t1 / 2 < t2 < t1
        assert t2 - two._model_decode_s(batch, 4096) == pytest.approx(two.tp.collectives_s(batch, batch))
    assert one.prefill_s(2048) / 2 < two.prefill_s(2048) < one.prefill_s(2048)


def test_memory_is_per_gpu(yi_costs: dict[int, StepCosts]) -> None:
    one, two = yi_costs[1], yi_costs[2]
    assert two.gpu_capacity_bytes == one.gpu_capacity_bytes  # each GPU's own memory
    g1, _ = one.per_seq_bytes(2048, 64)
    g2, _ = two.per_seq_bytes(2048, 64)
    assert g2 * 2 == pytest.approx(g1, rel=1e-3)  # 4 of the 8 KV heads per GPU
    weights_1, weights_2 = get_model("yi-34b").n_params() * 2, get_model("yi-34b@tp2").n_params() * 2
    assert one.gpu_fixed_bytes - two.gpu_fixed_bytes == pytest.approx(weights_1 - weights_2, rel=0.05)


def test_fleets_count_gpus_as_replicas_times_the_degree(yi_costs: dict[int, StepCosts]) -> None:
    two = yi_costs[2]
    slos = Slos(0.1)
    ans = fewest_gpus(two, "chunked", 0.5, 2048, 64, slos, seeds=(0,), n_requests=40)
    found = ans.met[0]
    assert found.tp == 2 and found.gpus == 2 * found.replicas and ans.gpu_range() == (found.gpus, found.gpus)
    d = found.to_dict()
    assert d["gpus"] == 2 * d["replicas"] and d["tensor_parallel"] == 2
    one = StepCosts(YI, None)
    assert "tensor_parallel" not in fewest_gpus(one, "chunked", 0.5, 2048, 64, slos, seeds=(0,),
                                                n_requests=40).met[0].to_dict()


def test_disaggregated_pools_take_their_own_degrees(yi_costs: dict[int, StepCosts]) -> None:
    reqs = poisson_requests(0.5, 20, 2048, 64, seed=0)
    res = simulate(reqs, yi_costs[1], "disaggregated", 1, 1, prefill_costs=yi_costs[2])
    same = simulate(reqs, yi_costs[1], "disaggregated", 1, 1)
    # the prefill replica of 2 GPUs prefills faster than one GPU does
    assert res.ttft_s.mean() < same.ttft_s.mean()
    text = SchedulerSettings(tensor_parallel=1, prefill_tensor_parallel=2).text("disaggregated")
    assert "tensor parallel 2 per prefill replica, 1 per decode replica" in text


def test_the_weighted_two_pool_search_minimises_gpus() -> None:
    def meets(p: int, d: int) -> bool:  # prefill replicas of 2 GPUs, decode replicas of 1
        return 3 / p + 8 / d <= 2.2

    p, d = fewest_total(meets, (6, 12), (1, 1), weights=(2, 1))
    fleets = [(a, b) for a in range(1, 13) for b in range(1, 25) if meets(a, b)]
    best = min(fleets, key=lambda x: 2 * x[0] + x[1])
    assert 2 * p + d == 2 * best[0] + best[1]


def test_a_whole_step_profile_prices_only_the_degree_it_was_measured_at() -> None:
    from sim.serving.engine_steps import StepTimeRefused

    cfg = SimConfig(model="opt-13b", hardware="a100-80g-sxm", method="dense", input_tokens=512,
                    output_tokens=64)
    tp2 = StepCosts(cfg, None, engine="distserve-vllm-opt13b-a100-tp2", tensor_parallel=2)
    st = tp2.step_time
    assert st is not None and tp2.engine_profile.tensor_parallel == 2 and tp2.cfg.model == "opt-13b@tp2"
    # the profile's measured whole step (collectives included), nothing added
    assert tp2.decode_s(8, 544) == st.decode_s(8, 544) and tp2.tp.collectives_s(8, 8) == 0.0
    # DistServe's TP 2 entry: prefill [27.44, 0.0905, 8.45e-6] ms (profiler-a100-80g.vllm.json:21-38)
    assert tp2.prefill_s(512) == pytest.approx((27.4408 + 0.090545 * 512 + 8.452e-6 * 512**2 + 1 + 2
                                                + 0.0001 * 512) / 1e3, rel=1e-4)
    with pytest.raises(StepTimeRefused, match="measured at tensor parallel 1 only"):
        StepCosts(cfg, None, engine="distserve-vllm-opt13b-a100", tensor_parallel=2)
    with pytest.raises(StepTimeRefused, match="measured at tensor parallel 2 only"):
        StepCosts(cfg, None, engine="distserve-vllm-opt13b-a100-tp2")


def test_a_retrieval_method_prices_the_first_gpus_kv_heads() -> None:
    from sim.serving.tensor_parallel import shard_demand
    from sim.synthetic import synthetic_demand

    demand = synthetic_demand("correction=0.3,hit=0.8", "yi-34b", seed=0)
    half = shard_demand(demand, shard_spec(get_model("yi-34b"), 2))
    assert half is not None and half.model == "yi-34b@tp2" and half.n_kv_heads == 4 == demand.n_kv_heads // 2
    assert (half.corrected[0] == demand.corrected[0][:, :, :4]).all()
    cfg = SimConfig(model="yi-34b", hardware="h100-sxm", method="freekv", input_tokens=3000, output_tokens=64)
    one, two = StepCosts(cfg, demand), StepCosts(cfg, demand, tensor_parallel=2)
    assert two.demand is not None and two.demand.model == "yi-34b@tp2"
    assert one.decode_s(8, 3000) / 2 < two.decode_s(8, 3000) < one.decode_s(8, 3000)


def test_host_time_profiles_are_per_degree() -> None:
    """Sarathi-Serve's engine messages its Ray workers every iteration at TP 2 (Vidur: about 6 ms), so the
    TP 1 profile is refused at TP 2 and points to the TP 2 one; `none` prices any degree."""
    from sim.serving.engine import load_engine
    from sim.serving.engine_steps import StepTimeRefused

    with pytest.raises(StepTimeRefused, match="use --engine sarathi-serve-a100-tp2"):
        StepCosts(YI, None, engine="sarathi-serve-a100", tensor_parallel=2)
    with pytest.raises(StepTimeRefused, match="use --engine sarathi-serve-a100,"):
        StepCosts(YI, None, engine="sarathi-serve-a100-tp2")
    tp2 = StepCosts(YI, None, engine="sarathi-serve-a100-tp2", tensor_parallel=2)
    kernels = StepCosts(YI, None, tensor_parallel=2)
    # cpu_overheads.csv@6d98aa8 lines 2-14 (CodeLlama-34B, TP 2) at 32 sequences: 9.08 ms in all
    assert tp2.decode_s(32, 2048) - kernels.decode_s(32, 2048) == pytest.approx(9.08e-3, abs=0.01e-3)
    assert load_engine("sarathi-serve-a100-tp2@high").tensor_parallel == 2
