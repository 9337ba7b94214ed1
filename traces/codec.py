"""Payload codecs of the PREFILL, STEP and KEYS frames (format versions 1 and 2), with per-sequence state.

Per-head page lists are handled as one sorted int64 array of *keys* per record, key = (l * H + h) << 32 |
page_id, so set operations over all L x H heads are a few vectorised numpy calls.

STEP payload (before zlib; little endian):
    fixed   sequence u32, step u32, context_tokens u32, L u16, H u16, flags u8, varint_bytes u32
            flags: bit 0 attention_mass; format 2 only: bit 1 fetched_tokens, bit 2 evicted_tokens,
            bit 3 refactorised (each set when the record holds the field; other bits must be 0)
    varints n_timings, timing name ids[n_timings],
            zigzag(attended_tokens - that sequence's previous attended_tokens)[L*H],
            removed_counts[L*H], added_counts[L*H], missed_code[L*H],
            removed ids, added ids, explicit missed ids   (each gap-coded per head)
            [bit 1] fetched_unit, zigzag(fetched_tokens - missed_counts * fetched_unit)[L*H]
            [bit 2] evicted_tokens[L*H]
    floats  similarity float32[L*H] byte-shuffled, corrected packbits[ceil(L*H/8)],
            [bit 3] refactorised packbits[ceil(L*H/8)],
            [bit 0] attention_mass float32[L*H] byte-shuffled, timings float64[n_timings]
missed_code per head: 1 = the missed pages are exactly the added pages (and there is at least one);
otherwise 2 * (number of missed pages), listed explicitly. The selection of a sequence's first step (and
of its first step after a PREFILL of the same sequence id) is coded against the empty set.
fetched_unit: the writer's meta.runtime["page_size"] (0 if none), so FreeKV's page recall (fetched =
missed pages x page size) stores one zero byte per head, which zlib folds away; any other value is still
exact, only larger. A format-1 STEP payload is the same without bits 1-3; the reader derives the three
fields (records.movement_from_missed).

PREFILL payload: sequence u32, prompt_tokens u32, L u16, H u16, varint_bytes u32, then varints
n_timings, name ids, counts[L*H], gap-coded ids; then timings float64[n_timings].
KEYS payload: UTF-8 JSON list of new timing names, appended to the name table in order.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from traces.errors import TraceError
from traces.records import FORMAT_VERSION, PrefillRecord, StepRecord, movement_from_missed
from traces.varint import (
    decode_uvarints,
    encode_uvarints,
    gap_decode,
    gap_encode,
    shuffle_bytes,
    unshuffle_bytes,
    zigzag_decode,
    zigzag_encode,
)

__all__ = ["Nested", "TimingNames", "SequenceState", "RecordEncoder", "RecordDecoder"]

Nested = tuple[tuple[np.ndarray, ...], ...]

STEP_FIXED = struct.Struct("<IIIHHBI")
PREFILL_FIXED = struct.Struct("<IIHHI")
STEP_FLAG_MASS = 0x01
STEP_FLAG_FETCHED = 0x02  # format 2
STEP_FLAG_EVICTED = 0x04  # format 2
STEP_FLAG_REFACTORISED = 0x08  # format 2
STEP_FLAGS_KNOWN = {
    1: STEP_FLAG_MASS,
    2: STEP_FLAG_MASS | STEP_FLAG_FETCHED | STEP_FLAG_EVICTED | STEP_FLAG_REFACTORISED,
}
_ID_LIMIT = 1 << 31  # page ids are int32
_U32_LIMIT = 1 << 32
_LOW32 = np.int64(0xFFFFFFFF)
_EMPTY_KEYS = np.zeros(0, dtype=np.int64)


@dataclass
class TimingNames:
    """The table of timing names (shared by writer and reader, grown by KEYS frames)."""

    names: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def add(self, names: Sequence[str]) -> None:
        for name in names:
            self.index[name] = len(self.names)
            self.names.append(name)

    def unknown(self, timings: Mapping[str, float]) -> list[str]:
        return [name for name in timings if name not in self.index]


@dataclass
class SequenceState:
    """What the delta coding of one sequence remembers from its previous step."""

    selected_keys: np.ndarray = field(default_factory=lambda: _EMPTY_KEYS)
    attended: np.ndarray | None = None  # (L*H,) int64
    last_step: int = -1


def _member(x: np.ndarray, sorted_ref: np.ndarray) -> np.ndarray:
    """(n,) bool: x[i] in sorted_ref (both int64; sorted_ref ascending and unique)."""
    if sorted_ref.size == 0 or x.size == 0:
        return np.zeros(x.shape, dtype=bool)
    idx = np.searchsorted(sorted_ref, x)
    idx[idx == sorted_ref.size] = 0
    return sorted_ref[idx] == x


def _diff_sorted(prev: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(removed = prev - cur, added = cur - prev) for sorted unique int64 arrays, one searchsorted."""
    if prev.size == 0 or cur.size == 0:
        return prev, cur
    idx = np.minimum(np.searchsorted(cur, prev), cur.size - 1)
    kept = cur[idx] == prev
    cur_in_prev = np.zeros(cur.size, dtype=bool)
    cur_in_prev[idx[kept]] = True
    return prev[~kept], cur[~cur_in_prev]


def _heads_of(keys: np.ndarray) -> np.ndarray:
    return keys >> np.int64(32)


def _counts(keys: np.ndarray, n_heads: int) -> np.ndarray:
    return np.bincount(_heads_of(keys), minlength=n_heads).astype(np.int64)


def keys_to_nested(keys: np.ndarray, n_layers: int, n_kv_heads: int) -> Nested:
    """Sorted key array -> selected[l][h] int32 arrays."""
    counts = _counts(keys, n_layers * n_kv_heads)
    ids = (keys & _LOW32).astype(np.int32)
    ends = np.cumsum(counts).tolist()
    parts = [ids[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    return tuple(tuple(parts[i * n_kv_heads:(i + 1) * n_kv_heads]) for i in range(n_layers))


class _Checker:
    """Validation of one record against the trace's (L, H), with messages naming the field."""

    def __init__(self, what: str, n_layers: int, n_kv_heads: int) -> None:
        self.what, self.n_layers, self.n_kv_heads = what, n_layers, n_kv_heads

    def fail(self, message: str) -> TraceError:
        return TraceError(f"{self.what}: {message}")

    def uint(self, name: str, value: object, limit: int = _U32_LIMIT) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < limit:
            raise self.fail(f"{name} must be an integer in [0, {limit}), got {value!r}")
        return int(value)

    def grid(self, name: str, value: object, kind: str) -> np.ndarray:
        """(L, H) array of dtype kind 'f' (float), 'b' (bool) or 'i' (non-negative int)."""
        a = np.asarray(value)
        shape = (self.n_layers, self.n_kv_heads)
        if a.shape != shape:
            raise self.fail(f"{name} must have shape (n_layers, n_kv_heads) = {shape}, got {a.shape}")
        ok = {"f": a.dtype.kind == "f", "b": a.dtype == np.bool_, "i": a.dtype.kind in "iu"}[kind]
        if not ok:
            wanted = {"f": "a float (float32) array", "b": "a bool array", "i": "an integer array"}[kind]
            raise self.fail(f"{name} must be {wanted}, got dtype {a.dtype}")
        if kind == "i" and a.size and (a.min() < 0 or a.max() >= _ID_LIMIT):
            raise self.fail(f"{name} must hold integers in [0, 2**31), got range [{a.min()}, {a.max()}]")
        return a

    def nested_keys(self, name: str, nested: object) -> np.ndarray:
        """selected/missed [l][h] sorted int arrays -> sorted int64 keys."""
        if not isinstance(nested, Sequence) or len(nested) != self.n_layers:
            got = len(nested) if isinstance(nested, Sequence) else type(nested).__name__
            raise self.fail(f"{name} must be a sequence of n_layers={self.n_layers} layers, got {got}")
        for li, layer in enumerate(nested):
            if not isinstance(layer, Sequence) or len(layer) != self.n_kv_heads:
                raise self.fail(f"{name}[{li}] must be a sequence of n_kv_heads={self.n_kv_heads} arrays")
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for layer in nested for a in layer]
        for i, a in enumerate(arrays):
            if a.ndim != 1 or (a.dtype.kind not in "iu" and a.size):
                li, h = divmod(i, self.n_kv_heads)
                raise self.fail(f"{name}[{li}][{h}] must be a 1-D integer array, got {a.dtype} {a.shape}")
        counts = np.array([a.size for a in arrays], dtype=np.int64)
        ids = np.concatenate(arrays).astype(np.int64, copy=False) if arrays else _EMPTY_KEYS
        if ids.size == 0:
            return _EMPTY_KEYS
        if ids.min() < 0 or ids.max() >= _ID_LIMIT:
            raise self.fail(f"{name} page ids must lie in [0, 2**31), got range [{ids.min()}, {ids.max()}]")
        keys = (np.repeat(np.arange(counts.size, dtype=np.int64), counts) << np.int64(32)) | ids
        bad = np.flatnonzero(np.diff(keys) <= 0)
        if bad.size:
            head = int(_heads_of(keys[bad[0] + 1 : bad[0] + 2])[0])
            li, h = divmod(head, self.n_kv_heads)
            raise self.fail(f"{name}[{li}][{h}] must be sorted ascending without duplicates")
        return keys

    def timings(self, timings: object) -> dict[str, float]:
        if not isinstance(timings, Mapping):
            raise self.fail(f"timings_s must be a dict of name -> seconds, got {type(timings).__name__}")
        out: dict[str, float] = {}
        for name, value in timings.items():
            if not isinstance(name, str) or not name:
                raise self.fail(f"timings_s keys must be non-empty strings, got {name!r}")
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise self.fail(f"timings_s[{name!r}] must be a number of seconds, got {value!r}")
            out[name] = float(value)
        return out


def _timing_varints(names: TimingNames, timings: dict[str, float]) -> tuple[list[np.ndarray], bytes]:
    ids = np.array([names.index[n] for n in timings], dtype=np.int64)
    values = np.array(list(timings.values()), dtype="<f8")
    return [np.array([len(timings)], dtype=np.int64), ids], values.tobytes()


class RecordEncoder:
    """Turns records into payloads; owns the per-sequence delta state and the timing name table.

    `check_*` validates a record without changing any state (so a rejected record leaves the writer
    usable); `encode_*` then produces the payload and advances the state.
    """

    def __init__(self, n_layers: int, n_kv_heads: int, fetched_unit: int = 0) -> None:
        """fetched_unit: tokens per missed page predicted as fetched (the run's page size; 0: none)."""
        self.n_layers, self.n_kv_heads = n_layers, n_kv_heads
        self.fetched_unit = int(fetched_unit)
        self.names = TimingNames()
        self.sequences: dict[int, SequenceState] = {}

    def encode_prefill(self, rec: PrefillRecord) -> tuple[list[str], bytes]:
        """-> (timing names new to the table, to go in a KEYS frame first; the PREFILL payload)."""
        if not isinstance(rec, PrefillRecord):
            raise TraceError(f"append_prefill expects a PrefillRecord, got {type(rec).__name__}")
        c = _Checker(f"PrefillRecord(sequence={rec.sequence})", self.n_layers, self.n_kv_heads)
        seq = c.uint("sequence", rec.sequence)
        prompt = c.uint("prompt_tokens", rec.prompt_tokens)
        keys = c.nested_keys("initial_selected", rec.initial_selected)
        timings = c.timings(rec.timings_s)
        new_names = self.names.unknown(timings)
        self.names.add(new_names)
        n_heads = self.n_layers * self.n_kv_heads
        counts = _counts(keys, n_heads)
        t_varints, t_bytes = _timing_varints(self.names, timings)
        varints = encode_uvarints(np.concatenate(t_varints + [counts, gap_encode(keys & _LOW32, counts)]))
        self.sequences[seq] = SequenceState()  # a prefill starts (or restarts) the sequence
        fixed = PREFILL_FIXED.pack(seq, prompt, self.n_layers, self.n_kv_heads, len(varints))
        return new_names, fixed + varints + t_bytes

    def encode_step(self, rec: StepRecord) -> tuple[list[str], bytes]:
        """-> (timing names new to the table, to go in a KEYS frame first; the STEP payload)."""
        if not isinstance(rec, StepRecord):
            raise TraceError(f"append_step expects a StepRecord, got {type(rec).__name__}")
        c = _Checker(f"StepRecord(sequence={rec.sequence}, step={rec.step})", self.n_layers, self.n_kv_heads)
        seq = c.uint("sequence", rec.sequence)
        step = c.uint("step", rec.step)
        context = c.uint("context_tokens", rec.context_tokens)
        state = self.sequences.get(seq, SequenceState())
        if step <= state.last_step:
            raise c.fail(
                f"steps of a sequence must be appended in increasing order; sequence {seq} already has "
                f"step {state.last_step}"
            )
        similarity = c.grid("similarity", rec.similarity, "f").astype("<f4", copy=False)
        corrected = c.grid("corrected", rec.corrected, "b")
        attended = c.grid("attended_tokens", rec.attended_tokens, "i").astype(np.int64).ravel()
        mass = None
        if rec.attention_mass is not None:
            mass = c.grid("attention_mass", rec.attention_mass, "f").astype("<f4", copy=False)
        fetched = evicted = rebuilt = None
        if rec.fetched_tokens is not None:
            fetched = c.grid("fetched_tokens", rec.fetched_tokens, "i").astype(np.int64).ravel()
        if rec.evicted_tokens is not None:
            evicted = c.grid("evicted_tokens", rec.evicted_tokens, "i").astype(np.int64).ravel()
        if rec.refactorised is not None:
            rebuilt = c.grid("refactorised", rec.refactorised, "b")
        selected = c.nested_keys("selected", rec.selected)
        missed = c.nested_keys("missed", rec.missed)
        outside = ~_member(missed, selected)
        if outside.any():
            li, h = divmod(int(_heads_of(missed[outside][:1])[0]), self.n_kv_heads)
            raise c.fail(f"missed[{li}][{h}] holds pages that are not in selected[{li}][{h}]")
        timings = c.timings(rec.timings_s)
        new_names = self.names.unknown(timings)
        self.names.add(new_names)

        n_heads = self.n_layers * self.n_kv_heads
        removed, added = _diff_sorted(state.selected_keys, selected)
        removed_counts, added_counts = _counts(removed, n_heads), _counts(added, n_heads)
        missed_counts = _counts(missed, n_heads)
        in_added = _counts(missed[_member(missed, added)], n_heads)
        same = (missed_counts == added_counts) & (in_added == added_counts) & (added_counts > 0)
        explicit = missed[~same[_heads_of(missed)]]
        explicit_counts = np.where(same, 0, missed_counts)
        prev_attended = state.attended if state.attended is not None else np.zeros(n_heads, np.int64)

        t_varints, t_bytes = _timing_varints(self.names, timings)
        columns = t_varints + [
            zigzag_encode(attended - prev_attended).astype(np.int64),
            removed_counts, added_counts, np.where(same, 1, 2 * missed_counts),
            gap_encode(removed & _LOW32, removed_counts),
            gap_encode(added & _LOW32, added_counts),
            gap_encode(explicit & _LOW32, explicit_counts),
        ]
        flags = STEP_FLAG_MASS if mass is not None else 0
        if fetched is not None:
            flags |= STEP_FLAG_FETCHED
            residual = fetched - missed_counts * self.fetched_unit
            columns += [np.array([self.fetched_unit], np.int64), zigzag_encode(residual).astype(np.int64)]
        if evicted is not None:
            flags |= STEP_FLAG_EVICTED
            columns.append(evicted)
        if rebuilt is not None:
            flags |= STEP_FLAG_REFACTORISED
        varints = encode_uvarints(np.concatenate(columns))
        parts = [
            STEP_FIXED.pack(seq, step, context, self.n_layers, self.n_kv_heads, flags, len(varints)),
            varints,
            shuffle_bytes(similarity.ravel()),
            np.packbits(corrected.ravel()).tobytes(),
        ]
        if rebuilt is not None:
            parts.append(np.packbits(rebuilt.ravel()).tobytes())
        if mass is not None:
            parts.append(shuffle_bytes(mass.ravel()))
        parts.append(t_bytes)
        self.sequences[seq] = SequenceState(selected, attended, step)
        return new_names, b"".join(parts)


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


class RecordDecoder:
    """Inverse of RecordEncoder: payloads -> records, mirroring its state. Raises ValueError on bad data
    (the reader turns it into a TraceError naming the file and offset).

    version: the trace's format version (1 or 2). page_size: meta.runtime["page_size"] or None, used to
    derive a format-1 step's fetched_tokens (missed pages x page_size; None without a page size).
    """

    def __init__(self, n_layers: int, n_kv_heads: int, version: int = FORMAT_VERSION,
                 page_size: int | None = None) -> None:
        if version not in STEP_FLAGS_KNOWN:
            raise ValueError(f"format version {version} has no record decoder ({sorted(STEP_FLAGS_KNOWN)})")
        self.n_layers, self.n_kv_heads = n_layers, n_kv_heads
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
        keys = self._keys(cur, counts)
        self._check_end(cur, end, payload)
        return PrefillRecord(seq, prompt, keys_to_nested(keys, n_layers, n_kv_heads), timings)

    def reset_sequence(self, seq: int) -> None:
        self.sequences[seq] = SequenceState()

    @staticmethod
    def _keys(cur: _Cursor, counts: np.ndarray) -> np.ndarray:
        ids = gap_decode(cur.take(int(counts.sum())), counts)
        return (np.repeat(np.arange(counts.size, dtype=np.int64), counts) << np.int64(32)) | ids

    @staticmethod
    def _check_end(cur: _Cursor, end: int, payload: bytes) -> None:
        if cur.pos != cur.values.size or end != len(payload):
            raise ValueError(
                f"payload has {len(payload) - end} unread bytes, {cur.values.size - cur.pos} unread varints"
            )

    def decode_step(self, payload: bytes) -> StepRecord:
        seq, step, context, n_layers, n_kv_heads, flags, n_varint = STEP_FIXED.unpack_from(payload)
        self._check_shape(n_layers, n_kv_heads)
        unknown = flags & ~STEP_FLAGS_KNOWN[self.version]
        if unknown:
            raise ValueError(
                f"step flags 0x{flags:02x} set bits 0x{unknown:02x} unknown to format {self.version}"
            )
        n_heads = n_layers * n_kv_heads
        n_bits = math.ceil(n_heads / 8)
        state = self.sequences.get(seq, SequenceState())
        offset = STEP_FIXED.size
        cur = _Cursor(decode_uvarints(payload[offset:offset + n_varint]))
        offset += n_varint
        t_offset = offset + 4 * n_heads * (2 if flags & STEP_FLAG_MASS else 1) + n_bits
        t_offset += n_bits if flags & STEP_FLAG_REFACTORISED else 0
        timings, end = self._timings(cur, payload, t_offset)
        prev_attended = state.attended if state.attended is not None else np.zeros(n_heads, np.int64)
        attended = prev_attended + zigzag_decode(cur.take(n_heads).astype(np.uint64))
        removed_counts, added_counts, missed_code = cur.take(n_heads), cur.take(n_heads), cur.take(n_heads)
        removed = self._keys(cur, removed_counts)
        added = self._keys(cur, added_counts)
        same = missed_code == 1
        explicit = self._keys(cur, np.where(same, 0, missed_code // 2))
        missed_counts = np.where(same, added_counts, missed_code // 2)
        fetched = evicted = rebuilt = None
        if flags & STEP_FLAG_FETCHED:
            unit = int(cur.take(1)[0])
            if not 0 <= unit < _ID_LIMIT:
                raise ValueError(f"fetched_unit {unit} out of [0, 2**31)")
            fetched = missed_counts * unit + zigzag_decode(cur.take(n_heads).astype(np.uint64))
            if fetched.size and (fetched.min() < 0 or fetched.max() >= _ID_LIMIT):
                raise ValueError(f"fetched_tokens out of [0, 2**31): [{fetched.min()}, {fetched.max()}]")
        if flags & STEP_FLAG_EVICTED:
            evicted = cur.take(n_heads)
            if evicted.size and evicted.max() >= _ID_LIMIT:
                raise ValueError(f"evicted_tokens out of [0, 2**31): max {evicted.max()}")
        self._check_end(cur, end, payload)

        prev = state.selected_keys
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
        missed = np.sort(np.concatenate([explicit, added[same[_heads_of(added)]]]))

        similarity = unshuffle_bytes(payload[offset:offset + 4 * n_heads], "<f4", n_heads)
        offset += 4 * n_heads
        bits = np.frombuffer(payload, np.uint8, n_bits, offset)
        corrected = np.unpackbits(bits, count=n_heads).astype(bool)
        offset += n_bits
        shape = (n_layers, n_kv_heads)
        if flags & STEP_FLAG_REFACTORISED:
            bits = np.frombuffer(payload, np.uint8, n_bits, offset)
            rebuilt = np.unpackbits(bits, count=n_heads).astype(bool).reshape(shape)
            offset += n_bits
        if self.version == 1:  # format 1 has no movement fields: FreeKV's page recall (docstring)
            fetched, evicted, rebuilt = movement_from_missed(missed_counts.reshape(shape), self.page_size)
        mass = None
        if flags & STEP_FLAG_MASS:
            mass = unshuffle_bytes(payload[offset:offset + 4 * n_heads], "<f4", n_heads)
            mass = mass.reshape(n_layers, n_kv_heads)
        self.sequences[seq] = SequenceState(selected, attended, step)
        return StepRecord(
            sequence=seq,
            step=step,
            context_tokens=context,
            similarity=similarity.reshape(shape),
            corrected=corrected.reshape(shape),
            selected=keys_to_nested(selected, n_layers, n_kv_heads),
            missed=keys_to_nested(missed, n_layers, n_kv_heads),
            attended_tokens=attended.astype(np.int32).reshape(shape),
            timings_s=timings,
            attention_mass=mass,
            fetched_tokens=None if fetched is None else fetched.astype(np.int32).reshape(shape),
            evicted_tokens=None if evicted is None else evicted.astype(np.int32).reshape(shape),
            refactorised=rebuilt,
        )
