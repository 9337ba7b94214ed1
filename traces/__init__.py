"""Traces: the contract between the runtime (producer) and the simulator and DSE tools (consumers).

A trace records, per decode step, layer and KV head, what a KV retrieval policy did: pooled query
similarity, correction, pages selected and pages recalled, tokens fetched and evicted and re-factorised
heads (format 2), plus run metadata and measured timings.
See docs/trace_format.md for the on-disk format. This package never imports torch.
"""

from __future__ import annotations

from traces.errors import TraceError
from traces.models import ModelSpec, get_model
from traces.reader import TraceReader, open_trace
from traces.records import FORMAT_VERSION, MultiContextRecord, PrefillRecord, RunMetadata, StepRecord
from traces.writer import TraceWriter

__all__ = [
    "FORMAT_VERSION",
    "RunMetadata",
    "PrefillRecord",
    "MultiContextRecord",
    "StepRecord",
    "ModelSpec",
    "get_model",
    "TraceWriter",
    "TraceReader",
    "TraceError",
    "open_trace",
]
