"""The format-3 multi-context prefill record: round trip, validation, and format-2 traces still read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from traces import MultiContextRecord, PrefillRecord, TraceWriter, open_trace
from traces.models import get_model
from traces.records import RunMetadata


def _meta() -> RunMetadata:
    return RunMetadata(model=get_model("smollm2-135m"), runtime={"method": "samkv", "page_size": 16},
                       task={"name": "rag_facts"}, seeds={}, device="cpu", library_versions={},
                       timing_clock="none", created_utc="2026-11-28T00:00:00+00:00")


def _empty(n_layers: int, n_heads: int) -> tuple:
    return tuple(tuple(np.zeros(0, np.int32) for _ in range(n_heads)) for _ in range(n_layers))


def test_multi_context_record_round_trips(tmp_path: Path) -> None:
    meta = _meta()
    m = meta.model
    mc = MultiContextRecord((100, 120), 10, 20, tuple(range(m.n_layers)), tuple([5] * m.n_layers))
    with TraceWriter.create(tmp_path / "t", meta) as w:
        w.append_prefill(PrefillRecord(0, 250, _empty(m.n_layers, m.n_kv_heads), {}, mc))
        w.append_prefill(PrefillRecord(1, 250, _empty(m.n_layers, m.n_kv_heads), {}))
    reader = open_trace(tmp_path / "t")
    first, second = list(reader.prefills())
    assert first.multi_context == mc and second.multi_context is None
    assert first.multi_context.sequence_ratio == pytest.approx(np.mean(range(m.n_layers)) / 220)
    assert reader.meta.format_version == 3


def test_multi_context_record_validates() -> None:
    with pytest.raises(ValueError, match="kept_tokens must be within"):
        MultiContextRecord((10,), 0, 1, (11,), (0,))
    with pytest.raises(ValueError, match="one count per layer"):
        MultiContextRecord((10,), 0, 1, (1, 2), (0,))
    with pytest.raises(ValueError, match="'query_tokens' must be an integer"):
        MultiContextRecord.from_dict({"document_tokens": [1], "kept_tokens": [1], "recomputed_tokens": [0],
                                      "prefix_tokens": 0})


def test_format_2_asset_reads_without_multi_context() -> None:
    reader = open_trace(Path(__file__).parent / "assets" / "v2_small")
    assert reader.meta.format_version == 2
    assert all(p.multi_context is None for p in reader.prefills())
