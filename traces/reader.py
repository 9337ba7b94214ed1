"""The validating trace reader.

`open_trace(path)` reads meta.json and checks every frame of records.bin (header and payload CRC-32,
decompression) in one streaming pass, without decoding or keeping records. Then `steps()` decodes
them one at a time, so memory stays constant however long the trace is.

A trace cut short by a killed writer reads cleanly up to its last whole record: `complete` is False
(no END frame) and `truncated` is True if a partial frame follows. Damage anywhere else (a checksum
failure with more data after it, a foreign or newer file) raises TraceError.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from traces.codec import RecordDecoder
from traces.errors import TraceError
from traces.format import META_FILE, RECORDS_FILE, Frame, Kind, iter_frames, meta_from_json, scan_records
from traces.records import PrefillRecord, RunMetadata, StepRecord

__all__ = ["TraceReader", "open_trace"]


class TraceReader:
    """A scanned, validated trace. Make one with `open_trace(path)`.

    meta: the run metadata. n_steps / n_prefills: whole records present. complete: the writer closed
    cleanly (END frame present). truncated: a partial last frame was cut off (a killed run). Opening
    holds no file handle; each `steps()` / `prefills()` / `records()` call reads the file afresh.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta: RunMetadata = meta_from_json(path / META_FILE)
        self._records = path / RECORDS_FILE
        scan = scan_records(self._records)
        self.n_steps: int = scan.counts[Kind.STEP]
        self.n_prefills: int = scan.counts[Kind.PREFILL]
        self.complete: bool = scan.end_payload is not None
        self.truncated: bool = scan.truncated
        self.valid_bytes: int = scan.valid_bytes
        self.file_bytes: int = scan.file_bytes
        if scan.version is not None and scan.version != self.meta.format_version:
            raise TraceError(
                f"{self._records}: written in trace format version {scan.version}, but {META_FILE} says "
                f"version {self.meta.format_version}; the two files come from different traces"
            )
        self.end: dict | None = None
        if scan.end_payload is not None:
            self.end = self._check_end(scan.end_payload)

    def _check_end(self, payload: bytes) -> dict:
        try:
            end = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise TraceError(f"{self._records}: the end frame does not hold JSON") from None
        if not isinstance(end, dict):
            raise TraceError(f"{self._records}: the end frame does not hold a JSON object")
        if (end.get("n_steps"), end.get("n_prefills")) != (self.n_steps, self.n_prefills):
            raise TraceError(
                f"{self._records}: the end frame counts {end.get('n_steps')} steps and "
                f"{end.get('n_prefills')} prefills, the file holds {self.n_steps} and {self.n_prefills}"
            )
        return end

    @property
    def n_layers(self) -> int:
        return self.meta.model.n_layers

    @property
    def n_kv_heads(self) -> int:
        return self.meta.model.n_kv_heads

    @property
    def dense_layers(self) -> tuple[int, ...]:
        """Layers the run kept dense (meta.runtime['dense_layers']), sorted."""
        return tuple(sorted(int(x) for x in self.meta.runtime.get("dense_layers", ()) or ()))

    def status(self) -> str:
        """One line: what the trace holds and whether it ended cleanly."""
        how = "complete" if self.complete else "incomplete (writer did not close it)"
        if self.truncated:
            how += f"; a partial last record was cut at byte {self.valid_bytes} of {self.file_bytes}"
        return f"{self.path}: {self.n_steps} steps, {self.n_prefills} prefills, {how}"

    def _decoder(self) -> RecordDecoder:
        page_size = self.meta.runtime.get("page_size")  # meta_from_json: int in [1, 2**31) or None
        return RecordDecoder(self.n_layers, self.n_kv_heads, self.meta.format_version, page_size,
                             max_context_tokens=self.meta.model.max_position_tokens)

    def records(self) -> Iterator[PrefillRecord | StepRecord]:
        """All records in file order (prefills and steps), decoded one at a time."""
        decoder = self._decoder()
        for frame in self._frames():
            if frame.kind == Kind.KEYS:
                self._decode(frame, decoder.add_names)
            elif frame.kind == Kind.PREFILL:
                rec = self._decode(frame, decoder.decode_prefill)
                decoder.reset_sequence(rec.sequence)
                yield rec
            elif frame.kind == Kind.STEP:
                yield self._decode(frame, decoder.decode_step)

    def steps(self) -> Iterator[StepRecord]:
        """Step records in file order (streaming; constant memory)."""
        decoder = self._decoder()
        for frame in self._frames():
            if frame.kind == Kind.KEYS:
                self._decode(frame, decoder.add_names)
            elif frame.kind == Kind.PREFILL:
                decoder.reset_sequence(self._decode(frame, decoder.prefill_sequence))
            elif frame.kind == Kind.STEP:
                yield self._decode(frame, decoder.decode_step)

    def prefills(self) -> list[PrefillRecord]:
        """All prefill records (step frames are skipped, not decoded)."""
        decoder = self._decoder()
        out: list[PrefillRecord] = []
        for frame in self._frames():
            if frame.kind == Kind.KEYS:
                self._decode(frame, decoder.add_names)
            elif frame.kind == Kind.PREFILL:
                out.append(self._decode(frame, decoder.decode_prefill))
        return out

    def _frames(self) -> Iterator[Frame]:
        return iter_frames(self._records, self.valid_bytes)

    def _decode(self, frame: Frame, fn):  # noqa: ANN001, ANN202 - fn: payload -> record
        try:
            return fn(frame.payload)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError, zlib.error) as exc:
            raise TraceError(
                f"{self._records} at byte {frame.offset}: {Kind.NAMES[frame.kind]} frame passes its "
                f"checksum but does not decode ({exc}); the file was written by a faulty writer"
            ) from None

    def __repr__(self) -> str:
        return f"TraceReader({self.status()})"


def open_trace(path: str | os.PathLike[str]) -> TraceReader:
    """Open and validate the trace directory `path` (TraceError with a clear message if it is not one)."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such trace directory")
    if not path.is_dir():
        hint = f"; pass its directory {path.parent} instead" if path.name in (META_FILE, RECORDS_FILE) else ""
        raise TraceError(
            f"{path}: is a file; a trace is a directory holding {META_FILE} and {RECORDS_FILE}{hint}"
        )
    try:
        return TraceReader(path)
    except OSError as exc:
        raise TraceError(f"{exc.filename or path}: cannot read the trace ({exc.strerror or exc})") from None
