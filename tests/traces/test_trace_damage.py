"""Damaged and foreign files: a cut-short tail reads cleanly, anything else raises a clear TraceError."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from trace_factory import assert_identical, make_meta, random_run, tiny_model, write_trace

from traces import FORMAT_VERSION, StepRecord, TraceError, open_trace
from traces.format import FILE_HEADER, FRAME_HEADER, iter_frames


def _frame_offsets(path: Path) -> list[tuple[int, int]]:
    """(kind, offset) of every frame of a valid trace."""
    records = path / "records.bin"
    return [(f.kind, f.offset) for f in iter_frames(records, records.stat().st_size)]


def _copy_with_records(src: Path, dst: Path, data: bytes) -> Path:
    dst.mkdir()
    shutil.copy(src / "meta.json", dst / "meta.json")
    (dst / "records.bin").write_bytes(data)
    return dst


@pytest.fixture(scope="module")
def run() -> list:
    return random_run(21, tiny_model(3, 2), n_sequences=2, n_steps=4, movement="random")


@pytest.fixture(scope="module")
def unclosed(tmp_path_factory: pytest.TempPathFactory, run: list) -> Path:
    return write_trace(tmp_path_factory.mktemp("u") / "t", make_meta(tiny_model(3, 2)), run, close=False)


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory, run: list) -> Path:
    return write_trace(tmp_path_factory.mktemp("c") / "t", make_meta(tiny_model(3, 2)), run)


def test_cut_at_every_byte_of_the_last_step_frame(tmp_path: Path, unclosed: Path, run: list) -> None:
    data = (unclosed / "records.bin").read_bytes()
    last = _frame_offsets(unclosed)[-1][1]
    steps = [r for r in run if isinstance(r, StepRecord)]
    for cut in range(last, len(data)):
        reader = open_trace(_copy_with_records(unclosed, tmp_path / f"cut{cut}", data[:cut]))
        assert (reader.n_steps, reader.complete, reader.truncated) == (len(steps) - 1, False, cut > last)
        assert_identical(list(reader.steps()), steps[:-1])
        assert f"byte {last}" in reader.status() or cut == last


def test_cut_at_every_byte_of_the_end_frame(tmp_path: Path, closed: Path, run: list) -> None:
    data = (closed / "records.bin").read_bytes()
    kind, end = _frame_offsets(closed)[-1]
    assert kind == 3
    for cut in range(end, len(data)):
        reader = open_trace(_copy_with_records(closed, tmp_path / f"cut{cut}", data[:cut]))
        assert (reader.n_steps, reader.complete, reader.truncated) == (8, False, cut > end)
    assert_identical(list(reader.records()), run)


def test_bad_checksum_of_the_last_frame_is_a_torn_write(tmp_path: Path, unclosed: Path) -> None:
    data = bytearray((unclosed / "records.bin").read_bytes())
    data[-1] ^= 0xFF
    reader = open_trace(_copy_with_records(unclosed, tmp_path / "t", bytes(data)))
    assert (reader.n_steps, reader.complete, reader.truncated) == (7, False, True)


def test_zero_filled_tail_is_a_torn_write(tmp_path: Path, unclosed: Path) -> None:
    """A power loss without fsync can leave the last blocks of a file zero-filled."""
    data = (unclosed / "records.bin").read_bytes()
    last = _frame_offsets(unclosed)[-1][1]
    reader = open_trace(_copy_with_records(unclosed, tmp_path / "t", data[:last] + bytes(4096)))
    assert (reader.n_steps, reader.complete, reader.truncated) == (7, False, True)
    zeros_then_data = data[:last] + bytes(40) + data[last:]
    with pytest.raises(TraceError, match="corrupted frame header"):
        open_trace(_copy_with_records(unclosed, tmp_path / "u", zeros_then_data))


def test_corrupted_middle_frame_payload_raises(tmp_path: Path, closed: Path) -> None:
    data = bytearray((closed / "records.bin").read_bytes())
    _, offset = [f for f in _frame_offsets(closed) if f[0] == 2][3]
    data[offset + FRAME_HEADER.size + 2] ^= 0x10
    path = _copy_with_records(closed, tmp_path / "t", bytes(data))
    with pytest.raises(TraceError, match=rf"records.bin at byte {offset}: step frame fails its CRC-32 check "
                                         r"and more data follows it: the trace is corrupted in the middle"):
        open_trace(path)


def test_corrupted_middle_frame_header_raises(tmp_path: Path, closed: Path) -> None:
    data = bytearray((closed / "records.bin").read_bytes())
    _, offset = _frame_offsets(closed)[4]
    data[offset + 2] ^= 0x01  # the payload length: without the header CRC this would look like a cut
    with pytest.raises(TraceError, match=rf"at byte {offset}: corrupted frame header"):
        open_trace(_copy_with_records(closed, tmp_path / "t", bytes(data)))


def test_data_after_end_frame_raises(tmp_path: Path, closed: Path) -> None:
    data = (closed / "records.bin").read_bytes()
    first = _frame_offsets(closed)[0][1]
    again = data + data[first:first + 40]
    with pytest.raises(TraceError, match="data after the end frame"):
        open_trace(_copy_with_records(closed, tmp_path / "t", again))


def test_end_frame_counts_must_match(tmp_path: Path, closed: Path) -> None:
    data = (closed / "records.bin").read_bytes()
    _, end = _frame_offsets(closed)[-1]
    from traces.format import Kind, encode_frame

    fake = encode_frame(Kind.END, json.dumps({"n_steps": 99, "n_prefills": 2}).encode(), 0)
    with pytest.raises(TraceError, match="end frame counts 99 steps"):
        open_trace(_copy_with_records(closed, tmp_path / "t", data[:end] + fake))


def test_step_with_flag_bits_unknown_to_its_format_raises(tmp_path: Path, closed: Path) -> None:
    """A STEP frame that passes its CRC but sets flag bits its format does not define (a faulty writer)."""
    from traces.codec import STEP_FIXED
    from traces.format import Kind, encode_frame

    data = (closed / "records.bin").read_bytes()
    kind, offset = [f for f in _frame_offsets(closed) if f[0] == Kind.STEP][0]
    frame = next(f for f in iter_frames(closed / "records.bin", len(data)) if f.offset == offset)
    flags_at = STEP_FIXED.size - 5  # flags u8 precedes varint_bytes u32
    payload = bytearray(frame.payload)
    payload[flags_at] |= 0x80
    end = offset + FRAME_HEADER.size + struct.unpack_from("<I", data, offset + 2)[0]
    bad = data[:offset] + encode_frame(kind, bytes(payload), 6) + data[end:]
    reader = open_trace(_copy_with_records(closed, tmp_path / "t", bad))
    with pytest.raises(TraceError, match=rf"at byte {offset}: step frame passes its checksum but does not "
                                         r"decode \(step flags 0x.. set bits 0x80 unknown to format 3\)"):
        list(reader.steps())


def test_records_file_version_must_match_meta_json(tmp_path: Path, closed: Path) -> None:
    data = (closed / "records.bin").read_bytes()
    older = FILE_HEADER.pack(b"FKVTRACE", 1) + data[FILE_HEADER.size:]
    with pytest.raises(TraceError, match=r"records.bin: written in trace format version 1, but meta.json "
                                         r"says version 3; the two files come from different traces"):
        open_trace(_copy_with_records(closed, tmp_path / "t", older))


# ------------------------------------------------------------------------------------------ foreign files


def _meta_doc(closed: Path) -> dict:
    return json.loads((closed / "meta.json").read_text())


@pytest.mark.parametrize(
    ("meta_text", "message"),
    [
        ("not json at all", r"meta.json: not valid JSON"),
        ('{"name": "some other tool", "version": 3}', r"not a freekv-dse trace \(field 'format' is None"),
        ("[1, 2]", r"not a freekv-dse trace \(field 'format' is 'list'"),
    ],
)
def test_foreign_meta_json_raises(tmp_path: Path, closed: Path, meta_text: str, message: str) -> None:
    path = _copy_with_records(closed, tmp_path / "t", (closed / "records.bin").read_bytes())
    (path / "meta.json").write_text(meta_text)
    with pytest.raises(TraceError, match=message):
        open_trace(path)


def test_newer_format_version_raises(tmp_path: Path, closed: Path) -> None:
    path = _copy_with_records(closed, tmp_path / "t", (closed / "records.bin").read_bytes())
    doc = _meta_doc(closed)
    doc["format_version"] = FORMAT_VERSION + 1
    (path / "meta.json").write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=rf"format version {FORMAT_VERSION + 1}, but this freekv-dse reads "
                                         rf"versions up to {FORMAT_VERSION}; upgrade"):
        open_trace(path)


def test_newer_records_file_version_raises(tmp_path: Path, closed: Path) -> None:
    data = (closed / "records.bin").read_bytes()
    newer = FILE_HEADER.pack(b"FKVTRACE", FORMAT_VERSION + 1) + data[FILE_HEADER.size:]
    with pytest.raises(TraceError,
                       match=rf"records.bin: written in trace format version {FORMAT_VERSION + 1}"):
        open_trace(_copy_with_records(closed, tmp_path / "t", newer))


def test_foreign_records_file_raises(tmp_path: Path, closed: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" * 8
    with pytest.raises(TraceError, match=r"records.bin: not a freekv-dse records file: it starts with"):
        open_trace(_copy_with_records(closed, tmp_path / "t", png))


def test_meta_with_missing_or_bad_fields_raises(tmp_path: Path, closed: Path) -> None:
    path = _copy_with_records(closed, tmp_path / "t", (closed / "records.bin").read_bytes())
    doc = _meta_doc(closed)
    del doc["meta"]["seeds"]
    (path / "meta.json").write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="run metadata lacks the field"):
        open_trace(path)
    doc = _meta_doc(closed)
    doc["meta"]["model"]["n_kv_heads"] = 4  # 6 query heads are not a multiple of 4
    (path / "meta.json").write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="meta.model is not a valid model spec"):
        open_trace(path)


def test_not_a_trace_directory(tmp_path: Path, closed: Path) -> None:
    with pytest.raises(TraceError, match="no such trace directory"):
        open_trace(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match=r"not a trace directory \(no meta.json\)"):
        open_trace(tmp_path / "empty")
    with pytest.raises(TraceError, match=r"is a file; a trace is a directory .*; pass its directory"):
        open_trace(closed / "meta.json")
    only_meta = tmp_path / "only_meta"
    only_meta.mkdir()
    shutil.copy(closed / "meta.json", only_meta / "meta.json")
    with pytest.raises(TraceError, match="records.bin: missing"):
        open_trace(only_meta)
