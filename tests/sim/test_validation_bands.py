"""sim.validation_bands: the checked-in bands file matches benchmarks/validate_sim.py's rows (fast: its
tallies, its row list and a sample of rows predicted again; slow: the whole regeneration), and `band`
reads it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from benchmark_script import load_benchmark

from sim.errors import SimInputError
from sim.methods import method_names
from sim.validation_bands import (
    BANDS,
    GENERATED_BY,
    band,
    build_document,
    dump_document,
    load_document,
    summarize,
)

STALE = f"sim/validation/bands.yaml no longer matches the benchmark's rows: run {GENERATED_BY}"


def _vs():
    return load_benchmark("validate_sim")


def _checked_in() -> dict:
    return load_document.__wrapped__()  # read now, not a cached copy


def test_checked_in_tallies_are_the_tallies_of_its_rows() -> None:
    doc = _checked_in()
    assert doc["generated_by"] == GENERATED_BY and doc["bands"] == list(BANDS)
    assert doc["methods"] == summarize(doc["rows"]), STALE


def test_checked_in_rows_are_the_benchmarks_rows() -> None:
    rows = _vs().all_rows()
    stored = [(r["key"], r["method"], r["measured"], r["source"]) for r in _checked_in()["rows"]]
    assert stored == [(r.key, r.method, r.measured, r.source) for r in rows], STALE
    assert {r.method for r in rows} <= set(method_names())  # every row names a simulated method


def test_sampled_rows_predict_the_checked_in_ratios() -> None:
    """Every full-attention row, both Quest rows, and one ShadowKV cell (a second; ArkVale's rows take
    about 20 s and are left to the slow test)."""
    vs = _vs()
    cell = "shadowkv/glm-4-9b-1m/122k/"
    sample = [r for r in vs.all_rows()
              if r.key.endswith("/full") or r.key.startswith(("quest/", cell))]
    assert {r.method for r in sample} == {"dense", "quest", "shadowkv"} and len(sample) == 15
    fresh = build_document(vs.band_records(vs.evaluate(sample)))["rows"]
    stored = {r["key"]: r["ratio"] for r in _checked_in()["rows"]}
    for row in fresh:
        assert row["ratio"] == pytest.approx(stored[row["key"]], abs=2e-4), (row["key"], STALE)


def test_infinigen_rows_predict_the_checked_in_ratios_and_count_in_its_band() -> None:
    """InfiniGen's own numbers (its FlexGen testbed; a few seconds): both throughputs and the speedup over
    FlexGen, and the band that counts them."""
    vs = _vs()
    rows = [r for r in vs.all_rows() if r.method == "infinigen"]
    assert [r.key for r in rows] == [
        "infinigen/throughput/b4", "infinigen/throughput/b20", "infinigen/speedup-over-flexgen/2048"
    ]
    fresh = build_document(vs.band_records(vs.evaluate(rows)))["rows"]
    stored = {r["key"]: r["ratio"] for r in _checked_in()["rows"]}
    for row in fresh:
        assert row["ratio"] == pytest.approx(stored[row["key"]], abs=2e-4), (row["key"], STALE)
    b = band("infinigen", "as-published")
    assert b.checked and b.rows == 3 and b.projections == 0


@pytest.mark.slow
def test_whole_regeneration_equals_the_checked_in_file() -> None:
    fresh, stored = _vs().bands_document(), _checked_in()
    assert [r["key"] for r in fresh["rows"]] == [r["key"] for r in stored["rows"]], STALE
    for a, b in zip(fresh["rows"], stored["rows"], strict=True):
        assert a["ratio"] == pytest.approx(b["ratio"], abs=2e-4), (a["key"], STALE)
    for method, modes in fresh["methods"].items():
        for mode, entry in modes.items():
            old = stored["methods"][method][mode]
            assert {k: entry[k] for k in ("rows", "within", "projections", "worst_row")} == {
                k: old[k] for k in ("rows", "within", "projections", "worst_row")
            }, (method, mode, STALE)
    for mode in ("as-published", "ideal"):
        new, old = fresh["heldout"]["freekv"][mode], stored["heldout"]["freekv"][mode]
        assert new["ratio"] == pytest.approx(old["ratio"], abs=2e-4) and new["peer"] == old["peer"], STALE


def test_band_of_a_checked_method_counts_its_measured_rows() -> None:
    stored = [r for r in _checked_in()["rows"] if r["method"] == "shadowkv" and r["measured"]]
    b = band("shadowkv", "as-published")
    assert b.checked and b.rows == len(stored) == 12 and b.projections == 0
    factors = [max(r["ratio"]["as-published"], 1 / r["ratio"]["as-published"]) for r in stored]
    assert b.within == {x: sum(f <= x for f in factors) for x in BANDS}
    assert b.worst_factor == pytest.approx(max(factors), abs=1e-4)
    label = b.label()
    assert label.startswith(f"within 1.2x on {b.within[1.2]} of 12 published results (within 2x on ")
    assert f"worst {b.worst_factor:.2f}x" in label and "ShadowKV (arXiv 2410.21465)" in label
    assert "[as-published pricing]" in label
    dense = band("dense", "ideal")  # ShadowKV's table: full attention measured, and its projections
    assert dense.rows == 11 and dense.projections == 11
    assert band("quest", "ideal").to_dict()["within"] == {"1.2x": 2, "1.6x": 2, "2x": 2}


def test_band_of_freekv_is_its_held_out_check_and_unchecked_methods_say_so() -> None:
    free = band("freekv", "as-published")
    assert free.rows == 0 and free.checked and free.heldout is not None
    assert free.heldout.published == 13.0
    assert free.heldout.peer in ("quest", "arkvale", "shadowkv", "infinigen")
    label = free.label()
    assert "no published result for freekv checked" in label
    assert "held out: FreeKV (arXiv 2505.13109)" in label
    none = band("razorattention", "ideal")
    assert not none.checked and none.heldout is None and none.worst_factor is None
    assert none.label().startswith("no published result for razorattention checked")
    with pytest.raises(SimInputError, match="pricing mode"):
        band("quest", "fast")


def test_tallies_bands_worst_row_and_projections(tmp_path: Path) -> None:
    def rec(key, method, ratio, measured=True):
        return {"key": key, "method": method, "measured": measured, "source": f"src {key}; detail",
                "ratio": {"as-published": ratio, "ideal": 1.0}}

    rows = [rec("a", "m", 1.1), rec("b", "m", 0.55), rec("c", "m", 2.5), rec("p", "m", 9.0, measured=False)]
    path = tmp_path / "bands.yaml"
    path.write_text(dump_document(build_document(rows)), encoding="utf-8")
    b = band("m", "as-published", str(path))
    assert (b.rows, b.projections, b.within) == (3, 1, {1.2: 1, 1.6: 1, 2.0: 2})  # 0.55 is 1.82x off
    assert (b.worst_row, b.worst_ratio, b.worst_factor) == ("c", 2.5, 2.5)
    assert "worst 2.50x (predicted/published 2.50, c: src c)" in b.label()
    assert band("m", "ideal", str(path)).within == {1.2: 3, 1.6: 3, 2.0: 3}


def test_bands_and_sensitivity_never_import_torch_or_benchmarks(fresh_python: Callable[[str], None]) -> None:
    code = ("import sys, sim.validation_bands, sim.sensitivity\n"
            "sim.validation_bands.band('freekv', 'ideal')\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "assert 'validate_sim_rows' not in sys.modules, 'benchmarks imported'\n")
    fresh_python(code)
