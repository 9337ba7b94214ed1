"""The serving validation's rows parse, name their source, and run: the criteria are the papers' own and a
fast subset of the script prints its ratios."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from benchmarks.serving_published import FEATURES, QUANTITIES, ROWS, SHAREGPT_REQUESTS_CSV
from benchmarks.validate_serving import highest_rate, main, meets, runner
from sim import SimConfig
from sim.hardware import list_profiles
from sim.serving import SCHEDULERS, StepCosts, poisson_requests
from sim.serving.engine import load_engine
from traces.models import get_model


def test_every_row_has_a_source_a_setup_and_a_published_value() -> None:
    assert len({r.key for r in ROWS}) == len(ROWS)
    for row in ROWS:
        assert ("arXiv" in row.source) and ("section" in row.source or "Table" in row.source), row.key
        assert row.quantity in QUANTITIES and row.published > 0 and row.published_note, row.key
        assert set(row.needs) <= set(FEATURES), row.key
        assert row.gpu in list_profiles(), row.key
        assert row.scheduler in SCHEDULERS and (row.baseline is None or row.baseline in SCHEDULERS), row.key
        if row.quantity == "capacity_ratio":
            assert row.baseline is not None, row.key
        if not row.needs:
            get_model(row.model)  # an unknown model raises
            runner(row.scheduler, row.settings)  # settings a scheduler takes
            for engine in (row.engine, *row.diagnostics):
                load_engine(engine)  # a shipped engine profile
    reproducible = [r for r in ROWS if not r.needs and r.quantity != "decode_iteration_s"]
    assert len(reproducible) >= 3
    tp_rows = [r for r in reproducible if r.tensor_parallel > 1]
    assert [r.key for r in tp_rows] == ["sarathi-5.1-yi34b-strict"]


def test_the_sharegpt_lengths_are_the_papers_2048_requests() -> None:
    with open(SHAREGPT_REQUESTS_CSV, newline="") as f:
        rows = [(int(r["input_tokens"]), int(r["output_tokens"])) for r in csv.DictReader(f)]
    assert len(rows) == 2048 and all(i >= 1 and o >= 1 and i + o <= 8192 for i, o in rows)


def test_the_rate_search_brackets() -> None:
    rate, runs = highest_rate(lambda r: r <= 3.0)
    assert 3.0 / 1.05 <= rate <= 3.0 and runs <= 20
    assert highest_rate(lambda r: False)[0] == 0.0


def test_criteria_are_the_papers_own() -> None:
    cfg = SimConfig(model="mistral-7b", hardware="a100-80g-pcie", method="dense", input_tokens=2048,
                    output_tokens=64)
    costs = StepCosts(cfg, None)
    reqs = poisson_requests(3.0, 40, 2048, 64, seed=0)
    res = runner("prefill-first", {"max_seqs": 128, "max_batched_tokens": 8192})(reqs, costs)
    sarathi = next(r for r in ROWS if r.key == "sarathi-5.2-mistral-strict")
    _, values = meets(sarathi, res, reqs)
    # Sarathi-Serve pools every decode gap of every request with a 0 for each first output token
    pooled = np.concatenate([res.tbt.expanded(), np.zeros(len(reqs))])
    assert values["tbt_p99_s"] == np.percentile(pooled, 99)
    assert values["scheduling_delay_p50_s"] == np.percentile(res.prefill_queue_s, 50)
    distserve = next(r for r in ROWS if r.key == "distserve-fig1-vllm")
    ok, values = meets(distserve, res, reqs)
    first = np.array([r.arrival_s for r in reqs]) + res.ttft_s
    tpot = (res.finish_s - first) / 64  # DistServe divides by the output tokens
    # Figure 1: each SLO's P90 on its own (DistServe's goodput search), the joint share printed beside it
    assert values["ttft_p90_s"] == np.percentile(res.ttft_s, 90)
    assert values["tpot_p90_s"] == np.percentile(tpot, 90)
    assert ok == (values["ttft_p90_s"] <= 0.4 and values["tpot_p90_s"] <= 0.04)
    assert values["attainment_both"] == np.mean((res.ttft_s <= 0.4) & (tpot <= 0.04))
    # a request never served counts as infinitely late
    cut = runner("prefill-first", {"max_seqs": 1})(reqs, costs)
    cut.ttft_s[-5:] = np.nan
    assert meets(distserve, cut, reqs)[1]["ttft_p90_s"] >= np.nanpercentile(cut.ttft_s, 90)


def test_a_fast_subset_prints_its_ratios(capsys) -> None:
    rows = "sarathi-table3-mistral-decode,distserve-fig1-prefill-only"
    assert main(["--rows", rows, "--requests", "200"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("sarathi-table3-mistral-decode"))
    assert float(line.split()[4]) > 0 and ("within 1.3x" in line or "OUTSIDE 1.3x" in line)
    assert "distserve-fig1-prefill-only" in out and "engine distserve-vllm-opt13b-a100" in out
    assert "diagnostic, engine none" in out  # the kernel-only step model stays a diagnostic line
    assert main(["--rows", "no-such-row"]) == 2
    assert main(["--rows", "sarathi-table3-mistral-decode", "--hardware-set", "gpu.no_such_field=1"]) == 2
    assert "engine sarathi-serve-a100" in out  # each row names the engine it assumed


def test_the_engine_adds_its_host_time_to_the_decode_row(capsys) -> None:
    """--engine none prices kernels alone; the rows' own engine adds Vidur's measured time at 32 sequences
    (2.432 ms) to the decode iteration; an unknown engine is one error line and exit 2."""
    row = "sarathi-table3-mistral-decode"
    ratios = {}
    for engine in ("none", "as-run"):
        assert main(["--rows", row, "--engine", engine]) == 0
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if x.startswith(row))
        ratios[engine] = float(line.split()[4])
        assert f"engine {'none' if engine == 'none' else 'sarathi-serve-a100'}" in out
    assert ratios["as-run"] - ratios["none"] == pytest.approx(2.432e-3 / 0.020, abs=0.01)
    assert main(["--rows", row, "--engine", "no-such-engine"]) == 2
    assert "unknown engine profile" in capsys.readouterr().err
