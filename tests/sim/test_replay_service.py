"""The replay service (sim.replay): a Question resolves once into demand, knobs and cells, and each front end
(dse sim, capacity, serve, the study objective, the report) simulates the same cells."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_trace_factory import make_trace

from sim import SimConfig, SimInputError, run_simulation
from sim.replay import DemandSource, Question, answer, resolve_demand
from sim.replay.answer import memory_headroom_note

MODEL = "llama-3.1-8b"
FLAGS = {"budget_tokens": "--budget-tokens", "page_size": "--page-size", "method": "--method",
         "method_options": "--option", "input_tokens": "--input-tokens", "output_tokens": "--output-tokens"}


def _q(**kw) -> Question:
    base = dict(model=MODEL, hardware=("a100-40g-pcie4",), input_tokens=4096, output_tokens=16)
    return Question(**{**base, **kw})


def test_a_cell_is_the_config_a_front_end_would_build(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t", budget_tokens=640, page_size=32, sink_tokens=64, window_tokens=64)
    ans = answer(_q(demand=DemandSource(trace=trace), batches=(1, 4)))
    assert ans.methods == ("freekv",)  # the trace's own policy's model
    assert [(c.batch, c.demand_end, c.priced) for c in ans.cells] == [(1, "central", True),
                                                                      (4, "central", True)]
    cfg = ans.cells[1].config
    assert cfg == SimConfig(model=MODEL, hardware="a100-40g-pcie4", method="freekv", batch_size=4,
                            input_tokens=4096, output_tokens=16, page_size=32, budget_tokens=640,
                            sink_tokens=64, window_tokens=64, tau=0.9, dense_layers=(0,))
    assert ans.knobs.source["budget_tokens"] == "trace" and ans.provenance()["trace"]["complete"]
    res = run_simulation(cfg, ans.cells[1].demand, seed=0)
    assert res.batch_size == 4 and res.mapped_from == "smollm2-135m"  # the trace's model


def test_given_knobs_override_the_trace_with_a_note_in_the_users_words(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t", budget_tokens=640)
    ans = answer(_q(demand=DemandSource(trace=trace), knobs={"budget_tokens": 1024}, names=FLAGS))
    assert ans.cells[0].config.budget_tokens == 1024 and ans.knobs.source["budget_tokens"] == "given"
    assert "--budget-tokens 1024 overrides the trace's budget_tokens 640" in ans.notes
    trace_knobs_off = answer(_q(demand=DemandSource(trace=trace), trace_knobs=False))
    off = trace_knobs_off.cells[0].config
    assert off.budget_tokens == 2048 and off.tau is None


def test_a_preset_answers_at_its_ends_for_the_methods_that_price_it() -> None:
    ans = answer(_q(demand=DemandSource(spec="preset:freekv-tau0.9"), methods=("freekv", "dense"),
                    demand_ends=True))
    assert [(c.method, c.demand_end) for c in ans.cells] == [
        ("freekv", "central"), ("freekv", "low"), ("freekv", "high"), ("dense", "n/a (no demand)")]
    assert ans.cells[-1].priced_demand is None and ans.cells[0].priced_demand is not None
    assert ans.demand.kind == "preset" and ans.table_notes() == [memory_headroom_note(ans.question)]
    assert any(n.startswith("demand preset:freekv-tau0.9") for n in ans.notes)


def test_measured_rates_and_no_demand() -> None:
    rates = resolve_demand(DemandSource(rates=(0.25, 0.75), rates_note="run 3"), MODEL)
    assert rates.kind == "rates" and rates.label == "correction=0.2500,hit=0.7500 (run 3)"
    assert rates.demand.synthetic == "correction=0.2500,hit=0.7500"
    none = answer(_q(methods=("dense",)))
    assert none.demand.kind == "none" and none.cells[0].demand is None and not none.cells[0].priced
    with pytest.raises(SimInputError, match="give one demand, not spec and rates"):
        DemandSource(spec="correction=0.5,hit=0.5", rates=(0.5, 0.5))


def test_refusals_and_every_method(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t")
    with pytest.raises(SimInputError,
                       match="--method arkvale: the trace .* holds the demand of the 'freekv'"):
        answer(_q(demand=DemandSource(trace=trace), methods=("arkvale",)))
    moved = answer(_q(demand=DemandSource(trace=trace), methods=("arkvale",), transplant_method=True))
    assert moved.cells[0].transplant == "demand of freekv transplanted onto arkvale"
    every = answer(_q(demand=DemandSource(trace=trace), every_method=True))
    assert "freekv" in every.methods and "arkvale" not in every.methods and "dense" in every.methods
    assert any(n.startswith("not replayed: --method arkvale") for n in every.notes)
    synthetic_free = answer(_q(every_method=True))
    assert synthetic_free.skipped["freekv"] == "needs a trace or synthetic demand"
    with pytest.raises(SimInputError, match="--method: unknown method 'lru': valid simulator models"):
        answer(_q(methods=("lru",), names=FLAGS))


def test_errors_name_the_users_flags() -> None:
    with pytest.raises(SimInputError, match="^--budget-tokens counts sink and window and must be a multiple "
                                            "of --page-size=32"):
        answer(_q(methods=("dense",), knobs={"budget_tokens": 100}, names=FLAGS))
    with pytest.raises(SimInputError, match="^--option: 'bogus' is not a knob of quest"):
        answer(_q(methods=("quest",), method_options={"bogus": 1}, names=FLAGS))
    with pytest.raises(SimInputError,
                       match="--input-tokens 8190 \\+ --output-tokens 16 = 8206 tokens exceeds"):
        answer(_q(model="smollm2-135m", methods=("dense",), input_tokens=8190, names=FLAGS))
    shape_only = answer(_q(model="smollm2-135m", methods=("dense",), input_tokens=8190,
                           model_positions=False))
    assert shape_only.cells[0].config.input_tokens == 8190
    every = answer(_q(demand=DemandSource(spec="correction=0.5,hit=0.5"), every_method=True,
                      method_options={"staging_pages": 8}))
    assert "freekv" in every.methods and "quest" in every.skipped  # only FreeKV's model reads it


def test_a_question_is_checked_when_asked() -> None:
    with pytest.raises(SimInputError, match="hardware needs at least one value"):
        _q(hardware=())
    with pytest.raises(SimInputError, match="implementation must be one of as-published, ideal"):
        _q(implementations=("fast",))
    with pytest.raises(SimInputError, match="give method names or every method, not both"):
        _q(methods=("freekv",), every_method=True)


def test_a_trace_without_sink_tokens_replays_without_them(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t", sink_tokens=0, window_tokens=64, budget_tokens=512)
    ans = answer(_q(demand=DemandSource(trace=trace)))
    assert ans.cells[0].config.sink_tokens == 0 and ans.knobs.source["sink_tokens"] == "trace"
