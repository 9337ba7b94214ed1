"""sim.serving schedulers, routers and the fleet search on tiny streams: the blocking scheduler reproduces
the single-GPU model it replaced, chunked iterations stay within their token budget and sum to the
prefill, a disaggregated TTFT carries the KV transfer, routers route as named, the fewest-GPUs answer
grows with the rate, and verdicts name the SLO that broke."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import simpy

from sim import SimConfig
from sim.errors import SimInputError
from sim.serving import (
    Request,
    SchedulerSettings,
    ServingResult,
    Slos,
    StepCosts,
    fewest_gpus,
    max_rate,
    poisson_requests,
    serve,
    simulate,
)

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def a100_dense() -> StepCosts:
    cfg = SimConfig(
        model=MODEL, hardware="a100-40g-pcie4", method="dense", input_tokens=16384, output_tokens=64
    )
    return StepCosts(cfg, None)


@pytest.fixture(scope="module")
def h100_dense() -> StepCosts:
    cfg = SimConfig(model=MODEL, hardware="h100-sxm", method="dense", input_tokens=8192, output_tokens=64)
    return StepCosts(cfg, None)


def test_blocking_reproduces_the_single_gpu_model_it_replaced(a100_dense: StepCosts) -> None:
    # golden values from sim/serving.py before it became a package (same stream, same costs)
    res = serve(poisson_requests(0.3, 40, 16384, 64, seed=3), a100_dense)
    st = res.stats(5.0, 0.05)
    assert st["ttft_p99_s"] == pytest.approx(2.8642814187105805, rel=1e-9)
    assert st["tpot_p99_s"] == pytest.approx(0.14870282450596678, rel=1e-9)
    assert st["max_batch"] == 8 and len(res.step_s) == 1461


def test_chunked_iterations_never_exceed_the_token_budget(h100_dense: StepCosts) -> None:
    reqs = [Request(0.01 * i, 300 + 37 * i, 20) for i in range(12)]
    for budget in (64, 100):
        res = simulate(reqs, h100_dense, "chunked", settings=SchedulerSettings(chunk_tokens=budget))
        assert 0 < res.max_iteration_tokens <= budget
        assert np.all(np.isfinite(res.finish_s))


def test_mixed_iteration_matches_a_hand_calculation(h100_dense: StepCosts) -> None:
    # 4 sequences decoding at 4096 tokens and the last chunk (512 tokens after 1536) of a 2048-token prompt
    c, layers = h100_dense.cost, h100_dense.cost.model.n_layers
    m, d = c.model, c.model.head_dim

    def linear(tokens: int) -> float:  # the decode step's own per-layer price of its token-parallel ops
        at = replace(c, batch=tokens)
        return at.qkv_s() + at.out_proj_s() + at.ffn_s()

    flops = 4.0 * m.n_qo_heads * d * 512 * (1536 + 513 / 2)
    n_bytes = ((1536 + 512) * 2 * m.n_kv_heads + 2 * 512 * m.n_qo_heads) * d * 2
    attention = max(flops / c.flops_per_s, n_bytes / c.hbm_bytes_per_s) + c.profile.gpu.kernel_launch_s
    head = replace(c, batch=5).lm_head_s() - replace(c, batch=4).lm_head_s()
    hand = h100_dense.decode_s(4, 4096) + layers * (linear(516) - linear(4) + attention) + head
    assert h100_dense.iteration_s(4, 4096, [(512, 1536, 2048)]) == pytest.approx(hand, rel=1e-12)
    # no chunk: the decode step itself; the chunk rides on the decode's weight reads (piggybacking)
    assert h100_dense.iteration_s(4, 4096, []) == h100_dense.decode_s(4, 4096)
    alone = h100_dense.iteration_s(0, 0.0, [(512, 1536, 2048)])
    mixed = h100_dense.iteration_s(4, 4096, [(512, 1536, 2048)])
    assert max(alone, h100_dense.decode_s(4, 4096)) < mixed < alone + h100_dense.decode_s(4, 4096)


def test_chunks_of_a_prompt_cost_a_little_more_than_one_pass(h100_dense: StepCosts) -> None:
    n, total, done = 8192, 0.0, 0
    while done < n:
        k = min(512, n - done)
        total += h100_dense.iteration_s(0, 0.0, [(k, done, n)])
        done += k
    one_pass = h100_dense.iteration_s(0, 0.0, [(n, 0, n)])
    # Sarathi-Serve measured 512-token chunks at 1.0-1.19x the one-pass prefill for 2K-16K prompts
    # (microsoft/sarathi-serve osdi-experiments/figure-9/chunking-overhead.csv at commit ceaa066)
    assert one_pass < total < 1.2 * one_pass
    res = simulate([Request(1.0, n, 16)], h100_dense, "chunked")
    assert res.ttft_s[0] == pytest.approx(total, rel=1e-12)


def test_disaggregated_ttft_includes_the_kv_transfer(h100_dense: StepCosts) -> None:
    req = [Request(0.5, 8192, 16)]
    kv = h100_dense.kv_bytes(8192)
    fast = simulate(req, h100_dense, "disaggregated", 1, 1, settings=SchedulerSettings(kv_link_gbps=50))
    slow = simulate(req, h100_dense, "disaggregated", 1, 1, settings=SchedulerSettings(kv_link_gbps=5))
    assert fast.ttft_s[0] == pytest.approx(h100_dense.prefill_s(8192) + kv / 50e9, rel=1e-9)
    assert slow.ttft_s[0] - fast.ttft_s[0] == pytest.approx(kv / 5e9 - kv / 50e9, rel=1e-9)
    assert kv > 8192 * 2 * 32 * 8 * 128 * 2 * 0.99  # the prompt's K and V, all layers


def test_disaggregated_first_token_at_the_prefill_end_leaves_the_decode_alone(h100_dense: StepCosts) -> None:
    """DistServe's context stage streams the first token when the prefill ends: TTFT loses the KV transfer
    (and any wait for decode memory), which moves into the gap to the second token; every finish time stays
    the same. A request of one output token finishes at its prefill's end and moves no KV."""
    reqs = [Request(0.0, 8192, 16), Request(0.02, 2048, 40)]
    link = 5.0

    def run(first_token: str, requests: list[Request] = reqs) -> ServingResult:
        settings = SchedulerSettings(kv_link_gbps=link, first_token=first_token)
        return simulate(requests, h100_dense, "disaggregated", 1, 1, settings=settings)

    handoff, early = run("handoff"), run("prefill")
    assert early.ttft_s[0] == pytest.approx(h100_dense.prefill_s(8192), rel=1e-9)
    transfer_s = h100_dense.kv_bytes(8192) / (link * 1e9)
    assert handoff.ttft_s[0] - early.ttft_s[0] == pytest.approx(transfer_s, rel=1e-9)
    assert np.all(early.ttft_s < handoff.ttft_s)
    assert np.allclose(early.finish_s, handoff.finish_s, rtol=1e-12)
    assert np.all(early.tpot_s > handoff.tpot_s)  # (finish - first token) / (outputs - 1)
    one = [Request(0.0, 4096, 1), Request(0.001, 2048, 40)]
    early_one, handoff_one = run("prefill", one), run("handoff", one)
    assert early_one.finish_s[0] == pytest.approx(h100_dense.prefill_s(4096), rel=1e-9)
    # its KV no longer holds the link ahead of the next request's
    assert early_one.finish_s[1] < handoff_one.finish_s[1]
    text = SchedulerSettings(first_token="prefill").text("disaggregated")
    assert "first token at the prefill's end" in text
    with pytest.raises(SimInputError, match="first_token"):
        SchedulerSettings(first_token="decode")


def test_disaggregated_prefill_parks_each_prompts_own_kv(h100_dense: StepCosts) -> None:
    """While the decode GPU is busy, the prefill GPU keeps prefilling as long as its free memory holds the
    finished prompts' KV, each by its own size (DistServe's context stage counts each prompt's blocks):
    four times as many prompts of a quarter of the longest prompt's length."""
    from sim.serving.disaggregated import Parking

    parking = Parking(simpy.Environment(), h100_dense)
    room = parking.capacity[0]
    settings = SchedulerSettings(max_seqs=1)
    for prompt in (8192, 2048):
        need = parking.need(prompt)[0]
        parked = room // need
        reqs = [Request(0.0, 8192, 4000)] + [Request(0.0, prompt, 2) for _ in range(parked + 10)]
        res = simulate(reqs, h100_dense, "disaggregated", 1, 1, settings=settings)
        started = res.prefill_queue_s  # arrival 0: the prefill's start
        # the first request decodes alone for its 4000 tokens; meanwhile exactly `parked` prompts park
        assert int((started < res.finish_s[0]).sum()) == 1 + parked, prompt
    assert parking.need(2048)[0] * 4 == pytest.approx(parking.need(8192)[0], rel=0.01)


def test_disaggregated_prefill_batches_waiting_prompts_up_to_the_token_cap(h100_dense: StepCosts) -> None:
    """Four 1024-token prompts arrive while a first one prefills: with a cap of 2048 prompt tokens the
    prefill GPU takes them two by two (one iteration of two whole prompts each), with a cap of 8192 all four
    at once, without a cap one at a time; the first prompt runs alone. On the step model a batch costs its
    prompts' prefills summed."""
    reqs = [Request(0.0, 1024, 2)] + [Request(0.001 * (k + 1), 1024, 2) for k in range(4)]
    alone = h100_dense.prefill_s(1024)
    pair = h100_dense.prefill_batch_s([1024, 1024])
    arrival = np.array([r.arrival_s for r in reqs])
    cap = SchedulerSettings(max_batched_tokens=2048)
    capped = simulate(reqs, h100_dense, "disaggregated", 1, 1, settings=cap)
    starts = np.round(arrival + capped.prefill_queue_s, 12)
    assert starts[1] == starts[2] == pytest.approx(alone) and starts[3] == starts[4]
    assert starts[3] == pytest.approx(alone + pair)
    wide = SchedulerSettings(max_batched_tokens=8192)
    four = simulate(reqs, h100_dense, "disaggregated", 1, 1, settings=wide)
    assert np.all(arrival[1:] + four.prefill_queue_s[1:] == pytest.approx(alone))
    one = simulate(reqs, h100_dense, "disaggregated", 1, 1)
    assert arrival[4] + one.prefill_queue_s[4] == pytest.approx(4 * alone)
    assert pair == pytest.approx(2 * alone)


def test_disaggregated_decode_is_never_stalled_by_prefill(h100_dense: StepCosts) -> None:
    reqs = [Request(0.0, 8192, 200), Request(0.5, 8192, 200)]
    blocking = simulate(reqs, h100_dense, "blocking")
    disagg = simulate(reqs, h100_dense, "disaggregated", 1, 1)
    # the first request's decode waits for the second's prefill only when they share the GPU
    assert disagg.tpot_s[0] < blocking.tpot_s[0]


@pytest.mark.parametrize("router", ["round-robin", "least-loaded"])
def test_routers(h100_dense: StepCosts, router: str) -> None:
    # r0 decodes long on GPU 0; r1 arrives and is short (GPU 1); r2 arrives once r1 is done
    alone = h100_dense.prefill_s(8192)
    reqs = [Request(0.0, 8192, 400), Request(0.001, 8192, 2), Request(3 * alone, 8192, 2)]
    res = simulate(reqs, h100_dense, "blocking", replicas=2, router=router)
    r0_alone = simulate(reqs[:1], h100_dense, "blocking")
    if router == "round-robin":  # r2 goes to GPU 0 (its turn) and its prefill stalls r0's decode
        assert res.tpot_s[0] > r0_alone.tpot_s[0] * 1.01
    else:  # r2 goes to the idle GPU 1
        assert res.tpot_s[0] == pytest.approx(r0_alone.tpot_s[0], rel=1e-9)


def test_same_inputs_same_result(h100_dense: StepCosts) -> None:
    reqs = poisson_requests(3.0, 30, 8192, 64, seed=1)
    a = simulate(reqs, h100_dense, "disaggregated", 2, 1)
    b = simulate(reqs, h100_dense, "disaggregated", 2, 1)
    assert np.array_equal(a.ttft_s, b.ttft_s) and np.array_equal(a.tpot_s, b.tpot_s, equal_nan=True)


def test_fewest_gpus_grows_with_the_rate(h100_dense: StepCosts) -> None:
    slos = Slos(token_s=0.03, ttft_s=2.0)
    totals = []
    for rate in (1.0, 3.0, 6.0):
        ans = fewest_gpus(h100_dense, "chunked", rate, 8192, 64, slos, seeds=(0,), n_requests=60)
        assert ans.gpu_range() is not None
        totals.append(ans.gpu_range()[0])
    assert totals == sorted(totals) and totals[-1] > totals[0]


def test_disaggregated_answer_counts_both_pools(h100_dense: StepCosts) -> None:
    ans = fewest_gpus(
        h100_dense, "disaggregated", 4.0, 8192, 64, Slos(0.03, 2.0), seeds=(0, 1), n_requests=60
    )
    met = ans.met
    assert len(met) == 2 and all(a.prefill_gpus >= 1 and a.gpus >= 1 for a in met)
    lo, hi = ans.prefill_share_range()
    assert 0 < lo <= hi < 1
    d = ans.to_dict()
    assert d["scheduler"] == "disaggregated" and d["gpus_min"] == min(a.total for a in met)


def test_verdict_names_the_broken_slo(h100_dense: StepCosts) -> None:
    res = simulate(poisson_requests(2.0, 30, 8192, 64, seed=0), h100_dense)
    slos = Slos(token_s=0.001, ttft_s=100.0)
    fails = res.failures(slos)
    assert [f.slo for f in fails] == ["TPOT"] and fails[0].value_s > 0.001
    assert "per-token" in fails[0].text() and "> 1 ms" in fails[0].text()
    found = max_rate(lambda r: simulate(poisson_requests(r, 20, 8192, 64, 0), h100_dense), Slos(0.001))
    assert found.rate_per_s == 0 and found.failures and found.failures[0].slo == "TPOT"


def test_no_fleet_meets_a_per_token_slo_below_one_sequence_alone(h100_dense: StepCosts) -> None:
    ans = fewest_gpus(h100_dense, "blocking", 1.0, 8192, 64, Slos(0.001), seeds=(0, 1), n_requests=40)
    assert ans.gpu_range() is None and ans.impossible is not None and ans.impossible.slo == "TPOT"
    assert ans.evaluations == 0


def test_early_stop_says_which_slo(h100_dense: StepCosts) -> None:
    reqs = poisson_requests(20.0, 200, 8192, 64, seed=0)
    res = simulate(reqs, h100_dense, "blocking", slos=Slos(0.03, 1.0), stop_early=True)
    assert res.stopped_by in ("TTFT", "TPOT") and not res.meets(Slos(0.03, 1.0))
    assert not np.isfinite(res.finish_s).all()  # it stopped before serving everything
