"""Study files: the pydantic schema of a `dse sweep` study, and loading it from YAML.

A study names the model and its weights, the accuracy tasks, the search space (dse.study_search), the
objectives and constraints, the workload replayed on hardware profiles, the sampler and the storage
(dse.study_sections). Every key is documented in docs/studies.md. Loading: `load_study_file(path,
overrides=["trials=4"])`; errors name the file, line and field and say what is valid (`DseError`, one
paragraph).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from dse.errors import DseError
from dse.study_search import (
    FREEKV_TOP_LEVEL,
    SEARCH_KNOBS,
    Baselines,
    KnobRange,
    Knobs,
    KnobValues,
    SearchSection,
    TauRange,
)
from dse.study_sections import (
    ACCURACY_METRICS,
    TASK_NAMES,
    Constraints,
    LatencyRef,
    ModelSection,
    Objective,
    Sampler,
    Seed,
    Slo,
    TaskSection,
    ThroughputRef,
    Trials,
    Workload,
    _Strict,
)
from dse.study_types import bool_paths
from dse.study_yaml import apply_overrides, format_validation_error, read_yaml_with_marks
from sim.yaml_io import FileReadError, read_text_file
from traces.retrieval_knobs import budget_convention_violation

__all__ = [
    "Study",
    "ModelSection",
    "TaskSection",
    "TauRange",
    "SearchSection",
    "Objective",
    "LatencyRef",
    "ThroughputRef",
    "Constraints",
    "Workload",
    "Slo",
    "Sampler",
    "Baselines",
    "Knobs",
    "KnobRange",
    "KnobValues",
    "load_study_file",
    "study_from_dict",
    "ACCURACY_METRICS",
    "SEARCH_KNOBS",
    "FREEKV_TOP_LEVEL",
    "budget_convention_violation",
    "TASK_NAMES",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class Study(_Strict):
    """A validated study; see docs/studies.md for every key with an example."""

    name: str
    description: str = ""
    model: ModelSection
    tasks: list[TaskSection]
    search: SearchSection = Field(default_factory=SearchSection)
    objectives: list[Objective]
    constraints: Constraints = Field(default_factory=Constraints)
    workload: Workload
    hardware: list[str]
    implementation: Literal["as-published", "ideal"] = "as-published"
    software: str = "pytorch2-cuda12"
    target_model: str | None = None
    extra_replay_models: list[str] = Field(default_factory=list)
    slo: Slo | None = None
    trials: Trials
    sampler: Sampler = Field(default_factory=Sampler)
    baselines: Baselines = Field(default_factory=Baselines)
    storage: str | None = None
    out_dir: str | None = None
    seed: Seed = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["float32", "bfloat16"] = "float32"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"study name {v!r} must be letters, digits, '_', '.', '-' (no spaces)")
        return v

    @field_validator("tasks")
    @classmethod
    def _tasks(cls, v: list[TaskSection]) -> list[TaskSection]:
        if not v:
            raise ValueError(f"tasks needs at least one task ({', '.join(TASK_NAMES)})")
        names = [t.name for t in v]
        if len(set(names)) != len(names):
            raise ValueError(f"each task may appear once, got {names}")
        return v

    @field_validator("target_model")
    @classmethod
    def _target(cls, v: str | None) -> str | None:
        if v is not None:
            ModelSection._known(v)
        return v

    @field_validator("extra_replay_models")
    @classmethod
    def _extra(cls, v: list[str]) -> list[str]:
        for name in v:
            ModelSection._known(name)
        return list(dict.fromkeys(v))

    @field_validator("hardware")
    @classmethod
    def _hardware(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("hardware needs at least one profile name (see `dse hardware list`)")
        try:
            from sim import list_profiles
        except ImportError:  # the simulator is checked again when the sweep replays a trace
            return list(dict.fromkeys(v))
        known = list(list_profiles())
        bad = [h for h in v if h not in known]
        if bad:
            raise ValueError(f"unknown hardware profile(s) {bad}; shipped profiles: {', '.join(known)}")
        return list(dict.fromkeys(v))

    @field_validator("software")
    @classmethod
    def _software(cls, v: str) -> str:
        try:
            from sim.software import list_software
        except ImportError:  # the simulator checks it again when the sweep replays a trace
            return v
        known = list_software()
        if v not in known and not v.endswith((".yaml", ".yml")):
            raise ValueError(
                f"unknown software profile {v!r}; valid: {', '.join(known)} (see `dse hardware software`)"
            )
        return v

    @model_validator(mode="after")
    def _cross_checks(self) -> Study:
        measured = {m for m, (task, _) in ACCURACY_METRICS.items() if task in {t.name for t in self.tasks}}
        self._check_objectives(measured)
        self._check_constraint(measured)
        if self.slo is not None and self.slo.hardware is not None and self.slo.hardware not in self.hardware:
            raise ValueError(f"slo.hardware: {self.slo.hardware!r} is not in hardware {self.hardware}")
        self._check_model_limits()
        self._check_single_context()
        from dse.method_knobs import check_search_knobs, check_untuned

        check_search_knobs(self.search)
        check_untuned(self.baselines)
        self._check_grid()
        return self

    def _check_single_context(self) -> None:
        """Every study task (TASK_NAMES) is a single context: a multi-context method (documents prefilled
        apart and joined) has nothing to join there."""
        from traces.catalogue import entry

        multi = [m for m in self.search.method if entry(m).kind == "multi-context"]
        if multi:
            tasks = ", ".join(t.name for t in self.tasks)
            raise ValueError(
                f"search.method: {', '.join(multi)} join separately prefilled documents and need a "
                f"multi-context task, but the study's tasks {tasks} are single contexts; drop "
                "them from search.method, or measure them with `dse trace --task rag_facts` (or rag_qa)")

    def _check_objectives(self, measured: set[str]) -> None:
        """Each objective measured by a task of the study, on a listed profile and replayed model; none
        repeated."""
        for i, obj in enumerate(self.objectives):
            if obj.metric is not None and obj.metric not in measured:
                raise ValueError(
                    f"objectives[{i}]: metric {obj.metric!r} is measured by task "
                    f"{ACCURACY_METRICS[obj.metric][0]!r}, which is not in tasks"
                )
            ref = obj.latency or obj.throughput
            if ref is not None and ref.hardware not in self.hardware:
                raise ValueError(f"objectives[{i}]: hardware {ref.hardware!r} is not in the study's hardware "
                                 f"list {self.hardware}")
            if ref is not None and ref.model is not None and ref.model not in self.replay_models:
                raise ValueError(f"objectives[{i}]: model {ref.model!r} is not replayed; replayed models: "
                                 f"{self.replay_models}")
        if not self.objectives:
            raise ValueError("objectives: needs at least one objective")
        labels = [o.label for o in self.objectives]
        if len(set(labels)) != len(labels):
            raise ValueError(f"objectives: repeated objectives {labels}")

    def _check_constraint(self, measured: set[str]) -> None:
        """An accuracy floor needs a measured higher-is-better metric."""
        if self.constraints.min_accuracy_ratio is None:
            return
        metric = self.constraint_metric
        if metric is None:
            raise ValueError(
                "constraints.min_accuracy_ratio: needs constraints.metric or a maximised accuracy objective"
            )
        if metric not in measured or not ACCURACY_METRICS[metric][1]:
            valid = sorted(m for m in measured if ACCURACY_METRICS[m][1])
            raise ValueError(f"constraints.metric: {metric!r} must be a measured higher-is-better metric: "
                             f"{valid}")

    def _check_model_limits(self) -> None:
        """Task contexts within the model's positions, dense layers among its layers."""
        from traces.models import get_model

        spec = get_model(self.model.name)
        for i, task in enumerate(self.tasks):
            if task.context_tokens > spec.max_position_tokens:
                raise ValueError(
                    f"tasks[{i}].context_tokens: {task.context_tokens} exceeds the "
                    f"{spec.max_position_tokens} positions of model {spec.name!r}; use at most "
                    f"{spec.max_position_tokens}"
                )
        for i, layer in enumerate(self.search.dense_layers):
            if not 0 <= layer < spec.n_layers:
                raise ValueError(
                    f"search.dense_layers[{i}]: layer {layer} does not exist; model {spec.name!r} has "
                    f"{spec.n_layers} layers (0-{spec.n_layers - 1})"
                )

    def _check_grid(self) -> None:
        """The grid sampler needs every searched knob discrete."""
        if self.sampler.name != "grid":
            return
        for method in self.search.method:
            for knob, values in self.search.method_space(method).items():
                if isinstance(values, TauRange | KnobRange) and values.step is None:
                    where = f"search.knobs.{method}.{knob}" if knob in self.search.knobs.get(method, {}) \
                        else f"search.{knob}"
                    raise ValueError(f"{where}: sampler.name grid needs discrete {knob}: give a list or a "
                                     "step")

    @property
    def replay_models(self) -> list[str]:
        """Models whose shape traces are replayed on: the target model first, then the extras."""
        target = self.target_model or self.model.name
        return [target] + [m for m in self.extra_replay_models if m != target]

    @property
    def searches_nothing(self) -> bool:
        """True when `search` names no knob (absent or `{}`): the study is one configuration, the
        defaults of SearchSection (method freekv, tau 0.9, page 32, budget 2048, sink 512, window 512)."""
        return not set(SEARCH_KNOBS) & self.search.model_fields_set

    @property
    def constraint_metric(self) -> str | None:
        if self.constraints.metric is not None:
            return self.constraints.metric
        for obj in self.objectives:
            if obj.metric is not None and obj.resolved_direction == "maximize":
                return obj.metric
        return None

    @property
    def output_dir(self) -> Path:
        return Path(self.out_dir) if self.out_dir else Path("runs") / self.name

    @property
    def storage_url(self) -> str:
        """The Optuna storage URL: `storage`, else a SQLite file in the output directory."""
        return self.storage or f"sqlite:///{self.output_dir / 'study.db'}"


def study_from_dict(data: Any, source: str = "<study>", marks: dict | None = None) -> Study:
    """Validate a parsed study; ValidationError becomes one DseError paragraph naming line and field."""
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise DseError(f"{source}: a study file must be a YAML mapping (key: value), not {kind}.")
    booleans = bool_paths(Study, data)
    if booleans:
        raise DseError(
            f"{source} is not a valid study: {', '.join(booleans)}: true/false given where a number is "
            "wanted (YAML reads true, false, yes, no, on and off as booleans); give the number"
        )
    try:
        return Study.model_validate(data)
    except ValidationError as exc:
        raise DseError(format_validation_error(exc, source, marks or {}, Study)) from None


def load_study_file(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Study, str]:
    """Load and validate a study file with dotted overrides ("trials=4", "sampler.seed=1",
    "search.page_size=[16, 32]"). Returns the study and the YAML text it came from."""
    path = Path(path)
    try:
        text = read_text_file(path, "study file")
    except FileReadError as exc:
        raise DseError(f"{exc}; a study is a YAML file (shipped studies are in studies/*.yaml)") from None
    data, marks = read_yaml_with_marks(text, str(path))
    data = apply_overrides(data, overrides, marks)
    return study_from_dict(data, str(path), marks), text
