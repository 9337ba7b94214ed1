"""The payload layout of the PREFILL, STEP and KEYS frames (format versions 1 and 2), and the
per-sequence state its delta coding keeps.

Per-head page lists are coded as one sorted int64 array of keys per record (traces/page_keys.py).

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

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from traces.page_keys import EMPTY_KEYS

__all__ = [
    "Nested",
    "TimingNames",
    "SequenceState",
    "STEP_FIXED",
    "PREFILL_FIXED",
    "PREFILL_TRAILER",
    "STEP_FLAG_MASS",
    "STEP_FLAG_FETCHED",
    "STEP_FLAG_EVICTED",
    "STEP_FLAG_REFACTORISED",
    "STEP_FLAGS_KNOWN",
]

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
    3: STEP_FLAG_MASS | STEP_FLAG_FETCHED | STEP_FLAG_EVICTED | STEP_FLAG_REFACTORISED,
}
# format 3: a PREFILL payload ends with uint32 n + n bytes of UTF-8 JSON, the multi-context record (n = 0:
# none; traces.records.MultiContextRecord)
PREFILL_TRAILER = struct.Struct("<I")


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

    selected_keys: np.ndarray = field(default_factory=lambda: EMPTY_KEYS)
    attended: np.ndarray | None = None  # (L*H,) int64
    last_step: int = -1
