"""The frozen format-version-1 trace (tests/traces/assets/v1_small) must stay readable, value for value.

The asset was written once by make_v1_asset.py; expected.json lists every record as plain JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from traces import PrefillRecord, StepRecord, open_trace
from traces.stats import trace_summary

ASSET = Path(__file__).resolve().parent / "assets" / "v1_small"


def _floats(values: list) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _lists(nested: tuple) -> list:
    return [[ids.tolist() for ids in layer] for layer in nested]


@pytest.fixture(scope="module")
def expected() -> list[dict]:
    return json.loads((ASSET / "expected.json").read_text())


def test_asset_metadata() -> None:
    reader = open_trace(ASSET)
    assert reader.meta.format_version == 1
    assert (reader.n_steps, reader.n_prefills, reader.complete, reader.truncated) == (6, 2, True, False)
    assert reader.meta.model.name == "tiny-3x2" and reader.meta.model.n_layers == 3
    assert reader.meta.runtime["tau"] == 0.9 and reader.meta.runtime["dense_layers"] == [0]
    assert reader.meta.timing_clock == "wall"
    assert reader.meta.created_utc == "2026-11-22T00:00:00+00:00"


def test_asset_spot_values() -> None:
    """A few values written out by hand, so a reader that drifts fails with a readable diff."""
    records = list(open_trace(ASSET).records())
    first = records[0]
    assert isinstance(first, PrefillRecord) and (first.sequence, first.prompt_tokens) == (0, 512)
    assert first.initial_selected[1][0].tolist() == [0, 2, 10, 11]
    assert first.timings_s == {"prefill_total": 0.5636383266901166}
    step = records[2]
    assert isinstance(step, StepRecord) and (step.sequence, step.step, step.context_tokens) == (0, 0, 513)
    assert step.similarity[1, 0] == np.float32(0.7680773138999939) and np.isnan(step.similarity[0]).all()
    assert step.corrected.tolist() == [[False, False], [True, True], [True, True]]
    assert step.selected[2][0].tolist() == [0, 4, 6, 11] and step.missed[1][0].tolist() == [12]
    assert step.attended_tokens.tolist() == [[513, 513], [1152, 1152], [1152, 1152]]
    assert step.timings_s["recall_sync"] == 0.0038827968440785805
    last = records[-1]
    assert (last.sequence, last.step) == (1, 2)
    assert last.selected[1][1].tolist() == [0, 5, 6, 16] and last.missed[2][1].tolist() == [8]


def test_asset_every_value_matches_expected_json(expected: list[dict]) -> None:
    records = list(open_trace(ASSET).records())
    assert len(records) == len(expected) == 8
    for rec, exp in zip(records, expected, strict=True):
        if exp["kind"] == "prefill":
            assert isinstance(rec, PrefillRecord)
            assert (rec.sequence, rec.prompt_tokens, rec.timings_s) == (
                exp["sequence"], exp["prompt_tokens"], exp["timings_s"])
            assert _lists(rec.initial_selected) == exp["initial_selected"]
            continue
        assert isinstance(rec, StepRecord)
        assert (rec.sequence, rec.step, rec.context_tokens, rec.timings_s) == (
            exp["sequence"], exp["step"], exp["context_tokens"], exp["timings_s"])
        assert rec.similarity.dtype == np.float32
        np.testing.assert_array_equal(rec.similarity.ravel().astype(np.float64), _floats(exp["similarity"]))
        assert rec.corrected.ravel().tolist() == exp["corrected"]
        assert _lists(rec.selected) == exp["selected"]
        assert _lists(rec.missed) == exp["missed"]
        assert rec.attended_tokens.dtype == np.int32
        assert rec.attended_tokens.ravel().tolist() == exp["attended_tokens"]
        assert rec.attention_mass is not None
        np.testing.assert_array_equal(rec.attention_mass.ravel().astype(np.float64),
                                      _floats(exp["attention_mass"]))


def test_asset_summary() -> None:
    summary = trace_summary(open_trace(ASSET))
    assert summary["steps"] == 6 and summary["n_sequences"] == 2 and summary["format_version"] == 1
    assert summary["selected_pages_per_head_step"] == 4.0


def test_command_line_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from traces.__main__ import main

    assert main([str(ASSET), "--tau", "0.8"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["tau"] == 0.8 and "6 steps, 2 prefills, complete" in err
    assert main([str(tmp_path)]) == 2
    assert "not a trace directory (no meta.json)" in capsys.readouterr().err
