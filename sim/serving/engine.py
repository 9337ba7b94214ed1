"""Serving-engine profiles: the host time a serving engine spends on every iteration outside the GPU's
kernels (scheduling, preparing the inputs, sampling, processing the outputs, worker messaging), which a
synchronous engine pays in series with each iteration's model forward.

A profile is a YAML file `sim/engine_profiles/<name>.yaml` (or any path to such a file):

    name: <the file's stem>
    description: <one line: which engine, GPU and model it was measured on>
    terms:
      <term>:                                   # e.g. schedule, sampler_e2e, process_model_outputs
        points_ms: [[<sequences>, <ms>], ...]   # per-iteration milliseconds at that many sequences in the
                                                # iteration (strictly increasing sequence counts)
        source: "<where the numbers are from; 'estimate: <reasoning>' where no measurement exists>"
        range: [<low>, <high>]                  # optional scale factors (low <= 1 <= high) the term could
                                                # take; required for an estimate

An iteration of `n` sequences (decode tokens and prefill chunks: Vidur's `batch.size`) costs the sum of its
terms, each interpolated linearly between its points and extended linearly past its ends along the end
segments, never below 0. `none` (no terms) is the engine of kernels alone: the step model unchanged.

The per-iteration sum and its terms follow Vidur's execution-time predictor, which adds exactly these five
CPU-overhead terms, each predicted from the batch size, to every batch's model time
(microsoft/vidur vidur/execution_time_predictor/sklearn_execution_time_predictor.py:518-548 (one model
per term on `batch_size`, targets `<term>_median` and `ray_comm_time_mean`), 871-899 (looked up by
`batch.size`); vidur/entities/execution_time.py:87-94 (their sum), 197-199 (`total_time` = model time +
the sum); commit 7d47513). Vidur leaves them out by default (`skip_cpu_overhead_modeling: True`,
vidur/config/config.py:559-562).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sim.errors import SimInputError
from sim.yaml_io import FileReadError, load_yaml, read_text_file

__all__ = ["EngineProfile", "EngineTerm", "EngineError", "DEFAULT_ENGINE", "load_engine", "list_engines",
           "ENGINE_DIR"]

DEFAULT_ENGINE = "none"
ENGINE_DIR = Path(__file__).resolve().parent.parent / "engine_profiles"
_TOP_KEYS = ("name", "description", "terms")
_TERM_KEYS = ("points_ms", "source", "range")


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
    """A serving engine's per-iteration host costs (module docstring)."""

    name: str
    description: str
    terms: tuple[EngineTerm, ...] = ()
    path: str = field(default="", compare=False)

    def iteration_s(self, sequences: int, end: str = "value") -> float:
        """Host seconds of one iteration of `sequences` sequences (0 without sequences or terms); `end`:
        "value", or "low" / "high" (every term at that end of its range)."""
        if sequences <= 0 or not self.terms:
            return 0.0
        pick = {"value": lambda t: 1.0, "low": lambda t: t.range[0], "high": lambda t: t.range[1]}[end]
        return sum(t.ms_at(sequences, pick(t)) for t in self.terms) / 1e3

    def at_end(self, end: str) -> EngineProfile:
        """This profile with every term at one end of its range ("low" or "high"; "value": itself)."""
        if end == "value":
            return self
        i = {"low": 0, "high": 1}[end]
        terms = tuple(
            EngineTerm(t.name, t.sequences, tuple(v * t.range[i] for v in t.ms), t.source, (1.0, 1.0))
            for t in self.terms
        )
        return EngineProfile(f"{self.name} ({end} end)", self.description, terms, self.path)

    def label(self) -> str:
        """The engine an answer assumes, in words."""
        return f"{self.name}: {self.description}"


NONE = EngineProfile(DEFAULT_ENGINE, "kernels only: no per-iteration engine host time")


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise EngineError(f"{where}: must be a finite number, got {value!r}")
    return float(value)


def _term(name: str, raw: object, origin: str) -> EngineTerm:
    where = f"engine profile {origin}: term {name!r}"
    if not isinstance(raw, dict):
        raise EngineError(f"{where}: expected a mapping with keys {', '.join(_TERM_KEYS)}, got {raw!r}")
    unknown = sorted(set(raw) - set(_TERM_KEYS))
    if unknown:
        raise EngineError(
            f"{where}: unknown key(s) {unknown}; valid keys: points_ms ([[sequences, ms], ...]), source "
            "(where the numbers are from), range ([low, high] scale factors, required for an estimate)"
        )
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise EngineError(f"{where}: 'source' must say where the numbers are from (non-empty text)")
    points = raw.get("points_ms")
    if not isinstance(points, list) or not points or not all(
        isinstance(p, list) and len(p) == 2 for p in points
    ):
        raise EngineError(f"{where}: 'points_ms' must be a non-empty list of [sequences, ms] pairs")
    seqs = [_number(p[0], f"{where}: points_ms sequences") for p in points]
    ms = [_number(p[1], f"{where}: points_ms ms") for p in points]
    if any(s < 1 or s != int(s) for s in seqs) or any(b <= a for a, b in zip(seqs, seqs[1:], strict=False)):
        raise EngineError(
            f"{where}: points_ms sequence counts must be whole numbers >= 1, strictly increasing"
        )
    if any(v < 0 for v in ms):
        raise EngineError(f"{where}: points_ms milliseconds must be >= 0")
    span = (1.0, 1.0)
    if "range" in raw:
        r = raw["range"]
        if not isinstance(r, list) or len(r) != 2:
            raise EngineError(f"{where}: 'range' must be [low, high] scale factors, got {r!r}")
        lo, hi = (_number(v, f"{where}: range") for v in r)
        if not 0 <= lo <= 1 <= hi:
            raise EngineError(f"{where}: 'range' must satisfy 0 <= low <= 1 <= high, got {r!r}")
        span = (lo, hi)
    elif source.strip().lower().startswith("estimate"):
        raise EngineError(f"{where}: an estimate needs 'range: [low, high]' (scale factors it could take)")
    return EngineTerm(name, tuple(int(s) for s in seqs), tuple(ms), source.strip(), span)


def _build(raw: object, origin: str, stem: str | None) -> EngineProfile:
    if not isinstance(raw, dict):
        raise EngineError(f"engine profile {origin}: expected a mapping with keys {', '.join(_TOP_KEYS)}")
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    if unknown:
        raise EngineError(
            f"engine profile {origin}: unknown key(s) {unknown}; valid keys: name, description, terms "
            "(term -> {points_ms, source, range}); see sim/serving/engine.py"
        )
    name, description = raw.get("name"), raw.get("description")
    if not isinstance(name, str) or not name.strip():
        raise EngineError(f"engine profile {origin}: 'name' must be non-empty text")
    if stem is not None and name != stem:
        raise EngineError(f"engine profile {origin}: 'name' {name!r} must equal the file name {stem!r}")
    if not isinstance(description, str) or not description.strip():
        raise EngineError(f"engine profile {origin}: 'description' must be non-empty text")
    terms = raw.get("terms") or {}
    if not isinstance(terms, dict):
        raise EngineError(f"engine profile {origin}: 'terms' must be a mapping of term name -> entry")
    built = tuple(_term(str(k), v, origin) for k, v in terms.items())
    return EngineProfile(name.strip(), " ".join(description.split()), built, origin)


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
