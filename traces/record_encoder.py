"""Records -> PREFILL and STEP payloads (traces/payload_layout.py), with the per-sequence delta state and
the timing name table."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from traces.errors import TraceError
from traces.page_keys import LOW32, counts_per_head, diff_sorted, heads_of, member
from traces.payload_layout import (
    PREFILL_FIXED,
    PREFILL_TRAILER,
    STEP_FIXED,
    STEP_FLAG_EVICTED,
    STEP_FLAG_FETCHED,
    STEP_FLAG_MASS,
    STEP_FLAG_REFACTORISED,
    SequenceState,
    TimingNames,
)
from traces.record_check import RecordChecker
from traces.records import MultiContextRecord, PrefillRecord, StepRecord
from traces.varint import encode_uvarints, gap_encode, shuffle_bytes, zigzag_encode

__all__ = ["RecordEncoder"]


@dataclass(frozen=True)
class _StepFields:
    """A checked StepRecord in the forms the payload stores: grids (L, H), per-head vectors (L*H,)."""

    seq: int
    step: int
    context: int
    similarity: np.ndarray  # (L, H) <f4
    corrected: np.ndarray  # (L, H) bool
    attended: np.ndarray  # (L*H,) int64
    mass: np.ndarray | None  # (L, H) <f4
    fetched: np.ndarray | None  # (L*H,) int64
    evicted: np.ndarray | None  # (L*H,) int64
    rebuilt: np.ndarray | None  # (L, H) bool
    selected: np.ndarray  # keys
    missed: np.ndarray  # keys
    timings: dict[str, float]


def _check_step(c: RecordChecker, rec: StepRecord, sequences: Mapping[int, SequenceState]) -> _StepFields:
    """Every field of `rec` checked, in the order the messages report them; nothing changes."""
    seq = c.uint("sequence", rec.sequence)
    step = c.uint("step", rec.step)
    context = c.uint("context_tokens", rec.context_tokens)
    last_step = sequences.get(seq, SequenceState()).last_step
    if step <= last_step:
        raise c.fail(
            f"steps of a sequence must be appended in increasing order; sequence {seq} already has "
            f"step {last_step}"
        )
    similarity = c.grid("similarity", rec.similarity, "f").astype("<f4", copy=False)
    corrected = c.grid("corrected", rec.corrected, "b")
    attended = c.grid("attended_tokens", rec.attended_tokens, "i").astype(np.int64).ravel()
    mass = None
    if rec.attention_mass is not None:
        mass = c.grid("attention_mass", rec.attention_mass, "f").astype("<f4", copy=False)
    fetched, evicted, rebuilt = _check_movement(c, rec)
    selected = c.nested_keys("selected", rec.selected)
    missed = c.nested_keys("missed", rec.missed)
    outside = ~member(missed, selected)
    if outside.any():
        li, h = divmod(int(heads_of(missed[outside][:1])[0]), c.n_kv_heads)
        raise c.fail(f"missed[{li}][{h}] holds pages that are not in selected[{li}][{h}]")
    timings = c.timings(rec.timings_s)
    return _StepFields(
        seq, step, context, similarity, corrected, attended, mass, fetched, evicted, rebuilt,
        selected, missed, timings,
    )  # fmt: skip


def _check_movement(c: RecordChecker, rec: StepRecord) -> tuple[np.ndarray | None, ...]:
    """(fetched (L*H,), evicted (L*H,), refactorised (L, H)), each None where the record has none."""
    fetched = evicted = rebuilt = None
    if rec.fetched_tokens is not None:
        fetched = c.grid("fetched_tokens", rec.fetched_tokens, "i").astype(np.int64).ravel()
    if rec.evicted_tokens is not None:
        evicted = c.grid("evicted_tokens", rec.evicted_tokens, "i").astype(np.int64).ravel()
    if rec.refactorised is not None:
        rebuilt = c.grid("refactorised", rec.refactorised, "b")
    return fetched, evicted, rebuilt


def _timing_varints(names: TimingNames, timings: dict[str, float]) -> tuple[list[np.ndarray], bytes]:
    ids = np.array([names.index[n] for n in timings], dtype=np.int64)
    values = np.array(list(timings.values()), dtype="<f8")
    return [np.array([len(timings)], dtype=np.int64), ids], values.tobytes()


def _selection_columns(
    f: _StepFields, state: SequenceState, n_heads: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """(varint columns of attended tokens, removed, added and missed pages; missed pages per head)."""
    removed, added = diff_sorted(state.selected_keys, f.selected)
    removed_counts, added_counts = counts_per_head(removed, n_heads), counts_per_head(added, n_heads)
    missed_counts = counts_per_head(f.missed, n_heads)
    in_added = counts_per_head(f.missed[member(f.missed, added)], n_heads)
    same = (missed_counts == added_counts) & (in_added == added_counts) & (added_counts > 0)
    explicit = f.missed[~same[heads_of(f.missed)]]
    explicit_counts = np.where(same, 0, missed_counts)
    prev_attended = state.attended if state.attended is not None else np.zeros(n_heads, np.int64)
    columns = [
        zigzag_encode(f.attended - prev_attended).astype(np.int64),
        removed_counts, added_counts, np.where(same, 1, 2 * missed_counts),
        gap_encode(removed & LOW32, removed_counts),
        gap_encode(added & LOW32, added_counts),
        gap_encode(explicit & LOW32, explicit_counts),
    ]  # fmt: skip
    return columns, missed_counts


def _movement_columns(
    f: _StepFields, missed_counts: np.ndarray, fetched_unit: int
) -> tuple[int, list[np.ndarray]]:
    """(flags, varint columns) of the optional fields: attention mass, fetched, evicted, refactorised."""
    flags = STEP_FLAG_MASS if f.mass is not None else 0
    columns: list[np.ndarray] = []
    if f.fetched is not None:
        flags |= STEP_FLAG_FETCHED
        residual = f.fetched - missed_counts * fetched_unit
        columns += [np.array([fetched_unit], np.int64), zigzag_encode(residual).astype(np.int64)]
    if f.evicted is not None:
        flags |= STEP_FLAG_EVICTED
        columns.append(f.evicted)
    if f.rebuilt is not None:
        flags |= STEP_FLAG_REFACTORISED
    return flags, columns


class RecordEncoder:
    """Turns records into payloads; owns the per-sequence delta state and the timing name table.

    `encode_*` checks the whole record before it changes any state (so a rejected record leaves the
    writer usable), then produces the payload and advances the state.
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
        c = RecordChecker(f"PrefillRecord(sequence={rec.sequence})", self.n_layers, self.n_kv_heads)
        seq = c.uint("sequence", rec.sequence)
        prompt = c.uint("prompt_tokens", rec.prompt_tokens)
        keys = c.nested_keys("initial_selected", rec.initial_selected)
        timings = c.timings(rec.timings_s)
        new_names = self.names.unknown(timings)
        self.names.add(new_names)
        counts = counts_per_head(keys, self.n_layers * self.n_kv_heads)
        t_varints, t_bytes = _timing_varints(self.names, timings)
        varints = encode_uvarints(np.concatenate(t_varints + [counts, gap_encode(keys & LOW32, counts)]))
        self.sequences[seq] = SequenceState()  # a prefill starts (or restarts) the sequence
        fixed = PREFILL_FIXED.pack(seq, prompt, self.n_layers, self.n_kv_heads, len(varints))
        return new_names, fixed + varints + t_bytes + _multi_context_trailer(rec, self.n_layers)

    def encode_step(self, rec: StepRecord) -> tuple[list[str], bytes]:
        """-> (timing names new to the table, to go in a KEYS frame first; the STEP payload)."""
        if not isinstance(rec, StepRecord):
            raise TraceError(f"append_step expects a StepRecord, got {type(rec).__name__}")
        c = RecordChecker(
            f"StepRecord(sequence={rec.sequence}, step={rec.step})", self.n_layers, self.n_kv_heads
        )
        f = _check_step(c, rec, self.sequences)
        new_names = self.names.unknown(f.timings)
        self.names.add(new_names)
        payload = self._step_payload(f, self.sequences.get(f.seq, SequenceState()))
        self.sequences[f.seq] = SequenceState(f.selected, f.attended, f.step)
        return new_names, payload

    def _step_payload(self, f: _StepFields, state: SequenceState) -> bytes:
        selection, missed_counts = _selection_columns(f, state, self.n_layers * self.n_kv_heads)
        t_varints, t_bytes = _timing_varints(self.names, f.timings)
        flags, movement = _movement_columns(f, missed_counts, self.fetched_unit)
        varints = encode_uvarints(np.concatenate(t_varints + selection + movement))
        parts = [
            STEP_FIXED.pack(f.seq, f.step, f.context, self.n_layers, self.n_kv_heads, flags, len(varints)),
            varints,
            shuffle_bytes(f.similarity.ravel()),
            np.packbits(f.corrected.ravel()).tobytes(),
        ]
        if f.rebuilt is not None:
            parts.append(np.packbits(f.rebuilt.ravel()).tobytes())
        if f.mass is not None:
            parts.append(shuffle_bytes(f.mass.ravel()))
        parts.append(t_bytes)
        return b"".join(parts)


def _multi_context_trailer(rec: PrefillRecord, n_layers: int) -> bytes:
    """The format-3 PREFILL trailer: uint32 length + the multi-context record as JSON (length 0: none)."""
    mc = rec.multi_context
    if mc is None:
        return PREFILL_TRAILER.pack(0)
    if not isinstance(mc, MultiContextRecord):
        raise TraceError(f"PrefillRecord(sequence={rec.sequence}).multi_context must be a "
                         f"MultiContextRecord, got {type(mc).__name__}")
    if len(mc.kept_tokens) != n_layers:
        raise TraceError(f"PrefillRecord(sequence={rec.sequence}).multi_context has {len(mc.kept_tokens)} "
                         f"layers, the model {n_layers}")
    body = json.dumps(mc.to_dict(), separators=(",", ":")).encode("utf-8")
    return PREFILL_TRAILER.pack(len(body)) + body
