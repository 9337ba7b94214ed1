"""Hardware profiles: the GPU, the host link and the host, every number with its source.

A profile is a YAML file: shipped ones in `sim/profiles/<name>.yaml`, user ones as `<name>.yaml` in any
directory listed in the environment variable `FREEKV_DSE_PROFILES` (several separated by `os.pathsep`; a
user file shadows a shipped one of the same name). Every number is written
`{value: <number>, source: "<datasheet/benchmark>"}` or `{value: <number>, calibrated: "<measurement>"}`;
a number without either is an error. The file is validated with pydantic and loaded into the frozen
dataclasses below; see docs/hardware.md for the field reference and how to add a profile.

Units: bandwidths in GB/s (1e9 bytes/s), times in seconds, memory in bytes, compute in TFLOP/s.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.errors import SimInputError
from sim.yaml_io import FileReadError, load_yaml, read_text_file

__all__ = [
    "GpuSpec",
    "HostLinkSpec",
    "HostSpec",
    "HardwareProfile",
    "HardwareError",
    "load_profile",
    "list_profiles",
    "profile_dirs",
    "find_profile_file",
    "missing_profile_dirs",
    "PROFILES_ENV",
]

PROFILES_ENV = "FREEKV_DSE_PROFILES"
_SHIPPED_DIR = Path(__file__).resolve().parent / "profiles"
_LINK_KINDS = ("pcie3", "pcie4", "pcie5", "nvlink-c2c")


class HardwareError(SimInputError):
    """A hardware profile that cannot be found or is invalid; the message names the file and field."""


# ----------------------------------------------------------------------------------------------------
# The loaded form: frozen dataclasses.


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    hbm_bandwidth_gbps: float  # peak GB/s
    peak_fp16_tflops: float  # dense FP16/BF16 tensor-core peak (not the 2:4-sparse figure)
    achievable_bandwidth_fraction: float  # of HBM peak reached by decode (memory-bound) kernels, (0, 1]
    achievable_compute_fraction: float  # of tensor peak reached by large GEMMs, (0, 1]
    kernel_launch_s: float  # per kernel launch on a stream (host + device overhead)
    # Optional (None: unknown): streaming multiprocessors and the shared memory one SM can give its
    # resident blocks; the simulator uses them where kernels of two streams compete for SMs (ShadowKV's
    # UVA gather against its key rebuild). Without them such kernels are assumed to overlap freely.
    sm_count: int | None = None
    shared_memory_per_sm_bytes: int | None = None


@dataclass(frozen=True)
class HostLinkSpec:
    kind: str  # "pcie3" | "pcie4" | "pcie5" | "nvlink-c2c"
    h2d_peak_gbps: float
    d2h_peak_gbps: float
    h2d_effective_gbps: float  # large pinned copies, measured (bandwidthTest-style)
    d2h_effective_gbps: float
    copy_issue_s: float  # host CPU time to issue one cudaMemcpyAsync
    dma_latency_s: float  # per-copy latency on the copy engine (setup, first byte)
    copy_engines: int
    run_efficiency: tuple[tuple[int, float], ...]  # (contiguous run bytes, fraction of effective bw)

    def efficiency(self, run_bytes: int) -> float:
        """Fraction of the effective bandwidth reached by a copy of contiguous runs of `run_bytes`.

        Linear interpolation of `run_efficiency` in log2(bytes); clamped to the first and last points.
        """
        if run_bytes <= 0:
            raise ValueError(f"run_bytes must be positive, got {run_bytes}")
        points = self.run_efficiency
        if run_bytes <= points[0][0]:
            return points[0][1]
        if run_bytes >= points[-1][0]:
            return points[-1][1]
        x = math.log2(run_bytes)
        for (b0, e0), (b1, e1) in zip(points, points[1:], strict=False):
            if run_bytes <= b1:
                x0, x1 = math.log2(b0), math.log2(b1)
                return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
        return points[-1][1]  # unreachable: run_bytes < last point here

    def effective_gbps(self, direction: str) -> float:
        if direction == "h2d":
            return self.h2d_effective_gbps
        if direction == "d2h":
            return self.d2h_effective_gbps
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")

    def copy_time_s(self, n_bytes: int, run_bytes: int, direction: str) -> float:
        """Copy-engine time of one copy of `n_bytes` made of contiguous runs of `run_bytes`.

        `dma_latency_s + n_bytes / (effective bandwidth * efficiency(run_bytes))`; 0 for an empty copy.
        The host-side issue cost (`copy_issue_s`) is not included: it is spent on the issuing thread.
        """
        if n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
        bw_bytes_per_s = self.effective_gbps(direction) * 1e9
        if n_bytes == 0:
            return 0.0
        run = min(run_bytes, n_bytes) if run_bytes > 0 else n_bytes
        return self.dma_latency_s + n_bytes / (bw_bytes_per_s * self.efficiency(run))


@dataclass(frozen=True)
class HostSpec:
    name: str
    memory_bytes: int
    memory_bandwidth_gbps: float  # peak DRAM bandwidth of the host socket
    sync_s: float  # host <-> device synchronisation (event/stream sync, small read-back)
    issue_threads: int  # host threads issuing copies (FreeKV uses a small pool)


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    gpu: GpuSpec
    link: HostLinkSpec
    host: HostSpec
    sources: dict[str, str] = field(default_factory=dict)  # dotted field -> source or "calibrated: ..."

    def to_dict(self) -> dict[str, Any]:
        """The YAML form: numbers as {value, source} or {value, calibrated}; JSON-able."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        for part in ("gpu", "link", "host"):
            spec = getattr(self, part)
            section: dict[str, Any] = {}
            for f in fields(spec):
                value = getattr(spec, f.name)
                dotted = f"{part}.{f.name}"
                if value is None:  # an optional field the profile leaves out
                    continue
                if dotted not in self.sources:
                    section[f.name] = value
                    continue
                if isinstance(value, tuple):
                    value = [list(p) for p in value]
                text = self.sources[dotted]
                key = "calibrated" if text.startswith("calibrated: ") else "source"
                section[f.name] = {"value": value, key: text.removeprefix("calibrated: ")}
            out[part] = section
        return out

    def with_overrides(self, overrides: Mapping[str, Any] | None = None, /, **dotted: Any) -> HardwareProfile:
        """A copy with dotted fields replaced, validated like a file: `{"link.h2d_effective_gbps": 10}`.

        The source of an overridden number becomes "override (was <old value>: <old source>)".
        """
        changes = {**(overrides or {}), **dotted}
        raw = self.to_dict()
        for key, value in changes.items():
            part, _, name = key.partition(".")
            known = part in ("gpu", "link", "host") and name in {f.name for f in fields(getattr(self, part))}
            if not known:
                valid = sorted(
                    f"{p}.{f.name}" for p in ("gpu", "link", "host") for f in fields(getattr(self, p))
                )
                raise HardwareError(
                    f"hardware override {key!r} on profile {self.name!r}: unknown field; "
                    f"valid: {', '.join(valid)}"
                )
            old = raw[part].get(name)
            if old is None:  # an optional field the profile leaves out
                raw[part][name] = {"value": value, "source": "override (the profile does not give it)"}
            elif isinstance(old, dict):
                was = old.get("source") or f"calibrated: {old.get('calibrated')}"
                raw[part][name] = {"value": value, "source": f"override (was {old['value']}: {was})"}
            else:
                raw[part][name] = value
        return _build(raw, f"{self.name} with overrides {sorted(changes)}")


# ----------------------------------------------------------------------------------------------------
# The file form: pydantic models (strict: unknown keys, missing fields, wrong types are errors).


def _bare_number_message(data: object) -> str:
    return (
        f'a bare value ({data!r}) has no source: write {{value: {data!r}, source: "<datasheet or '
        'benchmark>"} or {value: ..., calibrated: "<from which measurement>"}'
    )


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Sourced(BaseModel):
    """`{value, source}` or `{value, calibrated}`; exactly one of source/calibrated, not empty."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str | None = None
    calibrated: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, data: object) -> object:
        if not isinstance(data, dict):
            raise ValueError(_bare_number_message(data))
        value = data.get("value")
        if isinstance(value, str) and _parses_as_float(value):
            raise ValueError(
                f"value {value!r} is a string to YAML: write numbers with a dot and a signed exponent "
                "(4.0e-6, 4.0e+10) or in plain notation"
            )
        return data

    @model_validator(mode="after")
    def _one_origin(self) -> _Sourced:
        given = [k for k in ("source", "calibrated") if (getattr(self, k) or "").strip()]
        if len(given) != 1:
            raise ValueError(
                "every number needs exactly one non-empty 'source' (datasheet/benchmark) or 'calibrated' "
                f"(from which measurement); got {given or 'neither'}"
            )
        return self

    def origin(self) -> str:
        return self.source if self.source else f"calibrated: {self.calibrated}"


_StrictPositive = Annotated[float, Field(strict=True, gt=0)]


class _PositiveFloat(_Sourced):
    value: _StrictPositive


class _Fraction(_Sourced):
    value: Annotated[float, Field(strict=True, gt=0, le=1)]


class _PositiveInt(_Sourced):
    value: Annotated[int, Field(strict=True, gt=0)]

    @field_validator("value", mode="before")
    @classmethod
    def _integral_float(cls, v: object) -> object:
        # YAML `4.0e+10` is a float: accept it when integral (bools are rejected by strict int).
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return v


class _Curve(_Sourced):
    value: list[
        tuple[Annotated[int, Field(strict=True, gt=0)], Annotated[float, Field(strict=True, gt=0, le=1)]]
    ]

    @field_validator("value")
    @classmethod
    def _increasing(cls, v: list[tuple[int, float]]) -> list[tuple[int, float]]:
        if len(v) < 2:
            raise ValueError("needs at least two [run_bytes, fraction] points")
        sizes = [b for b, _ in v]
        if any(b1 <= b0 for b0, b1 in zip(sizes, sizes[1:], strict=False)):
            raise ValueError(f"run sizes must be strictly increasing, got {sizes}")
        return v


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _GpuFile(_Section):
    name: str = Field(min_length=1)
    memory_bytes: _PositiveInt
    hbm_bandwidth_gbps: _PositiveFloat
    peak_fp16_tflops: _PositiveFloat
    achievable_bandwidth_fraction: _Fraction
    achievable_compute_fraction: _Fraction
    kernel_launch_s: _PositiveFloat
    sm_count: _PositiveInt | None = None
    shared_memory_per_sm_bytes: _PositiveInt | None = None


class _LinkFile(_Section):
    kind: Literal[_LINK_KINDS]  # type: ignore[valid-type]
    h2d_peak_gbps: _PositiveFloat
    d2h_peak_gbps: _PositiveFloat
    h2d_effective_gbps: _PositiveFloat
    d2h_effective_gbps: _PositiveFloat
    copy_issue_s: _PositiveFloat
    dma_latency_s: _PositiveFloat
    copy_engines: _PositiveInt
    run_efficiency: _Curve

    @model_validator(mode="after")
    def _effective_below_peak(self) -> _LinkFile:
        for d in ("h2d", "d2h"):
            eff, peak = getattr(self, f"{d}_effective_gbps").value, getattr(self, f"{d}_peak_gbps").value
            if eff > peak:
                raise ValueError(
                    f"link.{d}_effective_gbps ({eff}) must not exceed link.{d}_peak_gbps ({peak})"
                )
        return self


class _HostFile(_Section):
    name: str = Field(min_length=1)
    memory_bytes: _PositiveInt
    memory_bandwidth_gbps: _PositiveFloat
    sync_s: _PositiveFloat
    issue_threads: _PositiveInt


class _ProfileFile(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = Field(min_length=1)
    gpu: _GpuFile
    link: _LinkFile
    host: _HostFile


def _valid_keys_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the schema model at `loc` (for 'unknown key' messages)."""
    model: type[BaseModel] = _ProfileFile
    for part in loc:
        info = model.model_fields.get(str(part))
        ann = info.annotation if info is not None else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            break
        model = ann
    return list(model.model_fields)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        dotted = ".".join(str(p) for p in loc) or "<top level>"
        kind = err["type"]
        if kind == "missing":
            msg = "missing (required)"
            if loc and loc[-1] in ("value",):
                msg = "missing 'value'"
        elif kind == "extra_forbidden":
            msg = f"unknown key; valid keys here: {', '.join(_valid_keys_at(loc[:-1]))}"
        else:
            msg = str(err["msg"]).removeprefix("Value error, ")
            if "input" in err and kind not in ("value_error",) and not isinstance(err["input"], dict):
                msg += f" (got {err['input']!r})"
        parts.append(f"{dotted}: {msg}")
    return "; ".join(parts)


def _build(raw: object, origin: str) -> HardwareProfile:
    if not isinstance(raw, dict):
        raise HardwareError(
            f"hardware profile {origin}: the file must be a YAML mapping with keys "
            f"name, description, gpu, link, host; got {type(raw).__name__}"
        )
    try:
        parsed = _ProfileFile.model_validate(raw)
    except ValidationError as exc:
        raise HardwareError(
            f"hardware profile {origin} is invalid: {_describe(exc)}. "
            "See docs/hardware.md for the field reference."
        ) from None
    sources: dict[str, str] = {}
    built: dict[str, Any] = {}
    for part, cls in (("gpu", GpuSpec), ("link", HostLinkSpec), ("host", HostSpec)):
        section = getattr(parsed, part)
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            item = getattr(section, f.name)
            if isinstance(item, _Sourced):
                value = item.value  # type: ignore[attr-defined]
                if isinstance(item, _Curve):
                    value = tuple((int(b), float(e)) for b, e in value)
                elif isinstance(item, (_PositiveFloat, _Fraction)):
                    value = float(value)
                kwargs[f.name] = value
                sources[f"{part}.{f.name}"] = item.origin()
            else:
                kwargs[f.name] = item
        built[part] = cls(**kwargs)
    return HardwareProfile(name=parsed.name, description=parsed.description, sources=sources, **built)


# ----------------------------------------------------------------------------------------------------
# Finding and loading profiles.


def profile_dirs() -> list[Path]:
    """Directories searched for `<name>.yaml`, highest priority first: $FREEKV_DSE_PROFILES, then shipped."""
    user = [Path(p).expanduser() for p in os.environ.get(PROFILES_ENV, "").split(os.pathsep) if p.strip()]
    return [*user, _SHIPPED_DIR]


def missing_profile_dirs() -> list[Path]:
    """Directories named in $FREEKV_DSE_PROFILES that do not exist (or are not directories)."""
    return [d for d in profile_dirs() if not d.is_dir()]


def _scan() -> tuple[dict[str, Path], dict[str, str]]:
    """({name: file} of every profile, {name: why it is ambiguous}). A name present as both NAME.yaml and
    NAME.yml in one directory is ambiguous (which one is meant?); a higher-priority directory may still
    define the name unambiguously and then wins."""
    found: dict[str, Path] = {}
    conflicts: dict[str, str] = {}
    for directory in reversed(profile_dirs()):  # later (higher priority) entries overwrite
        if not directory.is_dir():
            continue
        here: dict[str, list[Path]] = {}
        for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            here.setdefault(path.stem, []).append(path)
        for name, paths in here.items():
            if len(paths) > 1:
                found.pop(name, None)
                conflicts[name] = (
                    f"hardware profile {name!r} is defined twice in {directory}: "
                    f"{' and '.join(p.name for p in paths)}; keep one of them"
                )
            else:
                found[name] = paths[0]
                conflicts.pop(name, None)
    return found, conflicts


def _profile_files() -> dict[str, Path]:
    return _scan()[0]


def find_profile_file(name: str) -> Path | None:
    """The YAML file that `load_profile(name)` would read, or None if no directory has it."""
    return _profile_files().get(name)


def list_profiles() -> list[str]:
    """Names of every profile found (shipped and user directories; ambiguous names too), sorted."""
    found, conflicts = _scan()
    return sorted({*found, *conflicts})


def _load_file(path: Path) -> HardwareProfile:
    try:
        raw = load_yaml(read_text_file(path, "hardware profile file"))
    except FileReadError as exc:
        raise HardwareError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise HardwareError(
            f"hardware profile {path} is not valid YAML: {' '.join(str(exc).split())}"
        ) from None
    return _build(raw, str(path))


def load_profile(name_or_path: str | os.PathLike[str]) -> HardwareProfile:
    """Load a profile by name (see `list_profiles`) or from a YAML file path."""
    text = os.fspath(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, os.PathLike) or text.endswith((".yaml", ".yml")) or os.sep in text
    )
    if looks_like_path:
        path = Path(text).expanduser()
        if not path.is_file():
            raise HardwareError(
                f"hardware profile file {path} does not exist; pass a YAML file or one of "
                f"the profile names: {', '.join(list_profiles())}"
            )
        return _load_file(path)
    files, conflicts = _scan()
    if text in conflicts:
        raise HardwareError(conflicts[text])
    if text not in files:
        dirs = ", ".join(str(d) + (" (does not exist)" if not d.is_dir() else "") for d in profile_dirs())
        raise HardwareError(
            f"unknown hardware profile {text!r}; available: {', '.join(sorted(files)) or 'none'} "
            f"(searched {dirs}; add a directory with ${PROFILES_ENV})"
        )
    profile = _load_file(files[text])
    if profile.name != text:
        raise HardwareError(
            f"hardware profile {files[text]}: field 'name' is {profile.name!r} but the file is "
            f"named {text!r}; they must match"
        )
    return profile
