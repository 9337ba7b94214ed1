"""sim.serving.validation_band: the checked-in serving bands file matches what benchmarks/validate_serving.py
and benchmarks/validate_serving_measured.py compute (fast: its tallies and ranges, its row and engine
lists, the decode-step rows, DistServe's vLLM row and the kernels-only engine replayed again; slow: both
whole regenerations), and `serving_band` words its line from the file's numbers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from benchmark_script import load_benchmark

from sim.errors import SimInputError
from sim.serving.validation_band import (
    GENERATED_BY,
    KINDS,
    SECTIONS,
    TARGET,
    dump_document,
    load_document,
    profile_digest,
    published_section,
    published_tally,
    serving_band,
    with_section,
    write_section,
)

STALE = ("sim/validation/serving_bands.yaml no longer matches the serving checks: run "
         f"{GENERATED_BY['published']} and {GENERATED_BY['measured']}")


def _checked_in() -> dict:
    return load_document.__wrapped__()  # read now, not a cached copy


def _vs():
    return load_benchmark("validate_serving")


def _vm():
    return load_benchmark("validate_serving_measured")


def test_checked_in_file_has_both_sections_in_order_and_its_tally_is_its_rows() -> None:
    doc = _checked_in()
    assert list(doc) == ["generated_by", "target", *SECTIONS]
    assert doc["generated_by"] == GENERATED_BY and doc["target"] == TARGET
    pub = doc["published"]
    assert pub["tally"] == published_tally(pub["rows"]), STALE
    assert (pub["implementation"], pub["requests"], pub["seed"]) == ("ideal", 2048, 0)
    factors = [max(r["ratio"], 1 / r["ratio"]) for r in pub["rows"]]
    assert pub["tally"]["within"] == sum(f <= TARGET for f in factors)
    text = (Path(__file__).resolve().parents[2] / "sim" / "validation" / "serving_bands.yaml").read_text()
    assert text.startswith("# Written by two scripts") and GENERATED_BY["measured"] in text


def test_checked_in_published_rows_are_the_benchmarks_rows_on_their_engines() -> None:
    ROWS = _vs().ROWS  # noqa: N806
    pub = _checked_in()["published"]
    assert [r["key"] for r in pub["rows"]] == [r.key for r in ROWS if not r.needs], STALE
    assert [r["key"] for r in pub["not_run"]] == [r.key for r in ROWS if r.needs], STALE
    engines = {r.key: r.engine for r in ROWS}
    for row in pub["rows"]:  # each row ran on its own engine (a TP row's profile at its degree)
        assert row["engine"] in (engines[row["key"]], f"{engines[row['key']]}-tp2"), row["key"]
        # diagnostic engines as the script runs them (a decode-step row prints none)
        assert set(row["diagnostics"]) <= set(next(r for r in ROWS if r.key == row["key"]).diagnostics)


def test_decode_rows_and_distserves_vllm_row_give_the_checked_in_ratios() -> None:
    """The two decode-step rows (instant) and DistServe's Figure 1 vLLM row with its diagnostic engines
    (a few seconds), recomputed as --write-bands runs them."""
    vs = _vs()
    rows = {r.key: r for r in vs.ROWS}
    keys = ("sarathi-table3-mistral-decode", "sarathi-table3-yi34b-decode", "distserve-fig1-vllm")
    fresh = published_section([vs.evaluate(rows[k], 2048, "ideal", 0) for k in keys], "ideal", 2048, 0)
    stored = {r["key"]: r for r in _checked_in()["published"]["rows"]}
    for row in fresh["rows"]:
        old = stored[row["key"]]
        assert row["engine"] == old["engine"], STALE
        assert row["ratio"] == pytest.approx(old["ratio"], abs=2e-4), (row["key"], STALE)
        assert row["diagnostics"] == pytest.approx(old["diagnostics"], abs=2e-4), (row["key"], STALE)


def test_checked_in_measured_engines_are_the_scripts_engines_and_ranges_are_their_goodputs() -> None:
    from sim.serving.engine import load_engine

    vm = _vm()
    measured = _checked_in()["measured"]
    assert measured["implementation"] == "ideal" and measured["slos"] == [s.name for s in vm.SLOS]
    names = {load_engine(e).name: vm.engine_kind(e) for e in vm.ENGINES}
    assert {e: v["kind"] for e, v in measured["engines"].items()} == names, STALE
    assert set(names.values()) == set(KINDS)
    for e in vm.ENGINES:  # the profiles checked are today's files
        profile = load_engine(e)
        assert measured["engines"][profile.name]["profile_sha256"] == profile_digest(profile.path), STALE
    for entry in measured["engines"].values():
        for check in entry["checks"]:
            ratios = [g["ratio"] for g in check["goodputs"] if g["ratio"] is not None]
            assert (check["ratio_min"], check["ratio_max"]) == ((min(ratios), max(ratios)) if ratios
                                                                else (None, None))


def test_kernels_only_engine_replayed_again_gives_the_checked_in_section() -> None:
    """Every measured run on `none` (kernels only; about 7 s), as --write-bands records it."""
    vm = _vm()
    fresh = vm.bands_section([vm.evaluate(vm.load_runs(), "none", "ideal")], ["none"], "ideal")
    old = _checked_in()["measured"]["engines"]["none"]
    new = fresh["engines"]["none"]
    assert new["kind"] == old["kind"] == "kernels only"
    assert [c["config"] for c in new["checks"]] == [c["config"] for c in old["checks"]], STALE
    for a, b in zip(new["checks"], old["checks"], strict=True):
        assert {k: a[k] for k in ("runs", "rates", "train_runs", "held_out")} == {
            k: b[k] for k in ("runs", "rates", "train_runs", "held_out")}, STALE
        assert a["ratio_min"] == pytest.approx(b["ratio_min"], abs=2e-4), STALE
        assert a["ratio_max"] == pytest.approx(b["ratio_max"], abs=2e-4), STALE


@pytest.mark.slow
def test_whole_regeneration_equals_the_checked_in_file() -> None:
    """Both sections recomputed as --write-bands computes them (about 90 s), compared with the file."""
    vs, vm = _vs(), _vm()
    stored = _checked_in()
    results = [vs.evaluate(row, 2048, "ideal", 0) for row in vs.ROWS]
    fresh = published_section(results, "ideal", 2048, 0)
    assert [r["key"] for r in fresh["rows"]] == [r["key"] for r in stored["published"]["rows"]], STALE
    for a, b in zip(fresh["rows"], stored["published"]["rows"], strict=True):
        assert a["ratio"] == pytest.approx(b["ratio"], abs=2e-4), (a["key"], STALE)
    assert {k: v for k, v in fresh["tally"].items() if k != "worst_ratio"} == {
        k: v for k, v in stored["published"]["tally"].items() if k != "worst_ratio"}, STALE
    runs = vm.load_runs()
    engines = list(vm.ENGINES)
    measured = vm.bands_section([vm.evaluate(runs, e, "ideal") for e in engines], engines, "ideal")
    assert list(measured["engines"]) == list(stored["measured"]["engines"]), STALE
    for engine, entry in measured["engines"].items():
        old = stored["measured"]["engines"][engine]["checks"]
        for a, b in zip(entry["checks"], old, strict=True):
            for key in ("ratio_min", "ratio_max"):
                assert a[key] == pytest.approx(b[key], abs=2e-4), (engine, a["config"], STALE)


def test_checked_engines_print_their_ranges_from_the_file() -> None:
    doc = _checked_in()
    checks = {c["config"]: c for c in doc["measured"]["engines"]["none"]["checks"]}
    vllm, distserve = checks["tp1"], checks["c21d11"]
    b = serving_band("none")
    assert b["checked_as"] == "none" and b["kind"] == "kernels only"
    label = b["label"]
    assert f"{vllm['ratio_min']:.2f}-{vllm['ratio_max']:.2f} on vLLM" in label
    assert f"{distserve['ratio_min']:.2f}-{distserve['ratio_max']:.2f} on DistServe" in label
    assert "(held out)" in label
    t = doc["published"]["tally"]
    assert f"within 1.3x on {t['within']} of {t['rows']} rows, worst {t['worst_row']}" in label
    assert label.endswith("[ideal pricing]")
    aligned = serving_band("distserve-vllm-opt13b-a100")["label"]
    assert "NOT held out" in aligned
    fitted = serving_band("vllm-opt13b-a100-fitted-100-1")
    assert fitted["kind"] == "fitted" and "fitted on vllm-100-1, the others held out" in fitted["label"]
    tp2 = serving_band("sarathi-serve-a100-tp2")
    assert tp2["checked_as"] == "sarathi-serve-a100" and "its TP 1 profile" in tp2["label"]
    assert "priced the TP 2 prefill replica" in tp2["label"]
    from sim.serving.engine import load_engine

    high = serving_band(load_engine("sarathi-serve-a100@high").name)
    assert high["checked_as"] == "sarathi-serve-a100"
    assert "checked at its measured values, not at the high end of its ranges" in high["label"]
    tp4 = serving_band("sarathi-serve-a100-tp4")["label"]
    assert "checked as sarathi-serve-a100, its TP 1 profile)" in tp4 and "prefill replica" not in tp4


def test_unchecked_engine_says_so_with_the_files_numbers() -> None:
    measured = _checked_in()["measured"]
    kernels = [c for c in measured["engines"]["none"]["checks"] if c["config"] == "tp1"][0]
    fitted = [c for e in measured["engines"].values() if e["kind"] == "fitted" for c in e["checks"]
              if c["config"] == "tp1"]
    lo, hi = min(c["ratio_min"] for c in fitted), max(c["ratio_max"] for c in fitted)
    for engine in ("my-l40s-server", "distserve-opt66b-a100-tp4"):
        b = serving_band(engine)
        assert b["checked_as"] is None and b["checks"] == []
        label = b["label"]
        assert label.startswith("no measured serving run checks this engine; on DistServe's vLLM 0.2 runs "
                                f"({measured['hardware']}), "
                                f"kernels-only engines over-predicted capacity by {kernels['ratio_min']:.2f}-"
                                f"{kernels['ratio_max']:.2f}x")
        assert f"{lo:.2f}-{hi:.2f}x on the held-out runs" in label
        assert "fit your server with `dse engine-fit`" in label


def test_checks_count_only_on_the_hardware_they_ran_on() -> None:
    gpu = _checked_in()["measured"]["hardware"]
    assert gpu == _vm().GPU == "a100-80g-sxm"
    on_it = serving_band("none", None, [gpu])
    assert on_it["checked_as"] == "none" and on_it["hardware_unchecked"] == []
    assert on_it["label"] == serving_band("none")["label"]
    mixed = serving_band("none", None, ["l40s", gpu, "l40s"])
    assert (mixed["hardware_checked"], mixed["hardware_unchecked"]) == ([gpu], ["l40s"])
    assert f"(checked on {gpu} only, not on l40s)" in mixed["label"]
    off = serving_band("none", None, ["l40s", "h100-sxm"])
    assert off["checked_as"] is None and off["hardware_unchecked"] == ["l40s", "h100-sxm"]
    assert off["label"].startswith(
        f"no measured serving run checks this engine on l40s, h100-sxm (its checks ran on {gpu}); on "
        f"DistServe's vLLM 0.2 runs ({gpu}), kernels-only engines")


def test_a_profile_file_other_than_the_checked_one_is_unchecked(tmp_path: Path) -> None:
    from sim.serving.engine import load_engine

    shipped = load_engine("sarathi-serve-a100")
    assert serving_band(shipped.name, shipped.path)["checked_as"] == "sarathi-serve-a100"
    copy = tmp_path / "sarathi-serve-a100.yaml"
    copy.write_text(Path(shipped.path).read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    b = serving_band(load_engine(str(copy)).name, str(copy))
    assert b["checked_as"] is None
    assert b["label"].startswith("no measured serving run checks this engine (a profile named "
                                 "sarathi-serve-a100 whose file differs from the one checked); ")


def _synthetic(ratio_lo: float, ratio_hi: float) -> dict:
    check = {"config": "tp1", "runs_text": "a server", "runs": ["r1", "r2"], "rates": [1.0, 2.0],
             "train_runs": [], "held_out": "held out", "engines": "none", "ratio_min": ratio_lo,
             "ratio_max": ratio_hi, "goodputs": []}
    measured = {"source": "some runs", "implementation": "ideal", "slos": ["x"],
                "engines": {"none": {"kind": "kernels only", "checks": [check]}}}
    rows = [{"key": "a", "engine": "none", "ratio": 1.1, "diagnostics": {}},
            {"key": "b", "engine": "none", "ratio": 0.5, "diagnostics": {}}]
    published = {"implementation": "ideal", "requests": 10, "seed": 0, "tally": published_tally(rows),
                 "rows": rows, "not_run": []}
    return with_section(with_section(None, "measured", measured), "published", published)


def test_labels_follow_the_file_not_the_code(tmp_path: Path) -> None:
    path = tmp_path / "serving_bands.yaml"
    doc = _synthetic(0.7, 0.8)
    assert list(doc) == ["generated_by", "target", "published", "measured"]  # fixed order
    path.write_text(dump_document(doc), encoding="utf-8")
    b = serving_band("none", path=str(path))
    assert "0.70-0.80 on a server, 2 runs at 1-2 req/s (held out)" in b["label"]
    assert "within 1.3x on 1 of 2 rows, worst b 0.50 (engine none)" in b["label"]
    other = serving_band("x", path=str(path))["label"]
    assert "kernels-only engines predicted capacity by 0.70-0.80x" in other
    assert "engines fitted by" not in other  # no fitted engine in this file


def test_write_section_keeps_the_other_section(tmp_path: Path) -> None:
    path = tmp_path / "serving_bands.yaml"
    doc = _synthetic(1.5, 1.6)
    write_section("measured", doc["measured"], str(path))
    with pytest.raises(SimInputError, match="not a serving bands file"):
        serving_band("none", path=str(path))  # the published section is still missing
    write_section("published", doc["published"], str(path))
    assert serving_band("none", path=str(path))["checks"][0]["ratio_max"] == 1.6
    write_section("measured", _synthetic(1.1, 1.2)["measured"], str(path))
    back = yaml.safe_load(path.read_text())
    assert list(back) == ["generated_by", "target", "published", "measured"]
    assert back["published"] == doc["published"] and back["measured"]["engines"]["none"]["checks"][0][
        "ratio_min"] == 1.1
    with pytest.raises(ValueError, match="section"):
        with_section(None, "other", {})


def test_write_bands_refuses_a_partial_check() -> None:
    assert _vs().main(["--rows", "sarathi-table3-mistral-decode", "--write-bands"]) == 2
    assert _vm().main(["--engines", "none", "--write-bands"]) == 2


def test_serving_band_never_imports_torch_or_benchmarks(fresh_python: Callable[[str], None]) -> None:
    code = ("import sys, sim.serving.validation_band as v\n"
            "v.serving_band('none')\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "assert not any(m.startswith(('benchmarks', 'dse')) for m in sys.modules), 'imported'\n")
    fresh_python(code)
