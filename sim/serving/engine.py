"""Serving-engine profiles: what a serving engine adds to, or replaces in, the step model's price of each
iteration. Two kinds, one per file:

- host time per iteration (`terms:`): the time the engine spends on every iteration outside the GPU's
  kernels (scheduling, preparing the inputs, sampling, processing the outputs, worker messaging), which a
  synchronous engine pays in series with each iteration's model forward: added to the step model's
  kernel time. Measured by profiling the engine's CPU work per iteration (Vidur's cpu_overheads), so it
  holds on any model and GPU.
- whole steps (`step_time:`): the engine's measured time of a whole iteration (forward, host work and
  messaging), fitted per iteration shape on one model, GPU and method (sim/serving/engine_steps.py:
  DistServe's profiles of vLLM and of its own engine): replaces the step model's price of decode and
  prefill iterations; only that model, GPU and method, and no chunked scheduler.

A profile is a YAML file `sim/engine_profiles/<name>.yaml` (or any path to such a file):

    name: <the file's stem>
    description: <one line: which engine, GPU and model it was measured on>
    tensor_parallel: <GPUs per replica it was measured at; default 1: it prices that degree only>
    terms:                                      # host time per iteration
      <term>:                                   # e.g. schedule, sampler_e2e, process_model_outputs
        points_ms: [[<sequences>, <ms>], ...]   # per-iteration milliseconds at that many sequences in the
                                                # iteration (strictly increasing sequence counts)
        source: "<where the numbers are from; 'estimate: <reasoning>' where no measurement exists>"
        range: [<low>, <high>]                  # optional scale factors (low <= 1 <= high) the term could
                                                # take; required for an estimate
    step_time:                                  # or whole steps (not both)
      model: <registry name>   hardware: <profile name>   method: dense   source: "<repo file:line@commit>"
      prefill: {fixed_ms, per_token_ms, per_token_squared_ms, constant_ms}
      decode: [{below_batch: <B>, fixed_ms, per_token_ms, per_sequence_ms}, ..., {fixed_ms, ...}]
      per_iteration: {fixed_ms, per_context_token_ms}
    request_overhead:                           # optional, with either kind
      ms: <ms>                                  # per request, between its issue and its arrival at the
                                                # engine's queue (API server, HTTP, tokenisation)
      source: "<where the number is from>"
      range: [<low>, <high>]                    # optional scale factors, as a term's

An iteration of `n` sequences (decode tokens and prefill chunks: Vidur's `batch.size`) costs the sum of its
terms, each interpolated linearly between its points and extended linearly past its ends along the end
segments, never below 0. `none` (no terms) is the engine of kernels alone: the step model unchanged.

A request's overhead (`request_overhead`, 0 when absent) is the time a real server spends on a request
before its engine can schedule it: the API server receiving it, tokenising the prompt, handing it to the
engine. The fleet holds each request back by it before it joins a replica's queue (sim/serving/fleet.py),
so it adds to the request's TTFT (which counts from its issue) and to its queueing delay, and never
occupies a GPU. `dse engine-fit` fits it, with a per-iteration `server` term, to one measured run
(sim/serving/engine_fit.py).

The per-iteration sum and its terms follow Vidur's execution-time predictor, which adds exactly these five
CPU-overhead terms, each predicted from the batch size, to every batch's model time
(microsoft/vidur vidur/execution_time_predictor/sklearn_execution_time_predictor.py:518-548 (one model
per term on `batch_size`, targets `<term>_median` and `ray_comm_time_mean`), 871-899 (looked up by
`batch.size`); vidur/entities/execution_time.py:87-94 (their sum), 197-199 (`total_time` = model time +
the sum); commit 7d47513). Vidur leaves them out by default (`skip_cpu_overhead_modeling: True`,
vidur/config/config.py:559-562).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.errors import SimInputError
from sim.serving.engine_steps import DecodeSegment, StepTime, StepTimeRefused
from sim.yaml_io import FileReadError, load_yaml, read_text_file

__all__ = ["EngineProfile", "EngineTerm", "EngineError", "DEFAULT_ENGINE", "load_engine", "list_engines",
           "ENGINE_DIR"]

DEFAULT_ENGINE = "none"
ENGINE_DIR = Path(__file__).resolve().parent.parent / "engine_profiles"


class EngineError(SimInputError):
    """An engine profile that cannot be found or is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class EngineTerm:
    """One per-iteration host cost: milliseconds at each measured sequence count, and its origin."""

    name: str
    sequences: tuple[int, ...]
    ms: tuple[float, ...]
    source: str
    range: tuple[float, float] = (1.0, 1.0)

    def ms_at(self, sequences: int, scale: float = 1.0) -> float:
        """Milliseconds at `sequences` (linear between points, the end segments extended, >= 0)."""
        xs, ys = self.sequences, self.ms
        if len(xs) == 1:
            return max(0.0, ys[0] * scale)
        j = 1
        while j < len(xs) - 1 and sequences > xs[j]:
            j += 1
        x0, x1, y0, y1 = xs[j - 1], xs[j], ys[j - 1], ys[j]
        return max(0.0, (y0 + (y1 - y0) * (sequences - x0) / (x1 - x0)) * scale)


@dataclass(frozen=True)
class EngineProfile:
    """A serving engine's per-iteration host costs, or its whole-step times (module docstring)."""

    name: str
    description: str
    terms: tuple[EngineTerm, ...] = ()
    path: str = field(default="", compare=False)
    step_time: StepTime | None = None
    tensor_parallel: int | None = 1  # GPUs per replica it was measured at (None: any, `none`)
    request_overhead_ms: float = 0.0
    request_overhead_source: str = ""
    request_overhead_range: tuple[float, float] = (1.0, 1.0)

    @property
    def request_overhead_s(self) -> float:
        """Seconds each request spends before it joins a replica's queue (module docstring)."""
        return self.request_overhead_ms / 1e3

    @property
    def prices(self) -> str:
        """What the profile prices: "whole steps" (replacing the step model) or "host time per iteration"
        (added to it)."""
        return "whole steps" if self.step_time is not None else "host time per iteration"

    def iteration_s(self, sequences: int, end: str = "value") -> float:
        """Host seconds of one iteration of `sequences` sequences (0 without sequences or terms); `end`:
        "value", or "low" / "high" (every term at that end of its range)."""
        if sequences <= 0 or not self.terms:
            return 0.0
        pick = {"value": lambda t: 1.0, "low": lambda t: t.range[0], "high": lambda t: t.range[1]}[end]
        return sum(t.ms_at(sequences, pick(t)) for t in self.terms) / 1e3

    def at_end(self, end: str) -> EngineProfile:
        """This profile with every term at one end of its range ("low" or "high"; "value": itself; a
        whole-step profile has no ranges and refuses)."""
        if end == "value":
            return self
        if self.step_time is not None:
            raise EngineError(
                f"--engine {self.name}@{end}: a whole-step profile has no ranges; give {self.name} alone"
            )
        i = {"low": 0, "high": 1}[end]
        terms = tuple(
            EngineTerm(t.name, t.sequences, tuple(v * t.range[i] for v in t.ms), t.source, (1.0, 1.0))
            for t in self.terms
        )
        overhead_ms = self.request_overhead_ms * self.request_overhead_range[i]
        return EngineProfile(f"{self.name} ({end} end)", self.description, terms, self.path,
                             tensor_parallel=self.tensor_parallel, request_overhead_ms=overhead_ms,
                             request_overhead_source=self.request_overhead_source)

    def check_tensor_parallel(self, degree: int, flag: str = "--tensor-parallel") -> None:
        """Refuse a tensor-parallel degree this profile was not measured at: its host time (Ray messaging
        to the workers grows from 0.3 to 6 ms per iteration from TP 1 to 2 in Vidur's profile) or whole
        steps (collectives included) hold at that degree only."""
        if self.tensor_parallel is None or degree == self.tensor_parallel:
            return
        base = self.name.split(" (")[0].removesuffix(f"-tp{self.tensor_parallel}")
        want = base if degree == 1 else f"{base}-tp{degree}"
        shipped = want in list_engines()
        raise StepTimeRefused(
            f"{flag} {degree}: --engine {self.name} was measured at tensor parallel {self.tensor_parallel} "
            f"only; " + (f"use --engine {want}, its profile at {degree}, " if shipped else
                         f"no shipped profile of it is at {degree}; use ")
            + "another engine profile measured at that degree, or none (kernels only)"
        )

    def label(self) -> str:
        """The engine an answer assumes, in words."""
        overhead = f"; {self.request_overhead_ms:g} ms per request before it is queued" \
            if self.request_overhead_ms else ""
        return f"{self.name} ({self.prices}{overhead}): {self.description}"


NONE = EngineProfile(DEFAULT_ENGINE, "kernels only: no per-iteration engine host time", tensor_parallel=None)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


_Ms = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
_Factor = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
_Text = Annotated[str, Field(min_length=1, pattern=r"\S")]


class _Sourced(_Strict):
    """A measured or estimated cost: its source and the scale factors it could take (required for an
    estimate)."""

    source: _Text
    range: tuple[_Factor, Annotated[float, Field(ge=1, allow_inf_nan=False, strict=True)]] | None = None

    @model_validator(mode="after")
    def _estimate_has_range(self) -> _Sourced:
        if self.range is not None and self.range[0] > 1:
            raise ValueError(f"'range' must satisfy 0 <= low <= 1 <= high, got {list(self.range)}")
        if self.range is None and self.source.strip().lower().startswith("estimate"):
            raise ValueError("an estimate needs 'range: [low, high]' (scale factors it could take)")
        return self


class _TermFile(_Sourced):
    points_ms: list[tuple[Annotated[int, Field(ge=1, strict=True)], _Ms]] = Field(min_length=1)

    @field_validator("points_ms")
    @classmethod
    def _increasing(cls, points: list[tuple[int, float]]) -> list[tuple[int, float]]:
        if any(b[0] <= a[0] for a, b in zip(points, points[1:], strict=False)):
            raise ValueError("sequence counts must be strictly increasing")
        return points


class _OverheadFile(_Sourced):
    ms: _Ms


class _PrefillFile(_Strict):
    fixed_ms: float = Field(allow_inf_nan=False, strict=True)
    per_token_ms: _Ms
    # any finite number: a fitted curvature may be negative (DistServe's OPT-66B vLLM fit at TP 2)
    per_token_squared_ms: float = Field(default=0.0, allow_inf_nan=False, strict=True)
    constant_ms: float = Field(default=0.0, allow_inf_nan=False, strict=True)


class _DecodeFile(_Strict):
    below_batch: Annotated[int, Field(ge=2, strict=True)] | None = None
    fixed_ms: float = Field(allow_inf_nan=False, strict=True)
    per_token_ms: _Ms
    per_sequence_ms: _Ms = 0.0


class _IterationFile(_Strict):
    fixed_ms: _Ms = 0.0
    per_context_token_ms: _Ms = 0.0


class _StepTimeFile(_Strict):
    model: _Text
    hardware: _Text
    method: _Text = "dense"
    source: _Text
    prefill: _PrefillFile
    decode: list[_DecodeFile] = Field(min_length=1)
    per_iteration: _IterationFile = _IterationFile()

    @field_validator("decode")
    @classmethod
    def _segments(cls, segs: list[_DecodeFile]) -> list[_DecodeFile]:
        bounds = [s.below_batch for s in segs]
        if bounds[-1] is not None or any(b is None for b in bounds[:-1]):
            raise ValueError("every segment but the last needs 'below_batch'; the last has none")
        if any(b <= a for a, b in zip(bounds[:-1], bounds[1:-1], strict=False)):  # type: ignore[operator]
            raise ValueError("'below_batch' must be strictly increasing")
        return segs


class _ProfileFile(_Strict):
    name: _Text
    description: _Text
    tensor_parallel: Annotated[int, Field(ge=1, le=64, strict=True)] = 1
    terms: dict[str, _TermFile] | None = None
    step_time: _StepTimeFile | None = None
    request_overhead: _OverheadFile | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> _ProfileFile:
        if self.terms and self.step_time is not None:
            raise ValueError(
                "give 'terms' (host time per iteration, added to the step model) or 'step_time' (whole "
                "steps, replacing it), not both"
            )
        return self


_VALID_KEYS = {
    _ProfileFile: "name, description, tensor_parallel, terms (term -> {points_ms, source, range}) or "
    "step_time, request_overhead ({ms, source, range})",
    _OverheadFile: "ms (per request, >= 0), source (where the number is from), range ([low, high] scale "
    "factors, required for an estimate)",
    _TermFile: "points_ms ([[sequences, ms], ...]), source (where the numbers are from), range ([low, high] "
    "scale factors, required for an estimate)",
}


def _schema_at(loc: tuple[object, ...]) -> type[BaseModel]:
    """The schema model of the mapping at location `loc` (for 'unknown key' messages)."""
    if not loc:
        return _ProfileFile
    if loc[0] == "terms":
        return _TermFile
    if loc[0] == "request_overhead":
        return _OverheadFile
    sections: dict[object, type[BaseModel]] = {
        "prefill": _PrefillFile, "decode": _DecodeFile, "per_iteration": _IterationFile
    }
    return sections.get(loc[1], _StepTimeFile) if len(loc) > 1 else _StepTimeFile


def _where(loc: tuple[object, ...]) -> str:
    if len(loc) >= 2 and loc[0] == "terms":
        rest = ".".join(str(p) for p in loc[2:])
        return f"term {loc[1]!r}" + (f" {rest}" if rest else "")
    return ".".join(str(p) for p in loc) or "top level"


def _describe(exc: ValidationError, origin: str) -> str:
    """The first validation error as one line naming the file, the key and what is valid."""
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _schema_at(loc[:-1])
        valid = _VALID_KEYS.get(parent, ", ".join(parent.model_fields))
        where = _where(loc[:-1])
        return (f"engine profile {origin}: {where}: unknown key(s) {[str(loc[-1])]}; valid keys: {valid}; "
                "see sim/serving/engine.py")
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "missing":
        msg = "missing (required)"
    elif kind not in ("value_error",) and not isinstance(err.get("input"), dict):
        msg += f", got {err.get('input')!r}"
    if loc[-1:] == ("points_ms",) or "points_ms" in loc:
        msg = f"points_ms must be a non-empty list of [sequences >= 1, ms >= 0] pairs: {msg}"
    return f"engine profile {origin}: {_where(loc)}: {msg}"


def _step_time(f: _StepTimeFile) -> StepTime:
    segments = tuple(
        DecodeSegment(s.fixed_ms, s.per_token_ms, s.per_sequence_ms, s.below_batch) for s in f.decode
    )
    p, it = f.prefill, f.per_iteration
    return StepTime(
        f.model, f.hardware, f.method, " ".join(f.source.split()), p.fixed_ms, p.per_token_ms,
        p.per_token_squared_ms, p.constant_ms, segments, it.fixed_ms, it.per_context_token_ms,
    )


def _build(raw: object, origin: str, stem: str | None) -> EngineProfile:
    if not isinstance(raw, dict):
        keys = _VALID_KEYS[_ProfileFile]
        raise EngineError(f"engine profile {origin}: expected a mapping with keys {keys}")
    try:
        f = _ProfileFile.model_validate(raw)
    except ValidationError as exc:
        raise EngineError(_describe(exc, origin)) from None
    if stem is not None and f.name != stem:
        raise EngineError(f"engine profile {origin}: 'name' {f.name!r} must equal the file name {stem!r}")
    terms = tuple(
        EngineTerm(str(k), tuple(s for s, _ in t.points_ms), tuple(float(m) for _, m in t.points_ms),
                   t.source.strip(), tuple(t.range) if t.range is not None else (1.0, 1.0))  # type: ignore[arg-type]
        for k, t in (f.terms or {}).items()
    )
    step = _step_time(f.step_time) if f.step_time is not None else None
    o = f.request_overhead
    overhead = {} if o is None else {
        "request_overhead_ms": float(o.ms), "request_overhead_source": " ".join(o.source.split()),
        "request_overhead_range": tuple(o.range) if o.range is not None else (1.0, 1.0),
    }
    return EngineProfile(f.name.strip(), " ".join(f.description.split()), terms, origin, step,
                         f.tensor_parallel, **overhead)  # type: ignore[arg-type]


def list_engines() -> list[str]:
    """`none` and the names of the shipped engine profiles, sorted."""
    return [DEFAULT_ENGINE, *sorted(p.stem for p in ENGINE_DIR.glob("*.yaml") if p.stem != DEFAULT_ENGINE)]


def load_engine(name_or_path: str | os.PathLike[str] | EngineProfile | None) -> EngineProfile:
    """An engine profile by shipped name (sim/engine_profiles) or YAML path, with `@low` or `@high` for
    every term at that end of its range; None or "none": no host time."""
    if isinstance(name_or_path, EngineProfile):
        return name_or_path
    text = DEFAULT_ENGINE if name_or_path is None else str(name_or_path)
    base, at, end = text.rpartition("@")
    if at and end in ("low", "high"):
        return load_engine(base).at_end(end)
    is_path = text.endswith((".yaml", ".yml")) or os.sep in text
    if not is_path and text == DEFAULT_ENGINE:
        return NONE
    path = Path(text).expanduser() if is_path else ENGINE_DIR / f"{text}.yaml"
    if not is_path and not path.is_file():
        raise EngineError(
            f"--engine: unknown engine profile {text!r}; valid: {', '.join(list_engines())}, or a path to a "
            "YAML file (sim/serving/engine.py describes the format), each optionally with @low or @high "
            "(every term at that end of its range)"
        )
    try:
        raw = load_yaml(read_text_file(path, "engine profile file"), f"engine profile file {path}")
    except FileReadError as exc:
        raise EngineError(str(exc)) from None
    except yaml.YAMLError as exc:
        why = " ".join(str(exc).split())
        raise EngineError(f"engine profile file {path}: not valid YAML ({why})") from None
    return _build(raw, str(path), None if is_path else text)
