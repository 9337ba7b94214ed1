"""Trace statistics against hand-computed values on a tiny trace, and on random traces."""

from __future__ import annotations

import json
import math
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from trace_factory import StepStream, make_meta, random_run, tiny_model, write_trace

from traces import PrefillRecord, StepRecord, TraceError, TraceWriter, open_trace
from traces.stats import correction_rate, hit_rate, mean_similarity, movement, trace_summary

NAN = float("nan")


def _ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


E = _ids()


def _step(step: int, sim: list, corrected: list, selected: tuple, missed: tuple, timings: dict) -> StepRecord:
    return StepRecord(
        sequence=0, step=step, context_tokens=1000 + step,
        similarity=np.array(sim, np.float32), corrected=np.array(corrected, bool),
        selected=selected, missed=missed,
        attended_tokens=np.array([[1000 + step] * 2, [160, 160], [160, 160]], np.int32),
        timings_s=timings,
    )


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """3 layers x 2 KV heads, layer 0 dense, 2 steps; values chosen for hand computation (see test)."""
    model = tiny_model(3, 2)
    steps = [
        _step(0, [[NAN, NAN], [0.95, 0.85], [0.70, 0.92]], [[0, 0], [0, 1], [1, 0]],
              ((E, E), (_ids(1, 2, 3), _ids(4, 5)), (_ids(1), _ids(2, 3, 4, 5))),
              ((E, E), (_ids(1, 2, 3), _ids(4)), (E, _ids(2, 3))),
              {"select": 0.002, "attention": 0.004}),
        # layer 2 head 1: NaN similarity in a sparse layer, flagged: left out of correction statistics
        _step(1, [[NAN, NAN], [0.88, 0.99], [0.91, NAN]], [[0, 0], [1, 0], [0, 1]],
              ((E, E), (_ids(1, 2, 6), _ids(4, 5)), (_ids(1, 7), _ids(2, 3, 4, 5))),
              ((E, E), (_ids(6), E), (_ids(7), E)),
              {"select": 0.004}),
    ]
    prefill = PrefillRecord(0, 999, ((E, E), (_ids(1, 2, 3), _ids(4, 5)), (_ids(1), _ids(2, 3))),
                            {"prefill_total": 0.5})
    # budget 512 tokens: the contexts (1000, 1001) exceed it, so every finite similarity is a check
    meta = make_meta(model, dense_layers=(0,), tau=0.9, budget_tokens=512)
    return write_trace(tmp_path / "tiny", meta, [prefill, *steps])


def test_correction_rate_by_hand(tiny: Path) -> None:
    reader = open_trace(tiny)
    rate = correction_rate(reader)
    # 7 checks (4 at step 0, 3 at step 1); corrected: s0 L1h1, s0 L2h0, s1 L1h0
    assert rate.overall == pytest.approx(3 / 7) and rate.n_checks == 7 and rate.tau is None
    assert np.isnan(rate.per_layer[0]) and rate.per_layer[1:] == pytest.approx([2 / 4, 1 / 3])
    assert np.isnan(rate.per_head[0]).all()
    np.testing.assert_allclose(rate.per_head[1:], [[0.5, 0.5], [0.5, 0.0]])
    # (step, layer) checks: s0L1 yes, s0L2 yes, s1L1 yes, s1L2 no
    assert rate.check_share == pytest.approx(3 / 4)
    assert rate.check_share_per_layer[1:] == pytest.approx([1.0, 0.5])
    # recomputed at the run's tau: the same as the flags; at 0.93: 0.92 and 0.91 join
    assert correction_rate(reader, 0.9).overall == pytest.approx(3 / 7)
    assert correction_rate(reader, 0.93).overall == pytest.approx(5 / 7)
    assert correction_rate(reader, 0.5).overall == 0.0
    with pytest.raises(TraceError, match="tau must be None"):
        correction_rate(reader, 1.5)


def test_hit_rate_by_hand(tiny: Path) -> None:
    hits = hit_rate(open_trace(tiny))
    # selected 10 + 11 = 21 head-pages, missed 6 + 2 = 8
    assert (hits.selected_pages, hits.missed_pages) == (21, 8)
    assert hits.overall == pytest.approx(13 / 21)
    assert np.isnan(hits.per_layer[0]) and hits.per_layer[1:] == pytest.approx([1 - 5 / 10, 1 - 3 / 11])
    assert hits.corrected_check_share == pytest.approx(3 / 4)


def test_similarity_by_hand(tiny: Path) -> None:
    sim = mean_similarity(open_trace(tiny))
    assert np.isnan(sim.mean[0]).all()
    f32 = np.float32
    expected = [[(f32(0.95) + f32(0.88)) / 2, (f32(0.85) + f32(0.99)) / 2],
                [(f32(0.70) + f32(0.91)) / 2, f32(0.92)]]
    np.testing.assert_allclose(sim.mean[1:], expected, rtol=1e-7)
    assert sim.min[1].tolist() == pytest.approx([f32(0.88), f32(0.85)])
    assert sim.max[2].tolist() == pytest.approx([f32(0.91), f32(0.92)])
    assert sim.std[1, 0] == pytest.approx((f32(0.95) - f32(0.88)) / 2, rel=1e-6)
    assert sim.std[2, 1] == 0.0 and sim.count.tolist() == [[0, 0], [2, 2], [2, 1]]


def test_trace_summary_by_hand(tiny: Path) -> None:
    summary = trace_summary(open_trace(tiny))
    json.dumps(summary, allow_nan=False)  # JSON-able, NaN as null
    assert summary["n_sequences"] == 1 and summary["steps"] == 2 and summary["prefills"] == 1
    assert (summary["layers"], summary["kv_heads"], summary["dense_layers"]) == (3, 2, [0])
    assert summary["complete"] is True and summary["truncated"] is False
    assert summary["correction_rate"] == pytest.approx(3 / 7)
    assert summary["correction_rate_per_layer"][0] is None
    assert summary["hit_rate"] == pytest.approx(13 / 21)
    assert summary["corrected_check_share"] == pytest.approx(3 / 4)
    assert summary["mean_similarity"][0] == [None, None] and len(summary["mean_similarity"]) == 3
    assert summary["selected_pages_per_step"] == 10.5 and summary["missed_pages_per_step"] == 4.0
    assert summary["missed_pages_per_step_corrected_heads"] == 1.0  # s0 L1h1 (1) + s1 L1h0 (1)
    assert summary["selected_pages_per_head_step"] == pytest.approx(21 / 8)
    assert summary["attended_tokens_per_sparse_head_step"] == 160.0
    # 4 missed head-pages per step x page 32 tokens x head_dim 64 x K and V x 2 bytes
    assert summary["recall_bytes_per_step"] == 4 * 32 * 64 * 2 * 2
    assert summary["context_tokens"] == {"min": 1000, "max": 1001, "mean": 1000.5}
    assert summary["timings_s"] == {
        "clock": "wall",
        "step_mean": {"attention": 0.004, "select": pytest.approx(0.003)},
        "steps_with": {"attention": 1, "select": 2},
        "prefill_mean": {"prefill_total": 0.5},
    }
    assert trace_summary(open_trace(tiny), tau=0.93)["correction_rate"] == pytest.approx(5 / 7)


def test_movement_derived_from_missed_pages_by_hand(tiny: Path) -> None:
    """The tiny trace's steps carry no movement fields: FreeKV's recall, missed pages x page size 32.
    Missed head-pages: step 0 L1h0 3, L1h1 1, L2h1 2; step 1 L1h0 1, L2h0 1 (8 pages, 256 tokens)."""
    moved = movement(open_trace(tiny))
    assert (moved.n_steps, moved.derived_steps, moved.fetched_steps) == (2, 2, 2)
    assert moved.fetched_tokens == 256 and moved.fetched_tokens_per_step == 128.0
    assert moved.fetched_tokens_per_step_per_layer.tolist() == [0.0, 80.0, 48.0]
    assert moved.fetched_tokens_per_step_sync == 32.0  # corrected: s0 L1h1 (1 page), s1 L1h0 (1 page)
    assert moved.evicted_tokens == 0 and moved.refactorised_heads_per_step == 0.0
    summary = trace_summary(open_trace(tiny))
    assert summary["fetched_bytes_per_step"] == summary["recall_bytes_per_step"] == 128 * 64 * 2 * 2
    assert summary["fetched_bytes_total"] == 256 * 64 * 2 * 2 and summary["evicted_bytes_total"] == 0
    assert summary["movement_basis"].startswith("derived for every step: missed pages x page_size 32")


def test_recorded_movement_by_hand(tmp_path: Path, tiny: Path) -> None:
    """Step 0 records its movement; step 1 records none (derived: 2 missed pages x 32 tokens)."""
    reader = open_trace(tiny)
    prefill, s0, s1 = list(reader.records())
    s0 = replace(s0, fetched_tokens=np.array([[0, 0], [100, 7], [0, 3]], np.int32),
                 evicted_tokens=np.array([[0, 0], [5, 0], [0, 1]], np.int32),
                 refactorised=np.array([[0, 0], [1, 0], [0, 0]], bool))
    path = write_trace(tmp_path / "t", reader.meta, [prefill, s0, s1])
    moved = movement(open_trace(path))
    assert (moved.derived_steps, moved.fetched_tokens) == (1, 110 + 64)
    assert moved.fetched_tokens_per_step_per_layer.tolist() == [0.0, 69.5, 17.5]
    assert moved.fetched_tokens_per_step_sync == (7 + 32) / 2  # s0: L1h1 7, L2h0 0; s1: L1h0 32
    assert moved.evicted_tokens_per_step == 3.0
    assert moved.evicted_tokens_per_step_per_layer.tolist() == [0.0, 2.5, 0.5]
    assert moved.refactorised_heads_per_step_per_layer.tolist() == [0.0, 0.5, 0.0]
    summary = trace_summary(open_trace(path))
    assert summary["evicted_bytes_total"] == 6 * 64 * 2 * 2 and summary["fetched_tokens_per_step"] == 87.0
    assert summary["movement_basis"].startswith("recorded for 1 steps, derived for 1: missed pages")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recomputed_rate_at_run_tau_agrees_with_flags(tmp_path: Path, seed: int) -> None:
    model = tiny_model(5, 3)
    records = random_run(seed, model, n_sequences=2, n_steps=20, dense_layers=(0, 2))  # flags: sim < 0.9
    reader = open_trace(write_trace(tmp_path / "t", make_meta(model, dense_layers=(0, 2), tau=0.9), records))
    recorded, recomputed = correction_rate(reader), correction_rate(reader, 0.9)
    assert 0.0 < recorded.overall < 1.0
    assert recomputed.overall == recorded.overall
    np.testing.assert_array_equal(recomputed.per_head, recorded.per_head)
    np.testing.assert_array_equal(recomputed.check_share_per_layer, recorded.check_share_per_layer)


def test_empty_and_truncated_trace_summaries(tmp_path: Path) -> None:
    model = tiny_model()
    empty = trace_summary(open_trace(write_trace(tmp_path / "e", make_meta(model), [])))
    json.dumps(empty, allow_nan=False)
    assert empty["steps"] == 0 and empty["correction_rate"] is None and empty["hit_rate"] is None
    records = random_run(4, model, n_sequences=1, n_steps=5)
    path = write_trace(tmp_path / "t", make_meta(model), records, close=False)
    data = (path / "records.bin").read_bytes()
    (path / "records.bin").write_bytes(data[:-7])
    summary = trace_summary(open_trace(path))
    assert (summary["steps"], summary["complete"], summary["truncated"]) == (4, False, True)


def _long_trace(path: Path, n_steps: int) -> Path:
    """n_steps steps of one sequence (8 distinct records recycled with rising step and context)."""
    model = tiny_model(2, 1)
    rng = np.random.default_rng(0)
    stream = StepStream(model, 0, 64, (), 2, page_size=16, churn=1)
    pattern = [stream.next(rng) for _ in range(8)]
    # budget 64 tokens (2 pages of 32): every context (65 on) is past it, so each step is checked
    with TraceWriter.create(path, make_meta(model, dense_layers=(), budget_tokens=64)) as writer:
        for i in range(n_steps):
            writer.append_step(replace(pattern[i % 8], step=i, context_tokens=65 + i))
    return path


def _summary_peak_bytes(path: Path) -> tuple[dict, int]:
    reader = open_trace(path)
    tracemalloc.start()
    try:
        summary = trace_summary(reader)
        return summary, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_summary_streams_in_constant_memory(tmp_path: Path) -> None:
    short_path, long_path = _long_trace(tmp_path / "short", 128), _long_trace(tmp_path / "long", 1024)
    # warm-up pass: fill CPython's object free lists (up to 2000 tuples of each size, ~100 KB, kept and
    # counted by tracemalloc) before measuring, else the first measured pass's peak varies with GC timing
    trace_summary(open_trace(long_path))
    short, short_peak = _summary_peak_bytes(short_path)
    long, long_peak = _summary_peak_bytes(long_path)
    assert (short["steps"], long["steps"]) == (128, 1024)
    assert long["context_tokens"]["max"] == 65 + 1023
    # 8x the steps, not more memory: a pass holds a few records at a time (1024 decoded records ~ 1.5 MB)
    assert long_peak < 1.5 * short_peak + 50_000, (short_peak, long_peak)


@pytest.mark.slow
def test_summary_of_a_16k_step_trace(tmp_path: Path) -> None:
    summary, peak_bytes = _summary_peak_bytes(_long_trace(tmp_path / "long", 16384))
    assert summary["steps"] == 16384 and not math.isnan(summary["correction_rate"])
    assert peak_bytes < 1_000_000, peak_bytes


def test_steps_within_the_budget_are_not_checks(tmp_path: Path) -> None:
    """Steps whose context fits the budget (ceil(context / p) <= budget / p) make no check and no
    selection: their recorded flags (an old trace recorded some there) count for no correction, similarity
    or hit statistic; the per-step page figures still count every step."""
    model = tiny_model(3, 2)
    sel = ((E, E), (_ids(1, 2, 3), _ids(4, 5)), (_ids(1), _ids(2, 3)))
    miss = ((E, E), (_ids(1), E), (E, E))
    within = [  # budget 512 tokens, p 32: contexts up to 512 fit; flagged as an old trace did
        replace(_step(0, [[NAN, NAN], [0.1, 0.1], [0.1, 0.1]], [[0, 0], [1, 1], [1, 1]], sel, miss, {}),
                context_tokens=c, step=i) for i, c in enumerate((511, 512))
    ]
    past = [
        replace(_step(0, [[NAN, NAN], [0.95, 0.85], [0.70, 0.92]], [[0, 0], [0, 1], [1, 0]], sel, miss, {}),
                context_tokens=513, step=2)
    ]
    meta = make_meta(model, dense_layers=(0,), tau=0.9, budget_tokens=512)
    reader = open_trace(write_trace(tmp_path / "t", meta, [*within, *past]))
    rate = correction_rate(reader)
    assert rate.n_checks == 4 and rate.overall == pytest.approx(2 / 4)  # the last step only
    assert rate.check_share == pytest.approx(2 / 2)
    assert mean_similarity(reader).count.sum() == 4
    hits = hit_rate(reader)
    assert (hits.selected_pages, hits.missed_pages) == (8, 1)
    summary = trace_summary(reader)
    assert summary["steps"] == 3 and summary["steps_within_budget"] == 2
    assert summary["correction_rate"] == pytest.approx(0.5)
    assert summary["selected_pages_per_step"] == pytest.approx(8.0)  # every step held its pages
    # the same records with a budget they all exceed: every finite similarity is a check again
    wide = open_trace(write_trace(tmp_path / "w", make_meta(model, dense_layers=(0,), budget_tokens=256),
                                  [*within, *past]))
    assert correction_rate(wide).n_checks == 12 and trace_summary(wide)["steps_within_budget"] == 0


def test_derived_movement_that_does_not_fit_int32_is_a_trace_error(tmp_path: Path) -> None:
    """A format-2 step without movement fields derives missed pages x page_size; too large is refused."""
    model = tiny_model(2, 1)
    records = random_run(3, model, n_sequences=1, n_steps=2, dense_layers=())
    path = write_trace(tmp_path / "t", make_meta(model, dense_layers=(), page_size=2**30), records)
    with pytest.raises(TraceError, match=r"/t: step 0 of sequence 0: missed pages x page_size 1073741824"):
        trace_summary(open_trace(path))
