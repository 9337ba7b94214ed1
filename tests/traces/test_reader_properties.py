"""Property: no damaged trace makes the reader (or the simulator's demand reader on top of it) raise
anything but a TraceError / SimInputError naming the trace. Hypothesis edits the bytes of records.bin
(flips, cuts, insertions) and replaces values of meta.json with arbitrary JSON data."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_factory import make_meta, random_run, write_trace

from sim.demand import demand_from_trace
from sim.errors import SimInputError
from traces import TraceError, get_model, open_trace

# one scratch directory per module for the examples' files, removed when the run ends (hypothesis
# draws hundreds of examples: a directory each under /tmp would pile up)
_SCRATCH = tempfile.TemporaryDirectory(prefix="freekv-dse-props-")

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=False),
              st.text(max_size=8)),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = get_model("smollm2-135m")  # a registry model, so the demand reader accepts the trace
    run = random_run(5, model, n_sequences=1, n_steps=3, prompt_tokens=256, movement="random")
    return write_trace(tmp_path_factory.mktemp("valid") / "trace", make_meta(model), run)


def _read(path: Path) -> None:
    """Read everything the way `dse sim TRACE` does; only the input errors may come out."""
    try:
        reader = open_trace(path)
        for _ in reader.records():
            pass
        demand_from_trace(path, target_model="llama-3.1-8b")
    except (TraceError, SimInputError) as exc:
        assert str(path) in str(exc) or path.name in str(exc)


def _copy(valid: Path) -> Path:
    dst = Path(tempfile.mkdtemp(dir=_SCRATCH.name)) / "trace"
    shutil.copytree(valid, dst)
    return dst


def test_the_valid_trace_reads(valid: Path) -> None:
    reader = open_trace(valid)
    assert reader.n_steps == 3
    demand_from_trace(valid, target_model="llama-3.1-8b")


@SETTINGS
@given(data=st.data())
def test_records_with_bytes_edited(valid: Path, data: st.DataObject) -> None:
    path = _copy(valid)
    blob = bytearray((path / "records.bin").read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(blob)))
        kind = data.draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        if kind == "flip" and pos < len(blob):
            blob[pos] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del blob[pos:pos + data.draw(st.integers(1, 16))]
        elif kind == "insert":
            blob[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
        else:
            del blob[pos:]
    (path / "records.bin").write_bytes(bytes(blob))
    _read(path)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@SETTINGS
@given(data=st.data())
def test_meta_with_one_value_replaced(valid: Path, data: st.DataObject) -> None:
    path = _copy(valid)
    doc = json.loads((path / "meta.json").read_text())
    where = data.draw(st.sampled_from(_paths(doc)[1:]))
    edited = copy.deepcopy(doc)
    target = edited
    for part in where[:-1]:
        target = target[part]
    target[where[-1]] = data.draw(JSON)
    (path / "meta.json").write_text(json.dumps(edited))
    _read(path)


@SETTINGS
@given(st.binary(max_size=300))
def test_meta_from_any_bytes(valid: Path, content: bytes) -> None:
    path = _copy(valid)
    (path / "meta.json").write_bytes(content)
    _read(path)
