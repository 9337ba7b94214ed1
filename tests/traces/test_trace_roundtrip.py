"""Writer -> reader round trips (bit-exact) and the writer's input validation."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_factory import (
    StepStream,
    assert_identical,
    make_meta,
    random_prefill,
    random_run,
    tiny_model,
    write_trace,
)

from traces import FORMAT_VERSION, PrefillRecord, StepRecord, TraceError, TraceWriter, open_trace


@pytest.mark.parametrize(
    ("seed", "n_layers", "n_kv_heads", "dense", "with_mass", "compress_level", "movement"),
    [
        (0, 4, 2, (0,), False, 6, "none"),
        (1, 5, 3, (0, 3), True, 6, "random"),
        (2, 3, 1, (), True, 0, "freekv"),
        # all layers dense: empty selections, NaN similarity
        (3, 6, 4, (0, 1, 2, 3, 4, 5), False, 9, "random"),
        (4, 4, 2, (0,), True, 0, "random"),
    ],
)
def test_random_round_trip_is_bit_exact(tmp_path: Path, seed: int, n_layers: int, n_kv_heads: int,
                                        dense: tuple[int, ...], with_mass: bool, compress_level: int,
                                        movement: str) -> None:
    model = tiny_model(n_layers, n_kv_heads)
    records = random_run(seed, model, n_sequences=3, n_steps=7, dense_layers=dense, with_mass=with_mass,
                         movement=movement)
    path = write_trace(tmp_path / "t", make_meta(model, dense_layers=dense), records,
                       compress_level=compress_level)
    reader = open_trace(path)
    assert (reader.n_steps, reader.n_prefills, reader.complete, reader.truncated) == (21, 3, True, False)
    assert reader.meta == make_meta(model, dense_layers=dense)
    assert_identical(list(reader.records()), records)
    assert_identical(list(reader.steps()), [r for r in records if isinstance(r, StepRecord)])
    assert_identical(reader.prefills(), [r for r in records if isinstance(r, PrefillRecord)])
    assert reader.end is not None and reader.end["n_steps"] == 21


def test_steps_of_sequences_in_any_interleaving_and_restarted_sequence(tmp_path: Path) -> None:
    model = tiny_model()
    rng = np.random.default_rng(11)
    a = StepStream(model, 0, 1024, (0,), 6, churn=5)
    b = StepStream(model, 7, 3000, (0,), 6, churn=0)  # unchanged selection: empty deltas
    records: list[PrefillRecord | StepRecord] = [a.next(rng) for _ in range(3)]
    records += [b.next(rng), a.next(rng), b.next(rng), b.next(rng)]
    # sequence 0 is reused for a new prompt: a prefill restarts its step numbering and delta coding
    records.append(random_prefill(rng, model, 0, 512, (0,), 4))
    c = StepStream(model, 0, 512, (0,), 4)
    records += [c.next(rng), c.next(rng)]
    path = write_trace(tmp_path / "t", make_meta(model), records)
    assert_identical(list(open_trace(path).records()), records)


def test_movement_fields_round_trip_and_none_stays_none(tmp_path: Path) -> None:
    """Format 2 stores each of fetched/evicted/refactorised only when given; None reads back None (not
    derived), so a record's `movement(page_size)` is where the FreeKV derivation happens."""
    model = tiny_model(3, 2)
    base = random_run(9, model, n_sequences=1, n_steps=4, dense_layers=(0,), movement="freekv")
    steps = [r for r in base if isinstance(r, StepRecord)]
    shape = (3, 2)
    records = [
        steps[0],  # what the recorder writes for FreeKV
        replace(steps[1], fetched_tokens=None, evicted_tokens=None, refactorised=None),
        replace(steps[2], fetched_tokens=np.full(shape, 2**31 - 1, np.int32), refactorised=None,
                evicted_tokens=np.arange(6, dtype=np.int32).reshape(shape)),
        replace(steps[3], fetched_tokens=None, refactorised=np.eye(3, 2, dtype=bool)),
    ]
    got = list(open_trace(write_trace(tmp_path / "t", make_meta(model, page_size=32), records)).steps())
    assert_identical(got, records)
    assert got[1].fetched_tokens is None and got[1].evicted_tokens is None and got[1].refactorised is None
    fetched, evicted, rebuilt = got[1].movement(32)
    np.testing.assert_array_equal(fetched, got[1].missed_counts() * 32)
    assert fetched.dtype == np.int32 and not evicted.any() and not rebuilt.any()
    assert got[1].movement(None)[0] is None
    assert got[2].movement(32)[0] is got[2].fetched_tokens  # recorded values are used as they are
    assert got[0].fetched_tokens.sum() == 32 * sum(int(s.missed_counts().sum()) for s in [steps[0]])


def test_movement_round_trips_without_a_page_size_in_the_metadata(tmp_path: Path) -> None:
    """fetched_unit is 0 when the run's metadata has no page_size: the values are stored as they are."""
    model = tiny_model(2, 2)
    records = random_run(13, model, n_sequences=2, n_steps=3, dense_layers=(), movement="freekv")
    meta = make_meta(model, dense_layers=())
    meta = replace(meta, runtime={k: v for k, v in meta.runtime.items() if k != "page_size"})
    assert_identical(list(open_trace(write_trace(tmp_path / "t", meta, records)).records()), records)


MOVED = st.integers(0, 2**31 - 1)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_movement_values_round_trip(data: st.DataObject) -> None:
    """Property: any int32 >= 0 fetched/evicted values and any refactorised bits (or None) read back
    bit-exactly, for any page size, whatever the missed pages."""
    n_layers, n_kv_heads = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    model = tiny_model(n_layers, n_kv_heads)
    page_size = data.draw(st.sampled_from([1, 16, 32, 2**20]))
    stream = StepStream(model, 0, 2048, (), 4, churn=3)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    shape = (n_layers, n_kv_heads)
    grid = st.lists(MOVED, min_size=n_layers * n_kv_heads, max_size=n_layers * n_kv_heads)
    bits = st.lists(st.booleans(), min_size=n_layers * n_kv_heads, max_size=n_layers * n_kv_heads)
    records = []
    for _ in range(data.draw(st.integers(1, 3))):
        rec = stream.next(rng)
        fetched = data.draw(st.none() | grid.map(lambda v: np.array(v, np.int32).reshape(shape)))
        evicted = data.draw(st.none() | grid.map(lambda v: np.array(v, np.int32).reshape(shape)))
        rebuilt = data.draw(st.none() | bits.map(lambda v: np.array(v, bool).reshape(shape)))
        records.append(replace(rec, fetched_tokens=fetched, evicted_tokens=evicted, refactorised=rebuilt))
    with tempfile.TemporaryDirectory(prefix="freekv-dse-movement-") as tmp:
        path = write_trace(Path(tmp) / "t", make_meta(model, dense_layers=(), page_size=page_size), records)
        assert_identical(list(open_trace(path).steps()), records)


def test_meta_json_is_self_describing(tmp_path: Path) -> None:
    model = tiny_model()
    path = write_trace(tmp_path / "t", make_meta(model), [])
    doc = json.loads((path / "meta.json").read_text())
    assert doc["format"] == "freekv-dse-trace" and doc["format_version"] == FORMAT_VERSION
    assert doc["meta"]["model"]["n_layers"] == 4 and doc["meta"]["timing_clock"] == "wall"
    assert "similarity" in doc["encoding"]


def test_empty_trace_closed_and_unclosed(tmp_path: Path) -> None:
    model = tiny_model()
    closed = open_trace(write_trace(tmp_path / "closed", make_meta(model), []))
    assert (closed.n_steps, closed.complete, closed.truncated) == (0, True, False)
    assert list(closed.steps()) == [] and closed.prefills() == []
    TraceWriter.create(tmp_path / "killed", make_meta(model)).abort()  # only meta and the file header
    killed = open_trace(tmp_path / "killed")
    assert (killed.n_steps, killed.complete, killed.truncated) == (0, False, False)
    assert list(killed.steps()) == []
    (tmp_path / "killed" / "records.bin").write_bytes(b"FKVTR")  # killed inside the file header
    cut = open_trace(tmp_path / "killed")
    assert (cut.n_steps, cut.complete, cut.truncated) == (0, False, True)


def test_exception_inside_with_block_leaves_an_incomplete_trace(tmp_path: Path) -> None:
    model = tiny_model()
    records = random_run(5, model, n_sequences=1, n_steps=3)
    with pytest.raises(RuntimeError, match="boom"), TraceWriter.create(tmp_path / "t", make_meta(model)) as w:
        for rec in records:
            (w.append_prefill if isinstance(rec, PrefillRecord) else w.append_step)(rec)  # type: ignore[arg-type]
        raise RuntimeError("boom")
    reader = open_trace(tmp_path / "t")
    assert (reader.n_steps, reader.complete, reader.truncated) == (3, False, False)
    assert_identical(list(reader.records()), records)


def test_timing_names_and_values_are_exact(tmp_path: Path) -> None:
    model = tiny_model(2, 1)
    base = random_run(0, model, n_sequences=1, n_steps=3, dense_layers=())
    steps = [r for r in base if isinstance(r, StepRecord)]
    timings = [{"step_total": 1 / 3}, {"recall_sync": 1e-300, "step_total": 0.1}, {}]
    records = [replace(s, timings_s=t) for s, t in zip(steps, timings, strict=True)]
    got = list(open_trace(write_trace(tmp_path / "t", make_meta(model, dense_layers=()), records)).steps())
    assert [g.timings_s for g in got] == timings


# ------------------------------------------------------------------------------------------- validation


@pytest.fixture
def writer(tmp_path: Path) -> TraceWriter:
    return TraceWriter.create(tmp_path / "t", make_meta(tiny_model()))


@pytest.fixture
def step() -> StepRecord:
    return StepStream(tiny_model(), 0, 1024, (0,), 4).next(np.random.default_rng(0))


def _nested_with(nested: tuple, layer: int, head: int, value: np.ndarray) -> tuple:
    rows = [list(x) for x in nested]
    rows[layer][head] = value
    return tuple(tuple(r) for r in rows)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: {"similarity": s.similarity[:2]}, r"similarity must have shape \(n_layers, n_kv_heads\)"),
        (lambda s: {"corrected": s.corrected.astype(np.int8)}, "corrected must be a bool array"),
        (lambda s: {"attended_tokens": -s.attended_tokens}, r"attended_tokens must hold integers in \[0"),
        (lambda s: {"selected": _nested_with(s.selected, 1, 0, np.array([5, 3]))},
         r"selected\[1\]\[0\] must be sorted ascending without duplicates"),
        (lambda s: {"selected": _nested_with(s.selected, 2, 1, np.array([4, 4]))},
         r"selected\[2\]\[1\] must be sorted"),
        (lambda s: {"selected": _nested_with(s.selected, 1, 1, np.array([1.5]))},
         r"selected\[1\]\[1\] must be a 1-D integer array"),
        (lambda s: {"missed": _nested_with(s.missed, 3, 1, np.array([10_000], np.int32))},
         r"missed\[3\]\[1\] holds pages that are not in selected\[3\]\[1\]"),
        (lambda s: {"selected": s.selected[:3]}, "selected must be a sequence of n_layers=4 layers"),
        (lambda s: {"sequence": -1}, r"sequence must be an integer in \[0"),
        (lambda s: {"timings_s": {"select": "fast"}}, r"timings_s\['select'\] must be a number"),
        (lambda s: {"fetched_tokens": np.full((4, 2), -1, np.int32)},
         r"fetched_tokens must hold integers in \[0, 2\*\*31\)"),
        (lambda s: {"evicted_tokens": np.zeros((4, 3), np.int32)},
         r"evicted_tokens must have shape \(n_layers, n_kv_heads\) = \(4, 2\)"),
        (lambda s: {"evicted_tokens": np.zeros((4, 2))}, "evicted_tokens must be an integer array"),
        (lambda s: {"refactorised": np.zeros((4, 2), np.int32)}, "refactorised must be a bool array"),
    ],
)
def test_writer_rejects_bad_records_and_stays_usable(writer: TraceWriter, step: StepRecord, change,  # noqa: ANN001
                                                      message: str) -> None:
    with pytest.raises(TraceError, match=message):
        writer.append_step(replace(step, **change(step)))
    writer.append_step(step)  # the rejected record changed nothing
    writer.close()
    assert_identical(list(open_trace(writer.path).steps()), [step])


def test_writer_rejects_steps_out_of_order_and_appends_after_close(writer: TraceWriter,
                                                                   step: StepRecord) -> None:
    writer.append_step(replace(step, step=5))
    with pytest.raises(TraceError, match="increasing order; sequence 0 already has step 5"):
        writer.append_step(replace(step, step=5))
    writer.close()
    with pytest.raises(TraceError, match="writer is closed"):
        writer.append_step(replace(step, step=6))


def test_create_refuses_existing_trace_and_bad_meta(tmp_path: Path) -> None:
    meta = make_meta(tiny_model())
    write_trace(tmp_path / "t", meta, [])
    with pytest.raises(TraceError, match="already holds a trace"):
        TraceWriter.create(tmp_path / "t", meta)
    TraceWriter.create(tmp_path / "t", meta, overwrite=True).close()
    with pytest.raises(TraceError, match=r"RunMetadata.task cannot be stored in meta.json"):
        TraceWriter.create(tmp_path / "u", replace(meta, task={"name": object()}))
    TraceWriter.create(tmp_path / "v", replace(meta, format_version=FORMAT_VERSION + 1)).close()
    assert open_trace(tmp_path / "v").meta.format_version == FORMAT_VERSION  # the writer's own version
    (tmp_path / "file").write_text("x")
    with pytest.raises(TraceError, match="not a directory"):
        TraceWriter.create(tmp_path / "file", meta)


def test_traces_never_imports_torch(fresh_python: Callable[[str], None]) -> None:
    code = ("import sys, traces, traces.stats, traces.format, traces.codec, traces.catalogue\n"
            "import traces.retrieval_knobs, sim.replay, dse.method_knobs, dse.commands.methods\n"
            "from traces import FORMAT_VERSION, RunMetadata, PrefillRecord, StepRecord, ModelSpec, get_model,"
            " TraceWriter, TraceReader, TraceError, open_trace\n"
            "assert 'torch' not in sys.modules, 'the catalogue or the replay service imported torch'\n")
    fresh_python(code)
