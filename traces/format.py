"""On-disk layout of a trace: the directory, `meta.json`, and the framing of `records.bin`.

A trace is a directory holding

- `meta.json`: `{"format": "freekv-dse-trace", "format_version": 2, "records_file": "records.bin",
  "encoding": {...}, "meta": {RunMetadata as JSON, the ModelSpec as a dict}}`;
- `records.bin`: a 12-byte file header (`b"FKVTRACE"` + uint32 LE format version) followed by frames.

Frame (all little endian): a 14-byte header `kind u8 | flags u8 | payload_bytes u32 | payload_crc32 u32 |
header_crc32 u32` (header_crc32 over the first 10 header bytes), then the payload. flags bit 0: the payload
is zlib-compressed. CRC-32 is zlib's (IEEE 802.3), over the payload as stored. Payload codecs live in
`traces/codec.py`; docs/trace_format.md is the full description.

This module only knows bytes: it writes frames and scans a records file, classifying its tail as
complete, cleanly cut (a run killed mid-write) or corrupt.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from traces.errors import TraceError
from traces.models import ModelSpec
from traces.records import FORMAT_VERSION, RunMetadata
from traces.safe_load import load_user_json
from traces.user_files import UserFileError

__all__ = [
    "FORMAT_NAME",
    "META_FILE",
    "RECORDS_FILE",
    "FILE_MAGIC",
    "FILE_HEADER",
    "FRAME_HEADER",
    "Kind",
    "FLAG_ZLIB",
    "MAX_PAYLOAD_BYTES",
    "encode_frame",
    "Frame",
    "ScanResult",
    "scan_records",
    "iter_frames",
    "meta_to_json",
    "meta_from_json",
]

FORMAT_NAME = "freekv-dse-trace"
META_FILE = "meta.json"
RECORDS_FILE = "records.bin"
FILE_MAGIC = b"FKVTRACE"
FILE_HEADER = struct.Struct("<8sI")  # magic, format version
FRAME_HEADER = struct.Struct("<BBIII")  # kind, flags, payload_bytes, payload_crc32, header_crc32
FLAG_ZLIB = 0x01
MAX_PAYLOAD_BYTES = 1 << 30  # a sanity bound: one step of the largest model is a few hundred KB

ENCODING = {
    "byte_order": "little",
    "frame_header": "kind u8, flags u8, payload_bytes u32, payload_crc32 u32, header_crc32 u32",
    "checksum": "crc32 (zlib)",
    "compression": "zlib per frame (flags bit 0)",
    "similarity": "float32 (exact), byte-shuffled",
    "corrected": "packed bits, row-major (layer, head)",
    "fetched_tokens": "format 2: zigzag varints of fetched - missed pages x fetched_unit (the page size)",
    "evicted_tokens": "format 2: varints",
    "refactorised": "format 2: packed bits, row-major (layer, head)",
    "selected": "per sequence: pages removed/added since that sequence's previous step, gap-coded varints",
    "missed": "per head: 'equals the added pages' flag, else gap-coded varint ids",
    "timings": "float64 seconds, names from KEYS frames",
}


class Kind:
    """Frame kinds (the first header byte)."""

    PREFILL = 1
    STEP = 2
    END = 3
    KEYS = 4  # new timing names, appended to the reader's name table
    ALL = (PREFILL, STEP, END, KEYS)
    NAMES = {PREFILL: "prefill", STEP: "step", END: "end", KEYS: "keys"}


def encode_frame(kind: int, payload: bytes, compress_level: int) -> bytes:
    """One frame, header and (optionally zlib-compressed) payload, ready for a single write()."""
    flags = 0
    if compress_level > 0:
        packed = zlib.compress(payload, compress_level)
        if len(packed) < len(payload):
            payload, flags = packed, FLAG_ZLIB
    head = struct.pack("<BBII", kind, flags, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


@dataclass(frozen=True)
class Frame:
    kind: int
    offset: int  # of the frame header in records.bin
    payload: bytes  # decompressed


@dataclass
class ScanResult:
    """What a full pass over records.bin found (payloads checked, not decoded)."""

    counts: dict[int, int] = field(default_factory=lambda: dict.fromkeys(Kind.ALL, 0))
    valid_bytes: int = 0  # end offset of the last good frame (or of the file header)
    file_bytes: int = 0
    end_payload: bytes | None = None  # the END frame's payload, if the writer closed cleanly
    truncated: bool = False  # a partial (torn) frame follows the last good one
    torn_frame_offset: int | None = None
    version: int | None = None  # the file header's format version (None: cut inside the header)


def _read_file_header(f: BinaryIO, path: Path) -> int | None:
    """Check the 12-byte file header -> its format version, or None for a file cut inside its header
    (an empty trace)."""
    head = f.read(FILE_HEADER.size)
    if len(head) < FILE_HEADER.size:
        if head[: len(FILE_MAGIC)] == FILE_MAGIC[: len(head)]:  # the writer was killed inside the header
            return None
        raise TraceError(f"{path}: not a freekv-dse records file (it does not start with {FILE_MAGIC!r})")
    magic, version = FILE_HEADER.unpack(head)
    if magic != FILE_MAGIC:
        raise TraceError(
            f"{path}: not a freekv-dse records file: it starts with {magic!r}, expected {FILE_MAGIC!r}"
        )
    if version > FORMAT_VERSION:
        raise TraceError(
            f"{path}: written in trace format version {version}, but this freekv-dse reads versions up to "
            f"{FORMAT_VERSION}; upgrade freekv-dse to read it"
        )
    if version < 1:
        raise TraceError(f"{path}: invalid trace format version {version} in the file header")
    return int(version)


def _frames(f: BinaryIO, path: Path, file_bytes: int, start: int, stop: int | None,
            result: ScanResult | None) -> Iterator[Frame]:
    """Walk frames from `start`; with `stop`, only up to that offset (already scanned, trusted bounds).

    Without `stop` (a scan) the tail is classified: fewer bytes than a header, or a frame whose declared
    extent runs past the end of the file, or a last frame whose payload CRC fails and that ends exactly
    at the end of the file, is a torn write (result.truncated); a bad header CRC, a bad payload CRC
    followed by more data, an unknown kind or data after the END frame raise TraceError.
    """
    scanning = stop is None and result is not None
    offset = start
    limit = file_bytes if stop is None else stop
    seen_end = False
    while offset < limit:
        where = f"{path} at byte {offset}"
        if seen_end:
            raise TraceError(f"{where}: data after the end frame; the file was appended to after close")
        frame = _read_frame(f, where, offset, limit, file_bytes, scanning)
        if frame is None:  # a torn write ends the file
            result.truncated, result.torn_frame_offset = True, offset  # type: ignore[union-attr]
            return
        kind, payload, frame_end = frame
        if result is not None:
            result.counts[kind] += 1
            result.valid_bytes = frame_end
            if kind == Kind.END:
                result.end_payload = payload
        seen_end = kind == Kind.END
        yield Frame(kind, offset, payload)
        offset = frame_end


def _read_frame(f: BinaryIO, where: str, offset: int, limit: int, file_bytes: int,
                scanning: bool) -> tuple[int, bytes, int] | None:
    """(kind, decompressed payload, end offset) of the frame at `offset`, or None for a torn write
    (only when scanning; otherwise every defect raises TraceError)."""
    header = _read_frame_header(f, where, scanning)
    if header is None:
        return None
    kind, flags, n_bytes, payload_crc = header
    frame_end = offset + FRAME_HEADER.size + n_bytes
    if frame_end > limit:
        if scanning:
            return None
        raise TraceError(f"{where}: the file is shorter than when it was opened")
    stored = f.read(n_bytes)
    if zlib.crc32(stored) != payload_crc:
        if scanning and frame_end == file_bytes:
            return None
        raise TraceError(
            f"{where}: {Kind.NAMES[kind]} frame fails its CRC-32 check and more data follows it: "
            "the trace is corrupted in the middle (a run cut short only damages the last frame)"
        )
    try:
        payload = zlib.decompress(stored) if flags & FLAG_ZLIB else stored
    except zlib.error as exc:
        raise TraceError(f"{where}: {Kind.NAMES[kind]} frame does not decompress ({exc})") from None
    return kind, payload, frame_end


def _read_frame_header(f: BinaryIO, where: str, scanning: bool) -> tuple[int, int, int, int] | None:
    """(kind, flags, payload_bytes, payload_crc32) of a checked frame header, or None for a torn write
    (only when scanning)."""
    head = f.read(FRAME_HEADER.size)
    if len(head) < FRAME_HEADER.size:
        if scanning:
            return None
        raise TraceError(f"{where}: the file is shorter than when it was opened")
    kind, flags, n_bytes, payload_crc, header_crc = FRAME_HEADER.unpack(head)
    if zlib.crc32(head[:10]) != header_crc:
        if scanning and _zeros_to_end(f, head):
            # a crash without fsync can leave the file's last blocks zero-filled: a torn tail
            return None
        raise TraceError(
            f"{where}: corrupted frame header (checksum mismatch); the file is damaged in the middle, "
            "not merely cut short"
        )
    if kind not in Kind.ALL:
        raise TraceError(f"{where}: unknown frame kind {kind} (known: {sorted(Kind.NAMES.values())})")
    if n_bytes > MAX_PAYLOAD_BYTES:
        raise TraceError(f"{where}: frame payload of {n_bytes} bytes exceeds {MAX_PAYLOAD_BYTES}")
    return kind, flags, n_bytes, payload_crc


def _zeros_to_end(f: BinaryIO, head: bytes) -> bool:
    """True if `head` and everything after it to the end of the file are zero bytes."""
    if head.strip(b"\0"):
        return False
    while chunk := f.read(1 << 20):
        if chunk.strip(b"\0"):
            return False
    return True


def scan_records(path: Path) -> ScanResult:
    """Check every frame of records.bin (header, CRC, decompression) without decoding records."""
    result = ScanResult()
    try:
        with open(path, "rb") as f:
            result.file_bytes = f.seek(0, 2)
            f.seek(0)
            result.version = _read_file_header(f, path)
            if result.version is None:
                result.truncated = result.file_bytes > 0
                return result
            result.valid_bytes = FILE_HEADER.size
            for _ in _frames(f, path, result.file_bytes, FILE_HEADER.size, None, result):
                pass
    except FileNotFoundError:
        raise TraceError(f"{path}: missing; a trace directory holds {META_FILE} and {RECORDS_FILE}") from None
    return result


def iter_frames(path: Path, valid_bytes: int) -> Iterator[Frame]:
    """Frames of an already scanned records.bin, up to `valid_bytes` (CRCs checked again)."""
    with open(path, "rb") as f:
        file_bytes = f.seek(0, 2)
        f.seek(0)
        if valid_bytes < FILE_HEADER.size or _read_file_header(f, path) is None:
            return
        yield from _frames(f, path, file_bytes, FILE_HEADER.size, valid_bytes, None)


# ---------------------------------------------------------------------------------------- meta.json


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def meta_to_json(meta: RunMetadata) -> str:
    """The meta.json text for `meta` (TraceError naming the field if something is not JSON-able)."""
    body: dict[str, Any] = {}
    for name in RunMetadata.__dataclass_fields__:
        value = getattr(meta, name)
        if name == "model":
            value = value.to_dict()
        try:
            json.dumps(value, default=_json_default, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TraceError(
                f"RunMetadata.{name} cannot be stored in meta.json ({exc}); use JSON types "
                "(str, int, float except NaN/inf, bool, None, lists, dicts with str keys)"
            ) from None
        body[name] = value
    doc = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "records_file": RECORDS_FILE,
        "encoding": ENCODING,
        "meta": body,
    }
    return json.dumps(doc, default=_json_default, allow_nan=False, indent=1) + "\n"


def meta_from_json(path: Path) -> RunMetadata:
    """Read and validate meta.json -> RunMetadata (TraceError for a foreign or newer file)."""
    if not path.exists() and not path.is_symlink():
        raise TraceError(
            f"{path.parent}: not a trace directory (no {META_FILE}); traces are written by `dse trace` "
            "or traces.TraceWriter"
        )
    try:
        doc = load_user_json(path, "trace metadata")
    except UserFileError as exc:
        raise TraceError(f"{exc}; is this a freekv-dse trace?") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not valid JSON ({exc}); is this a freekv-dse trace?") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise TraceError(
            f"{path}: not a freekv-dse trace (field 'format' is {got!r}, expected {FORMAT_NAME!r})"
        )
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TraceError(f"{path}: 'format_version' must be a positive integer, got {version!r}")
    if version > FORMAT_VERSION:
        raise TraceError(
            f"{path}: written in trace format version {version}, but this freekv-dse reads versions up to "
            f"{FORMAT_VERSION}; upgrade freekv-dse to read it"
        )
    if doc.get("records_file", RECORDS_FILE) != RECORDS_FILE:
        raise TraceError(f"{path}: 'records_file' must be {RECORDS_FILE!r}, got {doc.get('records_file')!r}")
    body = doc.get("meta")
    if not isinstance(body, dict):
        raise TraceError(f"{path}: field 'meta' must be an object holding the run metadata")
    return _meta_from_dict(body, path, version)


def _meta_from_dict(body: dict[str, Any], path: Path, version: int) -> RunMetadata:
    fields = RunMetadata.__dataclass_fields__
    required = [n for n, f in fields.items() if f.default is MISSING and f.default_factory is MISSING]
    missing = [n for n in required if n not in body]
    if missing:
        raise TraceError(f"{path}: run metadata lacks the field(s) {', '.join(missing)}")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise TraceError(f"{path}: run metadata has unknown field(s) {', '.join(unknown)}")
    try:
        model = ModelSpec.from_dict(body["model"])
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path}: meta.model is not a valid model spec ({exc})") from None
    if body.get("timing_clock") not in ("cuda_event", "wall", "none"):
        raise TraceError(
            f"{path}: meta.timing_clock must be 'cuda_event', 'wall' or 'none', "
            f"got {body.get('timing_clock')!r}"
        )
    for name in ("runtime", "task", "seeds", "library_versions"):
        if not isinstance(body[name], dict):
            raise TraceError(f"{path}: meta.{name} must be an object, got {type(body[name]).__name__}")
    _check_runtime(body["runtime"], model, path)
    values = dict(body, model=model, format_version=version)
    values.setdefault("extra", {})
    return RunMetadata(**values)


_RUNTIME_INTS = {"page_size": 1, "budget_tokens": 1, "sink_tokens": 0, "window_tokens": 0, "batch_size": 1}


def _check_runtime(runtime: dict[str, Any], model: ModelSpec, path: Path) -> None:
    """The runtime settings readers rely on, where present: counts are integers in range, tau a number
    or null, dense_layers a list of the model's layer indices."""
    for name, low in _RUNTIME_INTS.items():
        v = runtime.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not low <= v < 1 << 31):
            raise TraceError(f"{path}: meta.runtime.{name} must be an integer in [{low}, 2**31), got {v!r}")
    if "method" in runtime:  # absent: a trace written before methods were recorded (FreeKV's)
        from traces.catalogue import CATALOGUE, canonical

        method = runtime["method"]
        if not isinstance(method, str) or canonical(method) not in CATALOGUE:
            raise TraceError(
                f"{path}: meta.runtime.method must name a method of the catalogue ({', '.join(CATALOGUE)}), "
                f"got {method!r}"
            )
    tau = runtime.get("tau")
    if tau is not None and (not isinstance(tau, (int, float)) or isinstance(tau, bool)):
        raise TraceError(f"{path}: meta.runtime.tau must be a number or null, got {tau!r}")
    for name in ("knobs", "extra"):
        if name in runtime and not isinstance(runtime[name], dict):
            raise TraceError(f"{path}: meta.runtime.{name} must be an object of method knobs, got "
                             f"{runtime[name]!r}")
    knob_tau = runtime.get("knobs", {}).get("tau")
    if knob_tau is not None and (not isinstance(knob_tau, (int, float)) or isinstance(knob_tau, bool)):
        raise TraceError(f"{path}: meta.runtime.knobs.tau must be a number or null, got {knob_tau!r}")
    dense = runtime.get("dense_layers", [])
    if not isinstance(dense, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and 0 <= x < model.n_layers for x in dense
    ):
        raise TraceError(
            f"{path}: meta.runtime.dense_layers must be a list of layer indices 0-{model.n_layers - 1}, "
            f"got {dense!r}"
        )
