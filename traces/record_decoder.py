"""PREFILL and STEP payloads (traces/payload_layout.py) -> records, mirroring the encoder's per-sequence
state. Raises ValueError on bad data (the reader turns it into a TraceError naming the file and offset)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from traces.page_keys import ID_LIMIT, heads_of, keys_from_ids, keys_to_nested
from traces.payload_layout import (
    PREFILL_FIXED,
    PREFILL_TRAILER,
    STEP_FIXED,
    STEP_FLAG_EVICTED,
    STEP_FLAG_FETCHED,
    STEP_FLAG_MASS,
    STEP_FLAG_REFACTORISED,
    STEP_FLAGS_KNOWN,
    SequenceState,
    TimingNames,
)
from traces.records import FORMAT_VERSION, MultiContextRecord, PrefillRecord, StepRecord, movement_from_missed
from traces.varint import decode_uvarints, gap_decode, unshuffle_bytes, zigzag_decode

__all__ = ["RecordDecoder"]


class _Cursor:
    """Reads consecutive slices of a varint array."""

    def __init__(self, values: np.ndarray) -> None:
        self.values, self.pos = values.astype(np.int64), 0

    def take(self, n: int) -> np.ndarray:
        if n < 0 or self.pos + n > self.values.size:
            raise ValueError(f"varint stream holds {self.values.size} values, needed {self.pos + n}")
        out = self.values[self.pos:self.pos + n]
        self.pos += n
        return out

    def keys(self, counts: np.ndarray) -> np.ndarray:
        """Gap-coded page ids, counts[head] per head, as keys."""
        return keys_from_ids(counts, gap_decode(self.take(int(counts.sum())), counts))


@dataclass(frozen=True)
class _SelectionDelta:
    """A step's selection against its sequence's previous one: keys removed and added, missed pages
    listed explicitly, heads whose missed pages are exactly the added ones, missed pages per head."""

    removed: np.ndarray
    added: np.ndarray
    explicit: np.ndarray
    same: np.ndarray  # (L*H,) bool
    missed_counts: np.ndarray  # (L*H,)

    def missed(self) -> np.ndarray:
        return np.sort(np.concatenate([self.explicit, self.added[self.same[heads_of(self.added)]]]))


def _selection_delta(cur: _Cursor, n_heads: int) -> _SelectionDelta:
    removed_counts, added_counts, missed_code = cur.take(n_heads), cur.take(n_heads), cur.take(n_heads)
    removed = cur.keys(removed_counts)
    added = cur.keys(added_counts)
    same = missed_code == 1
    explicit = cur.keys(np.where(same, 0, missed_code // 2))
    return _SelectionDelta(removed, added, explicit, same, np.where(same, added_counts, missed_code // 2))


def _movement_varints(
    cur: _Cursor, flags: int, missed_counts: np.ndarray, n_heads: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(fetched tokens, evicted tokens) per head, each None where the step has none (flags)."""
    fetched = evicted = None
    if flags & STEP_FLAG_FETCHED:
        unit = int(cur.take(1)[0])
        if not 0 <= unit < ID_LIMIT:
            raise ValueError(f"fetched_unit {unit} out of [0, 2**31)")
        fetched = missed_counts * unit + zigzag_decode(cur.take(n_heads).astype(np.uint64))
        if fetched.size and (fetched.min() < 0 or fetched.max() >= ID_LIMIT):
            raise ValueError(f"fetched_tokens out of [0, 2**31): [{fetched.min()}, {fetched.max()}]")
    if flags & STEP_FLAG_EVICTED:
        evicted = cur.take(n_heads)
        if evicted.size and evicted.max() >= ID_LIMIT:
            raise ValueError(f"evicted_tokens out of [0, 2**31): max {evicted.max()}")
    return fetched, evicted


def _apply_delta(prev: np.ndarray, removed: np.ndarray, added: np.ndarray) -> np.ndarray:
    """The selected keys: the previous ones less `removed`, plus `added`."""
    keep = np.ones(prev.size, dtype=bool)
    if removed.size:
        idx = np.searchsorted(prev, removed)
        if idx.max() >= prev.size or not np.array_equal(prev[idx], removed):
            raise ValueError("step removes pages its sequence had not selected")
        keep[idx] = False
    kept = prev[keep]
    selected = np.insert(kept, np.searchsorted(kept, added), added)
    if selected.size > 1 and not (np.diff(selected) > 0).all():
        raise ValueError("step adds pages its sequence had already selected")
    return selected


def _head_sections(
    payload: bytes, offset: int, flags: int, shape: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """(similarity, corrected, refactorised or None, offset after them), each (L, H)."""
    n_heads = shape[0] * shape[1]
    n_bits = math.ceil(n_heads / 8)
    similarity = unshuffle_bytes(payload[offset:offset + 4 * n_heads], "<f4", n_heads)
    offset += 4 * n_heads
    bits = np.frombuffer(payload, np.uint8, n_bits, offset)
    corrected = np.unpackbits(bits, count=n_heads).astype(bool)
    offset += n_bits
    rebuilt = None
    if flags & STEP_FLAG_REFACTORISED:
        bits = np.frombuffer(payload, np.uint8, n_bits, offset)
        rebuilt = np.unpackbits(bits, count=n_heads).astype(bool).reshape(shape)
        offset += n_bits
    return similarity.reshape(shape), corrected.reshape(shape), rebuilt, offset


def _timings_offset(offset: int, flags: int, n_heads: int) -> int:
    """Where a step's timings start: after its floats and bit fields, which start at `offset`."""
    n_bits = math.ceil(n_heads / 8)
    t_offset = offset + 4 * n_heads * (2 if flags & STEP_FLAG_MASS else 1) + n_bits
    return t_offset + (n_bits if flags & STEP_FLAG_REFACTORISED else 0)


class RecordDecoder:
    """Inverse of RecordEncoder: payloads -> records, mirroring its state. Raises ValueError on bad data
    (the reader turns it into a TraceError naming the file and offset).

    version: the trace's format version (1 or 2). page_size: meta.runtime["page_size"] or None, used to
    derive a format-1 step's fetched_tokens (missed pages x page_size; None without a page size).
    """

    def __init__(self, n_layers: int, n_kv_heads: int, version: int = FORMAT_VERSION,
                 page_size: int | None = None, max_context_tokens: int | None = None) -> None:
        if version not in STEP_FLAGS_KNOWN:
            raise ValueError(f"format version {version} has no record decoder ({sorted(STEP_FLAGS_KNOWN)})")
        self.n_layers, self.n_kv_heads = n_layers, n_kv_heads
        self.max_context_tokens = max_context_tokens  # the model's positions: a step attends at most these
        self.version, self.page_size = version, page_size
        self.names = TimingNames()
        self.sequences: dict[int, SequenceState] = {}

    def add_names(self, payload: bytes) -> None:
        names = json.loads(payload.decode("utf-8"))
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("keys frame must hold a JSON list of strings")
        self.names.add(names)

    def _check_shape(self, n_layers: int, n_kv_heads: int) -> None:
        if (n_layers, n_kv_heads) != (self.n_layers, self.n_kv_heads):
            raise ValueError(
                f"record has {n_layers} layers x {n_kv_heads} KV heads, the model in meta.json has "
                f"{self.n_layers} x {self.n_kv_heads}"
            )

    def _timings(self, cur: _Cursor, payload: bytes, offset: int) -> tuple[dict[str, float], int]:
        n = int(cur.take(1)[0])
        ids = cur.take(n)
        if ids.size and ids.max() >= len(self.names.names):
            raise ValueError(f"timing name id {ids.max()} not defined by a preceding keys frame")
        values = np.frombuffer(payload, dtype="<f8", count=n, offset=offset)
        return {self.names.names[i]: float(v) for i, v in zip(ids, values, strict=True)}, offset + 8 * n

    def prefill_sequence(self, payload: bytes) -> int:
        return PREFILL_FIXED.unpack_from(payload)[0]

    def decode_prefill(self, payload: bytes) -> PrefillRecord:
        seq, prompt, n_layers, n_kv_heads, n_varint = PREFILL_FIXED.unpack_from(payload)
        self._check_shape(n_layers, n_kv_heads)
        offset = PREFILL_FIXED.size
        cur = _Cursor(decode_uvarints(payload[offset:offset + n_varint]))
        timings, end = self._timings(cur, payload, offset + n_varint)
        n_heads = n_layers * n_kv_heads
        counts = cur.take(n_heads)
        keys = cur.keys(counts)
        multi_context = None
        if self.version >= 3:
            multi_context, end = _multi_context(payload, end, n_layers)
        self._check_end(cur, end, payload)
        return PrefillRecord(seq, prompt, keys_to_nested(keys, n_layers, n_kv_heads), timings, multi_context)

    def reset_sequence(self, seq: int) -> None:
        self.sequences[seq] = SequenceState()

    @staticmethod
    def _check_end(cur: _Cursor, end: int, payload: bytes) -> None:
        if cur.pos != cur.values.size or end != len(payload):
            raise ValueError(
                f"payload has {len(payload) - end} unread bytes, {cur.values.size - cur.pos} unread varints"
            )

    def _check_context(self, context: int) -> None:
        """A step attends at least the token it decodes and at most the model's positions."""
        top = self.max_context_tokens
        if context < 1 or (top is not None and context > top):
            bound = f"1 to {top} (the model's positions)" if top is not None else "at least 1"
            raise ValueError(f"step context_tokens {context} is out of range: a step attends {bound}")

    def _check_flags(self, flags: int) -> None:
        unknown = flags & ~STEP_FLAGS_KNOWN[self.version]
        if unknown:
            raise ValueError(
                f"step flags 0x{flags:02x} set bits 0x{unknown:02x} unknown to format {self.version}"
            )

    def decode_step(self, payload: bytes) -> StepRecord:
        seq, step, context, n_layers, n_kv_heads, flags, n_varint = STEP_FIXED.unpack_from(payload)
        self._check_shape(n_layers, n_kv_heads)
        self._check_context(context)
        self._check_flags(flags)
        n_heads, shape = n_layers * n_kv_heads, (n_layers, n_kv_heads)
        state = self.sequences.get(seq, SequenceState())
        offset = STEP_FIXED.size + n_varint
        cur = _Cursor(decode_uvarints(payload[STEP_FIXED.size:offset]))
        timings, end = self._timings(cur, payload, _timings_offset(offset, flags, n_heads))
        prev_attended = state.attended if state.attended is not None else np.zeros(n_heads, np.int64)
        attended = prev_attended + zigzag_decode(cur.take(n_heads).astype(np.uint64))
        delta = _selection_delta(cur, n_heads)
        fetched, evicted = _movement_varints(cur, flags, delta.missed_counts, n_heads)
        self._check_end(cur, end, payload)
        selected = _apply_delta(state.selected_keys, delta.removed, delta.added)
        missed = delta.missed()
        similarity, corrected, rebuilt, offset = _head_sections(payload, offset, flags, shape)
        if self.version == 1:  # format 1 has no movement fields: FreeKV's page recall (payload layout)
            missed_counts = delta.missed_counts.reshape(shape)
            fetched, evicted, rebuilt = movement_from_missed(missed_counts, self.page_size)
        mass = None
        if flags & STEP_FLAG_MASS:
            mass = unshuffle_bytes(payload[offset:offset + 4 * n_heads], "<f4", n_heads).reshape(shape)
        self.sequences[seq] = SequenceState(selected, attended, step)
        return StepRecord(
            sequence=seq,
            step=step,
            context_tokens=context,
            similarity=similarity,
            corrected=corrected,
            selected=keys_to_nested(selected, n_layers, n_kv_heads),
            missed=keys_to_nested(missed, n_layers, n_kv_heads),
            attended_tokens=attended.astype(np.int32).reshape(shape),
            timings_s=timings,
            attention_mass=mass,
            fetched_tokens=None if fetched is None else fetched.astype(np.int32).reshape(shape),
            evicted_tokens=None if evicted is None else evicted.astype(np.int32).reshape(shape),
            refactorised=rebuilt,
        )


def _multi_context(payload: bytes, offset: int, n_layers: int) -> tuple[MultiContextRecord | None, int]:
    """The format-3 PREFILL trailer at `offset` -> (the multi-context record or None, the offset after it)."""
    if offset + PREFILL_TRAILER.size > len(payload):
        raise ValueError("prefill payload ends before its multi-context trailer")
    (n,) = PREFILL_TRAILER.unpack_from(payload, offset)
    offset += PREFILL_TRAILER.size
    if n == 0:
        return None, offset
    if offset + n > len(payload):
        raise ValueError(f"multi-context trailer of {n} bytes runs past the payload")
    try:
        record = MultiContextRecord.from_dict(json.loads(payload[offset:offset + n].decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"multi-context trailer is not UTF-8 JSON: {exc}") from None
    if len(record.kept_tokens) != n_layers:
        raise ValueError(f"multi-context record has {len(record.kept_tokens)} layers, the record {n_layers}")
    return record, offset + n
