"""The method catalogue (traces/catalogue) and the retrieval knobs (traces/retrieval_knobs): every entry is
well formed, knobs check their values, a trace's runtime metadata reads in both layouts, the budget
convention has one wording. The runtime and simulator halves walk the catalogue in
tests/freekv_runtime/test_catalogue_policies.py and tests/sim/test_catalogue_models.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_factory import make_meta, random_run, tiny_model, write_trace

from traces import open_trace
from traces.catalogue import (
    CATALOGUE,
    DENSE,
    KINDS,
    KnobError,
    MethodKnobs,
    UnknownMethodError,
    canonical,
    entry,
    names,
    runtime_knobs,
    runtime_method,
)
from traces.retrieval_knobs import RetrievalKnobs, RetrievalKnobsError, budget_convention_violation

ENTRIES = list(CATALOGUE.values())


@pytest.mark.parametrize("method", ENTRIES, ids=lambda e: e.name)
def test_every_entry_is_well_formed(method) -> None:
    assert method.kind in KINDS and method.summary and method.source
    assert issubclass(method.knobs, MethodKnobs)
    assert method.policy or method.model
    for target in (method.policy, method.model):
        assert target is None or (":" in target and target.split(":")[0].count(".") >= 2)
    if method.policy is None:
        assert method.replays is None or CATALOGUE[method.replays].policy is not None
    else:
        assert method.replays == method.name
    assert set(method.moved_parts) <= {"K", "V"} and method.moved_parts
    defaults = method.knobs()  # every default is valid
    for spec in method.knobs.specs():
        assert spec.doc and spec.side in ("runtime", "simulator", "both") and spec.valid()
        assert spec.problem(getattr(defaults, spec.name)) is None
    assert entry(method.name) is method
    for alias in method.aliases:
        assert alias not in CATALOGUE and entry(alias) is method and canonical(alias) == method.name


def test_names_filter_by_half_and_kind() -> None:
    assert set(names(searchable=True)) == {e.name for e in ENTRIES if e.policy and e.model}
    assert "freekv-nohl" in names(simulator=True) and "freekv-nohl" not in names(runtime=True)
    dropping = set(names(kind="dropping"))
    assert dropping == {e.name for e in ENTRIES if e.kind == "dropping"}
    assert {"streamingllm", "h2o", "snapkv", "raas", "razorattention"} <= dropping
    assert DENSE in names(runtime=True, simulator=True)
    with pytest.raises(UnknownMethodError, match="freekv-nohl has no runtime policy"):
        entry("freekv-nohl", runtime=True)
    with pytest.raises(UnknownMethodError, match="unknown method 'lru': valid methods are freekv"):
        entry("lru")


def test_knobs_from_user_values_name_the_method_and_what_is_valid() -> None:
    ark = entry("arkvale")
    assert ark.knobs_from({"top_pages": 3, "selection_groups": None}, side="runtime").top_pages == 3
    with pytest.raises(KnobError, match="'topk' is not a knob of arkvale; valid knobs: group_pooling"):
        ark.knobs_from({"topk": 3})
    with pytest.raises(KnobError, match="group_heads is a simulator knob .* of arkvale, not read by the "
                                        "runtime"):
        ark.knobs_from({"group_heads": 2}, side="runtime")
    with pytest.raises(KnobError, match="arkvale knob top_pages must be an integer >= 1 or null"):
        ark.knobs_from({"top_pages": 0})
    with pytest.raises(KnobError, match="arkvale knob selection_groups must be an integer >= 1, got True"):
        ark.knobs_from({"selection_groups": True})  # a boolean is not an integer
    with pytest.raises(KnobError, match="exclude each other"):
        entry("shadowkv").knobs_from({"svd_every_window": True, "svd_interval_tokens": 8})
    assert entry("raas").knobs_from({"alpha": 0.5}).alpha == 0.5
    assert isinstance(entry("infinigen").knobs_from({"alpha": 2}).alpha, float)  # an int for a float knob
    with pytest.raises(KnobError, match="snapkv knob kernel_size must be an odd integer >= 1, got 4"):
        entry("snapkv").knobs_from({"kernel_size": 4})
    assert ark.knobs().check_retrieval(RetrievalKnobs()) is None
    assert "1..32" in ark.knobs_from({"top_pages": 33}).check_retrieval(RetrievalKnobs())


@settings(max_examples=60, deadline=None)
@given(method=st.sampled_from([e for e in ENTRIES if e.knobs.specs()]), data=st.data())
def test_every_knob_refuses_what_its_spec_refuses(method, data) -> None:
    spec = data.draw(st.sampled_from(method.knobs.specs()))
    value = data.draw(st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=True),
                                st.text(max_size=6), st.sampled_from(spec.choices or ("x",))))
    problem = spec.problem(value)
    if problem is None:
        knobs = method.knobs_from({spec.name: value})
        assert getattr(knobs, spec.name) == (spec.default if value is None else value)
    else:
        assert problem.startswith("must be ") and f"got {value!r}" in problem
        if value is not None:
            with pytest.raises(KnobError, match=f"{method.name} knob {spec.name} must be"):
                method.knobs_from({spec.name: value})


def test_runtime_metadata_reads_in_both_layouts() -> None:
    new = {"method": "quest", "knobs": {"group_pooling": "mean"}, "page_size": 16}
    assert runtime_knobs(new) == {"group_pooling": "mean"} and runtime_method(new) == "quest"
    old = {"method": "freekv", "tau": 0.8, "group_pooling": "mean", "page_summary": "box",
           "extra": {"staging_pages": 4}}
    assert runtime_knobs(old) == {"tau": 0.8, "group_pooling": "mean", "page_summary": "box",
                                  "staging_pages": 4}
    old_raas = {"method": "raas", "tau": 0.9, "group_pooling": "softmax_mean", "extra": {"alpha": 0.05}}
    assert runtime_knobs(old_raas) == {"alpha": 0.05}  # RuntimeConfig's fields raas did not read
    assert runtime_method({"method": "full"}) == DENSE and runtime_method({}) == "freekv"


def test_a_trace_written_before_the_rename_reads_as_dense(tmp_path) -> None:
    """Traces of the dense policy recorded its old name "full" (and knobs at the top level)."""
    from sim.demand import demand_from_trace

    model = tiny_model()
    every = tuple(range(model.n_layers))
    meta = make_meta(model, dense_layers=every)
    meta = replace(meta, runtime={**meta.runtime, "method": "full"})
    records = random_run(0, model, n_sequences=1, n_steps=3, dense_layers=every)
    path = write_trace(tmp_path / "t", meta, records)
    read = open_trace(path).meta
    assert read.runtime["method"] == "full" and read.method == DENSE and read.method_knobs == {}
    assert read.retrieval is not None and read.retrieval.dense_layers == every
    assert demand_from_trace(path).dense_attention


def test_the_budget_convention_has_one_wording_everywhere() -> None:
    from freekv_runtime.config import RuntimeConfig, RuntimeConfigError
    from sim.config import SimConfig
    from sim.errors import SimInputError

    why = ("budget_tokens counts sink and window and must be a multiple of page_size=32 of at least "
           "sink_tokens + window_tokens + page_size = 1056, got 100")
    assert budget_convention_violation(32, 100, 512, 512) == why
    with pytest.raises(RetrievalKnobsError, match=why.replace("+", r"\+")):
        RetrievalKnobs(budget_tokens=100)
    with pytest.raises(RuntimeConfigError, match=why.replace("+", r"\+")):
        RuntimeConfig(budget_tokens=100)
    with pytest.raises(SimInputError, match="SimConfig." + why.replace("+", r"\+")) as exc:
        SimConfig(model="llama-3.1-8b", hardware="a100-40g-pcie4", budget_tokens=100)
    assert exc.value.field == "budget_tokens" and exc.value.worded({"budget_tokens": "--budget-tokens",
                                                                    "page_size": "--page-size"}).startswith(
        "--budget-tokens counts sink and window and must be a multiple of --page-size=32")
    for bad in ((32, 2048, 16, 512), (32, 2048, 512, 0), (0, 2048, 512, 512), (32, 2050, 512, 512)):
        assert budget_convention_violation(*bad) is not None


@settings(max_examples=40, deadline=None)
@given(p=st.sampled_from([8, 16, 32]), extra_pages=st.integers(1, 20), context=st.integers(1, 4000))
def test_fits_budget_and_candidates_agree_on_ints_and_arrays(p: int, extra_pages: int, context: int) -> None:
    knobs = RetrievalKnobs(page_size=p, budget_tokens=(2 + extra_pages) * p, sink_tokens=p, window_tokens=p)
    assert knobs.selected_pages == extra_pages and knobs.selected_tokens == extra_pages * p
    fits = -(-context // p) <= knobs.budget_pages
    assert knobs.fits_budget(context) == fits == bool(knobs.fits_budget(np.array([context]))[0])
    assert (context <= knobs.budget_fit_tokens) == fits
    pages = max(0, -(-context // p) - 2)
    assert knobs.candidate_pages(context) == pages == int(knobs.candidate_pages(np.array([context]))[0])
