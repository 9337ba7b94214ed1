"""Moved bytes depend on the trace's method (traces/moved_bytes.py): ShadowKV moves values only, every other
method keys and values; trace_summary's byte figures and their basis text follow, by hand on a tiny trace."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from trace_factory import make_meta, tiny_model, write_trace

from traces import PrefillRecord, StepRecord, open_trace
from traces.moved_bytes import moved_parts, token_bytes, token_bytes_basis
from traces.stats import trace_summary

HEAD_DIM = 64  # tiny_model's (smollm2-135m's) head dim
E = np.zeros(0, np.int32)


def _ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def _write(path: Path, method: str) -> Path:
    """3 layers x 2 KV heads, layer 0 dense, 2 steps with recorded movement. Missed head-pages: step 0
    L1h0 2, L2h1 1 (3); step 1 L1h1 1 (1). Fetched tokens: 100 + 7 + 3 = 110, then 32 + 16 = 48 (158);
    evicted: 5 + 1 = 6, then 0."""
    fetched = [np.array([[0, 0], [100, 7], [0, 3]], np.int32), np.array([[0, 0], [32, 0], [16, 0]], np.int32)]
    evicted = [np.array([[0, 0], [5, 0], [0, 1]], np.int32), np.zeros((3, 2), np.int32)]
    selected = ((E, E), (_ids(1, 2), _ids(3)), (_ids(4), _ids(5)))
    missed = [((E, E), (_ids(1, 2), E), (E, _ids(5))), ((E, E), (E, _ids(3)), (E, E))]
    steps = [
        StepRecord(sequence=0, step=s, context_tokens=1000 + s,
                   similarity=np.full((3, 2), 0.95, np.float32), corrected=np.zeros((3, 2), bool),
                   selected=selected, missed=missed[s],
                   attended_tokens=np.array([[1000 + s] * 2, [160, 160], [160, 160]], np.int32),
                   fetched_tokens=fetched[s], evicted_tokens=evicted[s], refactorised=np.zeros((3, 2), bool))
        for s in range(2)
    ]
    meta = make_meta(tiny_model(3, 2), budget_tokens=512)
    meta = replace(meta, runtime={**meta.runtime, "method": method})
    return write_trace(path, meta, [PrefillRecord(0, 999, selected), *steps])


def test_the_table() -> None:
    assert moved_parts("shadowkv") == ("V",)
    for method in ("freekv", "quest", "arkvale", "infinigen", "h2o", "razorattention", None):
        assert moved_parts(method) == ("K", "V")
    assert token_bytes("shadowkv", 128, 2) == 256 and token_bytes("infinigen", 128, 2) == 512
    assert "V only" in token_bytes_basis("shadowkv", 128, 2)
    assert token_bytes_basis("freekv", 128, 2) == "head_dim 128 x 2 (K and V) x 2 bytes per element"


@pytest.mark.parametrize(("method", "parts"), [("shadowkv", 1), ("freekv", 2), ("infinigen", 2)])
def test_summary_bytes_by_hand(tmp_path: Path, method: str, parts: int) -> None:
    s = trace_summary(open_trace(_write(tmp_path / method, method)))
    per_token = HEAD_DIM * parts * 2  # head_dim x (V, or K and V) x 2 bytes
    assert s["fetched_tokens_per_step"] == 79.0 and s["missed_pages_per_step"] == 2.0
    assert s["fetched_bytes_per_step"] == 79 * per_token
    assert s["fetched_bytes_total"] == 158 * per_token
    assert s["evicted_bytes_total"] == 6 * per_token
    assert s["recall_bytes_per_step"] == 2 * 32 * per_token  # missed head-pages x page size 32
    which = "(V only, shadowkv moves no keys)" if parts == 1 else "(K and V)"
    factor = f"head_dim {HEAD_DIM} x {parts} {which} x 2 bytes per element"
    assert s["movement_bytes_basis"] == f"head-tokens x {factor}"
    assert s["recall_bytes_basis"] == f"missed head-pages x page_size 32 x {factor}"


def test_shadowkv_counts_half_of_the_same_trace_as_freekv(tmp_path: Path) -> None:
    shadow = trace_summary(open_trace(_write(tmp_path / "s", "shadowkv")))
    freekv = trace_summary(open_trace(_write(tmp_path / "f", "freekv")))
    keys = ("fetched_bytes_per_step", "fetched_bytes_total", "evicted_bytes_total", "recall_bytes_per_step")
    for key in keys:
        assert 2 * shadow[key] == freekv[key], key
