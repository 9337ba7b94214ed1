"""Studies over several methods: the conditional search space (the method first, then its own knobs),
per-method untuned baselines, where method knobs go (RuntimeConfig, extra, SimConfig.method_options),
and errors that name the YAML key. Real Optuna samplers on a real SQLite storage; nothing is measured
(the driver's choice of configuration only, as test_distinct_configs.py does)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from dse.driver import Sweep
from dse.errors import DseError
from dse.method_knobs import knob_problem, method_kind, param_name, sim_options
from dse.objective import _runtime_config
from dse.search_space import SearchSpace, TrialConfig, untuned_configs
from dse.study import load_study_file

pytestmark = pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used")

ROOT = Path(__file__).resolve().parents[2]

STUDY = """\
name: methods
model: {name: smollm2-135m}
tasks:
  - {name: passkey, context_tokens: 256, samples: 1}
search:
  method: [freekv, raas]
  page_size: [16, 32]
  budget_tokens: [128]
  sink_tokens: [32]
  window_tokens: [32]
  knobs:
    freekv:
      tau: [0.8, 0.9]
      staging_pages: [2, 4]
    raas:
      alpha: [0.01, 0.05, 0.1]
      group: [max, mean]
objectives:
  - metric: passkey_accuracy
  - latency: {hardware: a100-40g-pcie4}
workload: {input_tokens: 4096, output_tokens: 32}
hardware: [a100-40g-pcie4]
trials: 8
sampler: {name: tpe, seed: 0, n_startup_trials: 3}
baselines:
  dense: false
  untuned: [raas]
device: cpu
"""


def _write(tmp_path: Path, text: str = STUDY) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def _load(tmp_path: Path, *sets: str, text: str = STUDY):
    study, _ = load_study_file(_write(tmp_path, text), [f"out_dir={tmp_path / 'out'}", *sets])
    return study


def test_each_trial_draws_only_its_own_methods_knobs(tmp_path: Path) -> None:
    space = SearchSpace(_load(tmp_path).search)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    ostudy = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=4))
    seen = set()
    for _ in range(16):
        trial = ostudy.ask()
        config = space.suggest(trial)
        seen.add(config.method)
        params = set(trial.params)
        if config.method == "freekv":
            assert {"tau", "group_pooling", "page_summary", "staging_pages"} <= params
            assert not {p for p in params if p.startswith("raas.")}
            assert config.tau in (0.8, 0.9) and config.options["staging_pages"] in (2, 4)
        else:
            assert {"raas.alpha", "raas.group"} <= params and "tau" not in params
            assert config.tau is None and config.group_pooling is None and config.page_summary is None
            assert set(config.options) == {"alpha", "group"}
        ostudy.tell(trial, config.options.get("alpha", 0.5))  # TPE models each knob where it was drawn
    assert seen == {"freekv", "raas"}
    # 2 valid shapes (page 16 / 32) x (freekv: 2 tau x 2 staging; raas: 3 alpha x 2 group)
    assert space.n_valid() == 2 * (4 + 6)
    assert param_name("freekv", "tau") == "tau" and param_name("raas", "alpha") == "raas.alpha"


def test_the_grid_over_a_conditional_space_yields_every_distinct_configuration(tmp_path: Path) -> None:
    space = SearchSpace(_load(tmp_path, "sampler.name=grid").search)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    ostudy = optuna.create_study(sampler=optuna.samplers.GridSampler(space.grid(), seed=0))
    keys = set()

    def objective(trial: optuna.Trial) -> float:
        keys.add(space.suggest(trial).key())
        return 0.0

    ostudy.optimize(objective, n_trials=1000)  # the grid sampler stops the study once every cell is drawn
    assert len(ostudy.trials) == len(space.grid()["method"]) * 48  # cells: other methods' knobs vary too
    assert len(keys) == space.n_valid() == 20


def test_method_knobs_reach_the_runtime_and_the_simulator_model_that_takes_them(tmp_path: Path) -> None:
    study = _load(tmp_path)
    raas = TrialConfig("raas", None, 16, 128, 32, 32, None, None, {"alpha": 0.05, "group": "max"})
    runtime = _runtime_config(study, raas)
    assert runtime.method == "raas" and runtime.knobs.changed() == {"alpha": 0.05, "group": "max"}
    freekv = TrialConfig("freekv", 0.8, 16, 128, 32, 32, "mean", "box", {"staging_pages": 2})
    runtime = _runtime_config(study, freekv)
    k = runtime.knobs
    assert (k.tau, k.group_pooling, k.page_summary, k.staging_pages) == (0.8, "mean", "box", 2)
    # FreeKV's staging_pages is also an option of the simulator's FreeKV model; pool_chunk_pages is not
    assert sim_options("freekv", {"staging_pages": 2, "pool_chunk_pages": 8}) == {"staging_pages": 2}
    assert sim_options("raas", {"alpha": 0.05}) == {}
    # a configuration's identity covers its method knobs; a stored config reads back the same
    assert TrialConfig.from_dict(raas.to_dict()) == raas
    assert raas.key() != TrialConfig("raas", None, 16, 128, 32, 32, None, None, {"alpha": 0.01}).key()
    assert "|o=" not in TrialConfig("freekv", 0.9, 16, 128, 32, 32).key()  # FreeKV's keys as before


def test_untuned_baselines_per_method(tmp_path: Path) -> None:
    study = _load(tmp_path)
    configs = untuned_configs(study.baselines)
    assert list(configs) == ["untuned_freekv", "untuned_raas"]  # untuned_freekv stays by default
    assert configs["untuned_raas"] == TrialConfig("raas", None, 32, 2048, 512, 512, None, None, {})
    study = _load(tmp_path, "baselines.untuned={freekv: {budget_tokens: 128, sink_tokens: 32, "
                  "window_tokens: 32}, raas: {alpha: 0.05, budget_tokens: 1088}}")
    configs = untuned_configs(study.baselines)
    assert configs["untuned_freekv"].budget_tokens == 128 and configs["untuned_freekv"].tau == 0.9
    raas = configs["untuned_raas"]
    assert raas.options == {"alpha": 0.05} and raas.budget_tokens == 1088
    assert method_kind("raas") == "dropping" and method_kind("freekv") == "retrieval"
    assert method_kind("full") == "dense"


@pytest.mark.parametrize(
    ("sets", "expect"),
    [
        (["search.knobs.raas.alpa=[0.01]"],
         r"--set search.knobs.raas.alpa=\[0.01\], search\.knobs\.raas\.alpa: 'alpa' is not a knob of raas; "
         r"valid knobs: group_consistent, alpha, group"),
        (["search.knobs.raas.alpha=[2.0]"],
         r"search\.knobs\.raas\.alpha: raas knob alpha must be a number in \(0, 1\), got 2.0"),
        (["search.knobs.raas.tau=[0.5]"], r"search\.knobs\.raas\.tau: 'tau' is not a knob of raas"),
        (["search.knobs.raas.budget_tokens=[64]"],
         r"search\.knobs\.raas\.budget_tokens: budget_tokens is shared by every method: give it as "
         r"search\.budget_tokens"),
        (["search.method=[freekv]"], r"search\.knobs\.raas: 'raas' is not in search\.method"),
        (["search.tau=[0.5]"], r"search\.knobs\.freekv\.tau: FreeKV's tau is also given as search\.tau"),
        (["search.knobs.freekv.tau=[1.5]"],
         r"search\.knobs\.freekv\.tau: freekv knob tau must be a number in \[-1, 1\], got 1.5"),
        (["search.knobs.raas.alpha={low: 0.01, high: 0.1}", "sampler.name=grid"],
         r"search\.knobs\.raas\.alpha: sampler\.name grid needs discrete alpha"),
        (["search.knobs.raas.alpha=[]"], r"search\.knobs\.raas\.alpha: needs at least one value"),
        (["baselines.untuned=[nosuch]"], r"baselines\.untuned\.nosuch: unknown method\(s\) \['nosuch'\]"),
        (["baselines.untuned={raas: {alpha: 7}}"],
         r"baselines\.untuned\.raas\.alpha: raas knob alpha must be"),
        (["baselines.untuned={raas: {budget_tokens: 100}}"],
         r"baselines\.untuned\.raas: not a valid configuration: budget_tokens counts sink and window and "
         r"must be a multiple of page_size=32 of at least sink_tokens \+ window_tokens \+ page_size = 1056, "
         r"got 100"),
        (["search.method=[arkvale]", "search.knobs={arkvale: {top_pages: [40]}}",
          "search.budget_tokens=[128]", "search.sink_tokens=[32]", "search.window_tokens=[32]"], None),
        (["baselines.untuned={arkvale: {top_pages: 40}}"],
         r"baselines\.untuned\.arkvale: arkvale knob top_pages must be an integer in 1..32"),
        (["baselines.untuned=[freekv]", "baselines.untuned_freekv={tau: 0.8}"],
         r"baselines\.untuned\.freekv: FreeKV's untuned baseline is also given as baselines\.untuned_freekv"),
        (["baselines.untuned=5"], r"baselines\.untuned: Input should be a valid dictionary"),
    ],
)
def test_bad_method_knobs_name_the_yaml_key(tmp_path: Path, sets: list[str], expect: str | None) -> None:
    if expect is None:  # valid here; each trial checks its knobs against its shared knobs (skipped if not)
        _load(tmp_path, *sets)
        return
    with pytest.raises(DseError, match=expect):
        _load(tmp_path, *sets)


def test_errors_point_at_the_line_of_the_key(tmp_path: Path) -> None:
    text = STUDY.replace("      group: [max, mean]", "      group: [max, median]")
    with pytest.raises(DseError) as exc:
        _load(tmp_path, text=text)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "median" in row)
    assert f"line {line}, search.knobs.raas.group: raas knob group must be one of max, mean" in str(exc.value)
    assert knob_problem("raas", "alpha", 0.5) is None
    assert knob_problem("freekv", "group_pooling", "max") is None


def test_a_conditional_sweep_resumes_in_its_storage(tmp_path: Path) -> None:
    """Two sweep processes on one SQLite storage: the second loads the study (same definition), keeps
    the first one's trials and draws configurations not taken yet, each with only its method's knobs."""
    path = _write(tmp_path)

    def sweep() -> Sweep:
        study, text = load_study_file(path, [f"out_dir={tmp_path / 'out'}"])
        return Sweep(study, text)

    def draw(s: Sweep, n: int) -> None:
        """Until `n` more trials are complete (a redrawn duplicate is PRUNED and does not count)."""
        goal = n + sum(t.state.name == "COMPLETE" for t in s.ostudy.get_trials(deepcopy=False))
        for _ in range(100):
            if sum(t.state.name == "COMPLETE" for t in s.ostudy.get_trials(deepcopy=False)) >= goal:
                return
            trial = s.ostudy.ask()
            try:
                config = s.choose(trial)
            except optuna.TrialPruned:
                s.ostudy.tell(trial, state=optuna.trial.TrialState.PRUNED)
                continue
            s.ostudy.tell(trial, [float(config.options.get("alpha", 0.5)), 0.01])

    first = sweep()
    draw(first, 4)
    second = sweep()
    assert second.ostudy.user_attrs["fingerprint"]["search"]["knobs"]["raas"]["alpha"] == [0.01, 0.05, 0.1]
    draw(second, 4)
    done = [t for t in second.ostudy.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    keys = [t.user_attrs["config_key"] for t in done]
    assert len(done) == 8 and len(set(keys)) == len(keys)  # the budget, nothing measured twice
    for t in done:
        config = TrialConfig.from_dict(t.user_attrs["config"])
        own = {p for p in t.params if "." in p or p in ("tau", "group_pooling", "page_summary",
                                                        "staging_pages")}
        assert own == ({"tau", "group_pooling", "page_summary", "staging_pages"} if config.method == "freekv"
                       else {"raas.alpha", "raas.group"})


def test_shipped_methods_study_names_every_method_and_validates_with_those_installed(tmp_path: Path) -> None:
    """studies/methods-cpu.yaml lists the fifteen single-context methods; with the methods this checkout can
    run (a runtime policy and a simulator model) it validates and its space has valid configurations."""
    from traces.catalogue import CATALOGUE, names

    text = (ROOT / "studies" / "methods-cpu.yaml").read_text()
    import yaml

    data = yaml.safe_load(text)
    ten = ["freekv", "quest", "arkvale", "shadowkv", "infinigen", "streamingllm", "h2o", "snapkv", "raas",
           "razorattention", "pyramidkv", "duoattention", "cake", "clusterkv", "lazyeviction"]
    assert data["search"]["method"] == ten and list(data["baselines"]["untuned"]) == ten
    assert set(ten) <= set(CATALOGUE)
    runnable = [m for m in ten if m in names(searchable=True)]
    assert "freekv" in runnable
    knobs = {m: k for m, k in data["search"]["knobs"].items() if m in runnable}
    untuned = {m: k for m, k in data["baselines"]["untuned"].items() if m in runnable}
    study, _ = load_study_file(ROOT / "studies" / "methods-cpu.yaml", [
        f"search.method={runnable}", f"search.knobs={knobs}", f"baselines.untuned={untuned}",
    ])
    assert SearchSpace(study.search).n_valid() and set(untuned_configs(study.baselines)) == {
        f"untuned_{m}" for m in runnable}


@pytest.mark.slow
def test_a_sweep_over_two_methods_traces_and_replays_each_with_its_own_method(tmp_path: Path) -> None:
    """End to end with the real runtime and simulator: every trial's trace was recorded by its own
    method with its own knobs, and replayed with the simulator model of the same name."""
    import subprocess
    import sys

    from dse.results import load_results
    from traces.reader import open_trace

    text = (STUDY.replace("context_tokens: 256", "context_tokens: 128").replace("trials: 8", "trials: 3")
            .replace("budget_tokens: [128]", "budget_tokens: [96]")
            .replace("page_size: [16, 32]", "page_size: [16]")
            .replace("untuned: [raas]", "untuned: {raas: {page_size: 16, budget_tokens: 96, sink_tokens: 32, "
                     "window_tokens: 32}}\n  untuned_freekv: null"))
    path = _write(tmp_path, text)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dse.cli", "sweep", str(path), "--set", f"out_dir={out}", "--no-progress",
           "--set", "sampler={name: random, seed: 3}"]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    results = load_results(f"sqlite:///{out / 'study.db'}", "methods")
    runs = [*results.completed, *results.untuned_methods]
    assert [b.name for b in results.untuned_methods] == ["untuned_raas"] and len(results.completed) == 3
    for r in runs:
        method = r.config["method"]
        meta = open_trace(Path(r.trace_dir)).meta
        assert meta.runtime["method"] == method
        options = r.config.get("options") or {}
        assert {k: meta.method_knobs.get(k) for k in options} == options  # the trace records every knob
        assert {res["method"] for res in r.sim.values()} == {method}
        assert r.sim["a100-40g-pcie4"]["mapped_from"] is None  # measured model = replayed model
