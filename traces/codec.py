"""Payload codecs of the PREFILL, STEP and KEYS frames (format versions 1 and 2), with per-sequence state.

`RecordEncoder` (traces/record_encoder.py) turns records into payloads, `RecordDecoder`
(traces/record_decoder.py) payloads into records; the payload layout, its constants and the state the
delta coding keeps are in traces/payload_layout.py, the per-head page lists as key arrays in
traces/page_keys.py.
"""

from __future__ import annotations

from traces.payload_layout import (
    PREFILL_FIXED,
    STEP_FIXED,
    STEP_FLAG_EVICTED,
    STEP_FLAG_FETCHED,
    STEP_FLAG_MASS,
    STEP_FLAG_REFACTORISED,
    STEP_FLAGS_KNOWN,
    Nested,
    SequenceState,
    TimingNames,
)
from traces.record_decoder import RecordDecoder
from traces.record_encoder import RecordEncoder

__all__ = [
    "Nested",
    "TimingNames",
    "SequenceState",
    "RecordEncoder",
    "RecordDecoder",
    "STEP_FIXED",
    "PREFILL_FIXED",
    "STEP_FLAG_MASS",
    "STEP_FLAG_FETCHED",
    "STEP_FLAG_EVICTED",
    "STEP_FLAG_REFACTORISED",
    "STEP_FLAGS_KNOWN",
]
