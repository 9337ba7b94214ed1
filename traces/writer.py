"""The streaming trace writer: one frame per record, each written (and flushed) before the call returns.

```python
with TraceWriter.create(out_dir, meta) as w:     # creates the directory, writes meta.json
    w.append_prefill(prefill_record)
    w.append_step(step_record)                   # durable: a killed process keeps finished steps
# leaving the block normally writes the END frame (reader.complete is then True); leaving it with an
# exception closes the file without one, so the trace reads as incomplete.
```
The records file is opened unbuffered, so each record is a single write() system call into the OS page
cache: a SIGKILL loses at most the record being written. `fsync=True` also survives a power loss, at
the cost of one disk flush per record.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from traces.atomic_write import atomic_write_text
from traces.codec import RecordEncoder
from traces.errors import TraceError
from traces.format import (
    FILE_HEADER,
    FILE_MAGIC,
    META_FILE,
    RECORDS_FILE,
    Kind,
    encode_frame,
    meta_to_json,
)
from traces.models import ModelSpec
from traces.records import FORMAT_VERSION, PrefillRecord, RunMetadata, StepRecord

__all__ = ["TraceWriter"]


class TraceWriter:
    """Append-only writer of one trace directory. Make one with `TraceWriter.create`."""

    def __init__(self, path: Path, meta: RunMetadata, *, fsync: bool, compress_level: int) -> None:
        self.path = path
        self.meta = meta
        self.fsync = fsync
        self.compress_level = compress_level
        self.n_steps = 0
        self.n_prefills = 0
        self.bytes_written = 0
        page_size = meta.runtime.get("page_size") if isinstance(meta.runtime, dict) else None
        unit = page_size if isinstance(page_size, int) and not isinstance(page_size, bool) else 0
        # fetched_tokens are stored against missed pages x page size: FreeKV's recall costs ~nothing
        self._encoder = RecordEncoder(meta.model.n_layers, meta.model.n_kv_heads,
                                      fetched_unit=unit if 0 < unit < 1 << 31 else 0)
        self._file = open(path / RECORDS_FILE, "wb", buffering=0)  # noqa: SIM115 - closed in close()
        self._closed = False
        self._write(FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION))

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        meta: RunMetadata,
        *,
        fsync: bool = False,
        compress_level: int = 6,
        overwrite: bool = False,
    ) -> TraceWriter:
        """Create the trace directory `path` (parents too) and write its meta.json.

        The directory must not already hold a trace unless `overwrite=True` (then its meta.json and
        records.bin are replaced; other files are left alone). compress_level: zlib level 0-9 (0: none).
        meta.format_version is set to this writer's FORMAT_VERSION (e.g. when re-writing an older trace).
        """
        path = Path(path)
        if not isinstance(meta, RunMetadata):
            raise TraceError(f"{path}: TraceWriter.create needs a RunMetadata, got {type(meta).__name__}")
        if not isinstance(meta.model, ModelSpec):
            raise TraceError(
                f"{path}: RunMetadata.model must be a ModelSpec, got {type(meta.model).__name__}"
            )
        meta = replace(meta, format_version=FORMAT_VERSION)  # the file's format is the writer's own
        if not 0 <= compress_level <= 9:
            raise TraceError(f"{path}: compress_level must be 0-9, got {compress_level}")
        text = meta_to_json(meta)
        if path.exists() and not path.is_dir():
            raise TraceError(f"{path}: exists and is not a directory; a trace is a directory")
        existing = [name for name in (META_FILE, RECORDS_FILE) if (path / name).exists()]
        if existing and not overwrite:
            raise TraceError(
                f"{path}: already holds a trace ({', '.join(existing)}); choose a new directory or pass "
                "overwrite=True"
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
            for name in existing:
                (path / name).unlink()
        except OSError as exc:
            raise TraceError(f"{path}: cannot create the trace directory ({exc.strerror})") from None
        writer: TraceWriter | None = None
        try:
            writer = cls(path, meta, fsync=fsync, compress_level=compress_level)
            atomic_write_text(path / META_FILE, text)  # meta.json appears whole or not at all
        except (OSError, TraceError) as exc:
            if writer is not None:
                writer.abort()
            if isinstance(exc, TraceError):
                raise
            raise TraceError(f"{path}: cannot write the trace ({exc.strerror or exc})") from None
        return writer

    def append_prefill(self, rec: PrefillRecord) -> None:
        """Write one prefill record (starts or restarts the delta coding of its sequence)."""
        self._check_open()
        new_names, payload = self._encoder.encode_prefill(rec)
        self._write_frames(new_names, Kind.PREFILL, payload)
        self.n_prefills += 1

    def append_step(self, rec: StepRecord) -> None:
        """Write one step record; validated against the model's (L, H) first (TraceError if invalid)."""
        self._check_open()
        new_names, payload = self._encoder.encode_step(rec)
        self._write_frames(new_names, Kind.STEP, payload)
        self.n_steps += 1

    def close(self) -> None:
        """Write the END frame and close. Idempotent."""
        if self._closed:
            return
        end = {
            "n_steps": self.n_steps,
            "n_prefills": self.n_prefills,
            "closed_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        try:
            self._write(encode_frame(Kind.END, json.dumps(end).encode(), 0))
        finally:
            self.abort()

    def abort(self) -> None:
        """Close without an END frame: the trace keeps its records and reads as incomplete."""
        if not self._closed:
            self._closed = True
            self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _check_open(self) -> None:
        if self._closed:
            raise TraceError(f"{self.path}: the trace writer is closed; no more records can be appended")

    def _write_frames(self, new_names: list[str], kind: int, payload: bytes) -> None:
        data = encode_frame(kind, payload, self.compress_level)
        if new_names:
            data = encode_frame(Kind.KEYS, json.dumps(new_names).encode(), 0) + data
        self._write(data)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = self._file.write(view)
                view = view[n:]
            if self.fsync:
                os.fsync(self._file.fileno())
        except OSError as exc:
            raise TraceError(f"{self.path / RECORDS_FILE}: cannot write ({exc.strerror or exc})") from None
        self.bytes_written += len(data)
