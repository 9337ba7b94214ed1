"""The file form of a hardware profile: pydantic models of the YAML (strict: unknown keys, missing fields,
wrong types are errors), every number `{value, source}` or `{value, calibrated}`.

`ProfileFile.model_validate(raw)` checks a parsed file; `describe_errors` words its errors by dotted
field; `section_values` reads a checked section's numbers and where each comes from. docs/hardware.md is
the field reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = ["LINK_KINDS", "ProfileFile", "describe_errors", "section_values"]

LINK_KINDS = ("pcie3", "pcie4", "pcie5", "nvlink-c2c")


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


# finite (NaN and infinity refused), positive, and below 1e12 (of GB/s, TFLOP/s or seconds: no device is near)
_StrictPositive = Annotated[float, Field(strict=True, gt=0, lt=1e12, allow_inf_nan=False)]


class _PositiveFloat(_Sourced):
    value: _StrictPositive


class _Fraction(_Sourced):
    value: Annotated[float, Field(strict=True, gt=0, le=1, allow_inf_nan=False)]


class _PositiveInt(_Sourced):
    value: Annotated[int, Field(strict=True, gt=0, le=2**60)]  # at most one exbibyte

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
    kind: Literal[LINK_KINDS]  # type: ignore[valid-type]
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


class ProfileFile(_Section):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = Field(min_length=1)
    gpu: _GpuFile
    link: _LinkFile
    host: _HostFile


def _valid_keys_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the schema model at `loc` (for 'unknown key' messages)."""
    model: type[BaseModel] = ProfileFile
    for part in loc:
        info = model.model_fields.get(str(part))
        ann = info.annotation if info is not None else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            break
        model = ann
    return list(model.model_fields)


def describe_errors(exc: ValidationError) -> str:
    """The validation errors as `dotted.field: what is wrong`, joined by '; '."""
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


def section_values(section: BaseModel, names: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, origins) of a checked section's fields `names`: numbers taken out of their
    {value, source} (curves as tuples of (int, float), floats as float) and, for those, their source or
    "calibrated: <measurement>"; other fields (names) as they are."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name in names:
        item = getattr(section, name)
        if isinstance(item, _Sourced):
            value = item.value  # type: ignore[attr-defined]
            if isinstance(item, _Curve):
                value = tuple((int(b), float(e)) for b, e in value)
            elif isinstance(item, (_PositiveFloat, _Fraction)):
                value = float(value)
            values[name] = value
            origins[name] = item.origin()
        else:
            values[name] = item
    return values, origins
