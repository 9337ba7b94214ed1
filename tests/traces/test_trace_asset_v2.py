"""The frozen format-version-2 trace (tests/traces/assets/v2_small) must stay readable, value for value.

The asset was written once by make_v2_asset.py; expected.json lists every record as plain JSON. It holds
the format-2 movement fields in every combination the format allows: all present, all None, some None,
FreeKV's (fetched = missed pages x page size) and values near 2**31.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from make_v2_asset import record_to_json

from traces import PrefillRecord, StepRecord, open_trace
from traces.stats import trace_summary

ASSET = Path(__file__).resolve().parent / "assets" / "v2_small"


@pytest.fixture(scope="module")
def expected() -> list[dict]:
    return json.loads((ASSET / "expected.json").read_text())


def test_asset_metadata() -> None:
    reader = open_trace(ASSET)
    assert reader.meta.format_version == 2
    assert (reader.n_steps, reader.n_prefills, reader.complete, reader.truncated) == (6, 2, True, False)
    assert reader.meta.model.name == "tiny-3x2" and reader.meta.runtime["page_size"] == 32
    assert reader.meta.runtime["dense_layers"] == [0]


def test_asset_spot_values() -> None:
    """Values written out by hand, so a reader that drifts fails with a readable diff."""
    records = list(open_trace(ASSET).records())
    first = records[0]
    assert isinstance(first, PrefillRecord) and (first.sequence, first.prompt_tokens) == (0, 512)
    assert first.initial_selected[1][0].tolist() == [0, 2, 6, 8]
    step = records[2]
    assert isinstance(step, StepRecord) and (step.sequence, step.step, step.context_tokens) == (0, 0, 513)
    assert step.missed[1][0].tolist() == [1, 2, 10, 13] and step.selected[2][1].tolist() == [3, 5, 8, 10]
    assert step.fetched_tokens.tolist() == [[820, 3846], [3374, 2598], [2473, 1514]]
    assert step.evicted_tokens.tolist() == [[0, 2], [2, 1764239616], [0, 0]]
    assert step.refactorised is not None and not step.refactorised.any()
    assert step.fetched_tokens.dtype == step.evicted_tokens.dtype == np.int32
    none = records[3]
    assert (none.sequence, none.step) == (1, 0)
    assert none.fetched_tokens is None and none.evicted_tokens is None and none.refactorised is None
    freekv = records[4]  # FreeKV's: one missed page of 32 tokens in layer 2, head 1
    assert freekv.missed[2][1].tolist() == [2]
    assert freekv.fetched_tokens.tolist() == [[0, 0], [0, 0], [0, 32]]
    assert not freekv.evicted_tokens.any() and not freekv.refactorised.any()
    assert records[5].evicted_tokens is None
    assert records[5].refactorised.tolist() == [[False, True], [False, False], [False, True]]
    last = records[-1]
    assert (last.sequence, last.step, last.refactorised[0, 0]) == (1, 2, True)
    assert last.evicted_tokens.tolist() == [[0, 1274931595], [1, 72844492], [1327436509, 1]]


def test_asset_every_value_matches_expected_json(expected: list[dict]) -> None:
    """Each decoded record, written out as plain JSON by the function that wrote expected.json from the
    in-memory records (float32 values exactly as float64, NaN as null, None fields as null), equals it."""
    records = list(open_trace(ASSET).records())
    assert len(records) == len(expected) == 8
    for i, (rec, exp) in enumerate(zip(records, expected, strict=True)):
        assert record_to_json(rec) == exp, f"record {i} differs"
        if isinstance(rec, StepRecord):
            assert rec.similarity.dtype == rec.attention_mass.dtype == np.float32
            assert rec.attended_tokens.dtype == np.int32


def test_asset_summary_and_command_line(expected: list[dict], capsys: pytest.CaptureFixture[str]) -> None:
    """The summary's movement figures, recomputed from expected.json: recorded values, or where a field
    is None, FreeKV's (missed pages x page size 32 fetched, nothing evicted)."""
    from traces.__main__ import main

    steps = [e for e in expected if e["kind"] == "step"]

    def fetched(e: dict) -> int:
        if e["fetched_tokens"] is not None:
            return sum(e["fetched_tokens"])
        return 32 * sum(len(ids) for layer in e["missed"] for ids in layer)

    total_fetched = sum(fetched(e) for e in steps)
    total_evicted = sum(sum(e["evicted_tokens"] or []) for e in steps)
    summary = trace_summary(open_trace(ASSET))
    assert summary["format_version"] == 2 and summary["steps"] == 6
    assert summary["fetched_tokens_per_step"] == pytest.approx(total_fetched / 6)
    assert summary["fetched_bytes_total"] == total_fetched * 64 * 2 * 2
    assert summary["evicted_bytes_total"] == total_evicted * 64 * 2 * 2
    assert summary["refactorised_heads_per_step"] == pytest.approx(4 / 6)
    assert summary["movement_basis"].startswith("recorded for 3 steps, derived for 3")
    assert main([str(ASSET)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["fetched_tokens_per_step"] == summary["fetched_tokens_per_step"]
    assert "6 steps, 2 prefills, complete" in err
