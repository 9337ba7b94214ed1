"""ShadowKV's decode kernels priced by their loop structure (sim/methods/shadowkv_kernels.py)."""

from __future__ import annotations

import numpy as np
import pytest

from sim import SimConfig, synthetic_demand
from sim.engine import prepare
from sim.methods.shadowkv_kernels import (
    gather_block_smem_bytes,
    key_compaction_s,
    offset_reorder_s,
    resident_blocks,
    softmax_apply_repeat_s,
    softmax_final_reduction_s,
    topk_gather_s,
    topk_sort_s,
    value_gather_s,
)

A100_SMS, A100_SMEM = 108, 167936


def test_gather_blocks_hold_two_per_a100_sm() -> None:
    smem = gather_block_smem_bytes(512)  # 32 rows of 2 KiB + the chunk map
    assert resident_blocks(A100_SMS, A100_SMEM, smem, 128) == 2 * A100_SMS
    assert resident_blocks(None, A100_SMEM, smem, 128) is None


def test_few_blocks_are_bound_by_one_chunk_in_flight_many_by_the_link() -> None:
    link = np.array([1e-4])
    missed, hits = np.array([200.0]), np.array([300.0])
    # 40 blocks pairs: each pair's host reads take 200 x 2 us = 0.4 ms > the link's 0.1 ms
    few = value_gather_s(link, missed, hits, 40, 216, 2e-6, 5e-7)
    assert few[0] == pytest.approx(200 * 2e-6 + 200 * 5e-7)
    # a slow link binds instead
    slow = value_gather_s(np.array([1e-3]), missed, hits, 40, 216, 2e-6, 5e-7)
    assert slow[0] == pytest.approx(1e-3 + 200 * 5e-7)
    # more block pairs than fit: waves of resident blocks repeat the per-block walk
    waves = value_gather_s(link, missed, hits, 400, 216, 2e-6, 5e-7)
    assert waves[0] == pytest.approx(4 * (200 * 2e-6 + 200 * 5e-7))
    assert value_gather_s(link, np.array([0.0]), hits, 40, 216, 2e-6, 5e-7)[0] == 0.0


def test_the_hit_partner_can_hold_the_copy_back() -> None:
    got = value_gather_s(np.array([0.0]), np.array([10.0]), np.array([500.0]), 8, 216, 1e-6, 5e-7)
    assert got[0] == pytest.approx(500 * 5e-7 + 10 * 5e-7)


def test_key_compaction_and_topk_walk_scale_with_their_loop_steps() -> None:
    assert key_compaction_s(np.array([300.0]), 96, 216, 5e-7)[0] == pytest.approx(300 * 5e-7)
    assert key_compaction_s(np.array([300.0]), 300, 216, 5e-7)[0] == pytest.approx(2 * 300 * 5e-7)
    # 40 rows of 31K landmarks: one wave, 1.5 passes of ceil(31232 / 1024) = 31 steps
    assert topk_gather_s(40, np.array([31232.0]), A100_SMS, 5e-7)[0] == pytest.approx(1.5 * 31 * 5e-7)
    assert topk_gather_s(400, np.array([31232.0]), A100_SMS, 5e-7)[0] == pytest.approx(2 * 1.5 * 31 * 5e-7)


def _prepared(implementation: str, **options: float):
    cfg = SimConfig(
        model="yi-9b-200k", hardware="a100-80g-sxm", method="shadowkv", batch_size=10,
        input_tokens=244 * 1024, output_tokens=4, page_size=8, sink_tokens=0, window_tokens=32,
        budget_tokens=4096 + 32, implementation=implementation,  # type: ignore[arg-type]
        method_options={"svd_interval_tokens": 10**9, **options}, gpu_memory_utilization=1.0,
    )
    return prepare(cfg, synthetic_demand("correction=1.0,hit=0.6", "yi-9b-200k", seed=0))


def _work(implementation: str, **options: float):
    return _prepared(implementation, **options).work


def test_as_published_gather_pays_the_latency_walk_ideal_the_link_only() -> None:
    ideal = float(np.asarray(_work("ideal")["fetch"].copy_s)[-1, 5])
    fast = float(np.asarray(_work("as-published", uva_read_latency_s=1e-7)["fetch"].copy_s)[-1, 5])
    prepared = _prepared("as-published", uva_read_latency_s=4e-6)
    slow = float(np.asarray(prepared.work["fetch"].copy_s)[-1, 5])
    assert ideal < fast < slow
    missed_chunks = float(np.asarray(prepared.work["fetch"].bytes_per_copy)[-1, 5]) / 40 / 2048
    assert slow == pytest.approx(missed_chunks * (4e-6 + 5e-7))


def test_softmax_final_reduction_walks_every_partial_twice() -> None:
    # 31228 landmarks: ceil(31228 / 256) = 122 partials, a max pass and a sum pass, each unrolled by 4:
    # 30 steps of 4 loads and 2 leftover loads per pass, one L2 latency each
    got = softmax_final_reduction_s(np.array([31228.0, 256.0, 0.0, 1024.0]), 2.5e-7)
    assert got[0] == pytest.approx(2 * (30 + 2) * 2.5e-7)
    assert got[1] == pytest.approx(2 * 1 * 2.5e-7)
    assert got[2] == 0.0
    assert got[3] == pytest.approx(2 * 1 * 2.5e-7)  # 4 partials: one unrolled step
    # the walk grows with the row, so with the context at a fixed batch x context
    assert softmax_final_reduction_s(np.array([62456.0]), 2.5e-7)[0] == pytest.approx(2 * (61 + 0) * 2.5e-7)


def test_topk_sort_takes_the_warp_merge_or_the_block_radix_path() -> None:
    # 128 results: WarpMergeSort<128>, 5 rounds of (1 + log2(8 * 2^r) + 4) steps = 50
    assert topk_sort_s(128, 4e-8, 5e-7) == pytest.approx(50 * 4e-8 + 2 * 5e-7)
    # 256 or 512 results: MediumRadixSort, 4 passes of the 32-item ranking chain + 6 steps
    assert topk_sort_s(256, 4e-8, 5e-7) == pytest.approx(4 * 38 * 4e-8 + 2 * 5e-7)
    assert topk_sort_s(512, 4e-8, 5e-7) == topk_sort_s(256, 4e-8, 5e-7)
    assert topk_sort_s(1, 4e-8, 5e-7) == 0.0


def test_offset_reorder_runs_two_bitonic_sorts_per_block() -> None:
    # 256 sets: 17 map and scan steps + 2 x 8 x 9 / 2 bitonic stages, one wave of 96 blocks
    assert offset_reorder_s(256, 96, A100_SMS, 4e-8, 5e-7) == pytest.approx((17 + 72) * 4e-8 + 2 * 5e-7)
    assert offset_reorder_s(512, 40, A100_SMS, 4e-8, 5e-7) == pytest.approx((17 + 90) * 4e-8 + 2 * 5e-7)
    # more blocks than 8 per SM x 108 SMs of 256 threads: a second wave
    assert offset_reorder_s(256, 900, A100_SMS, 4e-8, 5e-7) == pytest.approx(2 * ((17 + 72) * 4e-8 + 1e-6))


def test_softmax_apply_repeats_its_row_walk_per_8192_columns() -> None:
    got = softmax_apply_repeat_s(320, np.array([8192.0, 8193.0, 31228.0]), 3600.0)
    assert got[0] == 0.0
    assert got[1] == pytest.approx(320 * 8193 * 4 / 3.6e12)
    assert got[2] == pytest.approx(3 * 320 * 31228 * 4 / 3.6e12)


def test_as_published_selection_counts_its_launches_walks_and_sorts() -> None:
    ideal = float(np.asarray(_work("ideal")["select"].seconds)[-1, 5])
    published = float(np.asarray(_work("as-published")["select"].seconds)[-1, 5])
    chunks = (244 * 1024 - 32) // 8
    topk_walk = 1.5 * np.ceil(chunks / 1024) * 5e-7
    partials = np.ceil(chunks / 256)
    steps = np.floor(partials / 4) + partials % 4
    reduction_walk = 2 * steps * 1.6e-7
    apply_repeats = 3 * 10 * 32 * chunks * 4 / 3.6e12  # 10 x 32 query rows, 4 walks of each row
    sorts = (4 * 38 + 17 + 90) * 4e-8 + 4 * 5e-7  # 512 results: radix sort, then the offsets' reorder
    # the code's score bytes: 4 bf16 passes per query score; per KV score max's value and int64 index and
    # top-k's 3.5 bf16 reads (ideal: 3 fp32 passes per query score)
    ideal_bytes = 10 * chunks * (4 * 128 * 2 + 3 * 32 * 4)
    code_bytes = 10 * chunks * (4 * (128 * 2 + 2 + 8 + 3.5 * 2) + 32 * 4 * 2)
    hbm_bytes_per_s = 2039e9 * 0.85  # a100-80g-sxm: datasheet bandwidth x achievable fraction
    extra = 9 * 4e-6 + (code_bytes - ideal_bytes) / hbm_bytes_per_s
    extra += topk_walk + reduction_walk + apply_repeats + sorts
    assert published - ideal == pytest.approx(extra, rel=0.01)
    slow_l2 = float(np.asarray(_work("as-published", l2_load_latency_s=2.5e-7)["select"].seconds)[-1, 5])
    assert slow_l2 - published == pytest.approx(2 * steps * 0.9e-7, rel=0.01)
    slow_smem = float(np.asarray(_work("as-published", smem_step_latency_s=8e-8)["select"].seconds)[-1, 5])
    assert slow_smem - published == pytest.approx((4 * 38 + 17 + 90) * 4e-8, rel=0.01)
