"""Study files: schema, dotted overrides, error messages with lines, the search space, shipped studies."""

from __future__ import annotations

from pathlib import Path

import pytest

from dse.errors import DseError
from dse.search_space import SearchSpace, TrialConfig
from dse.study import load_study_file, study_from_dict

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "studies").glob("*.yaml"))

MINIMAL = """\
name: mini
model: {name: smollm2-135m}
tasks:
  - {name: passkey, context_tokens: 256, samples: 1}
search:
  tau: [0.8, 0.9]
  page_size: [16, 32]
  budget_tokens: [128, 256]
  sink_tokens: [16, 32]
  window_tokens: [32]
objectives:
  - metric: passkey_accuracy
  - latency: {hardware: a100-40g-pcie4}
workload: {input_tokens: 4096, output_tokens: 64}
hardware: [a100-40g-pcie4]
trials: 3
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_shipped_studies_validate() -> None:
    names = {p.stem for p in SHIPPED}
    assert {"smoke", "paper-long-input", "paper-long-generation", "capacity-planning"} <= names
    for path in SHIPPED:
        study, text = load_study_file(path)
        assert study.name == path.stem
        assert text == path.read_text()
        SearchSpace(study.search)  # at least one valid combination


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_each_shipped_study_states_whether_its_samples_resolve_a_ten_point_drop(path: Path) -> None:
    """The header's power sentence matches dse/accuracy/floor.py: its prompt count is the samples of the
    task the accuracy floor (else the first accuracy objective) is measured on, 'can' / 'cannot' is
    drop_resolvable at the dense accuracy it names, and so is the count it says is needed."""
    import re

    from dse.accuracy.floor import drop_resolvable, min_prompts_to_meet
    from dse.study import ACCURACY_METRICS
    from freekv_runtime.stats import samples_needed_proportions

    study, text = load_study_file(path)
    header = " ".join(line.removeprefix("#").strip() for line in text.split("\nname:")[0].splitlines())
    m = re.search(r"Power: (\d+) (\w+) prompts? (can|cannot) resolve a 10-point drop from dense "
                  r"\(two-sided 5%, 80% power\): ~(\d+) needed at dense ([\d.]+)", header)
    assert m, f"{path.name}: no power sentence in the header comment"
    n, task, verdict, needed, dense = int(m[1]), m[2], m[3], int(m[4]), float(m[5])
    metric = study.constraint_metric or next(o.metric for o in study.objectives if o.metric is not None)
    assert task == ACCURACY_METRICS[metric][0]
    assert n == next(t.samples for t in study.tasks if t.name == task)
    assert (verdict == "can") == drop_resolvable(n, dense)
    assert needed == samples_needed_proportions(dense, dense - 0.10)
    ratio = study.constraints.min_accuracy_ratio
    if ratio is None:
        assert "sets no accuracy floor" in header
    else:
        assert f"from {min_prompts_to_meet(ratio)} prompts on" in header


def test_capacity_planning_lists_every_shipped_profile() -> None:
    from sim import list_profiles

    study, _ = load_study_file(ROOT / "studies" / "capacity-planning.yaml")
    assert set(study.hardware) == set(list_profiles())
    assert len(study.workload.batch_sizes) > 1 and len(study.workload.context_lengths) > 1


def test_defaults_and_dotted_overrides(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL)
    study, _ = load_study_file(
        path,
        [
            "trials=7",
            "sampler.seed=3",
            "search.page_size=[16]",
            "objectives.1.latency.stat=p99",
            "tasks.0.samples=2",
        ],
    )
    assert study.trials == 7 and study.sampler.seed == 3 and study.sampler.name == "tpe"
    assert study.search.page_size == [16]
    assert study.objectives[1].latency is not None and study.objectives[1].latency.stat == "p99"
    assert study.tasks[0].samples == 2
    assert [o.resolved_direction for o in study.objectives] == ["maximize", "minimize"]
    assert study.storage_url == "sqlite:///runs/mini/study.db"
    assert study.replay_models == ["smollm2-135m"]


def test_multi_context_methods_are_refused_on_single_context_tasks(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL)
    with pytest.raises(DseError, match="cacheblend join separately prefilled documents and need a "
                                       "multi-context task"):
        load_study_file(path, ["search.method=[freekv, cacheblend]"])


def test_unknown_key_names_line_field_and_valid_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL.replace("samples: 1}", "sampels: 1}"))
    with pytest.raises(DseError) as err:
        load_study_file(path)
    msg = str(err.value)
    assert "line 4" in msg and "tasks[0].sampels" in msg and "samples" in msg and str(path) in msg


def test_bad_value_names_line_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL.replace("page_size: [16, 32]", "page_size: [16, big]"))
    with pytest.raises(DseError, match=r"line 7, search\.page_size\[1\]: .*valid integer.*'big'"):
        load_study_file(path)


def test_cross_field_error_points_at_the_objective(tmp_path: Path) -> None:
    text = MINIMAL.replace("latency: {hardware: a100-40g-pcie4}", "latency: {hardware: h200}")
    path = _write(tmp_path, text)
    with pytest.raises(DseError, match=r"line 13, objectives\[1\]: hardware 'h200' is not in"):
        load_study_file(path)


def test_override_errors_name_the_override(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL)
    with pytest.raises(DseError, match=r"--set trials=zero, trials: must be an integer in \[1, 1000000\]"):
        load_study_file(path, ["trials=zero"])
    with pytest.raises(DseError, match="expected KEY=VALUE"):
        load_study_file(path, ["trials"])


def test_unknown_model_metric_and_profile_are_listed(tmp_path: Path) -> None:
    with pytest.raises(DseError, match="unknown model 'llama-9'.*smollm2-135m"):
        load_study_file(_write(tmp_path, MINIMAL.replace("name: smollm2-135m", "name: llama-9")))
    with pytest.raises(DseError, match="metric 'mean_kl' is measured by task 'fidelity'"):
        load_study_file(_write(tmp_path, MINIMAL.replace("metric: passkey_accuracy", "metric: mean_kl")))
    with pytest.raises(DseError, match="unknown hardware profile.*a100-40g-pcie4"):
        load_study_file(_write(tmp_path, MINIMAL.replace("hardware: [a100-40g-pcie4]", "hardware: [tpu]")))


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DseError, match="not valid YAML at line 2"):
        load_study_file(_write(tmp_path, "name: x\n  bad: [\n"))
    with pytest.raises(DseError, match="does not exist"):
        load_study_file(tmp_path / "nope.yaml")
    with pytest.raises(DseError, match="must be a YAML mapping"):
        study_from_dict([1, 2])


def test_invalid_combinations_are_named_not_raised() -> None:
    assert TrialConfig("freekv", 0.9, 16, 64, 32, 32).invalid_reason() is not None  # 64 < 32+32+16
    assert "sink_tokens must be a non-negative multiple of page_size=32, got 16" in (
        TrialConfig("freekv", 0.9, 32, 512, 16, 32).invalid_reason() or "")
    assert "window_tokens must hold at least one page" in (
        TrialConfig("freekv", 0.9, 32, 512, 0, 0).invalid_reason() or "")
    ok = TrialConfig("freekv", 0.9, 16, 96, 32, 32)
    assert ok.invalid_reason() is None
    assert TrialConfig.from_dict(ok.to_dict()) == ok and ok.key() == TrialConfig.from_dict(ok.to_dict()).key()


def test_search_space_without_any_valid_combination_is_rejected(tmp_path: Path) -> None:
    study, _ = load_study_file(_write(tmp_path, MINIMAL), ["search.budget_tokens=[32]"])
    with pytest.raises(DseError, match="no valid combination"):
        SearchSpace(study.search)


def test_grid_needs_discrete_tau_and_counts_valid_cells(tmp_path: Path) -> None:
    path = _write(tmp_path, MINIMAL)
    with pytest.raises(DseError, match="grid needs discrete tau"):
        load_study_file(path, ["sampler.name=grid", "search.tau={low: 0.7, high: 0.9}"])
    study, _ = load_study_file(path, ["sampler.name=grid", "search.tau={low: 0.7, high: 0.9, step: 0.1}"])
    space = SearchSpace(study.search)
    assert space.grid()["tau"] == [0.7, 0.8, 0.9]
    # valid (page, budget, sink, window): page 16 with budget 128 or 256 and sink 16 or 32 (4), and page 32
    # with sink 32 and budget 128 or 256 (2; sink 16 is no multiple of 32): 6 shapes x 3 taus
    assert space.n_valid() == 18


def test_objective_of_an_out_of_memory_profile_is_refused_not_invented(tmp_path: Path) -> None:
    """A latency objective on a profile where the batch does not fit raises OutOfMemory (the driver fails
    the trial with that reason) instead of returning a latency that was never simulated."""
    from dse.objective import Evaluation, OutOfMemory, objective_values

    study, _ = load_study_file(_write(tmp_path, MINIMAL))
    fits = {"oom": False, "per_token_latency_s": {"mean": 0.02, "p50": 0.02, "p99": 0.03}}
    oom = {"oom": True, "oom_message": "out of memory: needs 50.0 GiB of GPU memory, has 40.0; largest "
           "batch that fits: 0", "per_token_latency_s": None}
    ev = Evaluation({}, {"passkey_accuracy": 1.0}, {}, {}, {"smollm2-135m": {"a100-40g-pcie4": fits}})
    assert objective_values(study, ev) == [1.0, 0.02]
    ev = Evaluation({}, {"passkey_accuracy": 1.0}, {}, {}, {"smollm2-135m": {"a100-40g-pcie4": oom}})
    with pytest.raises(OutOfMemory, match="smollm2-135m on a100-40g-pcie4: out of memory: needs 50.0 GiB"):
        objective_values(study, ev)


def test_search_space_selection_design_and_methods() -> None:
    """group_pooling / page_summary are searched like tau; every runtime policy with a simulator model is
    searchable (the dropping ones included), an unknown name is refused."""
    from dse.search_space import SearchSpace
    from dse.study import SearchSection

    section = SearchSection(method=["freekv"], tau=[0.9], page_size=[16], budget_tokens=[256],
                            sink_tokens=[32], window_tokens=[32], group_pooling=["softmax_mean", "mean"],
                            page_summary=["minmax", "box"])
    space = SearchSpace(section)
    assert space.n_valid() == 4
    assert space.grid()["group_pooling"] == ["softmax_mean", "mean"]
    with pytest.raises(ValueError, match="group_pooling needs values among softmax_mean"):
        SearchSection(group_pooling=["avgSM"])
    # the dropping policies have simulator models now (sim/methods/streamingllm.py, h2o.py, snapkv.py)
    assert SearchSection(method=["h2o", "snapkv", "streamingllm"]).method == ["h2o", "snapkv", "streamingllm"]
    with pytest.raises(ValueError, match="unknown method"):
        SearchSection(method=["no-such-method"])
