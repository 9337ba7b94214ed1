"""The serving validation's rows parse, name their source, and set up runs the serving model can take."""

from __future__ import annotations

import csv

import pytest

from benchmarks.serving_published import FEATURES, QUANTITIES, ROWS, SHAREGPT_REQUESTS_CSV
from benchmarks.validate_serving import highest_rate, scheduler_runner
from sim.hardware import list_profiles
from traces.models import get_model


def test_every_row_has_a_source_a_setup_and_a_published_value() -> None:
    assert len({r.key for r in ROWS}) == len(ROWS)
    for row in ROWS:
        assert ("arXiv" in row.source) and ("section" in row.source or "Table" in row.source), row.key
        assert row.quantity in QUANTITIES and row.published > 0 and row.published_note, row.key
        assert set(row.needs) <= set(FEATURES), row.key
        assert row.gpu in list_profiles(), row.key
        if row.quantity == "capacity_ratio":
            assert row.baseline is not None, row.key
        if "tensor parallelism" not in row.needs:
            get_model(row.model)  # an unknown model raises
    reproducible = [r for r in ROWS
                    if "tensor parallelism" not in r.needs and r.quantity != "decode_iteration_s"]
    assert len(reproducible) >= 2


def test_the_sharegpt_lengths_are_the_papers_2048_requests() -> None:
    with open(SHAREGPT_REQUESTS_CSV, newline="") as f:
        rows = [(int(r["input_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)]
    assert len(rows) == 2048 and all(i >= 1 and o >= 1 and i + o <= 8192 for i, o in rows)


def test_blocking_runs_on_serve_and_the_rate_search_brackets() -> None:
    import sim.serving

    assert scheduler_runner("blocking", {}) is sim.serving.serve
    rate, runs = highest_rate(lambda r: r <= 3.0)
    assert 3.0 / 1.05 <= rate <= 3.0 and runs <= 20
    assert highest_rate(lambda r: False)[0] == 0.0


@pytest.mark.parametrize("scheduler", ["chunked", "disaggregated"])
def test_other_schedulers_are_found_by_keyword_or_reported_missing(scheduler: str) -> None:
    import inspect

    import sim.serving

    has = any("scheduler" in inspect.signature(getattr(sim.serving, n)).parameters
              for n in ("simulate", "serve") if hasattr(sim.serving, n))
    run = scheduler_runner(scheduler, {"chunk_tokens": 512, "prefill_gpus": 1, "decode_gpus": 1})
    assert (run is not None) == has
