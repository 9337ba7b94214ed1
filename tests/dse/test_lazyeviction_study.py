"""LazyEviction's knobs in a study: search.knobs.lazyeviction validates, each trial draws only its own
knobs, they reach the runtime config (alpha, selection, budget_rule) and the simulator model (selection,
budget_rule), and a budget too small for the peak rule is refused naming the key. Nothing is measured."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from dse.errors import DseError
from dse.method_knobs import sim_options
from dse.objective import _runtime_config
from dse.search_space import SearchSpace
from dse.study import load_study_file

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")

STUDY = """\
name: lazy
model: {name: smollm2-135m}
tasks:
  - {name: niah_single, context_tokens: 1024, samples: 1}
search:
  method: [lazyeviction, h2o]
  page_size: [16]
  budget_tokens: [256, 512]
  sink_tokens: [16]
  window_tokens: [32, 64]
  knobs:
    lazyeviction:
      alpha: [0.0001, 0.0005]
      budget_rule: [peak, published]
      selection: [per-query-head, per-kv-head]
objectives:
  - metric: niah_single_score
  - latency: {hardware: a100-40g-pcie4}
workload: {input_tokens: 4096, output_tokens: 32}
hardware: [a100-40g-pcie4]
trials: 8
sampler: {name: random, seed: 0}
baselines:
  dense: false
device: cpu
"""


def _load(tmp_path: Path, *sets: str):  # noqa: ANN202
    path = tmp_path / "study.yaml"
    path.write_text(STUDY)
    study, _ = load_study_file(path, [f"out_dir={tmp_path / 'out'}", *sets])
    return study


def test_lazyeviction_knobs_are_searchable(tmp_path: Path) -> None:
    study = _load(tmp_path)
    space = SearchSpace(study.search)
    assert space.n_valid()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    ostudy = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    seen = set()
    for _ in range(24):
        trial = ostudy.ask()
        config = space.suggest(trial)
        own = {p for p in trial.params if p.startswith("lazyeviction.")}
        if config.method != "lazyeviction":
            assert not own
            continue
        assert own == {"lazyeviction.alpha", "lazyeviction.budget_rule", "lazyeviction.selection"}
        runtime = _runtime_config(study, config)
        assert runtime.knobs.alpha in (0.0001, 0.0005)
        assert runtime.knobs.budget_rule == config.options["budget_rule"]
        assert set(sim_options("lazyeviction", config.options)) == {"budget_rule", "selection"}
        seen.add((config.options["budget_rule"], config.options["selection"]))
    assert len(seen) >= 3


def test_a_budget_too_small_for_the_peak_rule_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(DseError, match=r"baselines\.untuned\.lazyeviction: .*budget_rule=peak: "
                                       r"budget_tokens=64 must hold sink \+ 2 x window"):
        _load(tmp_path, "baselines.untuned={lazyeviction: {budget_tokens: 64, sink_tokens: 0, "
                        "window_tokens: 32, page_size: 16}}")
