"""sim.capacity: the batch search (monotone and not), step sampling, memory at the final context, binding."""

from __future__ import annotations

import numpy as np
import pytest

from sim import SimConfig, synthetic_demand
from sim.capacity import (
    FULL_STEPS_MAX,
    WINDOW_STEPS,
    WINDOWS,
    StepSampling,
    binding,
    capacity,
    evaluate_batch,
    largest_batch,
    memory_at,
    profile_of,
)

MODEL = "llama-3.1-8b"


def _brute(meets, max_batch: int) -> int:
    return max([b for b in range(1, max_batch + 1) if meets(b)], default=0)


@pytest.mark.parametrize("max_batch", [1, 2, 7, 16, 100, 127])
@pytest.mark.parametrize("limit", [0, 1, 3, 16, 50, 200])
def test_search_matches_brute_force_on_monotone_latency(max_batch: int, limit: int) -> None:
    def meets(b):
        return b <= limit

    best, tried = largest_batch(meets, max_batch)
    assert best == _brute(meets, max_batch)
    assert len(set(tried)) <= 2 * max_batch.bit_length() + 2  # a search, not a loop


def test_search_finds_a_larger_batch_behind_a_failing_power_of_two() -> None:
    # latency not monotone in batch: batch 4-7 over the SLO, 8-12 under it again (e.g. a kernel that
    # changes tiling), above 12 over
    def meets(b):
        return b <= 3 or 8 <= b <= 12

    best, _ = largest_batch(meets, 64)
    assert best == 12


def test_search_stops_probing_only_when_hopeless() -> None:
    tried_batches: list[int] = []

    def meets(b):
        tried_batches.append(b)
        return b <= 5

    best, tried = largest_batch(meets, 1000, hopeless=lambda b: b >= 32)
    assert best == 5 and max(tried) == 32  # 8 and 16 fail but are not hopeless: probing went on to 32


def test_search_with_nothing_passing_or_nothing_fitting() -> None:
    assert largest_batch(lambda b: False, 50)[0] == 0
    assert largest_batch(lambda b: True, 0) == (0, [])
    assert largest_batch(lambda b: True, 37)[0] == 37


def test_sampling_short_output_simulates_every_step_long_output_windows() -> None:
    short = StepSampling.for_output(512)
    assert short.windows == ((0, 512),)
    long = StepSampling.for_output(16384)
    assert len(long.windows) == WINDOWS and long.simulated_steps == WINDOWS * WINDOW_STEPS
    assert long.windows[0][0] == 0 and sum(long.windows[-1]) == 16384  # first step .. final context
    assert "windows" in long.label() and "final context" in long.label()
    assert StepSampling.for_output(FULL_STEPS_MAX).windows == ((0, FULL_STEPS_MAX),)


def test_memory_is_checked_at_the_final_context() -> None:
    # 600 in / 16K out on an RTX 4090: far fewer dense sequences fit at the final context than at the prompt
    cfg = SimConfig(model=MODEL, hardware="rtx-4090", method="dense", input_tokens=600, output_tokens=16384)
    final = memory_at(cfg).max_batch
    prompt = memory_at(cfg.replace(output_tokens=16)).max_batch
    assert final < prompt / 10
    point = evaluate_batch(cfg, None, final + 1)
    assert point.oom
    at_bound = evaluate_batch(cfg, None, final)  # the windows at later prompts are not refused memory
    assert not at_bound.oom and np.isfinite(at_bound.mean_s) and np.isfinite(at_bound.p99_s)
    assert capacity(cfg, None, slo_s=10.0).binds == "GPU memory"


def test_sampled_latency_close_to_full_simulation() -> None:
    cfg = SimConfig(model=MODEL, hardware="h100-pcie5", method="dense", input_tokens=8192, output_tokens=2048)
    sampled = evaluate_batch(cfg, None, 2)
    full = evaluate_batch(cfg, None, 2, sampling=StepSampling(2048, ((0, 2048),)))
    assert sampled.mean_s == pytest.approx(full.mean_s, rel=0.02)


def test_capacity_dense_bound_by_gpu_memory_and_answer_meets_slo() -> None:
    cfg = SimConfig(
        model=MODEL, hardware="a100-40g-pcie4", method="dense", input_tokens=32768, output_tokens=64
    )
    ans = capacity(cfg, None, slo_s=1.0)
    assert ans.batch == ans.max_batch_memory > 0
    assert ans.binds == "GPU memory"
    tight = capacity(cfg, None, slo_s=ans.probes[1].mean_s * 1.0001)
    assert tight.batch == 1 and tight.binds.startswith("SLO")


def test_capacity_answer_is_the_largest_batch_under_the_slo() -> None:
    demand = synthetic_demand("correction=0.5,hit=0.8", model=MODEL, seed=0)
    cfg = SimConfig(model=MODEL, hardware="h100-pcie5", method="freekv", input_tokens=16384, output_tokens=32)
    slo = 0.045
    ans = capacity(cfg, demand, slo_s=slo)
    assert ans.point is not None and ans.point.mean_s <= slo
    over = evaluate_batch(cfg, demand, ans.batch + 1)
    assert over.oom or over.mean_s > slo
    assert ans.binds.startswith("SLO (")
    assert ans.point.tokens_per_s == pytest.approx(ans.batch / ans.point.mean_s)


def test_p99_slo_is_never_looser_than_mean() -> None:
    demand = synthetic_demand("correction=0.5,hit=0.8", model=MODEL, seed=0)
    cfg = SimConfig(model=MODEL, hardware="h100-pcie5", method="freekv", input_tokens=16384, output_tokens=32)
    assert capacity(cfg, demand, 0.05, "p99").batch <= capacity(cfg, demand, 0.05, "mean").batch


def test_binding_rule_names_the_group_with_the_largest_share() -> None:
    from sim.capacity import BatchPoint

    cfg = SimConfig(model=MODEL, hardware="h100-pcie5", method="dense", input_tokens=1000, output_tokens=8)
    mem = memory_at(cfg)
    over = BatchPoint(
        5,
        0.1,
        0.1,
        1.0,
        mem,
        {"ffn": 0.01, "recall_sync": 0.05, "qkv.host": 0.02},
        {"ffn": "compute", "recall_sync": "recall", "qkv": "compute"},
        False,
    )
    assert binding(4, mem, over) == "SLO (host link 62%)"  # no transfer time to split: unqualified
    assert binding(mem.max_batch, mem, over) == "GPU memory"
    assert np.isfinite(over.tokens_per_s)


def _over_with_parts(parts: dict[str, tuple[float, float]]):
    from sim.capacity import BatchPoint

    cfg = SimConfig(model=MODEL, hardware="h100-pcie5", method="dense", input_tokens=1000, output_tokens=8)
    mem = memory_at(cfg)
    return mem, BatchPoint(
        5,
        0.1,
        0.1,
        1.0,
        mem,
        {"ffn": 0.01, "recall_sync": 0.03, "offload": 0.02, "prep": 0.01, "recall_sync.host": 0.01},
        {"ffn": "compute", "recall_sync": "recall", "offload": "offload", "prep": "offload"},
        False,
        parts,
    )


def test_binding_host_link_names_the_dominant_part_of_its_transfers() -> None:
    from sim.capacity import HOST_LINK_BANDWIDTH, HOST_LINK_PER_COPY, host_link_part

    # recall_sync 0.03 s: 3/4 per-copy; offload 0.02 s: all bandwidth -> bandwidth 0.0275, per-copy 0.0225
    mem, over = _over_with_parts({"recall_sync": (1.0, 3.0), "offload": (2.0, 0.0)})
    assert host_link_part(over) == HOST_LINK_BANDWIDTH
    # the share is the whole group's: recall_sync + offload + prep (a kernel in the offload category)
    assert binding(4, mem, over) == f"SLO ({HOST_LINK_BANDWIDTH} 75%)"
    mem, over = _over_with_parts({"recall_sync": (1.0, 9.0), "offload": (1.0, 1.0)})
    assert binding(4, mem, over) == f"SLO ({HOST_LINK_PER_COPY} 75%)"
    # a kernel in the group and the host-side issue (`.host`, host/software) never vote
    mem, over = _over_with_parts({"recall_sync.host": (0.0, 1.0), "prep": (0.0, 1.0), "offload": (1.0, 0.0)})
    assert host_link_part(over) == HOST_LINK_BANDWIDTH


def test_nothing_fits_gives_batch_zero_bound_by_gpu_memory() -> None:
    cfg = SimConfig(
        model=MODEL, hardware="rtx-4090", method="dense", input_tokens=120000, output_tokens=512
    )
    ans = capacity(cfg, None, slo_s=1.0)
    assert ans.batch == 0 and ans.point is None and ans.max_batch_memory == 0
    assert ans.binds == "GPU memory" and ans.to_dict()["tokens_per_s"] is None


def test_transfer_parts_split_each_copy_cycle_into_wire_and_per_copy_time() -> None:
    from sim.engine import transfer_parts_s
    from sim.methods.base import Kernel, Transfer

    n = np.array([[10, 0], [4, 2]])
    engine_bound = Transfer("h2d", n, copy_s=5e-6, bytes_per_copy=1024, issue_s=4e-6, issue_threads=4)
    issue_bound = Transfer("d2h", n, copy_s=3e-6, bytes_per_copy=64, issue_s=4e-6, issue_threads=1,
                           issuer="host")
    parts = transfer_parts_s({"a": engine_bound, "b": issue_bound, "k": Kernel(np.ones((2, 2)))}, 2e-6)
    assert set(parts) == {"a", "b"}
    assert parts["a"] == pytest.approx((16 * 3e-6, 16 * 2e-6))  # cycle: the copy engine's 5 us
    assert parts["b"] == pytest.approx((16 * 1e-6, 16 * 3e-6))  # cycle: the 4 us issue on one thread


def test_binding_host_link_split_matches_which_what_if_helps() -> None:
    """InfiniGen's prefetch moves whole tokens' KV in large copies: bandwidth; ArkVale recalls pages one
    copy each: per-copy cost. Moving the named part by 20% moves the answer more than the other part."""
    demand = synthetic_demand("correction=0.5,hit=0.8", model=MODEL, seed=0)
    base = SimConfig(model=MODEL, hardware="h100-pcie5", input_tokens=16384, output_tokens=32,
                     implementation="ideal")
    link = profile_of(base).link
    link_bw = {"link.h2d_effective_gbps": link.h2d_effective_gbps * 1.2,
               "link.d2h_effective_gbps": link.d2h_effective_gbps * 1.2}
    link_pc = {"link.dma_latency_s": link.dma_latency_s / 1.2, "link.copy_issue_s": link.copy_issue_s / 1.2}
    for method, slo, part in (("infinigen", 0.045, "bandwidth"), ("arkvale", 0.02, "per-copy cost")):
        cfg = base.replace(method=method)
        ans = capacity(cfg, demand, slo)
        assert ans.binds.startswith(f"SLO (host link ({part}) "), (method, ans.binds)
        faster = {
            name: capacity(cfg.replace(hardware_overrides=o), demand, slo).point.tokens_per_s
            for name, o in (("bandwidth", link_bw), ("per-copy cost", link_pc))
        }
        other = next(k for k in faster if k != part)
        assert faster[part] > faster[other] and faster[part] > ans.point.tokens_per_s, (method, faster)
