"""Format-1 traces read with the movement fields derived: fetched = missed pages x meta.runtime.page_size
(what FreeKV's page recall moved), nothing evicted, nothing re-factorised, and no warning."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from traces import StepRecord, TraceError, open_trace

V1 = Path(__file__).resolve().parent / "assets" / "v1_small"


def test_v1_steps_read_with_freekv_movement() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        steps = list(open_trace(V1).steps())
    assert len(steps) == 6
    for rec in steps:
        assert isinstance(rec, StepRecord)
        assert rec.fetched_tokens is not None and rec.fetched_tokens.dtype == np.int32
        np.testing.assert_array_equal(rec.fetched_tokens, rec.missed_counts() * 32)
        assert rec.evicted_tokens.dtype == np.int32 and not rec.evicted_tokens.any()
        assert rec.refactorised.dtype == np.bool_ and not rec.refactorised.any()
        assert rec.fetched_tokens.shape == rec.evicted_tokens.shape == rec.refactorised.shape == (3, 2)
    first = steps[0]  # missed[1][0] == [12] (test_trace_asset_v1.py): one page of 32 tokens
    assert first.missed[1][0].tolist() == [12]
    assert first.fetched_tokens.tolist() == [[0, 0], [32, 0], [128, 96]]
    assert sum(int(r.fetched_tokens.sum()) for r in steps) == 1152  # 36 missed head-pages x 32


def test_v1_without_page_size_has_no_fetched_tokens(tmp_path: Path) -> None:
    """Without a page size the fetched tokens are unknown (None); evicted and refactorised still read."""
    path = tmp_path / "v1"
    shutil.copytree(V1, path)
    doc = json.loads((path / "meta.json").read_text())
    del doc["meta"]["runtime"]["page_size"]
    (path / "meta.json").write_text(json.dumps(doc))
    rec = next(open_trace(path).steps())
    assert rec.fetched_tokens is None and rec.movement(None)[0] is None
    assert not rec.evicted_tokens.any() and not rec.refactorised.any()


def test_v1_page_size_too_large_for_int32_is_a_clear_error(tmp_path: Path) -> None:
    """missed pages x page_size must fit int32 fetched tokens: a meta.json saying otherwise is refused."""
    path = tmp_path / "v1"
    shutil.copytree(V1, path)
    doc = json.loads((path / "meta.json").read_text())
    doc["meta"]["runtime"]["page_size"] = 2**31
    (path / "meta.json").write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"meta.runtime.page_size must be an integer in \[1, 2\*\*31\)"):
        open_trace(path)
    doc["meta"]["runtime"]["page_size"] = 2**30  # the first step misses 4 pages of one head
    (path / "meta.json").write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"step frame passes its checksum but does not decode \(missed "
                                         r"pages x page_size 1073741824 = 4294967296 tokens does not fit"):
        list(open_trace(path).steps())
