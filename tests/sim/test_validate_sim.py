"""benchmarks/validate_sim.py: the table code on two rows (fast) and the whole script (slow)."""

from __future__ import annotations

import pytest
from benchmark_script import load_benchmark


def _module():
    return load_benchmark("validate_sim")


def test_two_rows_predict_and_tally() -> None:
    vs = _module()
    rows = [r for r in vs.all_rows() if r.key.startswith("quest/")]
    assert len(rows) == 2
    results = vs.evaluate(rows, ("as-published", "ideal"))
    for r in results:
        for mode in ("as-published", "ideal"):
            predicted, ratio = r[mode]
            assert predicted > 1.0  # both are speedups of Quest over full attention
            assert ratio == pytest.approx(predicted / r["row"].published)
    t = vs.tallies(results, "as-published")
    assert t[1.2] <= t[1.6] <= t[2.0] <= 2


def test_rows_name_source_setup_and_published_value() -> None:
    vs = _module()
    rows = vs.all_rows()
    assert len({r.key for r in rows}) == len(rows)
    for r in rows:
        assert r.source and r.setup and r.published > 0


def test_issue_rows_are_the_19_named_and_shadowkv_table_is_whole() -> None:
    vs = _module()
    rows = vs.all_rows()
    assert sum(r.named for r in rows) == 19  # the target rows; its tally counts these
    table_models = {model for model, _ in vs._SHADOWKV_PUBLISHED}
    shadowkv = [r for r in rows if r.key.startswith("shadowkv/") and r.key.split("/")[1] in table_models]
    assert len(shadowkv) == 3 * len(vs._SHADOWKV_PUBLISHED) == 33  # full, ShadowKV, projection per cell
    assert {r.key.split("/")[1] for r in shadowkv if not r.named} == {"glm-4-9b-1m", "yi-9b-200k"}


def test_every_retrieval_peer_is_accounted_for_with_rows_or_listed_numbers() -> None:
    vs = _module()
    rows = vs.all_rows()
    for peer in vs.RETRIEVAL_PEERS:
        predicted = [r for r in rows if r.method == peer and r.measured]
        listed = [c for c in vs.UNPREDICTED if c.method == peer]
        assert predicted or listed, f"{peer}: no published number predicted or listed"
        assert all(c.sentence and c.setup and c.reason for c in listed)


def test_infinigen_has_its_own_measured_rows_on_its_testbed() -> None:
    rows = [r for r in _module().all_rows() if r.method == "infinigen"]
    assert len(rows) == 3 and all(r.measured for r in rows)
    assert all("rtx-a6000-pcie3" in r.setup and "OPT-13B" in r.setup for r in rows)
    assert {r.unit for r in rows} == {"tok/s", "x"}


def test_tallies_keep_measurements_and_projections_apart(capsys) -> None:
    assert _module().main(["--only", "shadowkv/yi-9b-200k/60k", "--mode", "as-published"]) == 0
    out = capsys.readouterr().out
    assert "all measured rows (2):" in out and "all rows, with the authors' projections (3):" in out
    assert "target rows" not in out  # no named row selected
    assert "reproduces all 11 infinite-batch figures" in out


def test_projection_rows_are_the_tables_inf_column() -> None:
    vs = _module()
    rows = vs.all_rows()
    projections = {r.key for r in rows if not r.measured}
    assert projections == {r.key for r in rows if "/full-at-" in r.key}
    assert len(projections) == len(vs._SHADOWKV_PUBLISHED) == 11
    assert sum(r.named and r.measured for r in rows) == 14


def test_infinite_batch_figures_are_2_tib_per_s_over_kv_bytes() -> None:
    """The evidence that the column is arithmetic: every published infinite-batch figure is 2 TiB/s over
    one sequence's K+V bytes, from our registry's shapes (to the table's 2 decimals)."""
    vs = _module()
    for (model, ctx_k), published in vs._SHADOWKV_INFINITE_BATCH.items():
        assert vs.authors_infinite_batch(model, ctx_k) == pytest.approx(published, abs=0.006), (model, ctx_k)


def test_tally_groups_headline_is_named_measured_rows() -> None:
    vs = _module()
    results = vs.evaluate([r for r in vs.all_rows() if r.key.startswith("shadowkv/llama-3.1-8b/60k")])
    labels = [label for label, _ in vs.tally_groups(results)]
    assert labels[0] == "measured target rows"
    assert [len(g) for _, g in vs.tally_groups(results)] == [2, 3]  # repeated groups left out


def test_unknown_row_prefix_exits_2(capsys) -> None:
    assert _module().main(["--only", "nope"]) == 2


@pytest.mark.slow
def test_whole_script_prints_table_and_tallies(capsys) -> None:
    assert _module().main([]) == 0
    out = capsys.readouterr().out
    assert "as-published: within 1.2x" in out and "ideal: within 1.2x" in out
    lines = [line for line in out.splitlines() if line.startswith("  published: ")]
    assert len(lines) == len(_module().all_rows())
    assert "nan" not in out  # every row predicted (the unlimited-memory projections are not OOM)
